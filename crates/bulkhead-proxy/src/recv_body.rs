//! An HTTP/2 stream's incoming body, the h2 crate's `RecvStream`: data, its
//! flow-control window given back as it is read, then trailers. A client's
//! request body (`h2_server`) and an upstream's response body
//! (`h2_upstream`) are both read this way.

use std::{
    pin::Pin,
    task::{ready, Context, Poll},
};

use bytes::Bytes;
use http::{header, HeaderMap};
use http_body::{Body, Frame, SizeHint};

#[derive(Debug)]
pub(crate) struct RecvBody {
    recv: h2::RecvStream,
    data_done: bool,
    /// What h2 last said of the stream's end, asked once per frame read: each
    /// ask takes the connection's lock, and a message's body is asked several
    /// times by the layers around it. A stream that ends later is seen at the
    /// next read (`is_end_stream` may say false at the end, never true before).
    ended: bool,
    /// What Content-Length says is left to come (h2 fails a stream whose
    /// data does not match it), so the upstream is told the length.
    remaining: Option<u64>,
}

impl RecvBody {
    /// A body of unknown length.
    pub(crate) fn new(recv: h2::RecvStream) -> Self {
        let ended = recv.is_end_stream();
        Self { recv, data_done: false, ended, remaining: None }
    }

    /// A request's body, of the length its Content-Length says.
    pub(crate) fn sized(recv: h2::RecvStream, headers: &HeaderMap) -> Self {
        // A request that ended with its head (most of them) has nothing to size: no lookup.
        let ended = recv.is_end_stream();
        let remaining =
            if ended { None } else { headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok()) };
        Self { recv, data_done: false, ended, remaining }
    }
}

impl Body for RecvBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        if !self.data_done {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    if let Some(left) = &mut self.remaining {
                        *left = left.saturating_sub(data.len() as u64);
                    }
                    self.ended = self.recv.is_end_stream();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => self.data_done = true,
            }
        }
        let trailers = ready!(self.recv.poll_trailers(cx));
        self.ended = true;
        match trailers {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(left) => SizeHint::with_exact(left),
            None => SizeHint::default(),
        }
    }
}
