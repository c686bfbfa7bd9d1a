//! File descriptors. When the process runs out of them, every accept fails,
//! the admin port's included: /healthz stops answering and the kubelet
//! restarts a sidecar that was only busy (issue 21: 300 silent sockets under
//! a limit of 256 did it). So the app listeners must run out of connections
//! first: `--max-connections` is lowered at start to what the limit allows,
//! keeping descriptors for each connection's upstream and for the admin ports.

use rustix::process::{getrlimit, setrlimit, Resource};

/// Listeners, the epoll and event descriptors, the config directory, stdio.
const FIXED: u64 = 64;

/// `requested`, or fewer if the descriptor limit cannot hold that many
/// client connections, each with an upstream connection, beside
/// `admin_connections` on each of the two admin listeners.
pub(super) fn connection_budget(requested: usize, admin_connections: usize) -> usize {
    let limit = raise_soft_limit();
    let budget = budget(limit, admin_connections);
    let Some(budget) = budget.filter(|b| *b < requested) else { return requested };
    tracing::warn!(
        requested,
        allowed = budget,
        nofile = limit,
        "--max-connections lowered to what the file-descriptor limit (RLIMIT_NOFILE) allows: two descriptors a \
         connection (client and upstream), and some kept for the admin ports"
    );
    budget
}

/// Client connections `nofile` descriptors allow; None when unlimited.
fn budget(nofile: Option<u64>, admin_connections: usize) -> Option<usize> {
    let nofile = nofile?;
    let admin = 2 * u64::try_from(admin_connections).unwrap_or(u64::MAX);
    let left = nofile.saturating_sub(FIXED).saturating_sub(admin);
    Some(usize::try_from(left / 2).unwrap_or(usize::MAX).max(1))
}

/// Raise the soft limit to the hard one (as Go programs and Envoy do) and return it.
fn raise_soft_limit() -> Option<u64> {
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            limit = raised;
        }
    }
    limit.current
}

#[cfg(test)]
mod tests {
    use super::budget;

    #[test]
    fn two_descriptors_a_connection_after_the_admin_ports_and_fixed_ones() {
        // 256: 64 fixed, 2 × 64 admin, 64 left: 32 connections.
        assert_eq!(budget(Some(256), 64), Some(32));
        assert_eq!(budget(Some(1 << 20), 64), Some(((1 << 20) - 192) / 2));
        assert_eq!(budget(Some(100), 64), Some(1), "never zero");
        assert_eq!(budget(None, 64), None);
    }
}
