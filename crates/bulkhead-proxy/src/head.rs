//! Request heads kept to send a request again, when an upstream closed its
//! connection or refused the stream before it acted on the request.

use http::Request;

/// A copy of a request's head (its extensions stay behind: none is read upstream).
pub(super) fn copy_head<B>(req: &Request<B>) -> Request<()> {
    let mut head = Request::new(());
    *head.method_mut() = req.method().clone();
    *head.uri_mut() = req.uri().clone();
    *head.version_mut() = req.version();
    *head.headers_mut() = req.headers().clone();
    head
}
