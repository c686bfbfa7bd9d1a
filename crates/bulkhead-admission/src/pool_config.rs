//! The pool-config schema: the JSON document (`pools.json`) the operator
//! writes into a ConfigMap and an enforcer (`bulkhead proxy`, or the tower
//! Layer in process) reads.

use std::{net::IpAddr, str::FromStr};

use serde::{Deserialize, Serialize};

/// Whether the pool's numbers are per replica (`Instance`) or fleet-wide
/// (`Fleet`: divided by the replicas before they reach a pool config). The
/// CRD's `spec.pool.scope` is this type, so it lives here, with the schema.
// The variants carry no doc comments on purpose: schemars would turn each
// into a described `oneOf` branch, which a CRD's structural schema forbids.
#[allow(missing_docs)]
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Scope {
    #[default]
    Instance,
    Fleet,
}

/// Key of the JSON document in the ConfigMap (and its file name when mounted).
pub const POOL_CONFIG_KEY: &str = "pools.json";

/// Schema version of the JSON document; bump on incompatible change.
pub const POOL_CONFIG_VERSION: u32 = 1;

/// The hash that names one pool-config document: FNV-1a (64 bits) of its
/// bytes, as 16 lowercase hex digits. The operator computes it over the
/// ConfigMap value it writes and the sidecar over the file it applied, so
/// the two agree exactly when the sidecar enforces what was planned. Not a
/// security hash: it only tells versions of one document apart.
pub fn content_hash(bytes: &[u8]) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = bytes.iter().fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME));
    format!("{hash:016x}")
}

/// The JSON document (documented in docs/reference/pools-json.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolConfig {
    /// Schema version: [`POOL_CONFIG_VERSION`].
    pub version: u32,
    /// Name of the Bulkhead the config was planned from.
    pub bulkhead: String,
    /// The resource partitioned (`connections`, `requests`, ...).
    pub resource: String,
    /// Whether the Bulkhead's numbers were per replica or fleet-wide.
    pub scope: Scope,
    /// Replicas the fleet-wide numbers were divided by (1 for Instance).
    pub divided_by: u64,
    /// Units this replica may hand out in all.
    pub capacity: u32,
    /// Units any class may borrow beyond its floor, on this replica.
    pub shared_surplus: u32,
    /// What to do at a class's ceiling.
    pub on_ceiling: OnCeiling,
    /// The classes, each with its floor and ceiling.
    pub classes: Vec<PoolClass>,
}

/// What an enforcer does with a request past its class's ceiling. Only
/// rejection exists: a bulkhead never queues, least of all across classes.
/// Any other value is refused when the document is read, with the field named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnCeiling {
    /// Refuse the request at once.
    #[default]
    #[serde(rename = "reject")]
    Reject,
}

/// One class of work and its share of the pool on one replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolClass {
    /// The class's name, as requests are classified into it.
    pub name: String,
    /// Floor on this replica: held for this class alone.
    pub reserved: u32,
    /// Most this class may hold on this replica (floor + borrowed).
    pub ceiling: u32,
    /// A critical class (probes, admin traffic) keeps a floor of at least 1.
    pub critical: bool,
    /// Optional: the longest a request of this class may take, admission to the end of its
    /// response body, in milliseconds. A request past it gets 504 before its response head,
    /// or has its response cut after, and frees its slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration_ms: Option<u64>,
    /// Optional, written only while a `BulkheadDrill` saturates this class: each admitted request
    /// is held this long before it is forwarded, like a dependency that hangs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Hold>,
}

/// The longest a drill may hold a request, and may last: ten minutes.
pub const MAX_HOLD_MS: u64 = 600_000;

/// A drill's fault on one class (`classes[].hold`). It ends by itself at
/// `untilUnixMs` (wall clock), so a fault outlives neither its drill's
/// deadline nor an operator that stopped before lifting it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    /// The BulkheadDrill that placed the fault (for logs and /readyz).
    pub drill: String,
    /// How long each admitted request is held before it is forwarded (1 ..= 600000).
    pub ms: u64,
    /// Unix time in milliseconds after which nothing more is held.
    pub until_unix_ms: u64,
}

impl Hold {
    /// Whether the fault still holds at `now_unix_ms`.
    pub fn active_at(&self, now_unix_ms: u64) -> bool {
        now_unix_ms < self.until_unix_ms
    }

    /// How long a request admitted at `now_unix_ms` is held: `ms`, cut short
    /// by `untilUnixMs`; None once the fault has ended.
    pub fn remaining_at(&self, now_unix_ms: u64) -> Option<std::time::Duration> {
        self.active_at(now_unix_ms)
            .then(|| std::time::Duration::from_millis(self.ms.min(self.until_unix_ms - now_unix_ms)))
    }
}

/// Wall-clock now in unix milliseconds, as [`Hold::active_at`] reads it (0 before 1970).
pub fn now_unix_ms() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(now.as_millis()).unwrap_or(u64::MAX)
}

