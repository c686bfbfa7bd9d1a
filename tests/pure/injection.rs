//! Sidecar injection in the planner: the container a person would write, the
//! rules of spec.workload.proxy, no re-apply at rest, exact withdrawal, and a
//! withheld config, a missing image or one the operator does not allow that
//! leaves sidecars alone, and the operator's security context. No cluster.

use bulkhead::{
    crd::Bulkhead,
    plan::{changes, teardown, Change, ImageAllowList, Plan, PlanConfig, ProxyInjection},
    select::Selection,
    snapshot::Snapshot,
    status::{build_status, ApplyOutcome, PROXY_INJECTED},
};
use k8s_openapi::{api::apps::v1::Deployment, apimachinery::pkg::apis::meta::v1::Time};
use serde_json::{json, Value};

fn plan(bulkhead: &Bulkhead, snapshot: &Snapshot) -> Plan {
    let config = PlanConfig { proxy_image: Some("registry.example/bulkhead:test".into()), ..PlanConfig::default() };
    bulkhead::plan::plan(&Selection::parse(bulkhead), snapshot, &config)
}

fn bulkhead(proxy: &str, capacity: u32) -> Bulkhead {
    serde_saphyr::from_str(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: shop, uid: u-1}}\nspec:\n  dimension: Dependency\n  \
         pool: {{resource: requests, capacity: {capacity}}}\n  workload:\n    namespace: shop\n    selector: {{matchLabels: {{app: api}}}}\n    \
         proxy: {proxy}\n  classes:\n  - {{name: checkout, reserved: 40}}\n  - {{name: search, reserved: 30}}\n  \
         - {{name: control-plane, reserved: 5, critical: true}}\n"
    ))
    .expect("fixture")
}

const INGRESS: &str = "{mode: Ingress, port: 8081, upstreamPort: 8080}";

/// Namespace `shop` with Deployment `api` whose template is `template`.
fn shop(annotations: Value, template: Value) -> Snapshot {
    let mut s = Snapshot::default();
    s.apply(&crate::fixtures::mk_namespace("shop", &[]));
    s.apply(
        &serde_json::from_value::<Deployment>(json!({
            "metadata": {"name": "api", "namespace": "shop", "generation": 3, "annotations": annotations},
            "spec": {"selector": {"matchLabels": {"app": "api"}}, "template": template},
        }))
        .expect("deployment"),
    );
    s
}

fn plain_template() -> Value {
    json!({"metadata": {"labels": {"app": "api"}}, "spec": {"containers": [{"name": "app", "image": "app:1"}]}})
}

fn injections(changes: &[Change]) -> Vec<&ProxyInjection> {
    changes.iter().filter_map(|c| if let Change::InjectProxy(i) = c { Some(i) } else { None }).collect()
}

/// The Deployment as the API server holds it after the injection was applied.
fn after_injection(injection: &ProxyInjection) -> Snapshot {
    let body = &injection.body;
    let mut template = plain_template();
    let containers = template["spec"]["containers"].as_array_mut().expect("containers");
    containers.push(body["spec"]["template"]["spec"]["containers"][0].clone());
    template["spec"]["volumes"] = body["spec"]["template"]["spec"]["volumes"].clone();
    shop(body["metadata"]["annotations"].clone(), template)
}

#[test]
fn the_sidecar_is_what_a_person_would_write() {
    let snapshot = shop(json!({}), plain_template());
    let p = plan(&bulkhead(INGRESS, 200), &snapshot);
    assert!(p.is_valid(), "{:?}", p.errors);
    let all = changes("shop", &p, &snapshot, bulkhead::plan::WithheldConfig::KeepLast);
    let inject = injections(&all);
    assert_eq!(inject.len(), 1);
    // After the ConfigMap it mounts.
    let cm = all.iter().position(|c| matches!(c, Change::ApplyConfigMap(_))).expect("config map");
    let ij = all.iter().position(|c| matches!(c, Change::InjectProxy(_))).expect("injection");
    assert!(cm < ij, "the config is written before the sidecar that mounts it");

    let body = &inject[0].body;
    assert_eq!(body["metadata"]["annotations"]["proxy.bulkhead.dev/shop"], json!(inject[0].fingerprint));
    let c = &body["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["name"], "bulkhead-proxy");
    assert_eq!(c["image"], "registry.example/bulkhead:test");
    assert_eq!(
        c["args"],
        json!([
            "proxy",
            "--config-dir",
            "/etc/bulkhead/pools",
            "--listen",
            "0.0.0.0:8081",
            "--upstream",
            "http://127.0.0.1:8080",
            "--classify",
            "header:x-bulkhead-class",
            "--unclassified",
            "reject",
            "--admin",
            "0.0.0.0:9901",
            "--metrics",
            "127.0.0.1:9902"
        ])
    );
    assert_eq!(c["readinessProbe"]["httpGet"], json!({"path": "/readyz", "port": 9901}));
    assert_eq!(c["livenessProbe"]["httpGet"], json!({"path": "/healthz", "port": 9901}));
    assert_eq!(c["resources"]["requests"], json!({"cpu": "50m", "memory": "32Mi"}));
    let sc = &c["securityContext"];
    assert_eq!(
        (&sc["runAsNonRoot"], &sc["readOnlyRootFilesystem"], &sc["allowPrivilegeEscalation"]),
        (&json!(true), &json!(true), &json!(false))
    );
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "bulkhead-pools", "mountPath": "/etc/bulkhead/pools", "readOnly": true}])
    );
    assert_eq!(
        body["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "bulkhead-pools", "configMap": {"name": "bulkhead-shop"}}])
    );
}

