//! Path normalisation before path rules, as Envoy's `normalize_path` and
//! `merge_slashes` do: `/admin/../checkout` is `/checkout`, `//admin` and
//! `/%61dmin` are `/admin`. Otherwise a client picks its class by spelling
//! the same path another way. What some upstreams would still read another
//! way is refused: an encoded `/` or `\`, a raw `\` (a separator to IIS and
//! others), and a dot segment with parameters (`..;x`, which servlet
//! containers read as `..`).

use std::borrow::Cow;

/// Why a path cannot be classified safely.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("the path keeps a backslash, an encoded slash or a dot segment with parameters after normalisation")]
pub struct AmbiguousPath;

/// Percent-decode unreserved characters (RFC 3986 2.3), merge repeated
/// slashes, remove dot segments (RFC 3986 5.2.4). A path holding an
/// encoded `/` or `\`, or a raw `\`, is refused: the upstream may read it as
/// a segment boundary the rules never saw; so is a dot segment with
/// parameters (`/checkout/..;/admin` is `/admin` to Tomcat).
pub fn normalize(path: &str) -> Result<Cow<'_, str>, AmbiguousPath> {
    let b = path.as_bytes();
    if b.contains(&b'\\') {
        return Err(AmbiguousPath);
    }
    let plain = !path.contains('%') && !path.contains("//") && !path.contains("/.");
    if plain {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode_unreserved(b)?;
    let mut out: Vec<&str> = Vec::new();
    let ends_with_slash = decoded.ends_with('/') || decoded.ends_with("/.") || decoded.ends_with("/..");
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s if matches!(s.split(';').next(), Some("." | "..")) => return Err(AmbiguousPath),
            s => out.push(s),
        }
    }
    let mut normal = String::with_capacity(decoded.len());
    for s in &out {
        normal.push('/');
        normal.push_str(s);
    }
    if normal.is_empty() || (ends_with_slash && !normal.ends_with('/')) {
        normal.push('/');
    }
    Ok(Cow::Owned(normal))
}

fn decode_unreserved(b: &[u8]) -> Result<String, AmbiguousPath> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                let c = h << 4 | l;
                if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
                    out.push(c);
                    i += 3;
                    continue;
                }
                if matches!(c, b'/' | b'\\') {
                    return Err(AmbiguousPath);
                }
                // Anything else stays encoded, in upper case as RFC 3986 6.2.2.1 advises.
                out.extend_from_slice(&[b'%', b[i + 1].to_ascii_uppercase(), b[i + 2].to_ascii_uppercase()]);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    // The input was a valid URI path (ASCII); decoding unreserved bytes keeps it ASCII.
    String::from_utf8(out).map_err(|_| AmbiguousPath)
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_path_are_one_path() {
        for (raw, normal) in [
            ("/admin/x", "/admin/x"),
            ("/admin/../checkout/pay", "/checkout/pay"),
            ("/admin/%2e%2e/checkout", "/checkout"),
            ("/admin/%2E%2E/checkout", "/checkout"),
            ("//admin/x", "/admin/x"),
            ("/%61dmin/x", "/admin/x"),
            ("/a/./b/", "/a/b/"),
            ("/a/b/..", "/a/"),
            ("/../../x", "/x"),
            ("/a%20b", "/a%20b"),
            ("/a%3fb", "/a%3Fb"),
            ("/", "/"),
            ("/..", "/"),
        ] {
            assert_eq!(normalize(raw).as_deref(), Ok(normal), "{raw}");
        }
        assert_eq!(normalize("/admin%2Fx"), Err(AmbiguousPath));
        assert_eq!(normalize("/admin%5cx"), Err(AmbiguousPath));
        assert_eq!(normalize("/checkout\\..\\admin"), Err(AmbiguousPath));
        assert_eq!(normalize("/checkout/..;/admin"), Err(AmbiguousPath));
        assert_eq!(normalize("/checkout/.;x/../admin"), Err(AmbiguousPath));
        assert_eq!(normalize("/checkout/%2e%2e;x/admin"), Err(AmbiguousPath));
        assert_eq!(normalize("/a;b/./c").as_deref(), Ok("/a;b/c"), "parameters elsewhere are the server's");
        assert_eq!(normalize("/a%2"), Ok(Cow::Owned("/a%2".into())));
    }
}
