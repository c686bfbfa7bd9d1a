//! Read Bulkheads and cluster objects from files, directories or stdin:
//! multi-document YAML or JSON, `kind: List` expanded. Errors name the file,
//! the document and the field.
//!
//! Limits, so that no input can hang the run or grow its memory:
//! `MAX_INPUT_BYTES` over all inputs of a run, `MAX_DEPTH` levels of nesting,
//! `MAX_VALUES` values in a run and `MAX_OBJECT_VALUES` in one object. The
//! text is scanned for them before serde-saphyr parses it; the parser's own
//! budgets (`parse_options`) back the scan up and bound what aliases expand to.

use std::{
    collections::BTreeMap,
    fmt,
    io::Read,
    path::{Path, PathBuf},
};

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v1::HorizontalPodAutoscaler,
    core::v1::{ConfigMap, Endpoints, Namespace, Node, Pod, ResourceQuota, Service},
    discovery::v1::EndpointSlice,
    networking::v1::NetworkPolicy,
    node::v1::RuntimeClass,
    scheduling::v1::PriorityClass,
};
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_saphyr::Spanned;

use crate::{
    crd::{schema_errors, Bulkhead},
    snapshot::Snapshot,
};

/// Most bytes read in one run, all inputs together (16 MiB: a `kubectl get -A
/// -o yaml` of a few thousand pods). More is refused before it is parsed.
pub const MAX_INPUT_BYTES: usize = 16 << 20;
/// Deepest nesting of a document (a Deployment nests about 15 levels). A
/// YAML parser's time may grow with the square of flow nesting (`[[[[…`:
/// serde_yaml's did), so the text is scanned for it before parsing.
pub const MAX_DEPTH: usize = 64;
/// Most values (scalars, lists, maps) in one run, estimated from the text
/// before parsing: parsed values take about a hundred times their text.
pub(super) const MAX_VALUES: usize = 2_000_000;
/// Most values in one object: decoded into API types, `{}` in a list of
/// containers becomes a whole Container (a kilobyte and more).
pub(super) const MAX_OBJECT_VALUES: usize = 100_000;
/// The command-line name of stdin.
pub const STDIN: &str = "-";

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{file}")]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: more than {MAX_INPUT_BYTES} bytes of input in all (the limit of one run); split the input")]
    TooLarge { file: PathBuf },
    #[error("{file}: no .yaml, .yml or .json files in this directory")]
    EmptyDirectory { file: PathBuf },
    #[error("{place}: {message}")]
    Invalid { place: Place, message: String },
    #[error("{second}: {what} appears twice, different each time: also at {first}")]
    Duplicate { what: String, first: Box<Place>, second: Box<Place> },
}

/// Where an object was read: the file, the document, and the item of a List.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    pub file: PathBuf,
    /// 1-based.
    pub document: usize,
    /// `items[3]` (nested Lists: `items[3].items[0]`).
    pub item: Option<String>,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.file.display(), self.document)?;
        match &self.item {
            Some(item) => write!(f, ": {item}"),
            None => Ok(()),
        }
    }
}

/// Everything read from the files.
#[derive(Debug, Default)]
pub struct Input {
    pub bulkheads: Vec<Bulkhead>,
    pub snapshot: Snapshot,
    /// Objects left out, for a person to see (a Bulkhead of another API group).
    pub notes: Vec<String>,
}

/// Read every input: a file, a directory (its *.yaml, *.yml and *.json, sorted,
/// not recursive) or `-` for stdin.
pub fn load_files(paths: &[PathBuf]) -> Result<Input, LoadError> {
    let mut loader = Loader::default();
    for path in paths {
        if path.as_os_str() == STDIN {
            let text = loader.read(path, std::io::stdin().lock())?;
            loader.load_text(path, &text)?;
        } else if path.is_dir() {
            for file in directory_files(path)? {
                let text = loader.read_file(&file)?;
                loader.load_text(&file, &text)?;
            }
        } else {
            let text = loader.read_file(path)?;
            loader.load_text(path, &text)?;
        }
    }
    Ok(loader.input)
}

