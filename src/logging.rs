//! Log output of the operator and the proxy. JSON lines carry each event's
//! fields at the top level (`{"level":…,"message":…,"bulkhead":"shop"}`),
//! where Loki and Elasticsearch find them without a flattening stage.

use tracing_subscriber::{fmt::MakeWriter, EnvFilter};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Install the global subscriber: RUST_LOG filters (default info), stderr
/// is left to errors printed by the binary, logs go to stdout.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing::subscriber::set_global_default(subscriber(format, filter, std::io::stdout));
}

/// The subscriber `init` installs, writing to `writer`.
pub fn subscriber<W>(format: LogFormat, filter: EnvFilter, writer: W) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer);
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
}
