//! Where Events about a Bulkhead go, so that `kubectl describe bulkhead` shows
//! them on every supported server.
//!
//! A Bulkhead is cluster-scoped. The API server accepts an Event about a
//! cluster-scoped object only in namespace `default` (or `kube-system`), and
//! `kubectl describe` finds it there: it lists core/v1 Events by
//! involvedObject across all namespaces. Current servers take an
//! events.k8s.io/v1 Event in `default`; older ones (1.20 among them) refuse
//! one that has an eventTime outside `kube-system` (422 Invalid). On the first
//! such refusal the recorder switches, for the rest of the process, to core/v1
//! Events without an eventTime, which those servers accept in `default`.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex,
    },
};

use k8s_openapi::{
    api::core::v1::{Event as CoreEvent, EventSource, ObjectReference},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    api::{Api, Patch, PatchParams, PostParams},
    runtime::events::{Event, EventType, Recorder, Reporter},
    Client,
};

/// The namespace of every Event about a Bulkhead (the chart grants exactly
/// this namespace; the API server allows no other choice but kube-system).
pub const EVENTS_NAMESPACE: &str = "default";

/// A repeated core/v1 Event within this time bumps the count of the first.
const REPEAT_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// Which API took the Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Published {
    EventsV1,
    CoreV1,
}

pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    modern: Recorder,
    /// Set once the server refused an events.k8s.io/v1 Event as invalid.
    legacy: AtomicBool,
    /// Core/v1 Events already written: same object, type, reason and message
    /// become one Event with a count (as client-go's correlator does).
    repeats: Mutex<Repeats>,
}

/// Events written within the window, swept of older ones now and then (not
/// on every Event: under churn thousands are held, and a flip writes two).
#[derive(Default)]
struct Repeats {
    written: HashMap<RepeatKey, Repeat>,
    swept: Option<Timestamp>,
}

/// How often the expired entries are dropped.
const SWEEP_EVERY: SignedDuration = SignedDuration::from_secs(30);

impl Repeats {
    /// The Event written for `key` within the window, if any.
    fn recent(&mut self, key: &RepeatKey, now: Timestamp) -> Option<Repeat> {
        if self.swept.is_none_or(|t| t + SWEEP_EVERY <= now) {
            self.written.retain(|_, r| r.last + REPEAT_WINDOW > now);
            self.swept = Some(now);
        }
        self.written.get(key).filter(|r| r.last + REPEAT_WINDOW > now).cloned()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RepeatKey {
    uid: Option<String>,
    name: Option<String>,
    type_: &'static str,
    reason: String,
    message: String,
}

#[derive(Clone, Debug)]
struct Repeat {
    name: String,
    count: i32,
    last: Timestamp,
}

impl EventRecorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        EventRecorder {
            modern: Recorder::new(client.clone(), reporter.clone()),
            client,
            reporter,
            legacy: AtomicBool::new(false),
            repeats: Mutex::default(),
        }
    }

