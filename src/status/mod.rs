//! The status a Bulkhead reports, built from the plan (and the outcome of
//! applying it), merged with the previous status so that nothing moves unless
//! something changed.

mod admission;
mod conditions;
pub mod drill;
mod enforcement;
mod injection;
mod isolation;
mod placement;
mod reasons;
mod shard;
mod sized;

pub use admission::BYPASSED;
pub use conditions::{merge_conditions, ConditionStatus, DesiredCondition};
pub use enforcement::{apply_enforcement, Answer, Observed};
pub use isolation::isolated_condition;
pub use reasons::{
    reason, CONDITION_TYPES, CONTROL_PLANE_LANE, ENFORCED, FUNDED, ISOLATED, NODE_GROUPS_READY, PLACED, PROXY_INJECTED,
    QUOTAS_SCOPED, READY, SHUFFLE_SHARDED,
};
pub use reasons::{ConditionType, ISOLATED_IN_USE, SIZED, VERIFIED_UNDER_LOAD};
pub use sized::{apply_sizing, isolated_in_use_condition, sized_condition, usage_status, Sizing, SEVERITY};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{
    audit::Audit,
    crd::{Bulkhead, BulkheadStatus, ClassStatus, LayerStatus, PoolStatus},
    plan::{Funding, Plan},
};

/// A workload the API server refused a write to, and its account of why
/// (the fields and the manager that owns them, or an admission webhook's
/// denial), as a condition message names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Kind, namespace and name: `Deployment shop/api`.
    pub workload: String,
    /// The API server's message, as it gave it.
    pub account: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.workload, self.account)
    }
}

/// Refusals as one message: `workload: account; workload: account`.
fn list(refused: &[Refused]) -> String {
    refused.iter().map(Refused::to_string).collect::<Vec<_>>().join("; ")
}

/// What happened when the plan was applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// `conflicts`: workloads left alone because another manager owns a field
    /// placement sets; `rejected`: workloads whose placement the API server
    /// refused otherwise; each with the API server's account of it.
    /// `proxy_refused`: workloads whose sidecar injection was refused (a
    /// conflict or a rejection, each as the API server put it).
    Applied {
        config_maps: usize,
        quotas: usize,
        conflicts: Vec<Refused>,
        rejected: Vec<Refused>,
        proxy_refused: Vec<Refused>,
    },
    /// Offline, or a spec error stopped it.
    NotApplied,
    Failed(String),
}

/// The status to report. `previous` keeps condition transition times stable.
pub fn build_status(
    bulkhead: &Bulkhead,
    plan: &Plan,
    audit: Option<&Audit>,
    outcome: &ApplyOutcome,
    previous: Option<&BulkheadStatus>,
    now: &Time,
) -> BulkheadStatus {
    let generation = bulkhead.metadata.generation;
    let mut desired = desired_conditions(plan, outcome);
    // Shards add pairs to the Node layer and sort it: that needs every pair,
    // bounded once annotated. Otherwise copy only the pairs the status lists
    // (a small part of them with many classes); the Isolated condition reads
    // the same first pairs of each layer either way.
    let mut layers = match (&plan.shards, audit) {
        (_, None) => Vec::new(),
        (Some(_), Some(audit)) => audit.owned_layers(),
        (None, Some(audit)) => audit.listed_layers(),
    };
    if let Some(shards) = &plan.shards {
        let class_order: Vec<String> = bulkhead.spec.classes.iter().map(|c| c.name.clone()).collect();
        shard::annotate_node_layer(&mut layers, shards, &class_order);
        // Tenants that may share a node may share its machine and zone too.
        let mut shared: Vec<std::sync::Arc<LayerStatus>> = layers.into_iter().map(std::sync::Arc::new).collect();
        crate::audit::imply_nested_layers(&mut shared, &class_order);
        layers = shared.into_iter().map(|l| std::sync::Arc::try_unwrap(l).unwrap_or_else(|l| (*l).clone())).collect();
        desired.push(shard::shard_condition(shards));
    }
    if let Some(audit) = audit {
        admission::annotate_admission(&mut layers, plan, audit.admission);
        desired.push(isolated_condition(&layers, bulkhead.spec.classes.len()));
    }
    if plan.shards.is_some() {
        layers = layers.iter().map(LayerStatus::bounded).collect();
    }
    let previous_conditions = previous.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let cap = &plan.capacity;
    BulkheadStatus {
        observed_generation: generation,
        conditions: merge_conditions(previous_conditions, desired, generation, now),
        class_count: u32::try_from(bulkhead.spec.classes.len()).ok(),
        pool: Some(PoolStatus {
            scope: cap.scope,
            capacity: cap.capacity,
            reserved_total: cap.reserved_total,
            shared_surplus: cap.shared_surplus,
            replicas: cap.replicas.map(|r| r.current),
            max_replicas: cap.replicas.and_then(|r| r.max),
            per_replica_capacity: cap.per_replica_capacity,
            fleet_capacity: cap.fleet_capacity,
            fleet_capacity_at_max: cap.fleet_capacity_at_max,
        }),
        classes: cap
            .classes
            .iter()
            .map(|c| ClassStatus {
                name: c.name.clone(),
                reserved: c.reserved,
                ceiling: c.ceiling,
                borrowable: c.borrowable,
                left_to_others: c.left_to_others,
                reserved_per_replica: c.reserved_per_replica,
                ceiling_per_replica: c.ceiling_per_replica,
                shard: plan.shards.as_ref().and_then(|s| s.shards.get(&c.name)).cloned().unwrap_or_default(),
                usage: None,
            })
            .collect(),
        layers,
        enforcement: None,
    }
}

