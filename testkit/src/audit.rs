//! Count the writes a user or field manager made, from the API server's audit
//! log: an identical server-side apply leaves resourceVersion alone but is
//! still a request, and "no writes at steady state" means no requests.

use std::path::Path;

use serde_json::Value;

#[derive(Debug, Clone)]
pub struct Write {
    pub verb: String,
    pub uri: String,
    pub user: String,
    pub at: String,
    /// The HTTP status of the response (a refused write is still a request).
    pub code: u16,
}

/// Write requests (create/update/patch/delete) by `user` received at or after
/// `since` (RFC 3339, as in the audit log).
pub fn writes_by(cp_dir: &Path, user: &str, since: &str) -> Vec<Write> {
    let log = std::fs::read_to_string(cp_dir.join("audit.log")).expect("the API server writes an audit log");
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .filter(|e| matches!(e["verb"].as_str(), Some("create" | "update" | "patch" | "delete" | "deletecollection")))
        .filter(|e| e["user"]["username"] == user)
        .filter(|e| e["requestReceivedTimestamp"].as_str().is_some_and(|t| t >= since))
        .map(|e| Write {
            verb: e["verb"].as_str().unwrap_or_default().to_string(),
            uri: e["requestURI"].as_str().unwrap_or_default().to_string(),
            user: user.to_string(),
            at: e["requestReceivedTimestamp"].as_str().unwrap_or_default().to_string(),
            code: e["responseStatus"]["code"].as_u64().and_then(|c| u16::try_from(c).ok()).unwrap_or_default(),
        })
        .collect()
}

/// Now, in the audit log's format (UTC, microseconds).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

/// Wait until `user` has written nothing (Events aside) for `quiet`, so that a
/// check of writes at rest starts after the last reaction to earlier changes
/// (an old pod going away still moves the audit). Panics after `timeout`.
pub async fn wait_quiet(cp_dir: &Path, user: &str, quiet: std::time::Duration, timeout: std::time::Duration) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let since = now_rfc3339();
        tokio::time::sleep(quiet).await;
        let writes: Vec<Write> =
            writes_by(cp_dir, user, &since).into_iter().filter(|w| !w.uri.contains("/events")).collect();
        if writes.is_empty() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{user} kept writing for {timeout:?}: {writes:?}");
    }
}