    /// Record an Event about `regarding` (a cluster-scoped object).
    pub async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<Published, kube::Error> {
        if !self.legacy.load(Ordering::Relaxed) {
            match self.modern.publish(event, regarding).await {
                Ok(()) => return Ok(Published::EventsV1),
                Err(kube::Error::Api(s)) if s.is_invalid() || s.is_not_found() => {
                    tracing::info!(
                        reason = %s.message,
                        "the API server refuses events.k8s.io/v1 Events about cluster-scoped objects; using core/v1 Events in namespace {EVENTS_NAMESPACE}"
                    );
                    self.legacy.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        self.publish_core(event, regarding).await.map(|()| Published::CoreV1)
    }

    async fn publish_core(&self, event: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), EVENTS_NAMESPACE);
        let now = Timestamp::now();
        let key = RepeatKey {
            uid: regarding.uid.clone(),
            name: regarding.name.clone(),
            type_: type_name(event.type_),
            reason: event.reason.clone(),
            message: event.note.clone().unwrap_or_default(),
        };
        let earlier = {
            let mut repeats = self.repeats.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            repeats.recent(&key, now)
        };
        let written = match earlier {
            Some(r) => {
                let patch = serde_json::json!({"count": r.count + 1, "lastTimestamp": Time(now)});
                api.patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
                Repeat { name: r.name, count: r.count + 1, last: now }
            }
            None => {
                let core = self.core_event(event, regarding, now);
                let name = core.metadata.name.clone().unwrap_or_default();
                api.create(&PostParams::default(), &core).await?;
                Repeat { name, count: 1, last: now }
            }
        };
        self.repeats.lock().unwrap_or_else(std::sync::PoisonError::into_inner).written.insert(key, written);
        Ok(())
    }

    /// A core/v1 Event as servers before events.k8s.io/v1 wrote them: no
    /// eventTime (with one, an Event about a cluster-scoped object must be in
    /// kube-system), first/last timestamp and a count.
    fn core_event(&self, event: &Event, regarding: &ObjectReference, now: Timestamp) -> CoreEvent {
        let object = regarding.name.as_deref().unwrap_or(&self.reporter.controller);
        let instance = self.reporter.instance.clone();
        CoreEvent {
            metadata: ObjectMeta {
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                namespace: Some(EVENTS_NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            involved_object: regarding.clone(),
            type_: Some(type_name(event.type_).into()),
            reason: Some(event.reason.clone()),
            message: event.note.clone(),
            action: Some(event.action.clone()),
            related: event.secondary.clone(),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            source: Some(EventSource { component: Some(self.reporter.controller.clone()), host: instance.clone() }),
            reporting_component: Some(self.reporter.controller.clone()),
            reporting_instance: Some(instance.unwrap_or_else(|| self.reporter.controller.clone())),
            ..CoreEvent::default()
        }
    }
}

fn type_name(t: EventType) -> &'static str {
    match t {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::{json, Value};
    use tower_test::mock;

    use super::*;

    fn regarding() -> ObjectReference {
        ObjectReference {
            api_version: Some("bulkhead.dev/v1alpha1".into()),
            kind: Some("Bulkhead".into()),
            name: Some("shop".into()),
            uid: Some("u-1".into()),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn a_repeat_counts_only_within_the_window_and_old_ones_are_swept() {
        let key = |m: &str| RepeatKey {
            uid: None,
            name: Some("shop".into()),
            type_: "Normal",
            reason: "Applied".into(),
            message: m.into(),
        };
        let t0 = Timestamp::from_second(1_700_000_000).expect("time");
        let at = |secs: i64| t0 + SignedDuration::from_secs(secs);
        let mut r = Repeats::default();
        assert!(r.recent(&key("a"), t0).is_none());
        r.written.insert(key("a"), Repeat { name: "e-a".into(), count: 1, last: t0 });
        assert_eq!(r.recent(&key("a"), at(10)).map(|r| r.name), Some("e-a".into()), "within the window");
        r.written.insert(key("b"), Repeat { name: "e-b".into(), count: 1, last: at(20) });
        assert!(r.recent(&key("a"), at(340)).is_some(), "a sweep keeps what is within the window");
        // Past a's window but before the next sweep: not counted, still held.
        assert!(r.recent(&key("a"), at(361)).is_none());
        assert_eq!(r.written.len(), 2, "swept at most every 30 s");
        assert!(r.recent(&key("b"), at(370)).is_some());
        assert_eq!(r.written.len(), 1, "the next sweep dropped a");
        assert!(r.recent(&key("b"), at(400)).is_none());
        assert!(r.written.is_empty(), "and then b");
    }

    fn event(note: &str) -> Event {
        Event {
            type_: EventType::Warning,
            reason: "Unfunded".into(),
            note: Some(note.into()),
            action: "FundedChanged".into(),
            secondary: None,
        }
    }

    /// Publishes `notes` in order; the server answers each request with
    /// `answer(method, path)`. Returns what each publish returned and the
    /// requests as (method, path, body).
    async fn publish_all(
        notes: &[&str],
        answer: impl Fn(&str, &str) -> u16 + Send + 'static,
    ) -> (Vec<Result<Published, u16>>, Vec<(String, String, Value)>) {
        let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let recorder = EventRecorder::new(
            Client::new(service, "default"),
            Reporter { controller: "bulkhead".into(), instance: None },
        );
        let notes: Vec<String> = notes.iter().map(ToString::to_string).collect();
        let task = tokio::spawn(async move {
            let mut results = Vec::new();
            for note in notes {
                results.push(recorder.publish(&event(&note), &regarding()).await.map_err(|e| match e {
                    kube::Error::Api(s) => s.code,
                    _ => 0,
                }));
            }
            results
        });
        let mut seen = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().to_string();
            let path = request.uri().path().to_string();
            let bytes = request.into_body().collect_bytes().await.expect("body");
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let code = answer(&method, &path);
            let reply = if code < 300 {
                body.clone()
            } else {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                       "reason": if code == 422 { "Invalid" } else { "Forbidden" }, "message": "refused"})
            };
            seen.push((method, path, body));
            send.send_response(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&reply).expect("json")))
                    .expect("ok"),
            );
        }
        (task.await.expect("task"), seen)
    }

    #[tokio::test]
    async fn a_server_that_takes_events_v1_gets_events_v1() {
        let (results, seen) = publish_all(&["a"], |_, _| 201).await;
        assert_eq!(results, vec![Ok(Published::EventsV1)]);
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].1, "/apis/events.k8s.io/v1/namespaces/default/events");
    }

    #[tokio::test]
    async fn a_refused_events_v1_event_falls_back_to_core_v1_in_default_once_and_for_all() {
        let (results, seen) =
            publish_all(&["a", "b", "b"], |_, path| if path.starts_with("/apis/events.k8s.io") { 422 } else { 201 })
                .await;
        assert_eq!(results, vec![Ok(Published::CoreV1); 3]);
        let lines: Vec<String> = seen.iter().map(|(m, p, _)| format!("{m} {p}")).collect();
        let name_b = seen[2].2["metadata"]["name"].as_str().expect("name").to_string();
        assert_eq!(
            lines,
            vec![
                "POST /apis/events.k8s.io/v1/namespaces/default/events".to_string(),
                "POST /api/v1/namespaces/default/events".into(),
                "POST /api/v1/namespaces/default/events".into(),
                format!("PATCH /api/v1/namespaces/default/events/{name_b}"),
            ]
        );
        let core = &seen[1].2;
        assert_eq!(core["involvedObject"]["name"], "shop");
        assert_eq!(core["involvedObject"]["uid"], "u-1");
        assert_eq!(core["message"], "a");
        assert_eq!(core["type"], "Warning");
        assert_eq!(core["count"], 1);
        assert!(core.get("eventTime").is_none(), "1.20 refuses an eventTime here: {core}");
        assert_eq!(seen[3].2["count"], 2, "a repeat bumps the count: {}", seen[3].2);
    }

    #[tokio::test]
    async fn a_forbidden_event_is_an_error_for_the_caller_and_no_fallback() {
        let (results, seen) = publish_all(&["a", "b"], |_, _| 403).await;
        assert_eq!(results, vec![Err(403), Err(403)]);
        assert!(seen.iter().all(|(_, p, _)| p.starts_with("/apis/events.k8s.io")), "{seen:?}");
    }
}