#[test]
fn egress_routes_and_path_prefixes_become_arguments() {
    let snapshot = shop(json!({}), plain_template());
    let egress = "{mode: Egress, routes: [{class: checkout, port: 15001, upstream: 'http://payments.shop:80'}, \
                  {class: search, port: 15002, upstream: 'http://search.shop:9200'}]}";
    let p = plan(&bulkhead(egress, 200), &snapshot);
    let args = &p.proxy.injections[0].body["spec"]["template"]["spec"]["containers"][0]["args"];
    let args: Vec<&str> = args.as_array().expect("args").iter().filter_map(Value::as_str).collect();
    assert!(args.windows(2).any(|w| w == ["--route", "checkout=127.0.0.1:15001=http://payments.shop:80"]), "{args:?}");
    assert!(args.windows(2).any(|w| w == ["--route", "search=127.0.0.1:15002=http://search.shop:9200"]), "{args:?}");
    assert!(!args.contains(&"--listen"));

    let trusted = "{port: 8081, upstreamPort: 8080, classHeaderFrom: [10.0.0.0/8, 'fd00::/8']}";
    let p = plan(&bulkhead(trusted, 200), &snapshot);
    let args = &p.proxy.injections[0].body["spec"]["template"]["spec"]["containers"][0]["args"];
    let args: Vec<&str> = args.as_array().expect("args").iter().filter_map(Value::as_str).collect();
    assert!(args.windows(2).any(|w| w == ["--class-header-from", "10.0.0.0/8,fd00::/8"]), "{args:?}");

    let paths =
        "{port: 8081, upstreamPort: 8080, unclassified: search, pathPrefixes: [{prefix: /pay, class: checkout}]}";
    let p = plan(&bulkhead(paths, 200), &snapshot);
    let args = &p.proxy.injections[0].body["spec"]["template"]["spec"]["containers"][0]["args"];
    let args: Vec<&str> = args.as_array().expect("args").iter().filter_map(Value::as_str).collect();
    assert!(args.windows(2).any(|w| w == ["--classify", "path:/pay=checkout"]), "{args:?}");
    assert!(args.windows(2).any(|w| w == ["--unclassified", "search"]), "{args:?}");
}

#[test]
fn each_rule_of_the_proxy_names_its_field() {
    let snapshot = shop(json!({}), plain_template());
    let cases = [
        ("{mode: Ingress, port: 8081}", "spec.workload.proxy"),
        ("{port: 8080, upstreamPort: 8080}", "spec.workload.proxy.port"),
        ("{port: 9901, upstreamPort: 8080}", "spec.workload.proxy.adminPort"),
        ("{port: 8081, upstreamPort: 8080, unclassified: nobody}", "spec.workload.proxy.unclassified"),
        ("{port: 8081, upstreamPort: 8080, classifyHeader: 'bad header'}", "spec.workload.proxy.classifyHeader"),
        ("{port: 8081, upstreamPort: 8080, pathPrefixes: [{prefix: /a, class: nobody}]}", "spec.workload.proxy.pathPrefixes[0].class"),
        ("{port: 8081, upstreamPort: 8080, classHeaderFrom: [10.0.0.0/33]}", "spec.workload.proxy.classHeaderFrom[0]"),
        ("{port: 8081, upstreamPort: 8080, metricsAddress: 'localhost:9902'}", "spec.workload.proxy.metricsAddress"),
        ("{port: 8081, upstreamPort: 8080, metricsAddress: '0.0.0.0:8081'}", "spec.workload.proxy.metricsAddress"),
        ("{mode: Egress}", "spec.workload.proxy.routes"),
        ("{mode: Egress, routes: [{class: nobody, port: 1, upstream: 'http://x:1'}]}", "spec.workload.proxy.routes[0].class"),
        (
            "{mode: Egress, routes: [{class: checkout, port: 1, upstream: 'http://x:1'}, {class: search, port: 1, upstream: 'http://y:1'}]}",
            "spec.workload.proxy.routes[1].port",
        ),
    ];
    for (proxy, field) in cases {
        let p = plan(&bulkhead(proxy, 200), &snapshot);
        let fields: Vec<&str> = p.errors.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&field), "{proxy}: {fields:?}");
        assert!(
            changes("shop", &p, &snapshot, bulkhead::plan::WithheldConfig::KeepLast).is_empty(),
            "an invalid spec writes nothing"
        );
    }
}