/// Read YAML or JSON text as if from one file (the tests' and fuzzers' entry point).
pub fn load_text(name: &Path, text: &str) -> Result<Input, LoadError> {
    let mut loader = Loader::default();
    if text.len() > MAX_INPUT_BYTES {
        return Err(LoadError::TooLarge { file: name.to_path_buf() });
    }
    loader.load_text(name, text)?;
    Ok(loader.input)
}

fn directory_files(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let read_error = |source| LoadError::Read { file: dir.to_path_buf(), source };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_error)? {
        let path = entry.map_err(read_error)?.path();
        let wanted = path.extension().and_then(|e| e.to_str()).is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if wanted && !path.is_dir() {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(LoadError::EmptyDirectory { file: dir.to_path_buf() });
    }
    files.sort();
    Ok(files)
}

/// Kind, namespace and name of an object read.
type Identity = (String, String, String);

#[derive(Default)]
struct Loader {
    input: Input,
    /// Bytes read so far in this run.
    read: usize,
    /// Values (estimated) read so far in this run.
    values: usize,
    /// Where each object was first read, and a hash of it, to refuse a different second one.
    seen: BTreeMap<Identity, (Place, u64)>,
}

impl Loader {
    fn read_file(&mut self, path: &Path) -> Result<String, LoadError> {
        let file = std::fs::File::open(path).map_err(|source| LoadError::Read { file: path.to_path_buf(), source })?;
        self.read(path, file)
    }

