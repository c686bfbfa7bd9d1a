//! A generated corpus thrown at the loader and the planner, as `bulkhead
//! check` runs them: random text, random YAML values, and valid Bulkheads
//! with one field broken or changed. Never a panic, and never a passing
//! verdict (exit 0, 1 or 2) for input the API server or the planner refuses.
//! Also the planner's capacity properties over random specs.
//!
//! Case counts are modest so that the suite stays fast.

use std::path::Path;

use bulkhead::{
    crd::{Bulkhead, Scope},
    evaluate::Config,
    offline::{check_report, evaluate_all, load_text, EXIT_INVALID_INPUT},
    plan::plan_capacity,
    select::Replicas,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;
use serde_json::{json, Value};

/// The exit code `bulkhead check` gives for this text.
fn check_exit(text: &str) -> u8 {
    let Ok(input) = load_text(Path::new("generated.yaml"), text) else { return EXIT_INVALID_INPUT };
    if input.bulkheads.is_empty() {
        return EXIT_INVALID_INPUT;
    }
    let now = Time(jiff::Timestamp::UNIX_EPOCH);
    check_report(&evaluate_all(&input, &Config::default(), &now), false).exit
}

fn yaml(value: &Value) -> String {
    bulkhead::crd::to_yaml(value).expect("a JSON value is YAML")
}

/// A valid Bulkhead: funded, two classes, the first critical.
fn valid() -> Value {
    json!({
        "apiVersion": "bulkhead.dev/v1alpha1",
        "kind": "Bulkhead",
        "metadata": {"name": "generated"},
        "spec": {
            "dimension": "Tenant",
            "pool": {"resource": "connections", "capacity": 100},
            "classes": [
                {"name": "a", "reserved": 10, "critical": true,
                 "pods": {"namespaceSelector": {"matchLabels": {"team": "shop"}}, "podSelector": {}}},
                {"name": "b", "reserved": 10},
            ],
        },
    })
}

fn random_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        "[a-zA-Z0-9 ./:_-]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map("[a-zA-Z]{1,10}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One way to break a valid Bulkhead that the API server or the planner must refuse.
#[derive(Clone, Debug)]
enum Break {
    UnknownField { at: usize, name: String },
    Reserved(Value),
    NodeCount(i64),
    ClassName(String),
    Quantity(String),
    Database(String),
    LabelKey(String),
    Capacity(Value),
    Dimension(String),
    DuplicateClass,
}

fn breaks() -> impl Strategy<Value = Break> {
    prop_oneof![
        (0..4usize, "[a-z][a-zA-Z]{0,10}")
            .prop_filter("not a real field", |(_, n)| !KNOWN_FIELDS.contains(&n.as_str()))
            .prop_map(|(at, name)| Break::UnknownField { at, name }),
        prop_oneof![
            (4_294_967_296i64..i64::MAX).prop_map(Value::from),
            (i64::MIN..0).prop_map(Value::from),
            "[a-z]{1,8}".prop_map(Value::from),
            (0.1f64..1e6).prop_filter("fractional", |f| f.fract() != 0.0).prop_map(Value::from),
        ]
        .prop_map(Break::Reserved),
        prop_oneof![1001i64..1_000_000, i64::MIN..1].prop_map(Break::NodeCount),
        "[A-Z_ .]{1,5}[a-z]{0,5}".prop_map(Break::ClassName),
        "[a-z]{2,8}|-[1-9][0-9]{0,3}|[0-9]+ [a-z]+|[0-9]+Q".prop_map(Break::Quantity),
        prop_oneof![
            "[a-z.-]{1,20}(:[0-9]{1,5})?",
            "postgres://[a-z]{1,8}:(0|6553[6-9]|[7-9][0-9]{4}|[1-9][0-9]{5,7})/x",
            "postgres://:[0-9]{2,4}/x",
        ]
        .prop_map(Break::Database),
        "[a-z]{1,5}[ !*%][a-z]{1,5}|-[a-z]{1,5}|[a-z]{64,70}".prop_map(Break::LabelKey),
        prop_oneof![(4_294_967_296i64..i64::MAX).prop_map(Value::from), Just(Value::from("many"))]
            .prop_map(Break::Capacity),
        "[a-z]{1,10}".prop_map(Break::Dimension),
        Just(Break::DuplicateClass),
    ]
}

const KNOWN_FIELDS: &[&str] = &[
    "dimension",
    "pool",
    "workload",
    "layers",
    "classes",
    "resource",
    "capacity",
    "scope",
    "sharedSurplus",
    "name",
    "reserved",
    "ceiling",
    "critical",
    "pods",
    "quota",
    "databases",
    "nodes",
    "antiAffinity",
    "runtimeClassName",
    "priority",
    "spec",
    "status",
    "metadata",
    "apiVersion",
    "kind",
    "shuffleSharding",
    "namespaceSelector",
    "podSelector",
];

fn apply(bulkhead: &mut Value, b: &Break) {
    let spec = &mut bulkhead["spec"];
    match b {
        Break::UnknownField { at, name } => {
            let target = match at {
                0 => spec,
                1 => &mut spec["pool"],
                2 => &mut spec["classes"][0],
                _ => &mut spec["classes"][0]["pods"],
            };
            target[name.as_str()] = json!(1);
        }
        Break::Reserved(v) => spec["classes"][1]["reserved"] = v.clone(),
        Break::NodeCount(n) => spec["classes"][1]["nodes"] = json!({"count": n, "selector": {}}),
        Break::ClassName(n) => spec["classes"][1]["name"] = json!(n),
        Break::Quantity(q) => spec["classes"][0]["quota"] = json!({"hard": {"cpu": q}}),
        Break::Database(d) => spec["classes"][1]["databases"] = json!([d]),
        Break::LabelKey(k) => spec["classes"][0]["pods"]["podSelector"] = json!({"matchLabels": {k.as_str(): "x"}}),
        Break::Capacity(c) => spec["pool"]["capacity"] = c.clone(),
        Break::Dimension(d) => spec["dimension"] = json!(d),
        Break::DuplicateClass => spec["classes"][1]["name"] = json!("a"),
    }
}

/// Changes that keep a Bulkhead valid.
#[derive(Clone, Debug)]
struct Change {
    capacity: u32,
    reserved: (u32, u32),
    ceiling: Option<u32>,
    names: (String, String),
    database: Option<(String, u16)>,
    quantity: String,
}

fn changes() -> impl Strategy<Value = Change> {
    (
        1..=u32::MAX,
        (0..5000u32, 0..5000u32),
        prop::option::of(0..20_000u32),
        ("[a-z]([a-z0-9-]{0,10}[a-z0-9])?", "[a-z]([a-z0-9-]{0,10}[a-z0-9])?"),
        prop::option::of(("[a-z]{1,8}(\\.[a-z]{1,5}){0,3}", 1..=65535u16)),
        "[0-9]{1,4}(m|k|M|G|Ki|Mi|Gi)?|[0-9]\\.[0-9]{1,3}",
    )
        .prop_filter("distinct class names", |c| c.3 .0 != c.3 .1)
        .prop_map(|(capacity, reserved, ceiling, names, database, quantity)| Change {
            capacity,
            reserved,
            ceiling,
            names,
            database,
            quantity,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(text in "[\\[\\]{}:,'\"#&*!|>%@`?\\- \\na-z0-9\\t]{0,400}") {
        let _ = check_exit(&text);
    }

    #[test]
    fn random_values_as_objects_never_pass_unless_they_are_valid(
        value in random_value(),
        kind in prop_oneof![Just("Bulkhead"), Just("Pod"), Just("List"), Just("Node"), Just("Deployment")],
    ) {
        // A random value as a whole object, and as the spec of a Bulkhead beside a valid one.
        let mut object = value.clone();
        if let Value::Object(map) = &mut object {
            map.insert("kind".into(), json!(kind));
            map.insert("apiVersion".into(), json!(if kind == "Bulkhead" { "bulkhead.dev/v1alpha1" } else { "v1" }));
        }
        let _ = check_exit(&format!("{}---\n{}", yaml(&valid()), yaml(&object)));
        let mut bulkhead = valid();
        bulkhead["spec"] = value;
        let exit = check_exit(&yaml(&bulkhead));
        let decodes = serde_json::from_value::<Bulkhead>(bulkhead.clone()).is_ok();
        prop_assert!(exit == EXIT_INVALID_INPUT || decodes, "exit {exit} for a spec that does not decode: {bulkhead}");
    }

    #[test]
    fn a_broken_bulkhead_is_always_refused(b in breaks()) {
        let mut bulkhead = valid();
        apply(&mut bulkhead, &b);
        let text = yaml(&bulkhead);
        prop_assert_eq!(check_exit(&text), EXIT_INVALID_INPUT, "{:?} passed:\n{}", b, text);
    }

    #[test]
    fn a_changed_valid_bulkhead_is_never_refused_and_funding_is_exact(c in changes()) {
        let mut bulkhead = valid();
        let spec = &mut bulkhead["spec"];
        spec["pool"]["capacity"] = json!(c.capacity);
        spec["classes"][0]["name"] = json!(c.names.0);
        spec["classes"][1]["name"] = json!(c.names.1);
        spec["classes"][0]["reserved"] = json!(c.reserved.0);
        spec["classes"][1]["reserved"] = json!(c.reserved.1);
        spec["classes"][0]["quota"] = json!({"hard": {"cpu": c.quantity, "pods": "10"}});
        if let Some((host, port)) = &c.database {
            spec["classes"][1]["databases"] = json!([format!("postgres://{host}:{port}/db")]);
        }
        let reserved = u64::from(c.reserved.0) + u64::from(c.reserved.1);
        let shared = u64::from(c.capacity).saturating_sub(reserved);
        let ceiling_ok = c.ceiling.is_none_or(|x| u64::from(x) >= u64::from(c.reserved.1) && u64::from(x) <= u64::from(c.reserved.1) + shared);
        if let Some(x) = c.ceiling {
            spec["classes"][1]["ceiling"] = json!(x);
        }
        let exit = check_exit(&yaml(&bulkhead));
        if !ceiling_ok {
            prop_assert_eq!(exit, EXIT_INVALID_INPUT);
        } else {
            // No placement layers are required: the verdict is funding alone.
            let funded = reserved <= u64::from(c.capacity);
            prop_assert_eq!(exit, if funded { 0 } else { 1 }, "{}", yaml(&bulkhead));
        }
    }

    /// From issue 12: for every funded plan, per replica the floors plus the
    /// surplus fit in the capacity, every ceiling lies between its floor and
    /// floor + surplus, and Fleet totals never pass the capacity.
    #[test]
    fn funded_plans_never_promise_more_than_the_capacity(
        capacity in prop_oneof![0..1000u32, any::<u32>()],
        reserved in prop::collection::vec(prop_oneof![0..300u32, any::<u32>()], 1..8),
        shared in prop::option::of(prop_oneof![0..300u32, any::<u32>()]),
        ceilings in prop::collection::vec(prop::option::of(any::<u32>()), 8),
        fleet in any::<bool>(),
        current in prop_oneof![0..50u64, 0..=(3 * i32::MAX as u64)],
        max in prop::option::of(prop_oneof![0..100u64, 0..=(3 * i32::MAX as u64)]),
    ) {
        let mut bulkhead = valid();
        bulkhead["spec"]["pool"] = json!({"resource": "c", "capacity": capacity, "scope": if fleet { "Fleet" } else { "Instance" }});
        if let Some(s) = shared {
            bulkhead["spec"]["pool"]["sharedSurplus"] = json!(s);
        }
        bulkhead["spec"]["classes"] = reserved
            .iter()
            .zip(&ceilings)
            .enumerate()
            .map(|(i, (r, c))| json!({"name": format!("c{i}"), "reserved": r, "ceiling": c}))
            .collect();
        let bulkhead: Bulkhead = serde_json::from_value(bulkhead).expect("decodes");
        let replicas = Replicas { current, max, pods: 0 };
        let (plan, errors) = plan_capacity(&bulkhead.spec, Some(replicas));
        if !plan.funding.is_funded() {
            return Ok(());
        }
        let divisor = if fleet { replicas.divisor() } else { 1 };
        prop_assert_eq!(plan.divisor, divisor);
        let floors: u64 = plan.classes.iter().map(|c| u64::from(c.reserved_per_replica)).sum();
        prop_assert!(floors + u64::from(plan.per_replica_shared) <= u64::from(plan.per_replica_capacity));
        prop_assert!(u64::from(plan.per_replica_capacity) * divisor <= u64::from(capacity));
        for c in &plan.classes {
            prop_assert!(c.reserved_per_replica <= c.ceiling_per_replica);
            prop_assert!(u64::from(c.ceiling_per_replica) <= u64::from(c.reserved_per_replica) + u64::from(plan.per_replica_shared));
            if errors.is_empty() {
                prop_assert!(c.reserved <= c.ceiling && u64::from(c.ceiling) <= u64::from(c.reserved) + u64::from(plan.shared_surplus));
            }
            // A funded plan never rounds a floor to nothing.
            prop_assert!(c.reserved == 0 || c.reserved_per_replica > 0);
        }
        if plan.scope == Scope::Fleet {
            for total in [plan.fleet_capacity, plan.fleet_capacity_at_max].into_iter().flatten() {
                prop_assert!(total <= u64::from(capacity), "fleet total {} above capacity {}", total, capacity);
            }
        }
    }
}