#[test]
fn an_injected_workload_is_not_patched_again() {
    let snapshot = shop(json!({}), plain_template());
    let bh = bulkhead(INGRESS, 200);
    let p = plan(&bh, &snapshot);
    let settled = after_injection(&p.proxy.injections[0]);
    let again = plan(&bh, &settled);
    assert!(
        injections(&changes("shop", &again, &settled, bulkhead::plan::WithheldConfig::KeepLast)).is_empty(),
        "no rollout loop"
    );
    // Someone removed the container: it is put back.
    let stripped = shop(p.proxy.injections[0].body["metadata"]["annotations"].clone(), plain_template());
    assert_eq!(
        injections(&changes("shop", &plan(&bh, &stripped), &stripped, bulkhead::plan::WithheldConfig::KeepLast)).len(),
        1
    );
    // A changed proxy spec is a new patch.
    let changed = bulkhead("{mode: Ingress, port: 8082, upstreamPort: 8080}", 200);
    assert_eq!(
        injections(&changes("shop", &plan(&changed, &settled), &settled, bulkhead::plan::WithheldConfig::KeepLast))
            .len(),
        1
    );
}

#[test]
fn removing_the_proxy_or_the_bulkhead_withdraws_the_sidecar() {
    let snapshot = shop(json!({}), plain_template());
    let p = plan(&bulkhead(INGRESS, 200), &snapshot);
    let settled = after_injection(&p.proxy.injections[0]);
    let mut without: Bulkhead = bulkhead(INGRESS, 200);
    if let Some(w) = without.spec.workload.as_mut() {
        w.proxy = None;
    }
    let c = changes("shop", &plan(&without, &settled), &settled, bulkhead::plan::WithheldConfig::KeepLast);
    assert!(
        c.iter().any(|c| matches!(c, Change::WithdrawProxy(_, key) if key.name == "api")),
        "{:?}",
        c.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
    let down = teardown("shop", &settled);
    let withdraw = down.iter().position(|c| matches!(c, Change::WithdrawProxy(..))).expect("withdrawn on delete");
    assert_eq!(withdraw, 0, "the sidecar goes before anything it mounts");
}

#[test]
fn an_unfunded_design_leaves_injected_sidecars_in_place() {
    let snapshot = shop(json!({}), plain_template());
    let p = plan(&bulkhead(INGRESS, 200), &snapshot);
    let settled = after_injection(&p.proxy.injections[0]);
    // 40 + 30 + 5 reserved do not fit in 50.
    let unfunded = bulkhead(INGRESS, 50);
    let p = plan(&unfunded, &settled);
    let c = changes("shop", &p, &settled, bulkhead::plan::WithheldConfig::KeepLast);
    assert!(!c.iter().any(|c| matches!(c, Change::WithdrawProxy(..) | Change::InjectProxy(_))), "{c:?}");
    let now = Time(jiff::Timestamp::from_second(1_800_000_000).expect("time"));
    let status = build_status(&unfunded, &p, None, &ApplyOutcome::NotApplied, None, &now);
    let condition = status.conditions.iter().find(|c| c.type_ == PROXY_INJECTED).expect("ProxyInjected");
    assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "ConfigWithheld"));
}