    /// Read at most what is left of the budget (one byte more, to tell that it is exceeded).
    fn read(&mut self, path: &Path, reader: impl Read) -> Result<String, LoadError> {
        let left = MAX_INPUT_BYTES - self.read;
        let mut bytes = Vec::new();
        reader
            .take(left as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| LoadError::Read { file: path.to_path_buf(), source })?;
        if bytes.len() > left {
            return Err(LoadError::TooLarge { file: path.to_path_buf() });
        }
        self.read += bytes.len();
        String::from_utf8(bytes).map_err(|e| LoadError::Invalid {
            place: Place { file: path.to_path_buf(), document: 1, item: None },
            message: format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to()),
        })
    }

    fn load_text(&mut self, path: &Path, text: &str) -> Result<(), LoadError> {
        // kubectl accepts a UTF-8 byte order mark.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let scan = scan(text, MAX_VALUES.saturating_sub(self.values));
        self.values = self.values.saturating_add(scan.values);
        let message = match scan.too_deep {
            Some(((line, column), true)) => {
                Some(format!("nested more than {MAX_DEPTH} levels deep at line {line} column {column}"))
            }
            Some(((line, _), false)) => {
                Some(format!("indented more than {MAX_INDENT} columns (nested too deep) at line {line}"))
            }
            None if self.values > MAX_VALUES => {
                Some(format!("more than {MAX_VALUES} values in all (the limit of one run); split the input"))
            }
            None => None,
        };
        if let Some(message) = message {
            return Err(LoadError::Invalid {
                place: Place { file: path.to_path_buf(), document: 1, item: None },
                message,
            });
        }
        if is_json(path, text) {
            return self.load_json(path, text);
        }
        let documents = Documents::of(text);
        let parsed = serde_saphyr::from_multiple_with_options::<Spanned<Value>>(text, parse_options());
        let values = parsed.map_err(|e| {
            let line = e.location().map_or(1, |l| l.line() as usize);
            let place = Place { file: path.to_path_buf(), document: documents.number(line), item: None };
            LoadError::Invalid { place, message: parse_error(&e) }
        })?;
        // Empty documents (a trailing `---`) are skipped by the parser; the
        // others keep the number a reader counts.
        for Spanned { value, referenced, .. } in values {
            let place =
                Place { file: path.to_path_buf(), document: documents.number(referenced.line() as usize), item: None };
            if depth(&value) > MAX_DEPTH {
                return Err(LoadError::Invalid { place, message: format!("nested more than {MAX_DEPTH} levels deep") });
            }
            self.add_object(value, place)?;
        }
        Ok(())
    }

    /// JSON is read as JSON, not as the YAML it nearly is: a trailing comma
    /// or a comment is an error, as kubectl makes it. Several values in a
    /// row are several documents.
    fn load_json(&mut self, path: &Path, text: &str) -> Result<(), LoadError> {
        let values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        for (i, value) in values.enumerate() {
            let place = Place { file: path.to_path_buf(), document: i + 1, item: None };
            let value =
                value.map_err(|e| LoadError::Invalid { place: place.clone(), message: format!("not JSON: {e}") })?;
            if depth(&value) > MAX_DEPTH {
                return Err(LoadError::Invalid { place, message: format!("nested more than {MAX_DEPTH} levels deep") });
            }
            self.add_object(value, place)?;
        }
        Ok(())
    }

    fn add_object(&mut self, mut value: Value, place: Place) -> Result<(), LoadError> {
        let invalid = |message: String| LoadError::Invalid { place: place.clone(), message };
        if !value.is_object() {
            return Err(invalid(format!("not an object but {}", short(&value))));
        }
        let kind =
            value.get("kind").and_then(Value::as_str).ok_or_else(|| invalid("kind: missing".into()))?.to_string();
        if kind == "List" || kind.ends_with("List") && value.get("items").is_some() {
            let items = match value.get_mut("items").map(Value::take) {
                Some(Value::Array(items)) => items,
                None | Some(Value::Null) => Vec::new(),
                Some(other) => return Err(invalid(format!("items: must be a list, not {}", short(&other)))),
            };
            for (j, item) in items.into_iter().enumerate() {
                let item_place = Place {
                    item: Some(match &place.item {
                        Some(outer) => format!("{outer}.items[{j}]"),
                        None => format!("items[{j}]"),
                    }),
                    ..place.clone()
                };
                self.add_object(item, item_place)?;
            }
            return Ok(());
        }
        let Some(group) = expected_group(&kind) else {
            return Self::unread_kind(&value, &kind).map_err(invalid);
        };
        if count_values(&value) > MAX_OBJECT_VALUES {
            return Err(invalid(format!("more than {MAX_OBJECT_VALUES} values in one object")));
        }
        let api_version =
            value.get("apiVersion").and_then(Value::as_str).ok_or_else(|| invalid("apiVersion: missing".into()))?;
        let (found_group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        if found_group != group {
            self.input
                .notes
                .push(format!("{place}: ignored {kind} of apiVersion {api_version} (not {kind} of this tool)"));
            return Ok(());
        }
        let served = served_versions(&kind);
        if !served.contains(&version) {
            let listed: Vec<String> =
                served.iter().map(|v| format!("{group}/{v}").trim_start_matches('/').to_string()).collect();
            let listed = listed.join(", ");
            return Err(invalid(if kind == "Bulkhead" {
                format!("apiVersion: {api_version} is not served ({listed} is)")
            } else {
                format!(
                    "apiVersion: {api_version} is not a version of {kind} that Kubernetes 1.20-1.33 serves ({listed})"
                )
            }));
        }
        let namespace = value.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default().to_string();
        // kubectl would put a namespaced object in its context's namespace; here it
        // would match no namespace at all, and the pods left out could turn Shared into Separate.
        if namespace.is_empty() && namespaced(&kind) {
            return Err(invalid(format!(
                "metadata.namespace: missing: a {kind} lives in a namespace (kubectl get -o yaml prints it)"
            )));
        }
        let name = name_of(&mut value, &place).map_err(|m| invalid(m.to_string()))?;
        let identity = (kind.clone(), namespace.clone(), name.clone());
        let fingerprint = fingerprint(&value);
        if let Some((first, first_fingerprint)) = self.seen.get(&identity) {
            // The same object twice (one file passed twice, or a Namespace in two
            // example files) changes nothing; two different ones would silently
            // overwrite each other.
            if *first_fingerprint == fingerprint {
                return Ok(());
            }
            let what =
                if namespace.is_empty() { format!("{kind} {name}") } else { format!("{kind} {namespace}/{name}") };
            return Err(LoadError::Duplicate { what, first: Box::new(first.clone()), second: Box::new(place) });
        }
        self.seen.insert(identity, (place.clone(), fingerprint));
        self.decode(&kind, value).map_err(invalid)
    }

    /// A kind the planner does not read: skipped, unless it is one of this
    /// tool's group or a misspelling of one it reads (`kind: deployment`),
    /// which would otherwise leave an object out without a word.
    fn unread_kind(value: &Value, kind: &str) -> Result<(), String> {
        let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let meant = READ_KINDS.iter().find(|k| {
            let folded = kind.to_ascii_lowercase();
            let known = k.to_ascii_lowercase();
            folded == known || folded.strip_suffix('s') == Some(known.as_str()) || folded == format!("{known}es")
        });
        if let Some(meant) = meant.filter(|m| expected_group(m) == Some(group)) {
            return Err(format!(
                "kind: {kind} is not a kind of {api_version}: did you mean {meant}? (kinds are case-sensitive)"
            ));
        }
        // A drill runs in a cluster only (it sends load and holds traffic):
        // offline it is read past, like any kind the planner does not read.
        if group == "bulkhead.dev" && kind != "BulkheadDrill" {
            return Err(format!(
                "kind: {kind} is not a kind of {api_version} (Bulkhead and BulkheadDrill are; kinds are case-sensitive)"
            ));
        }
        Ok(())
    }

    fn decode(&mut self, kind: &str, value: Value) -> Result<(), String> {
        let snapshot = &mut self.input.snapshot;
        match kind {
            "Bulkhead" => {
                let bulkhead = decode_bulkhead(value)?;
                snapshot.seniority.insert(&bulkhead.metadata);
                self.input.bulkheads.push(bulkhead);
            }
            "Namespace" => snapshot.apply(&decode::<Namespace>(value)?),
            "Deployment" => snapshot.apply(&decode::<Deployment>(value)?),
            "StatefulSet" => snapshot.apply(&decode::<StatefulSet>(value)?),
            "HorizontalPodAutoscaler" => snapshot.apply(&decode::<HorizontalPodAutoscaler>(as_hpa_v1(value))?),
            "Node" => snapshot.apply(&decode::<Node>(value)?),
            "Pod" => snapshot.apply(&decode::<Pod>(value)?),
            "Service" => snapshot.apply(&decode::<Service>(value)?),
            "Endpoints" => snapshot.apply(&decode::<Endpoints>(value)?),
            "EndpointSlice" => snapshot.apply(&decode::<EndpointSlice>(as_slice_v1(value))?),
            "RuntimeClass" => snapshot.apply(&decode::<RuntimeClass>(as_version(value, "node.k8s.io/v1"))?),
            "ConfigMap" => snapshot.apply(&decode::<ConfigMap>(value)?),
            "ResourceQuota" => snapshot.apply(&decode::<ResourceQuota>(value)?),
            "NetworkPolicy" => snapshot.apply(&decode::<NetworkPolicy>(value)?),
            "PriorityClass" => snapshot.apply(&decode::<PriorityClass>(as_version(value, "scheduling.k8s.io/v1"))?),
            _ => {}
        }
        Ok(())
    }
}

