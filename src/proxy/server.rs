//! Listeners: accept, serve HTTP/1.1 and h2c on each connection, admit every
//! request (every HTTP/2 stream) through the gate, forward the admitted.

use std::{convert::Infallible, net::SocketAddr, sync::Arc};

use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use tokio::{net::TcpListener, sync::watch};

use super::{
    classify::Classifier,
    forward::{Forward, ForwardFuture, ProxyBody},
    layer::{Gate, PermitBody, ResponseFuture},
};

/// What one listener does with a request.
pub struct Listener {
    pub gate: Gate<Classifier>,
    pub forward: Forward,
}

/// One connection's service: the listener plus the peer, for x-forwarded-for.
struct Conn {
    listener: Arc<Listener>,
    peer: HeaderValue,
}

impl hyper::service::Service<Request<Incoming>> for Conn {
    type Response = Response<PermitBody<ProxyBody>>;
    type Error = Infallible;
    type Future = ResponseFuture<ForwardFuture>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        match self.listener.gate.admit(&req) {
            Ok(permit) => ResponseFuture::admitted(self.listener.forward.call(req, &self.peer), permit),
            Err(rejection) => ResponseFuture::rejected(rejection),
        }
    }
}

pub fn http_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new()).max_concurrent_streams(1024);
    builder
}

/// Accept until `stop` turns true; then each connection finishes the requests
/// it has (HTTP/1.1 closes after the current one, HTTP/2 sends GOAWAY). Every
/// task holds a clone of `drain`, so its sender sees when all have ended.
pub async fn accept(
    tcp: TcpListener,
    listener: Arc<Listener>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    mut stop: watch::Receiver<bool>,
    drain: watch::Receiver<()>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = tcp.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off briefly, keep listening.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let conn = Conn { listener: Arc::clone(&listener), peer: peer_value(peer) };
        let (builder, mut stop, drain) = (Arc::clone(&builder), stop.clone(), drain.clone());
        tokio::spawn(async move {
            let served = builder.serve_connection_with_upgrades(TokioIo::new(stream), conn);
            tokio::pin!(served);
            let result = tokio::select! {
                result = served.as_mut() => result,
                () = stopped(&mut stop) => {
                    served.as_mut().graceful_shutdown();
                    served.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(drain);
        });
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

fn peer_value(peer: SocketAddr) -> HeaderValue {
    // An IP address is always a valid header value.
    HeaderValue::from_str(&peer.ip().to_string()).unwrap_or(HeaderValue::from_static("unknown"))
}
