//! Leases (`coordination.k8s.io/v1`) in the fake API server, with the real server's optimistic
//! concurrency: a create of a name that exists is a 409 `AlreadyExists`, and a replace, a merge
//! patch or a delete whose resourceVersion (in the body, the patch's `metadata`, or the
//! delete's preconditions) is not the current one is a 409 `Conflict`; a merge patch without one
//! applies to whatever is current. Their resourceVersions are the store's, and every write is a
//! change that watches of Leases hear (with a `metadata.name` field selector, say), as on a real
//! server; lists and watches are served with the other kinds' (see `http.rs`). Every write is
//! logged, so that tests can tell who held a Lease when.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::http::Method;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde_json::{Value, json};

use super::FakeKube;
use super::select::merge_patch;
use super::store::{ChangeKind, Resource, Store, not_found, status};

/// The Leases of the fake cluster, by namespace and name.
#[derive(Debug, Default)]
pub struct Leases {
    items: BTreeMap<(String, String), Lease>,
    log: Vec<LeaseWrite>,
}

/// A write a watch hears of: what changed, and the Lease as it is after it (as it was, for a
/// deletion).
pub type Written = Option<(ChangeKind, Value)>;

/// One successful write: the Lease's holder right after it (`None` once deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseWrite {
    pub at: Instant,
    pub namespace: String,
    pub name: String,
    pub verb: &'static str,
    pub holder: Option<String>,
}

/// A reply: status code and body.
pub type Answer = (u16, Value);

fn status_json(st: &Status) -> Value {
    let mut v = serde_json::to_value(st).expect("a Status serializes");
    v["kind"] = json!("Status");
    v["apiVersion"] = json!("v1");
    v
}

fn error(code: u16, reason: &str, message: String) -> Answer {
    (code, status_json(&status(code, reason, message)))
}

impl Leases {
    /// Every Lease, with its namespace.
    pub fn all(&self) -> impl Iterator<Item = (&str, &Lease)> {
        self.items.iter().map(|((ns, _), l)| (ns.as_str(), l))
    }