/// Why a pool config cannot be enforced; each names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PoolConfigError {
    /// A schema version this build does not read.
    #[allow(missing_docs)] // its fields are the numbers the message names
    #[error("version: {found} is not supported (this build reads version {POOL_CONFIG_VERSION})")]
    Version { found: u32 },
    /// No class at all.
    #[error("classes: no class is defined")]
    NoClasses,
    /// Two classes of one name.
    #[allow(missing_docs)] // its fields are the numbers the message names
    #[error("classes[{index}].name: {name:?} appears twice")]
    DuplicateClass { index: usize, name: String },
    /// A class without a name.
    #[allow(missing_docs)] // its fields are the numbers the message names
    #[error("classes[{index}].name: must not be empty")]
    EmptyName { index: usize },
    /// The floors and the surplus add up to more than the capacity.
    #[allow(missing_docs)] // its fields are the numbers the message names
    #[error("capacity: the floors ({reserved}) plus sharedSurplus ({surplus}) exceed capacity {capacity}")]
    OverCapacity { reserved: u64, surplus: u32, capacity: u32 },
    /// A ceiling under the class's own floor.
    #[allow(missing_docs)] // its fields are the numbers the message names
    #[error("classes[{index}].ceiling: {ceiling} is below the class's reserved floor {reserved}")]
    CeilingBelowFloor { index: usize, ceiling: u32, reserved: u32 },
    /// A ceiling the class could never reach by borrowing.
    #[allow(missing_docs)] // its fields are the numbers the message names
    #[error("classes[{index}].ceiling: {ceiling} exceeds reserved {reserved} plus sharedSurplus {surplus}")]
    CeilingAboveBorrowable { index: usize, ceiling: u32, reserved: u32, surplus: u32 },
    /// A hold of no time, or longer than a drill may last.
    #[allow(missing_docs)] // its fields are the numbers the message names
    #[error("classes[{index}].hold.ms: {ms} is outside 1..={MAX_HOLD_MS}")]
    HoldOutOfRange { index: usize, ms: u64 },
    /// A critical class is the lane probes need; nothing may hold it.
    #[allow(missing_docs)] // its fields are the numbers the message names
    #[error("classes[{index}].hold: {name:?} is critical and is never held")]
    CriticalHeld { index: usize, name: String },
}

impl PoolConfig {
    /// The rules an enforcer relies on: every sum is exact (u64), so no
    /// combination of u32 fields can wrap past a check.
    pub fn validate(&self) -> Result<(), PoolConfigError> {
        if self.version != POOL_CONFIG_VERSION {
            return Err(PoolConfigError::Version { found: self.version });
        }
        if self.classes.is_empty() {
            return Err(PoolConfigError::NoClasses);
        }
        for (index, class) in self.classes.iter().enumerate() {
            if class.name.is_empty() {
                return Err(PoolConfigError::EmptyName { index });
            }
            if self.classes[..index].iter().any(|c| c.name == class.name) {
                return Err(PoolConfigError::DuplicateClass { index, name: class.name.clone() });
            }
            if class.ceiling < class.reserved {
                return Err(PoolConfigError::CeilingBelowFloor {
                    index,
                    ceiling: class.ceiling,
                    reserved: class.reserved,
                });
            }
            if u64::from(class.ceiling) > u64::from(class.reserved) + u64::from(self.shared_surplus) {
                return Err(PoolConfigError::CeilingAboveBorrowable {
                    index,
                    ceiling: class.ceiling,
                    reserved: class.reserved,
                    surplus: self.shared_surplus,
                });
            }
            if let Some(hold) = &class.hold {
                if class.critical {
                    return Err(PoolConfigError::CriticalHeld { index, name: class.name.clone() });
                }
                if hold.ms == 0 || hold.ms > MAX_HOLD_MS {
                    return Err(PoolConfigError::HoldOutOfRange { index, ms: hold.ms });
                }
            }
        }
        let reserved: u64 = self.classes.iter().map(|c| u64::from(c.reserved)).sum();
        if reserved + u64::from(self.shared_surplus) > u64::from(self.capacity) {
            return Err(PoolConfigError::OverCapacity {
                reserved,
                surplus: self.shared_surplus,
                capacity: self.capacity,
            });
        }
        Ok(())
    }
}

