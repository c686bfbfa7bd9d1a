//! `bulkhead shard`: when one tenant's shard fails (its K nodes lost), how many
//! of the other T − 1 tenants lose all their nodes, some, or none, under three
//! ways of placing T tenants on N nodes.

use num_bigint::BigUint;
use num_traits::ToPrimitive;
use serde::{Serialize, Serializer};
use serde_json::{json, Value};

use super::{check_sizes, ShardError, MAX_NODES, MAX_SHARD_SIZE, MAX_TENANTS};

/// Expected numbers of the other tenants hit by one shard's failure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impact {
    /// All their nodes are in the failed shard.
    pub fully_affected: f64,
    /// Some but not all of their nodes are.
    pub partially_affected: f64,
    /// None of their nodes are.
    pub unaffected: f64,
}

/// The calculator's answer for N nodes, shards of K, and T tenants.
#[derive(Debug, Clone, PartialEq)]
pub struct Calculation {
    pub nodes: usize,
    pub shard_size: usize,
    pub tenants: u64,
    /// C(N, K): the number of distinct shards.
    pub combinations: BigUint,
    /// Every tenant on every node.
    pub shared: Impact,
    /// floor(N / K) groups of K nodes (the N mod K other nodes unused); tenants
    /// spread over the groups as evenly as they go, the failed one in a largest group.
    pub partitioned: Impact,
    pub groups: usize,
    pub tenants_in_failed_group: u64,
    /// Each tenant on K of the N nodes drawn uniformly at random: exact expectations.
    pub shuffle_sharded: Impact,
}

impl Calculation {
    pub fn new(nodes: usize, shard_size: usize, tenants: u64) -> Result<Self, ShardError> {
        if nodes > MAX_NODES {
            return Err(ShardError::TooManyNodes { nodes, max: MAX_NODES });
        }
        if shard_size > MAX_SHARD_SIZE {
            return Err(ShardError::ShardSizeTooLarge { shard_size, max: MAX_SHARD_SIZE });
        }
        check_sizes(nodes, shard_size)?;
        if tenants == 0 {
            return Err(ShardError::NoTenants);
        }
        if tenants > MAX_TENANTS {
            return Err(ShardError::TooManyTenants { tenants, max: MAX_TENANTS });
        }
        let others = tenants - 1;
        let shared = Impact { fully_affected: others as f64, partially_affected: 0.0, unaffected: 0.0 };

        let groups = nodes / shard_size;
        let tenants_in_failed_group = tenants.div_ceil(groups as u64);
        let partitioned = Impact {
            fully_affected: (tenants_in_failed_group - 1) as f64,
            partially_affected: 0.0,
            unaffected: (tenants - tenants_in_failed_group) as f64,
        };

        // Another tenant's shard B meets the failed shard S in j nodes with the
        // hypergeometric probability C(K, j) C(N − K, K − j) / C(N, K): j = K for
        // exactly one of the C(N, K) shards, j = 0 for the C(N − K, K) shards
        // that avoid S, and partly for the rest.
        let (n, k) = (nodes as u64, shard_size as u64);
        let combinations = binomial(n, k);
        let disjoint = binomial(n - k, k);
        let partial = &combinations - &disjoint - 1u32;
        let expect = |count: &BigUint| ratio(&(count * others), &combinations);
        let shuffle_sharded = Impact {
            fully_affected: expect(&BigUint::from(1u32)),
            partially_affected: expect(&partial),
            unaffected: expect(&disjoint),
        };
        Ok(Calculation {
            nodes,
            shard_size,
            tenants,
            combinations,
            shared,
            partitioned,
            groups,
            tenants_in_failed_group,
            shuffle_sharded,
        })
    }

    /// The human table.
    pub fn table(&self) -> String {
        let (n, k) = (self.nodes, self.shard_size);
        let mut out = format!(
            "{} nodes, shard size {k}, {} tenants: one tenant's shard fails ({k} node(s) lost); of the {} other tenants:\n\n",
            group_digits(&n.to_string()),
            group_digits(&self.tenants.to_string()),
            group_digits(&(self.tenants - 1).to_string()),
        );
        out +=
            &format!("{:<16}{:>16}{:>20}{:>14}\n", "assignment", "fully affected", "partially affected", "unaffected");
        for (name, i) in
            [("shared", &self.shared), ("partitioned", &self.partitioned), ("shuffleSharded", &self.shuffle_sharded)]
        {
            out += &format!(
                "{name:<16}{:>16}{:>20}{:>14}\n",
                expectation(i.fully_affected),
                expectation(i.partially_affected),
                expectation(i.unaffected)
            );
        }
        let spare = n % k;
        let spare = if spare == 0 { String::new() } else { format!(", {spare} node(s) unused") };
        out += &format!(
            "\nshared: every tenant on every node.\npartitioned: {} group(s) of {k} node(s){spare}; the failed tenant's group is a largest one, {} tenant(s).\n",
            self.groups,
            group_digits(&self.tenants_in_failed_group.to_string()),
        );
        out += &format!(
            "shuffleSharded: each tenant on {k} of the {n} nodes drawn at random (expected counts); C({n}, {k}) = {} distinct shards.\n",
            big(&self.combinations)
        );
        out
    }
}

/// C(n, k) exactly (0 when k > n). Each step's product is C(n − k + i, i), so
/// every division is exact; cost O(min(k, n − k)) big-by-small operations.
pub fn binomial(n: u64, k: u64) -> BigUint {
    if k > n {
        return BigUint::from(0u32);
    }
    let k = k.min(n - k);
    let mut c = BigUint::from(1u32);
    for i in 1..=k {
        c *= n - k + i;
        c /= i;
    }
    c
}

