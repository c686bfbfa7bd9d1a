//! The Date field of the HTTP/2 responses (RFC 9110 6.6.1: a proxy adds
//! one to a response that has none), formatted once a second per thread.

use std::{cell::RefCell, time::SystemTime};

use http::HeaderValue;

thread_local! {
    /// The second formatted, and its text.
    static CACHED: RefCell<(u64, HeaderValue)> = const { RefCell::new((0, HeaderValue::from_static(""))) };
}

/// Now, as a Date value.
pub(super) fn now() -> HeaderValue {
    let now = SystemTime::now();
    let second = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != second {
            // An IMF-fixdate is always a valid header value.
            let text = httpdate::fmt_http_date(now);
            cached.1 = HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static(""));
            cached.0 = second;
        }
        cached.1.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_date_is_an_imf_fixdate_of_now() {
        let value = now();
        let text = value.to_str().expect("ascii");
        let parsed = httpdate::parse_http_date(text).expect("an HTTP date");
        let age = SystemTime::now().duration_since(parsed).expect("not in the future");
        assert!(age.as_secs() <= 1, "{text} is {age:?} old");
        assert_eq!(text.len(), "Sun, 06 Nov 1994 08:49:37 GMT".len());
    }
}
