//! One HTTP/1.1 exchange on its own connection, bounded in time and size:
//! the drill's requests and its questions to the sidecars' admin ports.

use std::{net::SocketAddr, time::Duration};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest answer read; the rest is not needed to judge it.
pub(super) const MAX_ANSWER: u64 = 64 * 1024;

/// Send `request` (which asks the server to close) and read the answer
/// until it closes, within `timeout`; the status code and what was read.
pub(super) async fn exchange(addr: SocketAddr, request: &[u8], timeout: Duration) -> Result<(u16, Vec<u8>), String> {
    let work = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(request).await?;
        let mut answer = Vec::with_capacity(512);
        (&mut stream).take(MAX_ANSWER).read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = match tokio::time::timeout(timeout, work).await {
        Err(_) => return Err(format!("no answer within {timeout:?}")),
        Ok(Err(e)) => return Err(e.kind().to_string()),
        Ok(Ok(answer)) => answer,
    };
    let code = status_code(&answer).ok_or_else(|| "not an HTTP answer".to_string())?;
    Ok((code, answer))
}

/// `HTTP/1.1 503 ...` → 503.
fn status_code(answer: &[u8]) -> Option<u16> {
    let line = answer.split(|b| *b == b'\n').next()?;
    let code = line.split(|b| *b == b' ').nth(1)?;
    std::str::from_utf8(code).ok()?.trim().parse().ok()
}

/// `GET path` for the drill's load, naming the class in `header` if given.
pub(super) fn get_request(path: &str, header: Option<(&str, &str)>) -> Vec<u8> {
    let named = header.map(|(h, v)| format!("{h}: {v}\r\n")).unwrap_or_default();
    format!(
        "GET {path} HTTP/1.1\r\nHost: bulkhead-drill\r\nUser-Agent: bulkhead-drill\r\n{named}Connection: close\r\n\r\n"
    )
    .into_bytes()
}

/// The `held=` of a sidecar's /readyz answer: requests a drill's fault holds there now.
pub(super) fn held(answer: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(answer).ok()?;
    let body = text.split_once("\r\n\r\n")?.1;
    body.split_whitespace().find_map(|w| w.strip_prefix("held="))?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_and_the_held_count_are_read_from_the_answer() {
        assert_eq!(status_code(b"HTTP/1.1 503 Service Unavailable\r\n\r\n"), Some(503));
        assert_eq!(status_code(b"garbage"), None);
        assert_eq!(held(b"HTTP/1.1 200 OK\r\n\r\nok generation=2 config=ab held=4\n"), Some(4));
        assert_eq!(held(b"HTTP/1.1 200 OK\r\nx: held=9\r\n\r\nok generation=2 config=ab\n"), None);
        let r = String::from_utf8(get_request("/call/a", Some(("x-bulkhead-class", "a")))).expect("ascii");
        assert!(r.starts_with("GET /call/a HTTP/1.1\r\n") && r.contains("x-bulkhead-class: a\r\n"), "{r}");
    }
}
