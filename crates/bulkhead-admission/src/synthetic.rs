//! Responses the bulkhead makes itself, never an upstream's: one builder for
//! plain HTTP and gRPC (as linkerd2-proxy's `SyntheticHttpResponse`), so that
//! every such answer names why in `x-bulkhead-reason` and `grpc-status` is
//! written in one place. A refusal's table entry says what it answers; the
//! in-process Layer and the sidecar both build from here.

use http::{header, HeaderName, HeaderValue, Request, Response, StatusCode};

/// Names the class a rejection (or a 502) is about.
pub const CLASS_HEADER: HeaderName = HeaderName::from_static("x-bulkhead-class");
/// Why the bulkhead answered itself: a [`SyntheticResponse::reason`].
pub const REASON_HEADER: HeaderName = HeaderName::from_static("x-bulkhead-reason");

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// The gRPC status codes the bulkhead answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrpcStatus {
    /// 4: the upstream did not answer in time.
    DeadlineExceeded,
    /// 8: the class's pool is full.
    ResourceExhausted,
}

impl GrpcStatus {
    /// The code as gRPC numbers it.
    pub const fn code(self) -> u8 {
        match self {
            GrpcStatus::DeadlineExceeded => 4,
            GrpcStatus::ResourceExhausted => 8,
        }
    }
}

/// What one kind of answer the bulkhead makes itself says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyntheticResponse {
    /// The status of a plain HTTP answer.
    pub http_status: StatusCode,
    /// A gRPC request's answer instead: trailers-only, HTTP 200. None: the
    /// HTTP status, which gRPC clients map to a code themselves.
    pub grpc_status: Option<GrpcStatus>,
    /// The `x-bulkhead-reason` value, and the reason's metric label.
    pub reason: &'static str,
    /// Says what happened; sent as `grpc-message` (plain ASCII: no percent-encoding needed).
    pub message: &'static str,
    /// The client's connection cannot carry another request (`connection: close`).
    pub close_connection: bool,
}

impl SyntheticResponse {
    /// The response head (the body is empty); `grpc`: the request is gRPC ([`is_grpc`]).
    pub fn response(&self, grpc: bool) -> Response<()> {
        let mut res = Response::new(());
        let headers = res.headers_mut();
        headers.insert(REASON_HEADER, HeaderValue::from_static(self.reason));
        match self.grpc_status.filter(|_| grpc) {
            Some(status) => {
                // Trailers-only: status and message in the one HEADERS frame.
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
                headers.insert(GRPC_STATUS, HeaderValue::from(u16::from(status.code())));
                headers.insert(GRPC_MESSAGE, HeaderValue::from_static(self.message));
            }
            None => {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
                *res.status_mut() = self.http_status;
            }
        }
        if self.close_connection {
            res.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        res
    }
}

/// gRPC over HTTP/2 names itself by content type (application/grpc, +proto, ...).
pub fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: SyntheticResponse = SyntheticResponse {
        http_status: StatusCode::GATEWAY_TIMEOUT,
        grpc_status: Some(GrpcStatus::DeadlineExceeded),
        reason: "upstream-timeout",
        message: "bulkhead: upstream timeout",
        close_connection: false,
    };

    #[test]
    fn plain_answers_carry_the_status_and_grpc_ones_a_trailers_only_status() {
        let plain = TIMEOUT.response(false);
        assert_eq!(plain.status(), 504);
        assert_eq!(plain.headers()["x-bulkhead-reason"], "upstream-timeout");
        assert_eq!(plain.headers()["content-length"], "0");
        assert!(plain.headers().get("grpc-status").is_none() && plain.headers().get("connection").is_none());

        let grpc = TIMEOUT.response(true);
        assert_eq!(grpc.status(), 200);
        assert_eq!(grpc.headers()["grpc-status"], "4");
        assert_eq!(grpc.headers()["grpc-message"], "bulkhead: upstream timeout");
        assert_eq!(grpc.headers()["content-type"], "application/grpc");

        let close = SyntheticResponse { grpc_status: None, close_connection: true, ..TIMEOUT };
        let res = close.response(true);
        assert_eq!((res.status().as_u16(), &res.headers()["connection"]), (504, &HeaderValue::from_static("close")));
    }
}
