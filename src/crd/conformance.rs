//! Check a Bulkhead, as JSON, against the CRD's own OpenAPI schema, the way
//! the API server (and `kubectl apply --validate=strict`) does: unknown
//! fields, types, required fields, minima and maxima, lengths, patterns,
//! enums, and duplicate keys of map- and set-typed lists. The offline CLI
//! runs it, so a file that the cluster would refuse never passes `check`.
//!
//! `metadata` is left to the planner (it checks the name), as the CRD
//! schema says nothing about it either.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Mutex, OnceLock},
};

use regex::Regex;
use serde_json::{Map, Value};

/// The CRD's openAPIV3Schema, as JSON.
fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let crd = super::definition();
        let schema =
            crd.spec.versions.first().and_then(|v| v.schema.as_ref()).and_then(|s| s.open_api_v3_schema.as_ref());
        serde_json::to_value(schema).unwrap_or(Value::Null)
    })
}

/// Every place where `object` breaks the CRD schema, each as `path: problem`
/// (`spec.classes[0].celing: unknown field`). Empty when it conforms.
pub fn schema_errors(object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let Some(map) = object.as_object() else {
        return vec!["<root>: must be an object".to_string()];
    };
    let root = schema();
    let props = root.get("properties").and_then(Value::as_object);
    for (key, value) in map {
        match (key.as_str(), props.and_then(|p| p.get(key))) {
            // The API server checks these itself (the CRD schema leaves them out); the
            // loader has checked apiVersion and kind, the planner checks the name.
            ("apiVersion" | "kind" | "metadata", _) => {}
            (_, Some(prop)) => check(key, value, prop, &mut errors),
            (_, None) => errors.push(format!("{key}: unknown field")),
        }
    }
    if !map.contains_key("spec") {
        errors.push("spec: required".to_string());
    }
    errors
}

fn check(path: &str, value: &Value, schema: &Value, errors: &mut Vec<String>) {
    // Null is pruned by the API server for fields that are not nullable.
    if value.is_null() {
        return;
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            errors.push(format!("{path}: must be an integer or a string"));
        }
        return;
    }
    let ty = schema.get("type").and_then(Value::as_str);
    let type_ok = match ty {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !type_ok {
        // A whole number past 64 bits parses as a float: say it is too large,
        // not that it is of another type.
        let too_large = ty == Some("integer") && value.as_f64().is_some_and(|x| x.fract() == 0.0 && x.abs() >= 9.2e18);
        if too_large {
            errors.push(format!("{path}: {value} is too large for an integer (at most {})", i64::MAX));
        } else {
            errors.push(format!("{path}: must be of type {}, not {}", ty.unwrap_or("?"), type_name(value)));
        }
        return;
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        if !options.contains(value) {
            let shown: Vec<String> = options.iter().map(Value::to_string).collect();
            errors.push(format!("{path}: {value} is not one of {}", shown.join(", ")));
        }
    }
    match value {
        Value::Object(map) => check_object(path, map, schema, errors),
        Value::Array(items) => check_array(path, items, schema, errors),
        Value::String(s) => check_string(path, s, schema, errors),
        Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                if schema.get("minimum").and_then(Value::as_f64).is_some_and(|min| x < min) {
                    errors.push(format!("{path}: {n} is less than the minimum {}", bound(schema, "minimum")));
                }
                if schema.get("maximum").and_then(Value::as_f64).is_some_and(|max| x > max) {
                    errors.push(format!("{path}: {n} is more than the maximum {}", bound(schema, "maximum")));
                }
            }
        }
        _ => {}
    }
}

fn check_object(path: &str, map: &Map<String, Value>, schema: &Value, errors: &mut Vec<String>) {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    for (key, value) in map {
        let here = format!("{path}.{key}");
        match (props.and_then(|p| p.get(key)), additional) {
            (Some(prop), _) | (None, Some(prop)) => check(&here, value, prop, errors),
            (None, None) if props.is_some() && !preserve => errors.push(format!("{here}: unknown field")),
            (None, None) => {}
        }
    }
    for required in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if map.get(required).is_none_or(Value::is_null) {
            errors.push(format!("{path}.{required}: required"));
        }
    }
}

fn check_array(path: &str, items: &[Value], schema: &Value, errors: &mut Vec<String>) {
    let len = items.len() as f64;
    if schema.get("minItems").and_then(Value::as_f64).is_some_and(|min| len < min) {
        errors.push(format!("{path}: {} items, fewer than the minimum {}", items.len(), bound(schema, "minItems")));
    }
    if schema.get("maxItems").and_then(Value::as_f64).is_some_and(|max| len > max) {
        errors.push(format!("{path}: {} items, more than the maximum {}", items.len(), bound(schema, "maxItems")));
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            check(&format!("{path}[{i}]"), item, item_schema, errors);
        }
    }
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => {
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                if !seen.insert(item.to_string()) {
                    errors.push(format!("{path}[{i}]: duplicate entry {item}"));
                }
            }
        }
        Some("map") => {
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let key: Vec<String> =
                    keys.iter().map(|k| item.get(*k).map(Value::to_string).unwrap_or_default()).collect();
                if !seen.insert(key.clone()) {
                    errors.push(format!("{path}[{i}]: duplicate entry with {}", describe_key(&keys, &key)));
                }
            }
        }
        _ => {}
    }
}

fn check_string(path: &str, s: &str, schema: &Value, errors: &mut Vec<String>) {
    let len = s.chars().count() as f64;
    if schema.get("minLength").and_then(Value::as_f64).is_some_and(|min| len < min) {
        errors.push(format!("{path}: {s:?} is shorter than the minimum length {}", bound(schema, "minLength")));
    }
    if schema.get("maxLength").and_then(Value::as_f64).is_some_and(|max| len > max) {
        errors.push(format!("{path}: longer than the maximum length {}", bound(schema, "maxLength")));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        if !matches_pattern(pattern, s) {
            errors.push(format!("{path}: {s:?} does not match the pattern {pattern}"));
        }
    }
    if schema.get("format").and_then(Value::as_str) == Some("date-time") && s.parse::<jiff::Timestamp>().is_err() {
        errors.push(format!("{path}: {s:?} is not an RFC 3339 date-time"));
    }
}

/// Patterns come from our own schema; one that does not compile matches nothing.
fn matches_pattern(pattern: &str, s: &str) -> bool {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Regex>>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let regex = cache.entry(pattern.to_string()).or_insert_with(|| Regex::new(pattern).ok());
    regex.as_ref().is_some_and(|r| r.is_match(s))
}

/// A bound as the schema states it (schemars writes some as 1000000000.0).
fn bound(schema: &Value, key: &str) -> String {
    match schema.get(key).and_then(Value::as_f64) {
        Some(x) if x.fract() == 0.0 && x.abs() < 1e18 => format!("{}", x as i64),
        Some(x) => x.to_string(),
        None => "?".to_string(),
    }
}

fn describe_key(names: &[&str], values: &[String]) -> String {
    names.iter().zip(values).map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", ")
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