/// A `.json` file, or text that opens as JSON does (`kubectl get -o json`
/// on stdin); YAML manifests start with a key, a comment or `---`.
fn is_json(path: &Path, text: &str) -> bool {
    path.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with(['{', '['])
}

/// Every kind the planner reads.
const READ_KINDS: [&str; 15] = [
    "Bulkhead",
    "Namespace",
    "Node",
    "Pod",
    "Service",
    "Endpoints",
    "ConfigMap",
    "ResourceQuota",
    "NetworkPolicy",
    "Deployment",
    "StatefulSet",
    "HorizontalPodAutoscaler",
    "EndpointSlice",
    "RuntimeClass",
    "PriorityClass",
];

/// The versions of a kind that the API servers bulkhead supports (1.20 to
/// 1.33) serve, any of which `kubectl get -o yaml` may print. Those read here
/// differ from the newest only in fields the planner does not read.
fn served_versions(kind: &str) -> &'static [&'static str] {
    match kind {
        "Bulkhead" => &["v1alpha1"],
        // v2 from 1.23 (kubectl's choice there), v2beta2 until 1.26, v2beta1 until 1.25.
        "HorizontalPodAutoscaler" => &["v1", "v2", "v2beta2", "v2beta1"],
        // v1 from 1.21; v1beta1 (all that 1.20 serves) until 1.25.
        "EndpointSlice" => &["v1", "v1beta1"],
        // v1 from 1.20; v1beta1 until 1.25.
        "RuntimeClass" => &["v1", "v1beta1"],
        // v1 from 1.14; v1beta1 and v1alpha1 until 1.22.
        "PriorityClass" => &["v1", "v1beta1", "v1alpha1"],
        _ => &["v1"],
    }
}