/// A pod runs one sidecar: a Bulkhead whose workload already carries an
/// older Bulkhead's yields it (no write, ProxyInjected False naming the
/// winner), while a Bulkhead that is older than the one injected does not.
#[test]
fn a_workload_another_bulkheads_older_sidecar_holds_is_left_to_it() {
    let mut older = bulkhead(INGRESS, 200);
    older.metadata.name = Some("first".into());
    older.metadata.creation_timestamp = Some(Time("2026-01-01T00:00:00Z".parse().expect("time")));
    let mut younger = bulkhead(INGRESS, 200);
    younger.metadata.creation_timestamp = Some(Time("2026-06-01T00:00:00Z".parse().expect("time")));
    let mut snapshot = shop(json!({"proxy.bulkhead.dev/first": "abc"}), plain_template());
    snapshot.seniority.insert(&older.metadata);
    snapshot.seniority.insert(&younger.metadata);
    let p = plan(&younger, &snapshot);
    assert!(p.proxy.injections.is_empty());
    assert_eq!(p.proxy.yielded, vec![("Deployment shop/api".to_string(), "first".to_string())]);
    let all = changes("shop", &p, &snapshot, bulkhead::plan::WithheldConfig::KeepLast);
    assert!(injections(&all).is_empty());
    let status = build_status(&younger, &p, None, &ApplyOutcome::NotApplied, None, &Time(jiff::Timestamp::UNIX_EPOCH));
    let c = status.conditions.iter().find(|c| c.type_ == PROXY_INJECTED).expect("ProxyInjected");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "ProxyOfOlderBulkhead"));
    assert!(c.message.contains("Deployment shop/api to Bulkhead first"), "{}", c.message);
    // The other way round: the older one is not kept out by the younger's sidecar.
    let snapshot = {
        let mut s = shop(json!({"proxy.bulkhead.dev/shop": "abc"}), plain_template());
        s.seniority.insert(&older.metadata);
        s.seniority.insert(&younger.metadata);
        s
    };
    let p = plan(&older, &snapshot);
    assert_eq!(p.proxy.injections.len(), 1);
    assert!(p.proxy.yielded.is_empty());
}

/// An operator given no --proxy-image (run by hand, outside the chart) has no
/// image it may inject: none is published to fall back on. The condition
/// names the flag, nothing is injected and nothing already injected is pulled.
#[test]
fn without_an_image_from_the_operator_or_the_bulkhead_nothing_is_injected_and_the_flag_is_named() {
    let no_image = PlanConfig { proxy_image: None, ..PlanConfig::default() };
    let snapshot = shop(json!({}), plain_template());
    let bh = bulkhead(INGRESS, 200);
    let p = bulkhead::plan::plan(&Selection::parse(&bh), &snapshot, &no_image);
    assert!(p.proxy.requested && p.proxy.no_image && p.proxy.injections.is_empty());
    let settled = after_injection(&plan(&bh, &snapshot).proxy.injections[0]);
    let p = bulkhead::plan::plan(&Selection::parse(&bh), &settled, &no_image);
    let c = changes("shop", &p, &settled, bulkhead::plan::WithheldConfig::KeepLast);
    assert!(!c.iter().any(|c| matches!(c, Change::WithdrawProxy(..) | Change::InjectProxy(_))), "{c:?}");
    assert!(c.iter().any(|c| matches!(c, Change::ApplyConfigMap(_))), "the pool config is still written: {c:?}");
    let now = Time(jiff::Timestamp::from_second(1_800_000_000).expect("time"));
    let status = build_status(&bh, &p, None, &ApplyOutcome::NotApplied, None, &now);
    let condition = status.conditions.iter().find(|c| c.type_ == PROXY_INJECTED).expect("ProxyInjected");
    assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "NoProxyImage"));
    assert!(condition.message.contains("--proxy-image"), "{}", condition.message);

    // The Bulkhead's own image is enough, when the operator allows it.
    let own = bulkhead("{mode: Ingress, port: 8081, upstreamPort: 8080, image: \"registry.example/own:1\"}", 200);
    let allowing = PlanConfig { proxy_image_allow: ImageAllowList::new(["registry.example/own:1"]), ..no_image };
    let p = bulkhead::plan::plan(&Selection::parse(&own), &snapshot, &allowing);
    assert_eq!(p.proxy.injections.len(), 1);
    let c = &p.proxy.injections[0].body["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "registry.example/own:1");
}

