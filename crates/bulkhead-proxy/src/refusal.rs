//! Every answer the proxy makes itself, in one vocabulary: the pool's
//! refusals, the 400s of requests a proxy must not forward or classify, and
//! the upstream's failures. Each is one [`SyntheticResponse`] (its status,
//! gRPC status, `x-bulkhead-reason` and metric label), built by the one
//! builder the in-process Layer uses too. docs/operations/troubleshooting.md
//! lists every reason (a test holds it to [`Refusal::ALL`]).

use http::{Response, StatusCode};

use bulkhead_admission::{
    admission::Reason,
    synthetic::{GrpcStatus, SyntheticResponse},
};

/// Why the proxy answered a request itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The pool refused it (503; gRPC RESOURCE_EXHAUSTED).
    Admission(Reason),
    /// A CONNECT: the upstream would open a tunnel to a host the client names.
    Connect,
    /// No Host, several, or one that is not `host[:port]`.
    BadHost,
    /// A class header sent twice: a front proxy's appended value must not lose to the client's.
    RepeatedClassHeader,
    /// A path whose normal form path rules cannot be sure of.
    AmbiguousPath,
    /// A target that makes no URI for an h2c upstream.
    BadRequestTarget,
    /// The client stopped sending its request body for the idle timeout.
    RequestBodyIdle,
    /// No response head within `--response-timeout` (or the class's maximum duration).
    UpstreamTimeout,
    /// No connection to the upstream.
    UpstreamConnect,
    /// The upstream failed or closed mid-request.
    Upstream,
    /// The upstream switched protocols on a request that was not tunnelled.
    UpstreamUpgrade,
}

impl Refusal {
    /// Every refusal, the pool's first.
    pub const ALL: [Refusal; 13] = [
        Refusal::Admission(Reason::Ceiling),
        Refusal::Admission(Reason::SurplusExhausted),
        Refusal::Admission(Reason::Unclassified),
        Refusal::Connect,
        Refusal::BadHost,
        Refusal::RepeatedClassHeader,
        Refusal::AmbiguousPath,
        Refusal::BadRequestTarget,
        Refusal::RequestBodyIdle,
        Refusal::UpstreamTimeout,
        Refusal::UpstreamConnect,
        Refusal::Upstream,
        Refusal::UpstreamUpgrade,
    ];

    /// What the answer says.
    pub const fn synthetic(self) -> SyntheticResponse {
        use StatusCode as S;
        // (status, gRPC status, reason, message, close the connection)
        let (http_status, grpc_status, reason, message, close_connection) = match self {
            Refusal::Admission(reason) => return reason.synthetic(),
            // A request the proxy will not forward: the connection may be out of step with it.
            Refusal::Connect => (S::BAD_REQUEST, None, "connect", "bulkhead: CONNECT is never forwarded", true),
            Refusal::BadHost => (S::BAD_REQUEST, None, "bad-host", "bulkhead: no single valid Host", true),
            Refusal::RepeatedClassHeader => {
                (S::BAD_REQUEST, None, "repeated-class-header", "bulkhead: the class header is repeated", true)
            }
            Refusal::AmbiguousPath => (S::BAD_REQUEST, None, "ambiguous-path", "bulkhead: the path is ambiguous", true),
            Refusal::BadRequestTarget => {
                (S::BAD_REQUEST, None, "bad-request-target", "bulkhead: the request target is not a URI", false)
            }
            // The upload's stream is stuck: nothing else can follow it on an HTTP/1.1 connection.
            Refusal::RequestBodyIdle => {
                (S::REQUEST_TIMEOUT, None, "request-body-idle", "bulkhead: the request body stalled", true)
            }
            Refusal::UpstreamTimeout => (
                S::GATEWAY_TIMEOUT,
                Some(GrpcStatus::DeadlineExceeded),
                "upstream-timeout",
                "bulkhead: upstream timeout",
                false,
            ),
            Refusal::UpstreamConnect => {
                (S::BAD_GATEWAY, None, "upstream-connect", "bulkhead: cannot connect to the upstream", false)
            }
            Refusal::Upstream => (S::BAD_GATEWAY, None, "upstream", "bulkhead: the upstream failed", false),
            Refusal::UpstreamUpgrade => {
                (S::BAD_GATEWAY, None, "upstream-upgrade", "bulkhead: the upstream switched protocols", false)
            }
        };
        SyntheticResponse { http_status, grpc_status, reason, message, close_connection }
    }

    /// The `x-bulkhead-reason` value.
    pub const fn reason(self) -> &'static str {
        self.synthetic().reason
    }

    /// The `reason` label this refusal is counted under.
    pub const fn metric_label(self) -> &'static str {
        self.reason()
    }

    /// The answer's head (the body is empty); `grpc`: the request is gRPC.
    pub fn response(self, grpc: bool) -> Response<()> {
        self.synthetic().response(grpc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every refusal with its status, gRPC status and reason. A new variant
    /// fails to compile here until it is listed (and in `Refusal::ALL`).
    fn listed(refusal: Refusal) -> (u16, Option<u8>, &'static str) {
        match refusal {
            Refusal::Admission(Reason::Ceiling) => (503, Some(8), "ceiling"),
            Refusal::Admission(Reason::SurplusExhausted) => (503, Some(8), "surplus-exhausted"),
            Refusal::Admission(Reason::Unclassified) => (503, Some(8), "unclassified"),
            Refusal::Connect => (400, None, "connect"),
            Refusal::BadHost => (400, None, "bad-host"),
            Refusal::RepeatedClassHeader => (400, None, "repeated-class-header"),
            Refusal::AmbiguousPath => (400, None, "ambiguous-path"),
            Refusal::BadRequestTarget => (400, None, "bad-request-target"),
            Refusal::RequestBodyIdle => (408, None, "request-body-idle"),
            Refusal::UpstreamTimeout => (504, Some(4), "upstream-timeout"),
            Refusal::UpstreamConnect => (502, None, "upstream-connect"),
            Refusal::Upstream => (502, None, "upstream"),
            Refusal::UpstreamUpgrade => (502, None, "upstream-upgrade"),
        }
    }

    #[test]
    fn every_refusal_with_its_status_grpc_status_and_reason() {
        let mut reasons = Vec::new();
        for refusal in Refusal::ALL {
            let (status, grpc, reason) = listed(refusal);
            let plain = refusal.response(false);
            assert_eq!(plain.status(), status, "{refusal:?}");
            assert_eq!(plain.headers()["x-bulkhead-reason"], reason, "{refusal:?}");
            assert_eq!((refusal.reason(), refusal.metric_label()), (reason, reason));
            let answered = refusal.response(true);
            let grpc_status = answered.headers().get("grpc-status").map(|v| v.to_str().unwrap_or_default());
            assert_eq!(grpc_status, grpc.map(|c| c.to_string()).as_deref(), "{refusal:?}");
            assert_eq!(answered.status(), if grpc.is_some() { 200 } else { status }, "{refusal:?}");
            let closes = plain.headers().get("connection").is_some_and(|v| v == "close");
            assert_eq!(closes, refusal.synthetic().close_connection, "{refusal:?}");
            reasons.push(reason);
        }
        reasons.sort_unstable();
        reasons.dedup();
        assert_eq!(reasons.len(), Refusal::ALL.len(), "each refusal has a reason of its own");
        // The pool's reasons are the admission crate's words, not copies.
        for reason in Reason::ALL {
            assert_eq!(Refusal::Admission(reason).reason(), reason.as_str());
        }
    }
}
