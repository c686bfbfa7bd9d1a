//! Log output of the operator and the proxy. JSON lines carry each event's
//! fields at the top level (`{"level":…,"message":…,"bulkhead":"shop"}`),
//! where Loki and Elasticsearch find them without a flattening stage.

use tracing_subscriber::{fmt::MakeWriter, EnvFilter};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Added to the filter unless RUST_LOG names kube_client itself: kube-client
/// logs its own ERROR line per failed request ("failed with error client
/// error (Connect)"). Each such failure reaches the caller, which logs it with
/// what failed (a watch's kind and next retry, a Bulkhead's reconcile, an
/// Event, the Lease) and counts it (the controller's own Bulkhead watch logs
/// at debug: the snapshot's Bulkhead watch reports the same failures at WARN):
/// the line said the same again with less, and was half of the log while the
/// API server was unreachable.
/// `RUST_LOG=info,kube_client=info` shows it again.
pub const QUIET_KUBE_CLIENT: &str = "kube_client::client::builder=off";

/// The filter for a RUST_LOG value (default info).
pub fn filter(rust_log: Option<&str>) -> EnvFilter {
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        Some(directives) if directives.contains("kube_client") => EnvFilter::new(directives),
        Some(directives) => EnvFilter::new(format!("{directives},{QUIET_KUBE_CLIENT}")),
        None => EnvFilter::new(format!("info,{QUIET_KUBE_CLIENT}")),
    }
}

/// Install the global subscriber: RUST_LOG filters (see [`filter`]), stderr
/// is left to errors printed by the binary, logs go to stdout.
pub fn init(format: LogFormat) {
    let filter = filter(std::env::var("RUST_LOG").ok().as_deref());
    let _ = tracing::subscriber::set_global_default(subscriber(format, filter, std::io::stdout));
}

/// The subscriber `init` installs, writing to `writer`.
pub fn subscriber<W>(format: LogFormat, filter: EnvFilter, writer: W) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    // Colour codes only on a terminal: `kubectl logs` and log collectors read files.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi);
    match format {
        LogFormat::Text => Box::new(builder.finish()),
        LogFormat::Json => Box::new(builder.json().flatten_event(true).with_current_span(true).finish()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_lines_carry_event_fields_at_the_top_level() {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = subscriber(LogFormat::Json, EnvFilter::new("info"), move || writer.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(bulkhead = "shop", retry_in = 5, "reconcile failed");
        });
        let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("utf-8");
        let line: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
        assert_eq!(line["message"], "reconcile failed", "{line}");
        assert_eq!(line["bulkhead"], "shop", "{line}");
        assert_eq!(line["retry_in"], 5, "{line}");
        assert_eq!(line["level"], "WARN", "{line}");
        assert!(line.get("fields").is_none(), "fields are not nested: {line}");
    }

    #[test]
    fn kube_client_s_per_request_line_is_dropped_unless_asked_for_and_every_other_error_kept() {
        let logged = |rust_log: Option<&str>| {
            let out = Captured::default();
            let writer = out.clone();
            let subscriber = subscriber(LogFormat::Text, filter(rust_log), move || writer.clone());
            tracing::subscriber::with_default(subscriber, || {
                tracing::error!(target: "kube_client::client::builder", "failed with error client error (Connect)");
                tracing::error!(target: "kube_lease_manager::manager", "LeaseManager watcher error");
                tracing::error!(target: "kube_client::config", "an error elsewhere in kube-client");
                tracing::warn!(kind = "Pod", "watch failed");
                tracing::debug!("a debug line");
            });
            let bytes = out.0.lock().expect("lock").clone();
            String::from_utf8(bytes).expect("utf-8")
        };
        // Unset, and as the chart sets it (logLevel: info).
        for rust_log in [None, Some("info"), Some("")] {
            let text = logged(rust_log);
            assert!(!text.contains("failed with error"), "{rust_log:?}: {text}");
            for kept in ["LeaseManager watcher error", "an error elsewhere in kube-client", "watch failed"] {
                assert!(text.contains(kept), "{rust_log:?}: {kept} dropped:\n{text}");
            }
            assert_eq!(text.lines().count(), 3, "{rust_log:?}: {text}");
        }
        assert!(logged(Some("debug")).contains("a debug line"));
        assert!(!logged(Some("debug")).contains("failed with error"));
        assert!(logged(Some("info,kube_client=info")).contains("failed with error"));
    }
}