/// v1beta1 (all that 1.20 serves) has the fields the audit reads as v1 has
/// them (addresses, conditions, targetRef): read it as v1.
fn as_slice_v1(value: Value) -> Value {
    as_version(value, "discovery.k8s.io/v1")
}

/// Read an older version as `api_version`: its fields that the planner reads
/// are the same.
fn as_version(mut value: Value, api_version: &str) -> Value {
    if let Some(v) = value.get_mut("apiVersion") {
        *v = Value::String(api_version.into());
    }
    value
}

/// Every version of a HorizontalPodAutoscaler agrees on what the planner
/// reads (scaleTargetRef, minReplicas, maxReplicas); the rest (v2's metrics
/// and behavior, its status) is left out, so it cannot fail v1's decoding.
fn as_hpa_v1(value: Value) -> Value {
    let spec = value.get("spec");
    let field = |name: &str| spec.and_then(|s| s.get(name)).cloned();
    let mut kept = serde_json::Map::new();
    for name in ["scaleTargetRef", "minReplicas", "maxReplicas"] {
        if let Some(v) = field(name) {
            kept.insert(name.into(), v);
        }
    }
    serde_json::json!({
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": value.get("metadata").cloned().unwrap_or(Value::Null),
        "spec": kept,
    })
}

fn fingerprint(value: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

/// The API group of each kind the planner reads ("" is the core group).
fn expected_group(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Bulkhead" => "bulkhead.dev",
        "Namespace" | "Node" | "Pod" | "Service" | "Endpoints" | "ConfigMap" | "ResourceQuota" => "",
        "Deployment" | "StatefulSet" => "apps",
        "HorizontalPodAutoscaler" => "autoscaling",
        "EndpointSlice" => "discovery.k8s.io",
        "NetworkPolicy" => "networking.k8s.io",
        "RuntimeClass" => "node.k8s.io",
        "PriorityClass" => "scheduling.k8s.io",
        _ => return None,
    })
}

fn namespaced(kind: &str) -> bool {
    !matches!(kind, "Bulkhead" | "Namespace" | "Node" | "RuntimeClass" | "PriorityClass")
}

