//! Print an error with its causes, each once.
//!
//! Our errors keep their cause in `source()` and out of their own text, so
//! `e: cause: cause` reads once. Third-party errors (kube's config errors,
//! hyper's) also write their cause into their own text; a cause whose text
//! is already printed is skipped rather than repeated.

use std::{error::Error, fmt};

/// `Chain(&e)` displays `e: cause: cause`, skipping a cause already in the
/// text so far.
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut printed = self.0.to_string();
        let mut cause = self.0.source();
        while let Some(e) = cause {
            let text = e.to_string();
            if !text.is_empty() && !printed.contains(&text) {
                printed.push_str(": ");
                printed.push_str(&text);
            }
            cause = e.source();
        }
        f.write_str(&printed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading {0}")]
    struct Ours(&'static str, #[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Repeats(#[source] Ours);

    fn io() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")
    }

    #[test]
    fn each_cause_once() {
        assert_eq!(Chain(&Ours("a", io())).to_string(), "reading a: no such file");
        // A third-party error that writes its cause into its text too.
        assert_eq!(Chain(&Repeats(Ours("a", io()))).to_string(), "outer: reading a: no such file");
    }
}
