//! Suspensions and reconcile requests: what `poolctl suspend`, `resume` and `reconcile` leave in
//! the world for every run and every `watch` replica to read, kept as the other records are (see
//! [`super::up`]): Docker volumes, which no prune removes, `docker ps -a` does not show, and the
//! list every observation makes already reads. A pool of Nodes keeps them on its Lease instead
//! (see [`crate::backend::kube`]'s `marks`); one it kept here before it had a `node:` section
//! still counts until it is resumed.
//!
//! A pool's suspension is the volume `poolctl-suspend-<pool>`, labelled with who suspended it
//! and why; its creation time, on the daemon's clock, is when. Resuming removes it. A reconcile
//! request is the volume `poolctl-reconcile-<pool>`: its `create` event reaches `watch` at once
//! (see [`super::events`]), and the replica that acts on it removes it. A promotion
//! (`poolctl promote`) is the volume `poolctl-promote-<pool>`, labelled with the template hash
//! whose canaries it promotes and who promoted them; a promotion of another template is written
//! over it.

use std::collections::HashMap;

use super::DockerBackend;
use crate::backend::BackendError;
use crate::model::{Promotion, Suspension, labels};

/// The name of `pool`'s suspension record.
pub fn suspension_record_name(pool: &str) -> String {
    format!("poolctl-suspend-{pool}")
}

/// The name of `pool`'s reconcile request.
pub fn request_record_name(pool: &str) -> String {
    format!("poolctl-reconcile-{pool}")
}

/// The name of `pool`'s promotion record.
pub fn promotion_record_name(pool: &str) -> String {
    format!("poolctl-promote-{pool}")
}

/// The promotion recorded by the volume `name` with `labels`, made at `created`, by pool;
/// `None` for anything else. The name and the label must agree, and a template be named.
pub(super) fn promotion_from(
    name: &str,
    labels: &HashMap<String, String>,
    created: i64,
) -> Option<(String, Promotion)> {
    let pool = name.strip_prefix("poolctl-promote-")?;
    (labels.get(labels::PROMOTED).map(String::as_str) == Some(pool)).then_some(())?;
    let template_hash = labels.get(labels::PROMOTED_TEMPLATE).filter(|h| !h.is_empty())?.clone();
    let by = labels.get(labels::PROMOTED_BY).filter(|b| !b.is_empty()).cloned();
    let by = by.unwrap_or_else(|| "an unknown user".to_owned());
    Some((pool.to_owned(), Promotion { template_hash, by, at: created }))
}

/// The suspension recorded by the volume `name` with `labels`, made at `created` (seconds since
/// the Unix epoch), by pool; `None` for anything else. The name and the label must agree.
pub(super) fn suspension_from(
    name: &str,
    labels: &HashMap<String, String>,
    created: i64,
) -> Option<(String, Suspension)> {
    let pool = name.strip_prefix("poolctl-suspend-")?;
    (labels.get(labels::SUSPENDED).map(String::as_str) == Some(pool)).then_some(())?;
    let by = labels.get(labels::SUSPENDED_BY).filter(|b| !b.is_empty()).cloned();
    let reason = labels.get(labels::SUSPEND_REASON).filter(|r| !r.is_empty()).cloned();
    let by = by.unwrap_or_else(|| "an unknown user".to_owned());
    Some((pool.to_owned(), Suspension { by, at: created, reason }))
}

/// The pool whose reconcile request is the volume `name` with `labels`; `None` for anything else.
pub(super) fn request_of(name: &str, labels: &HashMap<String, String>) -> Option<String> {
    let pool = name.strip_prefix("poolctl-reconcile-")?;
    (labels.get(labels::RECONCILE_REQUESTED).map(String::as_str) == Some(pool)).then(|| pool.to_owned())
}