fn desired_conditions(plan: &Plan, outcome: &ApplyOutcome) -> Vec<DesiredCondition> {
    let mut conditions = vec![ready(plan, outcome), funded(plan), control_plane_lane(plan), quotas_scoped(plan)];
    conditions.extend(placement::placement_conditions(plan, outcome));
    conditions.extend(injection::proxy_condition(plan, outcome));
    conditions.extend(injection::enforced_condition(plan));
    conditions
}

fn ready(plan: &Plan, outcome: &ApplyOutcome) -> DesiredCondition {
    if !plan.errors.is_empty() {
        let message = plan.errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
        return DesiredCondition::new(READY, ConditionStatus::False, reason::INVALID_SPEC, message);
    }
    if let ApplyOutcome::Failed(message) = outcome {
        return DesiredCondition::new(READY, ConditionStatus::False, reason::APPLY_FAILED, message.clone());
    }
    if !plan.capacity.funding.is_funded() {
        return DesiredCondition::new(
            READY,
            ConditionStatus::False,
            reason::NOT_FUNDED,
            "the pool config is not written until the design is funded (see Funded)",
        );
    }
    if !plan.not_opted_in.is_empty() {
        return DesiredCondition::new(
            READY,
            ConditionStatus::False,
            reason::NAMESPACE_NOT_OPTED_IN,
            not_opted_in_message(plan),
        );
    }
    if let Some(w) = &plan.workload {
        if let Some(why) = &plan.config_withheld {
            return DesiredCondition::new(
                READY,
                ConditionStatus::False,
                reason::CONFIG_WITHHELD,
                format!("no pool config: {why}"),
            );
        }
        if w.workloads.is_empty() {
            return DesiredCondition::new(
                READY,
                ConditionStatus::False,
                reason::WORKLOAD_NOT_FOUND,
                format!(
                    "no Deployment or StatefulSet in namespace {} matches spec.workload.selector; \
                     the pool config assumes 1 replica",
                    w.namespace
                ),
            );
        }
    }
    let message = match outcome {
        ApplyOutcome::Applied { config_maps, quotas, .. } => {
            format!("{config_maps} pool config(s) and {quotas} quota(s) are up to date")
        }
        _ => format!(
            "planned {} pool config(s) and {} quota(s)",
            usize::from(plan.config_map.is_some()),
            plan.quotas.len()
        ),
    };
    DesiredCondition::new(READY, ConditionStatus::True, reason::RECONCILED, message)
}

/// At most this many namespaces are named in a message.
const NAMED_NAMESPACES: usize = 10;

/// What was held back in which namespace, and the command that opts them in.
pub(crate) fn not_opted_in_message(plan: &Plan) -> String {
    let label = plan.namespace_opt_in.as_ref().map(ToString::to_string).unwrap_or_default();
    let named: Vec<&crate::plan::NotOptedIn> = plan.not_opted_in.iter().take(NAMED_NAMESPACES).collect();
    let listed: Vec<String> = named.iter().map(|n| format!("{} ({})", n.namespace, n.held.join(", "))).collect();
    let more = plan.not_opted_in.len() - named.len();
    let more = if more > 0 { format!(" and {more} more namespace(s)") } else { String::new() };
    let names: Vec<&str> = named.iter().map(|n| n.namespace.as_str()).collect();
    format!(
        "nothing is written in namespaces without the label {label}: {}{more}; what was written there before is \
         left as it is. A namespace admin opts in with: kubectl label namespace {} {label}",
        listed.join("; "),
        names.join(" ")
    )
}

