//! A client's request body, whichever protocol brought it: hyper's for
//! HTTP/1.1, the h2 stream's for HTTP/2 (`h2_server` serves those without
//! hyper). The stack and the upstream side see this one type.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::{idle::BoxError, recv_body::RecvBody};

#[derive(Debug)]
pub(crate) enum Inbound {
    Http1(Incoming),
    H2(RecvBody),
}

impl Body for Inbound {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Inbound::Http1(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Inbound::H2(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Inbound::Http1(body) => body.is_end_stream(),
            Inbound::H2(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Inbound::Http1(body) => body.size_hint(),
            Inbound::H2(body) => body.size_hint(),
        }
    }
}