impl DockerBackend {
    /// Record that `by` suspends `pool`, for `reason`; a pool already suspended keeps the
    /// record it has (who suspended it first, and when), which is returned.
    pub(super) async fn write_suspension(
        &self,
        pool: &str,
        by: &str,
        reason: Option<&str>,
    ) -> Result<Suspension, BackendError> {
        let name = suspension_record_name(pool);
        let mut labels = HashMap::from([
            (labels::POOL.to_owned(), pool.to_owned()),
            (labels::SUSPENDED.to_owned(), pool.to_owned()),
            (labels::SUSPENDED_BY.to_owned(), by.to_owned()),
        ]);
        labels.extend(reason.map(|r| (labels::SUSPEND_REASON.to_owned(), r.to_owned())));
        let volume = self.create_record(&name, labels, &format!("suspend pool {pool}")).await?;
        let created = super::up::volume_created(&volume);
        suspension_from(&volume.name, &volume.labels, created).map(|(_, s)| s).ok_or_else(|| {
            BackendError::Failed(format!("suspend pool {pool}: the volume {name} is in the way"))
        })
    }

    /// Record that `by` promotes the canaries of `pool`'s template `template_hash`, and return
    /// the promotion that stands: one of the same template already there stays as it was (who
    /// promoted first, and when); one of another template is replaced.
    pub(super) async fn write_promotion(
        &self,
        pool: &str,
        template_hash: &str,
        by: &str,
    ) -> Result<Promotion, BackendError> {
        let name = promotion_record_name(pool);
        let standing = self.listed().promotions.get(pool).cloned();
        if standing.is_some_and(|p| p.template_hash != template_hash) {
            self.remove_volume(&name).await?;
        }
        let labels = HashMap::from([
            (labels::POOL.to_owned(), pool.to_owned()),
            (labels::PROMOTED.to_owned(), pool.to_owned()),
            (labels::PROMOTED_TEMPLATE.to_owned(), template_hash.to_owned()),
            (labels::PROMOTED_BY.to_owned(), by.to_owned()),
        ]);
        let volume = self.create_record(&name, labels, &format!("promote pool {pool}")).await?;
        let created = super::up::volume_created(&volume);
        promotion_from(&volume.name, &volume.labels, created)
            .map(|(_, p)| p)
            .filter(|p| p.template_hash == template_hash)
            .ok_or_else(|| {
                BackendError::Failed(format!("promote pool {pool}: the volume {name} is in the way"))
            })
    }

    /// Write `pool`'s reconcile request, made anew: Docker tells `watch` of a volume's
    /// creation, and an old request left over (a watch that was down) would be answered with
    /// no event.
    pub(super) async fn write_request(&self, pool: &str) -> Result<(), BackendError> {
        self.remove_volume(&request_record_name(pool)).await?;
        let labels = HashMap::from([
            (labels::POOL.to_owned(), pool.to_owned()),
            (labels::RECONCILE_REQUESTED.to_owned(), pool.to_owned()),
        ]);
        let doing = format!("request a reconcile of pool {pool}");
        self.create_record(&request_record_name(pool), labels, &doing).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_suspension_is_read_only_when_its_name_and_label_agree() {
        let ok = labels(&[
            (labels::SUSPENDED, "w"),
            (labels::SUSPENDED_BY, "ann@box"),
            (labels::SUSPEND_REASON, "x"),
        ]);
        let (pool, s) = suspension_from("poolctl-suspend-w", &ok, 7).unwrap();
        assert_eq!((pool.as_str(), s.by.as_str(), s.at, s.reason.as_deref()), ("w", "ann@box", 7, Some("x")));
        assert!(suspension_from("poolctl-suspend-v", &ok, 7).is_none());
        assert!(suspension_from("poolctl-rollout-w", &ok, 7).is_none());
        let request = labels(&[(labels::RECONCILE_REQUESTED, "w")]);
        assert_eq!(request_of("poolctl-reconcile-w", &request).as_deref(), Some("w"));
        assert!(request_of("poolctl-reconcile-v", &request).is_none());
    }

    #[test]
    fn a_promotion_is_read_only_with_its_pool_and_template() {
        let ok = labels(&[
            (labels::PROMOTED, "w"),
            (labels::PROMOTED_TEMPLATE, "abc"),
            (labels::PROMOTED_BY, "ann"),
        ]);
        let (pool, p) = promotion_from("poolctl-promote-w", &ok, 9).unwrap();
        assert_eq!((pool.as_str(), p.template_hash.as_str(), p.by.as_str(), p.at), ("w", "abc", "ann", 9));
        assert!(promotion_from("poolctl-promote-v", &ok, 9).is_none());
        let no_template = labels(&[(labels::PROMOTED, "w")]);
        assert!(promotion_from("poolctl-promote-w", &no_template, 9).is_none());
    }
}
