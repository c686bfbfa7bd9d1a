//! The rejection contract: 503 with Retry-After and headers naming the class
//! and the reason, or for gRPC a trailers-only RESOURCE_EXHAUSTED.
//!
//! 503, not 429: the request is refused because this replica's pool for its
//! class is full at this instant, a server-side condition that another replica
//! (or this one a moment later) may not share; 429 says the client exceeded
//! its own rate and should slow down, which a bulkhead does not measure.

use http::{header, HeaderValue, Request, Response, StatusCode};

use super::{
    admission::{Reason, Rejection},
    synthetic::{is_grpc, GrpcStatus, SyntheticResponse, CLASS_HEADER},
};

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
        let mut res = rejection.reason.synthetic().response(is_grpc(req));
        let headers = res.headers_mut();
        headers.insert(header::RETRY_AFTER, self.retry_after.clone());
        if let Some(class) = &rejection.class {
            headers.insert(CLASS_HEADER, class.clone());
        }
        res
    }
}

impl Reason {
    /// The answer to a request refused for this reason: 503, or for gRPC RESOURCE_EXHAUSTED.
    pub const fn synthetic(self) -> SyntheticResponse {
        let message = match self {
            Reason::Ceiling => "bulkhead: the class is at its ceiling",
            Reason::SurplusExhausted => "bulkhead: no shared capacity is free",
            Reason::Unclassified => "bulkhead: the request names no known class",
        };
        SyntheticResponse {
            http_status: StatusCode::SERVICE_UNAVAILABLE,
            grpc_status: Some(GrpcStatus::ResourceExhausted),
            reason: self.as_str(),
            message,
            close_connection: false,
        }
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