/// Whoever may write a Bulkhead must not be able to run an image of their
/// choice in every workload it selects, with those workloads' service
/// accounts and secrets: an image that is neither the operator's own nor on
/// its allow-list is never injected. ProxyInjected names the field, the image
/// and the flag; sidecars injected before are left as they are (as for
/// NoProxyImage); the pool config is still written.
#[test]
fn an_image_outside_the_allow_list_is_never_injected_and_the_field_is_named() {
    let config = PlanConfig {
        proxy_image: Some("registry.example/bulkhead:1.0".into()),
        proxy_image_allow: ImageAllowList::parse("registry.example/bulkhead:*").expect("valid"),
        ..PlanConfig::default()
    };
    let with_image = |image: &str| {
        bulkhead(
            &format!("{{mode: Ingress, port: 8081, upstreamPort: 8080, image: \"{image}\", networkPolicy: {{}}}}"),
            200,
        )
    };
    let snapshot = shop(json!({}), plain_template());
    let evil = with_image("attacker.example/miner:1");
    let p = bulkhead::plan::plan(&Selection::parse(&evil), &snapshot, &config);
    assert!(p.is_valid(), "{:?}", p.errors);
    assert!(p.proxy.injections.is_empty() && p.proxy.image_refused.is_some());
    assert!(p.network_policy.policy.is_none(), "no policy in front of pods without a sidecar");
    let c = changes("shop", &p, &snapshot, bulkhead::plan::WithheldConfig::KeepLast);
    assert!(!c.iter().any(|c| matches!(c, Change::InjectProxy(_) | Change::WithdrawProxy(..))), "{c:?}");
    assert!(c.iter().any(|c| matches!(c, Change::ApplyConfigMap(_))), "the pool config is still written: {c:?}");
    let now = Time(jiff::Timestamp::from_second(1_800_000_000).expect("time"));
    let status = build_status(&evil, &p, None, &ApplyOutcome::NotApplied, None, &now);
    let condition = status.conditions.iter().find(|c| c.type_ == PROXY_INJECTED).expect("ProxyInjected");
    assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "ImageNotAllowed"));
    for part in [
        "spec.workload.proxy.image attacker.example/miner:1",
        "--proxy-image-allow",
        "allowed: registry.example/bulkhead:1.0, registry.example/bulkhead:*",
    ] {
        assert!(condition.message.contains(part), "{part}: {}", condition.message);
    }

    // Injected before (the operator's image): a new image outside the list
    // neither replaces nor withdraws that sidecar.
    let settled = after_injection(&plan(&bulkhead(INGRESS, 200), &snapshot).proxy.injections[0]);
    let p = bulkhead::plan::plan(&Selection::parse(&evil), &settled, &config);
    let c = changes("shop", &p, &settled, bulkhead::plan::WithheldConfig::KeepLast);
    assert!(!c.iter().any(|c| matches!(c, Change::InjectProxy(_) | Change::WithdrawProxy(..))), "{c:?}");

    // A prefix allows that repository's tags, not a repository that starts alike.
    let image = |bh: &Bulkhead, config: &PlanConfig| {
        let p = bulkhead::plan::plan(&Selection::parse(bh), &snapshot, config);
        p.proxy.injections.first().map(|i| i.body["spec"]["template"]["spec"]["containers"][0]["image"].clone())
    };
    assert_eq!(
        image(&with_image("registry.example/bulkhead:1.1"), &config),
        Some(json!("registry.example/bulkhead:1.1"))
    );
    assert_eq!(image(&with_image("registry.example/bulkhead-evil:1.1"), &config), None);
    // Without a list, only the operator's own image, named or not.
    let own_only = PlanConfig { proxy_image_allow: ImageAllowList::default(), ..config };
    assert_eq!(
        image(&with_image("registry.example/bulkhead:1.0"), &own_only),
        Some(json!("registry.example/bulkhead:1.0"))
    );
    assert_eq!(image(&with_image("registry.example/bulkhead:1.1"), &own_only), None);
    assert_eq!(image(&bulkhead(INGRESS, 200), &own_only), Some(json!("registry.example/bulkhead:1.0")));
}