fn funded(plan: &Plan) -> DesiredCondition {
    match &plan.capacity.funding {
        Funding::Funded { message } => {
            DesiredCondition::new(FUNDED, ConditionStatus::True, reason::FUNDED, message.clone())
        }
        Funding::Unfundable { message } => {
            DesiredCondition::new(FUNDED, ConditionStatus::False, reason::UNFUNDABLE, message.clone())
        }
        Funding::FloorRoundsToZero { message, .. } => {
            DesiredCondition::new(FUNDED, ConditionStatus::False, reason::FLOOR_ROUNDS_TO_ZERO, message.clone())
        }
    }
}

fn control_plane_lane(plan: &Plan) -> DesiredCondition {
    let unreserved: Vec<String> = plan
        .capacity
        .classes
        .iter()
        .enumerate()
        .filter(|(_, c)| c.critical && c.reserved == 0)
        .map(|(i, c)| format!("{} (spec.classes[{i}].reserved: 0)", c.name))
        .collect();
    if !unreserved.is_empty() {
        return DesiredCondition::new(
            CONTROL_PLANE_LANE,
            ConditionStatus::False,
            reason::CRITICAL_CLASS_UNRESERVED,
            format!(
                "critical but reserving nothing: {}; the lane has no floor of its own, so during an overload \
                 health checks compete for the surplus like everything else; reserve at least 1",
                unreserved.join(", ")
            ),
        );
    }
    let critical: Vec<String> = plan
        .capacity
        .classes
        .iter()
        .filter(|c| c.critical)
        .map(|c| format!("{} (reserved {})", c.name, c.reserved))
        .collect();
    if critical.is_empty() {
        DesiredCondition::new(
            CONTROL_PLANE_LANE,
            ConditionStatus::False,
            reason::NO_CRITICAL_CLASS,
            "no class is critical: health checks and admin traffic compete with everything else during an \
             overload; mark a small class critical: true (the cheapest reservation there is)",
        )
    } else {
        DesiredCondition::new(
            CONTROL_PLANE_LANE,
            ConditionStatus::True,
            reason::CRITICAL_CLASS,
            format!("control-plane lane: {}", critical.join(", ")),
        )
    }
}

fn quotas_scoped(plan: &Plan) -> DesiredCondition {
    if plan.quota_collisions.is_empty() {
        let scoped = plan.quotas.iter().filter(|q| q.spec.as_ref().is_some_and(|s| s.scope_selector.is_some())).count();
        let message = if scoped == 0 {
            format!("{} quota(s), each alone in its namespace", plan.quotas.len())
        } else {
            format!(
                "{} quota(s): {} alone in its namespace, {scoped} in namespaces classes share, each scoped to its \
                 class's PriorityClass",
                plan.quotas.len(),
                plan.quotas.len() - scoped
            )
        };
        return DesiredCondition::new(QUOTAS_SCOPED, ConditionStatus::True, reason::QUOTAS_SCOPED, message);
    }
    let unscopable: Vec<String> = plan
        .quota_collisions
        .iter()
        .filter_map(|c| c.unscopable.as_ref().map(|why| format!("namespace {}: {why}", c.namespace)))
        .collect();
    if !unscopable.is_empty() {
        return DesiredCondition::new(
            QUOTAS_SCOPED,
            ConditionStatus::False,
            reason::QUOTA_NOT_SCOPABLE,
            format!(
                "{}; classes share these namespaces, so their quotas would have to be scoped by PriorityClass; \
                 no quota was written there",
                unscopable.join("; ")
            ),
        );
    }
    let detail = plan
        .quota_collisions
        .iter()
        .map(|c| format!("namespace {} is selected by the quotas of {}", c.namespace, c.classes.join(" and ")))
        .collect::<Vec<_>>()
        .join("; ");
    DesiredCondition::new(
        QUOTAS_SCOPED,
        ConditionStatus::False,
        reason::QUOTA_NAMESPACE_SHARED,
        format!(
            "{detail}: a ResourceQuota bounds every pod of its namespace, so each would also bound the other \
             classes; no quota was written there. Give a class a priority (or any placement field) and the \
             quotas are scoped by PriorityClass instead"
        ),
    )
}
