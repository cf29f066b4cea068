//! Each logged request as the API server's authorizer sees it: the attributes RBAC rules are
//! matched against (API group, resource with its subresource, verb, namespace, name), made from
//! the method, path and query as kube-apiserver's `RequestInfoFactory` makes them.

use super::store::RequestRecord;

/// What RBAC decides a request by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or `deletecollection`.
    pub verb: String,
    /// `""` for the core group.
    pub group: String,
    /// The resource, with its subresource after a slash (`pods/eviction`, `nodes/status`).
    pub resource: String,
    pub namespace: Option<String>,
    /// The object's name; `None` for a collection (a list, a watch, a create).
    pub name: Option<String>,
}

impl RequestRecord {
    /// The request's authorization attributes; `None` for a path outside the resource API
    /// (`/version`, `/healthz`), which RBAC knows as a non-resource URL.
    pub fn attributes(&self) -> Option<Attributes> {
        let segments: Vec<&str> = self.path.trim_matches('/').split('/').collect();
        let (group, rest) = match segments.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return None,
        };
        // `namespaces/NS/...` scopes what follows; `namespaces/NS` alone is that Namespace.
        let (namespace, parts) = match rest {
            ["namespaces", ns, parts @ ..] if !parts.is_empty() => (Some((*ns).to_owned()), parts),
            parts => (None, parts),
        };
        let (resource, name, subresource) = match parts {
            [resource] => (*resource, None, None),
            [resource, name] => (*resource, Some(*name), None),
            [resource, name, subresource, ..] => (*resource, Some(*name), Some(*subresource)),
            [] => return None,
        };
        let watch = self
            .query
            .as_deref()
            .is_some_and(|q| q.split('&').any(|pair| pair == "watch=true" || pair == "watch=1"));
        let verb = match (self.method.as_str(), name) {
            ("GET" | "HEAD", _) if watch => "watch",
            ("GET" | "HEAD", Some(_)) => "get",
            ("GET" | "HEAD", None) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", Some(_)) => "delete",
            ("DELETE", None) => "deletecollection",
            _ => return None,
        };
        let resource = match subresource {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_owned(),
        };
        // kube-apiserver takes a Namespace's own name as its namespace too.
        let namespace =
            namespace.or_else(|| (resource == "namespaces").then(|| name.map(str::to_owned)).flatten());
        Some(Attributes {
            verb: verb.to_owned(),
            group: group.to_owned(),
            resource,
            namespace,
            name: name.map(str::to_owned),
        })
    }
}