/// An address range, `10.0.0.0/8` or `fd00::/8` (a bare address is one host):
/// the peers an enforcer believes when they name a class by header. Here,
/// beside the schema, because the operator validates what it injects with
/// the same parser the proxy uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    /// Loopback, IPv4 and IPv6: the default set of trusted peers.
    pub fn loopback() -> Vec<Cidr> {
        vec![
            Cidr { net: IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), bits: 8 },
            Cidr { net: IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), bits: 128 },
        ]
    }

    /// Whether `ip` is in this network (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.net, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => prefix_eq(&net.octets(), &ip.octets(), self.bits),
            (IpAddr::V6(net), IpAddr::V6(ip)) => prefix_eq(&net.octets(), &ip.octets(), self.bits),
            _ => false,
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let (whole, rest) = (usize::from(bits / 8), bits % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || (a[whole] ^ b[whole]) >> (8 - rest) == 0
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{s:?}: expected an address range such as 10.0.0.0/8");
        let (addr, bits) = s.trim().split_once('/').map_or((s.trim(), None), |(a, b)| (a, Some(b)));
        let net: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            Some(b) => b.parse::<u8>().ok().filter(|b| *b <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(Cidr { net, bits })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // The README's example pool: 40 + 30 + 10 + 5 reserved, 115 shared, 200 in all.
    use crate::admission::tests::example;

    #[test]
    fn the_content_hash_is_fnv1a_64_in_hex() {
        // FNV-1a's published test vectors: "" and "a".
        assert_eq!(content_hash(b""), "cbf29ce484222325");
        assert_eq!(content_hash(b"a"), "af63dc4c8601ec8c");
        assert_ne!(content_hash(b"{\"capacity\":1}"), content_hash(b"{\"capacity\":2}"));
    }

    #[test]
    fn only_reject_is_read_at_the_ceiling() {
        let mut doc = serde_json::to_value(example()).expect("serialises");
        assert_eq!(doc["onCeiling"], "reject");
        doc["onCeiling"] = "queue".into();
        let err = serde_path_to_error::deserialize::<_, PoolConfig>(doc).expect_err("queue is refused");
        assert_eq!(err.path().to_string(), "onCeiling");
        assert!(err.to_string().contains("unknown variant `queue`, expected `reject`"), "{err}");
    }

    #[test]
    fn by_default_only_loopback_peers_may_name_a_class() {
        let trusted = Cidr::loopback();
        let believed = |ip: &str| trusted.iter().any(|c| c.contains(ip.parse().expect("ip")));
        for ip in ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"] {
            assert!(believed(ip), "{ip} is loopback");
        }
        for ip in ["10.244.1.7", "192.168.0.1", "::ffff:10.0.0.1", "fd00::1", "0.0.0.0"] {
            assert!(!believed(ip), "{ip} is another pod or host");
        }
    }

    #[test]
    fn the_example_pool_is_valid() {
        assert_eq!(example().validate(), Ok(()));
    }

    #[test]
    fn each_rule_names_its_field() {
        let mut c = example();
        c.version = 2;
        assert!(c.validate().unwrap_err().to_string().starts_with("version:"));
        let mut c = example();
        c.capacity = 199;
        assert!(matches!(c.validate(), Err(PoolConfigError::OverCapacity { reserved: 85, .. })));
        let mut c = example();
        c.classes[1].ceiling = 29;
        assert!(c.validate().unwrap_err().to_string().starts_with("classes[1].ceiling:"));
        let mut c = example();
        c.classes[2].ceiling = 126;
        assert!(matches!(c.validate(), Err(PoolConfigError::CeilingAboveBorrowable { index: 2, .. })));
        let mut c = example();
        c.classes[3].name = "search".into();
        assert!(matches!(c.validate(), Err(PoolConfigError::DuplicateClass { index: 3, .. })));
    }

    #[test]
    fn a_hold_is_bounded_never_on_the_critical_lane_and_absent_from_a_plain_document() {
        let plain = serde_json::to_string(&example()).expect("serialises");
        assert!(!plain.contains("hold"), "a config without a drill says nothing of holds: {plain}");
        let hold = |ms| Some(Hold { drill: "d".into(), ms, until_unix_ms: 10 });
        let mut c = example();
        c.classes[1].hold = hold(30_000);
        assert_eq!(c.validate(), Ok(()));
        let doc = serde_json::to_value(&c).expect("serialises");
        assert_eq!(doc["classes"][1]["hold"], serde_json::json!({"drill": "d", "ms": 30000, "untilUnixMs": 10}));
        for ms in [0, MAX_HOLD_MS + 1] {
            c.classes[1].hold = hold(ms);
            assert!(c.validate().unwrap_err().to_string().starts_with("classes[1].hold.ms:"), "{ms}");
        }
        let critical = c.classes.iter().position(|k| k.critical).expect("a critical class");
        c.classes[1].hold = None;
        c.classes[critical].hold = hold(1);
        assert!(matches!(c.validate(), Err(PoolConfigError::CriticalHeld { index, .. }) if index == critical));
        let h = Hold { drill: "d".into(), ms: 1, until_unix_ms: 10 };
        assert!(h.active_at(9) && !h.active_at(10));
    }

    #[test]
    fn sums_do_not_wrap() {
        let mut c = example();
        c.capacity = u32::MAX;
        c.shared_surplus = u32::MAX;
        for class in &mut c.classes {
            class.reserved = u32::MAX;
            class.ceiling = u32::MAX;
        }
        assert!(matches!(c.validate(), Err(PoolConfigError::OverCapacity { .. })));
    }
}
