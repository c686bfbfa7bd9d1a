//! The rejection contract: 503 with Retry-After and headers naming the class
//! and the reason, or for gRPC a trailers-only RESOURCE_EXHAUSTED.
//!
//! 503, not 429: the request is refused because this replica's pool for its
//! class is full at this instant, a server-side condition that another replica
//! (or this one a moment later) may not share; 429 says the client exceeded
//! its own rate and should slow down, which a bulkhead does not measure.

use http::{header, HeaderName, HeaderValue, Request, Response, StatusCode};

use super::admission::{Reason, Rejection};

/// Names the class a rejection (or a 502) is about.
pub const CLASS_HEADER: HeaderName = HeaderName::from_static("x-bulkhead-class");
/// Why the proxy answered itself: a [`Reason`] or an upstream failure.
pub const REASON_HEADER: HeaderName = HeaderName::from_static("x-bulkhead-reason");
/// The status of every admission rejection of a plain HTTP request.
pub const REJECT_STATUS: StatusCode = StatusCode::SERVICE_UNAVAILABLE;
/// gRPC's RESOURCE_EXHAUSTED.
pub const GRPC_RESOURCE_EXHAUSTED: &str = "8";

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// Builds rejection responses; everything but the class is made once.
#[derive(Clone, Debug)]
pub struct Rejector {
    retry_after: HeaderValue,
}

impl Default for Rejector {
    fn default() -> Self {
        Self::new(1)
    }
}

impl Rejector {
    /// `retry_after`: seconds a client should wait before trying again.
    pub fn new(retry_after: u32) -> Self {
        Self { retry_after: HeaderValue::from(retry_after) }
    }

    /// The response for a refused request (head only: the body is empty).
    pub fn response<B>(&self, req: &Request<B>, rejection: &Rejection) -> Response<()> {
        let grpc = is_grpc(req);
        let mut res = Response::new(());
        if !grpc {
            *res.status_mut() = REJECT_STATUS;
        }
        let headers = res.headers_mut();
        headers.insert(header::RETRY_AFTER, self.retry_after.clone());
        headers.insert(REASON_HEADER, reason_value(rejection.reason));
        if let Some(class) = &rejection.class {
            headers.insert(CLASS_HEADER, class.clone());
        }
        if grpc {
            // Trailers-only: status and message in the one HEADERS frame.
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
            headers.insert(GRPC_STATUS, HeaderValue::from_static(GRPC_RESOURCE_EXHAUSTED));
            headers.insert(GRPC_MESSAGE, grpc_message(rejection.reason));
        } else {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        }
        res
    }
}

/// gRPC over HTTP/2 names itself by content type (application/grpc, +proto, ...).
pub fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The `x-bulkhead-reason` header value of a refusal.
pub fn reason_value(reason: Reason) -> HeaderValue {
    match reason {
        Reason::Ceiling => HeaderValue::from_static("ceiling"),
        Reason::SurplusExhausted => HeaderValue::from_static("surplus-exhausted"),
        Reason::Unclassified => HeaderValue::from_static("unclassified"),
    }
}

/// Percent-encoding is not needed: these are plain printable ASCII.
fn grpc_message(reason: Reason) -> HeaderValue {
    match reason {
        Reason::Ceiling => HeaderValue::from_static("bulkhead: the class is at its ceiling"),
        Reason::SurplusExhausted => HeaderValue::from_static("bulkhead: no shared capacity is free"),
        Reason::Unclassified => HeaderValue::from_static("bulkhead: the request names no known class"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_grpc_rejections() {
        let r = Rejector::new(3);
        let rejection = Rejection { reason: Reason::Ceiling, class: Some(HeaderValue::from_static("search")) };
        let res = r.response(&Request::new(()), &rejection);
        assert_eq!(res.status(), 503);
        assert_eq!(res.headers()["retry-after"], "3");
        assert_eq!(res.headers()["x-bulkhead-class"], "search");
        assert_eq!(res.headers()["x-bulkhead-reason"], "ceiling");

        let req = Request::builder().header("content-type", "application/grpc+proto").body(()).expect("request");
        let res = r.response(&req, &Rejection { reason: Reason::Unclassified, class: None });
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["grpc-status"], "8");
        assert_eq!(res.headers()["x-bulkhead-reason"], "unclassified");
        assert!(res.headers().get("x-bulkhead-class").is_none());
    }
}