    /// Write `lease` (or delete it, for `None`) at resourceVersion `rv`.
    fn write(
        &mut self,
        namespace: &str,
        name: &str,
        verb: &'static str,
        lease: Option<Lease>,
        rv: u64,
    ) -> Option<Lease> {
        let holder = lease.as_ref().and_then(|l| l.spec.as_ref()?.holder_identity.clone());
        self.log.push(LeaseWrite {
            at: Instant::now(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            verb,
            holder,
        });
        let key = (namespace.to_owned(), name.to_owned());
        match lease {
            Some(mut lease) => {
                lease.metadata.resource_version = Some(rv.to_string());
                lease.metadata.namespace = Some(namespace.to_owned());
                self.items.insert(key, lease.clone());
                Some(lease)
            }
            None => self.items.remove(&key).map(|mut gone| {
                gone.metadata.resource_version = Some(rv.to_string());
                gone
            }),
        }
    }

    /// Serve one request under `/apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]`;
    /// a write is made at resourceVersion `rv`, and returned for watches to hear.
    fn serve(
        &mut self,
        method: &Method,
        ns: &str,
        name: Option<&str>,
        body: Option<&Value>,
        rv: u64,
    ) -> (Answer, Written) {
        let before = self.log.len();
        let answer = self.answer(method, ns, name, body, rv);
        let written = (self.log.len() > before).then(|| {
            let kind = match (method, answer.0) {
                (&Method::POST, _) => ChangeKind::Added,
                (&Method::DELETE, _) => ChangeKind::Deleted,
                _ => ChangeKind::Modified,
            };
            (kind, answer.1.clone())
        });
        (answer, written)
    }

    fn answer(
        &mut self,
        method: &Method,
        ns: &str,
        name: Option<&str>,
        body: Option<&Value>,
        rv: u64,
    ) -> Answer {
        let decoded = || body.cloned().map(serde_json::from_value::<Lease>);
        match (method, name) {
            (&Method::GET, Some(name)) => match self.items.get(&(ns.to_owned(), name.to_owned())) {
                Some(l) => (200, to_json(l)),
                None => (404, status_json(&not_found("leases", name))),
            },
            (&Method::POST, None) => {
                let Some(Ok(lease)) = decoded() else {
                    return error(400, "BadRequest", "not a Lease".into());
                };
                let name = lease.metadata.name.clone().unwrap_or_default();
                if self.items.contains_key(&(ns.to_owned(), name.clone())) {
                    return error(
                        409,
                        "AlreadyExists",
                        format!("leases.coordination.k8s.io \"{name}\" already exists"),
                    );
                }
                let created = self.write(ns, &name, "create", Some(lease), rv);
                (201, to_json(&created))
            }
            (&Method::PUT, Some(name)) => {
                let Some(Ok(lease)) = decoded() else {
                    return error(400, "BadRequest", "not a Lease".into());
                };
                let Some(current) = self.items.get(&(ns.to_owned(), name.to_owned())) else {
                    return (404, status_json(&not_found("leases", name)));
                };
                if lease.metadata.resource_version != current.metadata.resource_version {
                    return error(409, "Conflict", conflict(name));
                }
                let replaced = self.write(ns, name, "replace", Some(lease), rv);
                (200, to_json(&replaced))
            }
            // A merge patch (kube's `Patch::Merge`): a conflict only when it names a
            // resourceVersion that is not the current one.
            (&Method::PATCH, Some(name)) => {
                let Some(patch) = body else {
                    return error(400, "BadRequest", "the patch body is not JSON".into());
                };
                let Some(current) = self.items.get(&(ns.to_owned(), name.to_owned())) else {
                    return (404, status_json(&not_found("leases", name)));
                };
                let want = patch.pointer("/metadata/resourceVersion").and_then(Value::as_str);
                if want.is_some_and(|w| Some(w) != current.metadata.resource_version.as_deref()) {
                    return error(409, "Conflict", conflict(name));
                }
                let mut value = to_json(current);
                merge_patch(&mut value, patch);
                let Ok(lease) = serde_json::from_value::<Lease>(value) else {
                    return error(400, "BadRequest", "the patched Lease does not decode".into());
                };
                let patched = self.write(ns, name, "patch", Some(lease), rv);
                (200, to_json(&patched))
            }
            (&Method::DELETE, Some(name)) => {
                let Some(current) = self.items.get(&(ns.to_owned(), name.to_owned())) else {
                    return (404, status_json(&not_found("leases", name)));
                };
                let want =
                    body.and_then(|b| b.pointer("/preconditions/resourceVersion")).and_then(Value::as_str);
                if want.is_some_and(|w| Some(w) != current.metadata.resource_version.as_deref()) {
                    return error(409, "Conflict", conflict(name));
                }
                let gone = self.write(ns, name, "delete", None, rv);
                (200, to_json(&gone))
            }
            _ => error(405, "MethodNotAllowed", format!("the fake API server does not {method} leases")),
        }
    }
}

fn conflict(name: &str) -> String {
    format!(
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the object has been modified; \
         please apply your changes to the latest version and try again"
    )
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("a Lease serializes")
}

impl Store {
    pub fn leases(&self) -> &Leases {
        &self.leases
    }

    /// Serve one request on Leases (see [`Leases`]): a write takes the store's next
    /// resourceVersion and is heard by watches of Leases.
    pub fn serve_lease(
        &mut self,
        method: &Method,
        ns: &str,
        name: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        let rv = self.resource_version() + 1;
        let (answer, written) = self.leases.serve(method, ns, name, body, rv);
        if let Some((kind, object)) = written {
            self.publish_at(rv, Resource::Leases, kind, Some(ns.to_owned()), object);
        }
        answer
    }
}

impl FakeKube {
    /// The Lease `namespace/name`, if it exists.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Lease> {
        self.store().leases().items.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// Every successful write to a Lease so far, in order.
    pub fn lease_writes(&self) -> Vec<LeaseWrite> {
        self.store().leases().log.clone()
    }
}
