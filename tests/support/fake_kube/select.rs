//! Label and field selectors, and JSON merge patches, as the API server applies them.
//!
//! They work on `serde_json::Value` so that lists, watches and the eviction check share one
//! matcher whatever the resource type.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

/// One requirement of a label selector (`k=v`, `k!=v`, `k in (a,b)`, `k`, `!k`...).
#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed `labelSelector` query parameter: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelQuery(Vec<Requirement>);

/// Splits on commas that are not inside parentheses (`a in (x,y),b=c`).
fn split_top_level(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth = depth.saturating_sub(1);
                cur.push(c);
            }
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    parts.push(cur);
    parts.into_iter().map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect()
}

fn set_values(s: &str) -> Result<Vec<String>, String> {
    let s = s.trim();
    let inner = s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised set, got {s:?}"))?;
    Ok(inner.split(',').map(|v| v.trim().to_owned()).collect())
}

impl LabelQuery {
    /// Parses the `labelSelector` syntax of the API server.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let req = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotIn(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::In(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::In(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, v)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), set_values(v)?)
            } else if let Some((k, v)) = part.split_once(" in ") {
                Requirement::In(k.trim().into(), set_values(v)?)
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::DoesNotExist(k.trim().into())
            } else if part.contains(char::is_whitespace) {
                return Err(format!("unable to parse requirement: {part:?}"));
            } else {
                Requirement::Exists(part)
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Builds the query that a PodDisruptionBudget's `spec.selector` stands for, as
    /// `metav1.LabelSelectorAsSelector` does; `None` where that fails (an unknown operator,
    /// `In`/`NotIn` without values, `Exists`/`DoesNotExist` with some), for the API server
    /// treats such a budget as selecting nothing.
    pub fn from_selector(sel: &LabelSelector) -> Option<Self> {
        let mut reqs = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            reqs.push(Requirement::In(k.clone(), vec![v.clone()]));
        }
        for e in sel.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            reqs.push(match (e.operator.as_str(), values.is_empty()) {
                ("In", false) => Requirement::In(e.key.clone(), values),
                ("NotIn", false) => Requirement::NotIn(e.key.clone(), values),
                ("Exists", true) => Requirement::Exists(e.key.clone()),
                ("DoesNotExist", true) => Requirement::DoesNotExist(e.key.clone()),
                _ => return None,
            });
        }
        Some(Self(reqs))
    }

    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }

    /// Matches the `metadata.labels` of an object in its JSON form.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels: BTreeMap<String, String> = obj
            .pointer("/metadata/labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        self.matches_labels(&labels)
    }
}

/// A parsed `fieldSelector`: `path=value`, `path==value` or `path!=value`, comma separated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldQuery(Vec<(Vec<String>, bool, String)>);

impl FieldQuery {
    /// Accepts the field paths of `allowed` only, as the real server refuses other fields.
    pub fn parse(s: &str, allowed: &[&str]) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let (path, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid field selector: {part:?}"));
            };
            let path = path.trim();
            if !allowed.contains(&path) {
                return Err(format!("field label not supported: {path}"));
            }
            reqs.push((path.split('.').map(str::to_owned).collect(), eq, value.trim().to_owned()));
        }
        Ok(Self(reqs))
    }

    /// The value an equality requirement on `path` (e.g. `spec.nodeName`) asks for, if any.
    pub fn required(&self, path: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(p, eq, _)| *eq && p.iter().map(String::as_str).eq(path.split('.')))
            .map(|(_, _, v)| v.as_str())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = obj;
            for seg in path {
                cur = cur.get(seg).unwrap_or(&Value::Null);
            }
            // Absent fields compare as the empty string (unscheduled pods have nodeName "").
            let got = match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (got == *want) == *eq
        })
    }
}

/// RFC 7386 JSON merge patch. Strategic merge patches are applied with it too: for the fields
/// that poolctl patches (unschedulable, labels, annotations, taints) the two agree, since
/// `spec.taints` has no merge key and is replaced whole. Directive keys (`$patch`,
/// `$setElementOrder/...`, `$retainKeys`) are dropped.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    let Value::Object(map) = target else { unreachable!("target was just made an object") };
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            map.remove(k);
        } else {
            merge_patch(map.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}