/// The object's name. An object with only `generateName` (a manifest for
/// `kubectl create`) is given one of its own, made from where it was read,
/// so that two such pods never collapse into one.
fn name_of(value: &mut Value, place: &Place) -> Result<String, &'static str> {
    let meta = value.get_mut("metadata").and_then(Value::as_object_mut).ok_or("metadata: missing")?;
    if let Some(name) = meta.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        return Ok(name.to_string());
    }
    let prefix = meta.get("generateName").and_then(Value::as_str).ok_or("metadata.name: missing")?;
    let name = format!("{prefix}<{place}>");
    meta.insert("name".into(), Value::String(name.clone()));
    Ok(name)
}

/// Decode with the path of the failing field in the message.
fn decode<K: DeserializeOwned>(value: Value) -> Result<K, String> {
    serde_path_to_error::deserialize::<_, K>(value).map_err(|e| format!("{}: {}", e.path(), e.inner()))
}

/// A Bulkhead must first pass the CRD schema, as in the cluster.
fn decode_bulkhead(value: Value) -> Result<Bulkhead, String> {
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<unnamed>").to_string();
    let errors = schema_errors(&value);
    if !errors.is_empty() {
        return Err(format!("Bulkhead {name}: {}", errors.join("; ")));
    }
    decode::<Bulkhead>(value).map_err(|e| format!("Bulkhead {name}: {e}"))
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Values in an object, counted until past the limit.
fn count_values(value: &Value) -> usize {
    let mut count = 0;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        count += 1;
        if count > MAX_OBJECT_VALUES {
            break;
        }
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    count
}

/// Nesting depth of a parsed document.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The parser's own budgets, past the pre-scan's limits: they only back it
/// up (its defaults would refuse a large `kubectl get -A` dump: 250,000 nodes,
/// 1,024 documents), so each is set beyond what the scan lets through.
fn parse_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        // Errors name the line and column; the loader names the file and document.
        with_snippet: false,
        // Scalars read as serde_yaml (YAML 1.2) read them, as before: `y`,
        // `on` and `no` are strings, and so are `0755` and `1_000`.
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        budget: serde_saphyr::budget! {
            max_depth: 2 * MAX_DEPTH,
            max_nodes: 2 * MAX_VALUES,
            max_events: 4 * MAX_VALUES,
            max_documents: MAX_VALUES,
            // What aliases expand to is not in the text the scan counted: an
            // expansion larger than one object may be is refused as it is
            // replayed (at the default 1,000,000 an alias bomb took 13 s).
            max_recorded_anchor_events: MAX_OBJECT_VALUES,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_OBJECT_VALUES,
        },
    }
}

/// A nesting the pre-scan let through (it errs that way) but the parser's
/// budget refused reads as the scan's own refusal; other errors as the parser says.
fn parse_error(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::{budget::BudgetBreach, Error};
    let at = e.location().filter(|l| l.line() > 0).map(|l| format!(" at line {} column {}", l.line(), l.column()));
    let at = at.unwrap_or_default();
    // What went wrong, under the wrappers that add where an alias was defined and used.
    let mut inner = e;
    while let Error::AliasError { error, .. } | Error::WithSnippet { error, .. } = inner {
        inner = error;
    }
    // The parser's own wording names its options and types: say what is wrong with the text instead.
    match inner {
        Error::Budget { breach: BudgetBreach::Depth { .. }, .. } => {
            format!("nested more than {MAX_DEPTH} levels deep{at}")
        }
        Error::Budget {
            breach:
                BudgetBreach::RecordedAnchorEvents { .. } | BudgetBreach::Aliases { .. } | BudgetBreach::Anchors { .. },
            ..
        }
        | Error::AliasReplayLimitExceeded { .. }
        | Error::AliasReplayCounterOverflow { .. }
        | Error::AliasReplayStackDepthExceeded { .. } => {
            format!("aliases (*name) expand to more than {MAX_OBJECT_VALUES} values{at}: write the values out")
        }
        Error::Budget { .. } => {
            format!("more than {MAX_VALUES} values in all (the limit of one run){at}; split the input")
        }
        Error::DuplicateMappingKey { key: Some(key), .. } => format!("the key {key} appears twice in one mapping{at}"),
        Error::DuplicateMappingKey { key: None, .. } => format!("a key appears twice in one mapping{at}"),
        _ => format!("not YAML: {e}"),
    }
}

