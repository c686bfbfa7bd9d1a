//! Capacity planning, the heart of the operator: floors, ceilings, what each
//! class may borrow, whether the design is fundable, and how the numbers split
//! over replicas.
//!
//! Worked example (the README's): capacity 200, four classes reserving 30 each,
//! shared surplus 80 → each class's ceiling is 110, and when one class hangs
//! holding all of it, 90 remain for the others.

use crate::{
    crd::{BulkheadSpec, Scope},
    select::{Replicas, SpecError},
};

/// Whether the reservations and surplus fit in the capacity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Funding {
    Funded {
        message: String,
    },
    /// Reservations plus surplus exceed capacity.
    Unfundable {
        message: String,
    },
    /// Fleet split: some class's per-replica floor rounds down to nothing.
    FloorRoundsToZero {
        classes: Vec<String>,
        message: String,
    },
}

impl Funding {
    pub fn is_funded(&self) -> bool {
        matches!(self, Funding::Funded { .. })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassCapacity {
    pub name: String,
    pub critical: bool,
    /// As declared (per replica for Instance, fleet-wide for Fleet).
    pub reserved: u32,
    pub ceiling: u32,
    pub borrowable: u32,
    /// What the other classes keep when this one holds its whole ceiling.
    pub left_to_others: u32,
    pub reserved_per_replica: u32,
    pub ceiling_per_replica: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapacityPlan {
    pub scope: Scope,
    pub capacity: u32,
    pub reserved_total: u64,
    pub shared_surplus: u32,
    pub funding: Funding,
    /// None when the Bulkhead names no workload.
    pub replicas: Option<Replicas>,
    /// 1 for Instance; the replicas a Fleet pool is split over.
    pub divisor: u64,
    pub per_replica_capacity: u32,
    pub per_replica_shared: u32,
    /// Instance: capacity × replicas, since per-process limits multiply.
    /// Fleet: what the per-replica split adds up to. None also when the
    /// product does not fit in u64 (it is never rounded).
    pub fleet_capacity: Option<u64>,
    pub fleet_capacity_at_max: Option<u64>,
    pub classes: Vec<ClassCapacity>,
}

/// Plan the numbers. Ceiling errors are returned alongside a plan that clamps
/// them, so that status can still show what the rest of the spec means.
pub fn plan_capacity(spec: &BulkheadSpec, replicas: Option<Replicas>) -> (CapacityPlan, Vec<SpecError>) {
    let pool = &spec.pool;
    let capacity = pool.capacity;
    let reserved_total: u64 = spec.classes.iter().map(|c| u64::from(c.reserved)).sum();
    // capacity - reserved_total is at most capacity, so it fits in u32.
    let shared = pool
        .shared_surplus
        .unwrap_or_else(|| u32::try_from(u64::from(capacity).saturating_sub(reserved_total)).unwrap_or(capacity));
    let mut errors = Vec::new();

    let divisor = match pool.scope {
        Scope::Instance => 1,
        Scope::Fleet => replicas.unwrap_or_default().divisor(),
    };
    let per_replica_shared = split(shared, divisor);

    let classes: Vec<ClassCapacity> = spec
        .classes
        .iter()
        .enumerate()
        .map(|(i, class)| {
            // Exact: a floor plus the surplus may pass u32::MAX; the ceiling is then capped there
            // (it is a u32 in the spec), which is no limit any capacity can reach.
            let most = u32::try_from(u64::from(class.reserved) + u64::from(shared)).unwrap_or(u32::MAX);
            let ceiling = match class.ceiling {
                None => most,
                Some(c) if c < class.reserved => {
                    errors.push(SpecError::new(
                        format!("spec.classes[{i}].ceiling"),
                        format!("{c} is below the class's reserved floor {}", class.reserved),
                    ));
                    class.reserved
                }
                Some(c) if c > most => {
                    errors.push(SpecError::new(
                        format!("spec.classes[{i}].ceiling"),
                        format!(
                            "{c} exceeds reserved + sharedSurplus ({} + {shared} = {most}): the class could never borrow that much",
                            class.reserved
                        ),
                    ));
                    most
                }
                Some(c) => c,
            };
            let reserved_per_replica = split(class.reserved, divisor);
            let floor_plus_surplus = u64::from(reserved_per_replica) + u64::from(per_replica_shared);
            let ceiling_per_replica =
                u32::try_from(u64::from(split(ceiling, divisor)).min(floor_plus_surplus)).unwrap_or(u32::MAX);
            ClassCapacity {
                name: class.name.clone(),
                critical: class.critical,
                reserved: class.reserved,
                ceiling,
                borrowable: ceiling.saturating_sub(class.reserved),
                left_to_others: capacity.saturating_sub(ceiling),
                reserved_per_replica,
                ceiling_per_replica,
            }
        })
        .collect();

    let funding = funding(spec, &classes, reserved_total, shared, divisor);
    let per_replica_capacity = split(capacity, divisor);
    let (fleet_capacity, fleet_capacity_at_max) = match (pool.scope, replicas) {
        (_, None) => (None, None),
        (Scope::Instance, Some(r)) => {
            let capacity = u64::from(capacity);
            (capacity.checked_mul(r.current), r.max.and_then(|m| capacity.checked_mul(m)))
        }
        (Scope::Fleet, Some(r)) => {
            // What the split over `n` replicas adds up to over those n. At most
            // 64 classes (validated) of u32 each, plus a u32: far from u64::MAX;
            // checked all the same. At the autoscaler's maximum the pool is
            // split again, over the maximum.
            let added_up = |n: u64| {
                classes
                    .iter()
                    .try_fold(u64::from(split(shared, n)), |sum, c| sum.checked_add(u64::from(split(c.reserved, n))))
                    .and_then(|p| p.checked_mul(n))
            };
            (added_up(divisor), r.max.map(|m| added_up(m.max(1))).and_then(|x| x))
        }
    };

    let plan = CapacityPlan {
        scope: pool.scope,
        capacity,
        reserved_total,
        shared_surplus: shared,
        funding,
        replicas,
        divisor,
        per_replica_capacity,
        per_replica_shared,
        fleet_capacity,
        fleet_capacity_at_max,
        classes,
    };
    (plan, errors)
}

/// A fleet-wide number split over `divisor` replicas, rounded down. The
/// quotient of a u32 by a divisor of at least 1 always fits in u32.
fn split(value: u32, divisor: u64) -> u32 {
    u32::try_from(u64::from(value) / divisor.max(1)).unwrap_or(value)
}

fn funding(spec: &BulkheadSpec, classes: &[ClassCapacity], reserved_total: u64, shared: u32, divisor: u64) -> Funding {
    let capacity = u64::from(spec.pool.capacity);
    let needed = reserved_total + u64::from(shared);
    let sum = if classes.is_empty() {
        "0".to_string()
    } else {
        classes.iter().map(|c| c.reserved.to_string()).collect::<Vec<_>>().join(" + ")
    };
    if needed > capacity {
        return Funding::Unfundable {
            message: format!(
                "reserved {sum} = {reserved_total}, plus shared surplus {shared}, is {needed}: \
                 {over} more than the capacity of {capacity} {resource}",
                over = needed - capacity,
                resource = spec.pool.resource
            ),
        };
    }
    let zero: Vec<&ClassCapacity> = classes.iter().filter(|c| c.reserved > 0 && c.reserved_per_replica == 0).collect();
    if !zero.is_empty() {
        let detail = zero
            .iter()
            .map(|c| format!("{} reserves {} over {divisor} replicas = 0 each", c.name, c.reserved))
            .collect::<Vec<_>>()
            .join("; ");
        return Funding::FloorRoundsToZero {
            classes: zero.iter().map(|c| c.name.clone()).collect(),
            message: format!(
                "{detail}: a floor of 0 guarantees nothing (raise the reservation or lower the replica count)"
            ),
        };
    }
    Funding::Funded {
        message: format!(
            "reserved {sum} = {reserved_total}, plus shared surplus {shared}, is {needed} of {capacity} {resource}",
            resource = spec.pool.resource
        ),
    }
}