/// The operator's --proxy-security-context replaces the restricted default
/// (OpenShift's restricted SCC assigns the user and refuses a fixed one);
/// a field that is not a securityContext's is refused, never dropped.
#[test]
fn the_sidecars_security_context_is_the_operators_and_restricted_by_default() {
    let snapshot = shop(json!({}), plain_template());
    let bh = bulkhead(INGRESS, 200);
    let sidecar = |config: &PlanConfig| {
        let p = bulkhead::plan::plan(&Selection::parse(&bh), &snapshot, config);
        p.proxy.injections[0].body["spec"]["template"]["spec"]["containers"][0]["securityContext"].clone()
    };
    let default = PlanConfig { proxy_image: Some("img:1".into()), ..PlanConfig::default() };
    assert_eq!(sidecar(&default), bulkhead::plan::default_proxy_security_context());
    assert_eq!(sidecar(&default)["runAsUser"], 65532);
    assert_eq!(sidecar(&default)["runAsNonRoot"], true);

    let openshift = bulkhead::plan::parse_security_context(
        r#"{"runAsNonRoot": true, "runAsUser": null, "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}, "readOnlyRootFilesystem": true}"#,
    )
    .expect("a securityContext");
    let config = PlanConfig { proxy_security_context: openshift, ..default.clone() };
    let context = sidecar(&config);
    assert!(context.get("runAsUser").is_none(), "{context}");
    assert_eq!(context["runAsNonRoot"], true);
    assert_ne!(plan(&bh, &snapshot).proxy.injections[0].fingerprint, {
        let p = bulkhead::plan::plan(&Selection::parse(&bh), &snapshot, &config);
        p.proxy.injections[0].fingerprint.clone()
    });

    for (bad, why) in [
        (r#"{"runAsUsr": 1000}"#, "runAsUsr: not a field"),
        (r#"{"capabilities": {"drop": ["ALL"], "remove": ["NET_RAW"]}}"#, "capabilities.remove: not a field"),
        (r#"{"runAsUser": "root"}"#, "invalid type"),
        ("[1]", "expected a JSON object"),
        ("runAsUser: 1", "not JSON"),
    ] {
        let err = bulkhead::plan::parse_security_context(bad).expect_err(bad);
        assert!(err.contains(why), "{bad}: {err}");
    }
}

/// A Service in front of the app's own port: the sidecar is injected, and
/// no request through that Service is counted. `Enforced` says so, naming
/// the Service, whether targetPort is a number, the name of the app's
/// container port, or left out (then it is the port); pointing it at the
/// proxy, by number or by the sidecar's port name, clears it.
#[test]
fn a_service_aimed_at_the_apps_own_port_is_a_bypass() {
    let template = json!({
        "metadata": {"labels": {"app": "api"}},
        "spec": {"containers": [{"name": "app", "image": "app:1", "ports": [{"name": "http", "containerPort": 8080}]}]},
    });
    let service = |name: &str, port: Value| {
        serde_json::from_value::<k8s_openapi::api::core::v1::Service>(json!({
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"selector": {"app": "api"}, "ports": [port]},
        }))
        .expect("service")
    };
    let enforced = |s: &Snapshot| {
        let bh = bulkhead(INGRESS, 200);
        let p = plan(&bh, s);
        let status = build_status(&bh, &p, None, &ApplyOutcome::NotApplied, None, &Time(jiff::Timestamp::UNIX_EPOCH));
        let c = status.conditions.iter().find(|c| c.type_ == "Enforced").expect("Enforced").clone();
        (c.status, c.reason, c.message)
    };
    for (port, via) in [
        (json!({"port": 80, "targetPort": 8080}), "sends to 8080"),
        (json!({"port": 80, "targetPort": "http"}), "sends to targetPort http, 8080"),
        (json!({"port": 8080}), "sends to 8080"),
    ] {
        let mut s = shop(json!({}), template.clone());
        s.apply(&service("api", port.clone()));
        let (status, reason, message) = enforced(&s);
        assert_eq!((status.as_str(), reason.as_str()), ("False", "Bypassed"), "{port}: {message}");
        assert!(
            message.contains(&format!("Service shop/api port {} {via}, the app's own port", port["port"])),
            "{message}"
        );
    }
    for port in [json!({"port": 80, "targetPort": 8081}), json!({"port": 80, "targetPort": "bulkhead-proxy"})] {
        let mut s = shop(json!({}), template.clone());
        s.apply(&service("api", port.clone()));
        let (status, reason, _) = enforced(&s);
        assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "NotObserved"), "{port}");
    }
    // A Service of other pods, or in another namespace, is none of its business.
    let mut s = shop(json!({}), template.clone());
    let mut other = service("other", json!({"port": 80, "targetPort": 8080}));
    other.spec.as_mut().expect("spec").selector = Some([("app".to_string(), "web".to_string())].into());
    s.apply(&other);
    let mut elsewhere = service("api", json!({"port": 80, "targetPort": 8080}));
    elsewhere.metadata.namespace = Some("lab".into());
    s.apply(&elsewhere);
    assert_eq!(enforced(&s).1, "NotObserved");
}