/// num / den as the nearest double (den > 0), even when both overflow f64.
fn ratio(num: &BigUint, den: &BigUint) -> f64 {
    if num.bits() <= 53 && den.bits() <= 53 {
        // Both exact as doubles: one correctly rounded division.
        return num.to_f64().unwrap_or(0.0) / den.to_f64().unwrap_or(1.0);
    }
    // Scale the quotient to at least 64 significant bits, convert, scale back in
    // steps so that no intermediate power of two underflows.
    let shift = (den.bits() + 64).saturating_sub(num.bits());
    let mut x = ((num << shift) / den).to_f64().unwrap_or(f64::INFINITY);
    let mut left = shift;
    while left > 0 && x != 0.0 {
        let step = left.min(1000);
        x *= 2f64.powi(-(step as i32));
        left -= step;
    }
    x
}

/// The `-o json` object, keys in the documented order (other keys come after
/// the three numbers of `partitioned`). Whole expectations print as integers;
/// C(N, K) prints as a string of digits once it exceeds 2^53, where JSON
/// readers that use doubles would round it.
impl Serialize for Calculation {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Json {
            nodes: usize,
            shard_size: usize,
            tenants: u64,
            combinations: Value,
            shared: ImpactJson,
            partitioned: PartitionedJson,
            shuffle_sharded: ImpactJson,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct PartitionedJson {
            #[serde(flatten)]
            impact: ImpactJson,
            groups: usize,
            tenants_in_failed_group: u64,
        }
        let combinations = match self.combinations.to_u64() {
            Some(c) if c <= 1 << 53 => json!(c),
            _ => json!(self.combinations.to_string()),
        };
        Json {
            nodes: self.nodes,
            shard_size: self.shard_size,
            tenants: self.tenants,
            combinations,
            shared: ImpactJson::from(&self.shared),
            partitioned: PartitionedJson {
                impact: ImpactJson::from(&self.partitioned),
                groups: self.groups,
                tenants_in_failed_group: self.tenants_in_failed_group,
            },
            shuffle_sharded: ImpactJson::from(&self.shuffle_sharded),
        }
        .serialize(serializer)
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ImpactJson {
    fully_affected: Value,
    partially_affected: Value,
    unaffected: Value,
}

impl From<&Impact> for ImpactJson {
    fn from(i: &Impact) -> Self {
        ImpactJson {
            fully_affected: number(i.fully_affected),
            partially_affected: number(i.partially_affected),
            unaffected: number(i.unaffected),
        }
    }
}

/// A whole number as a JSON integer (799, not 799.0), anything else as it is.
fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() <= (1u64 << 53) as f64 {
        json!(x as i64)
    } else {
        json!(x)
    }
}

/// An expectation for people: whole numbers as they are, otherwise two
/// decimals, or three significant digits below 1 (0.000133, not 0.00).
fn expectation(x: f64) -> String {
    if x.fract() == 0.0 {
        group_digits(&format!("{x:.0}"))
    } else if x >= 1.0 {
        let s = format!("{x:.2}");
        let (whole, frac) = s.split_once('.').unwrap_or((&s, ""));
        format!("{}.{frac}", group_digits(whole))
    } else if x >= 1e-6 {
        let decimals = (-x.log10()).floor() as usize + 3;
        format!("{x:.decimals$}")
    } else {
        format!("{x:.2e}")
    }
}

/// 75287520 → 75,287,520.
/// A count for a person: exact up to 24 digits, beyond that in scientific
/// notation with its number of digits (the JSON output keeps it exact).
fn big(count: &BigUint) -> String {
    let digits = count.to_string();
    if digits.len() <= 24 {
        return group_digits(&digits);
    }
    format!("{}.{}e{} (a number of {} digits)", &digits[..1], &digits[1..3], digits.len() - 1, digits.len())
}

fn group_digits(digits: &str) -> String {
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_binomials_by_hand() {
        assert_eq!(binomial(8, 2), BigUint::from(28u32)); // 8·7/2
        assert_eq!(binomial(6, 2), BigUint::from(15u32)); // 6·5/2
        assert_eq!(binomial(100, 5), BigUint::from(75_287_520u32)); // 100·99·98·97·96/120
        assert_eq!(binomial(5, 7), BigUint::from(0u32));
        assert_eq!(binomial(7, 7), BigUint::from(1u32));
        assert_eq!(binomial(7, 0), BigUint::from(1u32));
    }

    #[test]
    fn shard_ratio_is_exact_for_small_and_sane_for_huge() {
        assert_eq!(ratio(&BigUint::from(799u32), &BigUint::from(28u32)), 799.0 / 28.0);
        let big = binomial(10_000, 50);
        assert_eq!(ratio(&big, &big), 1.0);
        let third = ratio(&big, &(&big * 3u32));
        assert!((third - 1.0 / 3.0).abs() < 1e-15, "{third}");
        assert_eq!(ratio(&BigUint::from(1u32), &binomial(100_000, 50_000)), 0.0);
    }

    #[test]
    fn shard_expectations_print_for_people() {
        assert_eq!(expectation(799.0), "799");
        assert_eq!(expectation(12345.678), "12,345.68");
        assert_eq!(expectation(9999.0 / 75_287_520.0), "0.000133");
        assert_eq!(expectation(0.5), "0.500");
        assert_eq!(group_digits("75287520"), "75,287,520");
        assert_eq!(group_digits("28"), "28");
    }
}