/// Where each document of a stream starts, by line, to number them as a
/// reader does: the first document may start without `---`; every later one
/// starts at a `---` line (YAML forbids one inside any scalar).
struct Documents {
    /// 1-based line of each document's start, in order.
    starts: Vec<usize>,
}

impl Documents {
    fn of(text: &str) -> Self {
        let mut starts = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let marker = line.strip_prefix("---").is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']));
            let content = !line.trim().is_empty() && !line.starts_with(['#', '%']);
            if marker || (starts.is_empty() && content) {
                starts.push(i + 1);
            }
        }
        Self { starts }
    }

    /// The 1-based number of the document holding `line`.
    fn number(&self, line: usize) -> usize {
        self.starts.partition_point(|&start| start <= line).max(1)
    }
}

/// Most columns of indentation and block indicators at the start of a line.
const MAX_INDENT: usize = 4 * MAX_DEPTH;

/// What a linear scan of the text tells before the YAML parser sees it.
struct Scan {
    /// Where flow nesting first passed `MAX_DEPTH` or a line's indentation
    /// passed `MAX_INDENT`, as ((line, column), whether it was flow nesting).
    too_deep: Option<((usize, usize), bool)>,
    /// At least the number of values: lines, flow openers and separators, block
    /// indicators (counted only until past the budget).
    values: usize,
}

/// Flow nesting (`[`, `{`) is counted outside quoted scalars and comments;
/// block nesting is bounded by how far the indentation and the block
/// indicators (`- `, `? `, `: `) that start a line reach: every level needs a
/// column more (`- - - - x` is four levels). The YAML parser takes time
/// quadratic in flow depth, and memory in block depth, before its own
/// recursion limit applies. The scan errs only towards letting text through
/// to the parser; nesting is checked again after parsing.
fn scan(text: &str, budget: usize) -> Scan {
    let (limit, indent) = (MAX_DEPTH, MAX_INDENT);
    let mut values = 0usize;
    let (mut line, mut column, mut depth) = (1, 0, 0usize);
    let mut quote: Option<char> = None;
    let (mut comment, mut leading) = (false, true);
    // The previous character, and the last one on this line that was not a space ('\n' at its start).
    let (mut prev, mut last) = ('\n', '\n');
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        column += 1;
        if c == '\n' {
            (line, column, comment, leading, prev, last) = (line + 1, 0, false, true, '\n', '\n');
            values += 1;
            if values > budget {
                break;
            }
            continue;
        }
        if leading && quote.is_none() {
            let indicator = matches!(c, '-' | '?' | ':') && chars.peek().is_none_or(|n| n.is_whitespace());
            values += usize::from(indicator);
            if c == ' ' || c == '\t' || indicator {
                if column > indent {
                    return Scan { too_deep: Some(((line, column), false)), values };
                }
            } else {
                leading = false;
            }
        }
        if comment {
            continue;
        }
        match quote {
            Some('"') if c == '\\' => {
                chars.next();
                column += 1;
            }
            Some('\'') if c == '\'' && chars.peek() == Some(&'\'') => {
                chars.next();
                column += 1;
            }
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '#' if prev.is_whitespace() => comment = true,
                // A quote opens a scalar only where a value or key may start.
                '"' | '\'' if matches!(last, '\n' | ':' | '-' | '[' | '{' | ',' | '?') => quote = Some(c),
                '[' | '{' => {
                    depth += 1;
                    values += 1;
                    if depth > limit {
                        return Scan { too_deep: Some(((line, column), true)), values };
                    }
                }
                ',' => {
                    values += 1;
                    if values > budget {
                        break; // the caller refuses it: no need to read on
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        prev = c;
        if !c.is_whitespace() {
            last = c;
        }
    }
    Scan { too_deep: None, values }
}
