//! Revision records: a pool's rollout history, kept in the world as up and rollout records are
//! (see [`super::up`]): Docker volumes, which no container prune removes and `docker ps -a`
//! does not show, read by the same list call.
//!
//! Each rollout of a template is a volume `poolctl-rev-<pool>-<n>`, labelled with its number,
//! template (hash and canonical JSON), origin and, for a rollback, the template it gave up; its
//! creation time is the rollout's start, on the daemon's clock. Its end is a second volume,
//! `poolctl-rev-<pool>-<n>-end`, labelled with the result, made when the end is known. Both are
//! written once and never changed: an end is never removed and made again, so no kill -9 in
//! between can lose it, and a second writer of the same end finds the first one's standing.

use std::collections::{BTreeMap, HashMap};

use super::DockerBackend;
use crate::backend::BackendError;
use crate::model::{REVISION_HISTORY_LIMIT, Revision, RevisionEnd, RolloutResult, labels};

/// The name of revision `number` of `pool`.
fn revision_record_name(pool: &str, number: u64) -> String {
    format!("poolctl-rev-{pool}-{number}")
}

/// The name of the end record of revision `number` of `pool`.
fn end_record_name(pool: &str, number: u64) -> String {
    format!("poolctl-rev-{pool}-{number}-end")
}

/// One record of a pool's history, as the list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HistoryRecord {
    /// A revision began.
    Start { pool: String, revision: Revision },
    /// Revision `number` ended.
    End { pool: String, number: u64, end: RevisionEnd },
}

/// The history record named `name` with `labels`, made at `created` (seconds since the Unix
/// epoch); `None` for anything that is not one. Labels can hold anything: a record whose name
/// does not match its own labels, whose number is not one, or whose result is unknown is no
/// record.
pub(super) fn history_record_from(
    name: &str,
    labels: &HashMap<String, String>,
    created: i64,
) -> Option<HistoryRecord> {
    if !name.starts_with("poolctl-rev-") {
        return None;
    }
    let pool = labels.get(labels::POOL).filter(|p| !p.is_empty())?.clone();
    let number: u64 = labels.get(labels::REVISION)?.parse().ok()?;
    if let Some(result) = labels.get(labels::REVISION_RESULT) {
        let result = RolloutResult::parse(result)?;
        let end = RevisionEnd { result, at: created };
        return (name == end_record_name(&pool, number)).then_some(HistoryRecord::End { pool, number, end });
    }
    if name != revision_record_name(&pool, number) {
        return None;
    }
    let label = |key: &str| labels.get(key).filter(|v| !v.is_empty()).cloned();
    let revision = Revision {
        number,
        template_hash: label(labels::TEMPLATE_HASH)?,
        template: label(labels::TEMPLATE),
        // An earlier poolctl recorded a Git URL with its user name, which may be a token.
        source: label(labels::SOURCE).map(|s| crate::source::redact(&s).into_owned()),
        commit: label(labels::COMMIT),
        started: created,
        rolled_back_from: label(labels::ROLLED_BACK_FROM),
        end: None,
    };
    Some(HistoryRecord::Start { pool, revision })
}

/// Each pool's revisions, oldest first, with their ends. An end whose revision is gone is
/// dropped: there is nothing it could be the end of.
pub(super) fn assemble(records: Vec<HistoryRecord>) -> BTreeMap<String, Vec<Revision>> {
    let mut history: BTreeMap<String, Vec<Revision>> = BTreeMap::new();
    let mut ends: HashMap<(String, u64), RevisionEnd> = HashMap::new();
    for record in records {
        match record {
            HistoryRecord::Start { pool, revision } => history.entry(pool).or_default().push(revision),
            HistoryRecord::End { pool, number, end } => {
                ends.insert((pool, number), end);
            }
        }
    }
    for (pool, revisions) in &mut history {
        revisions.sort_by_key(|r| r.number);
        for revision in revisions.iter_mut() {
            revision.end = ends.remove(&(pool.clone(), revision.number));
        }
    }
    history
}

impl DockerBackend {
    /// Write the record of `revision` of `pool`, then remove the pool's revisions that fall out
    /// of [`REVISION_HISTORY_LIMIT`], as the last list showed them. The same revision written
    /// again is fine; another one under its number (a stale view of the history) is refused.
    pub(super) async fn write_revision(
        &self,
        pool: &str,
        revision: &Revision,
        record_labels: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        let name = revision_record_name(pool, revision.number);
        let mut labels: HashMap<String, String> = record_labels.clone().into_iter().collect();
        let number = revision.number.to_string();
        labels.insert(labels::POOL.to_owned(), pool.to_owned());
        labels.insert(labels::REVISION.to_owned(), number.clone());
        labels.insert(labels::TEMPLATE_HASH.to_owned(), revision.template_hash.clone());
        let optional = [
            (labels::TEMPLATE, &revision.template),
            (labels::SOURCE, &revision.source),
            (labels::COMMIT, &revision.commit),
            (labels::ROLLED_BACK_FROM, &revision.rolled_back_from),
        ];
        labels.extend(optional.into_iter().filter_map(|(key, value)| Some((key.to_owned(), value.clone()?))));
        let doing = format!("record revision {number} of pool {pool}");
        let made = self.create_record(&name, labels, &doing).await?;
        let same = made.labels.get(labels::REVISION) == Some(&number)
            && made.labels.get(labels::TEMPLATE_HASH) == Some(&revision.template_hash);
        if !same {
            return Err(BackendError::Failed(format!(
                "{doing}: the volume {name} already records another rollout; run again"
            )));
        }
        let old: Vec<u64> = self
            .history_of(pool)
            .iter()
            .map(|r| r.number)
            .filter(|n| n.saturating_add(REVISION_HISTORY_LIMIT) <= revision.number)
            .collect();
        self.remove_revisions(pool, &old).await;
        Ok(())
    }

    /// Write the end of revision `number` of `pool`; one written before stands.
    pub(super) async fn write_revision_end(
        &self,
        pool: &str,
        number: u64,
        result: RolloutResult,
        record_labels: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        let mut labels: HashMap<String, String> = record_labels.clone().into_iter().collect();
        labels.insert(labels::POOL.to_owned(), pool.to_owned());
        labels.insert(labels::REVISION.to_owned(), number.to_string());
        labels.insert(labels::REVISION_RESULT.to_owned(), result.as_str().to_owned());
        let doing = format!("record the end of revision {number} of pool {pool}");
        self.create_record(&end_record_name(pool, number), labels, &doing).await.map(drop)
    }

    /// Remove every revision of `pool` the last list showed: the pool is gone.
    pub(super) async fn remove_history(&self, pool: &str) -> Result<(), BackendError> {
        let all: Vec<u64> = self.history_of(pool).iter().map(|r| r.number).collect();
        self.remove_revisions(pool, &all).await;
        Ok(())
    }

    /// The revisions of `pool` the last list showed.
    fn history_of(&self, pool: &str) -> Vec<Revision> {
        self.listed().history.get(pool).cloned().unwrap_or_default()
    }

    /// Remove these revisions of `pool`, each with its end. Best effort: a revision left
    /// behind is only one more line of history, and is tried again with the next one.
    async fn remove_revisions(&self, pool: &str, numbers: &[u64]) {
        for &number in numbers {
            for name in [end_record_name(pool, number), revision_record_name(pool, number)] {
                if let Err(e) = self.remove_volume(&name).await {
                    tracing::warn!("pool {pool}: cannot remove the old revision record {name}: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn revisions_and_their_ends_are_read_back_by_pool_in_order() {
        let start = |n: &str, hash: &str| {
            labels(&[(labels::POOL, "w"), (labels::REVISION, n), (labels::TEMPLATE_HASH, hash)])
        };
        let end =
            labels(&[(labels::POOL, "w"), (labels::REVISION, "1"), (labels::REVISION_RESULT, "Complete")]);
        let records: Vec<HistoryRecord> = [
            ("poolctl-rev-w-2", start("2", "b"), 200),
            ("poolctl-rev-w-1-end", end, 150),
            ("poolctl-rev-w-1", start("1", "a"), 100),
        ]
        .into_iter()
        .filter_map(|(name, labels, created)| history_record_from(name, &labels, created))
        .collect();
        let history = assemble(records);
        let w = &history["w"];
        assert_eq!(
            w.iter().map(|r| (r.number, r.template_hash.as_str(), r.started)).collect::<Vec<_>>(),
            [(1, "a", 100), (2, "b", 200)]
        );
        assert_eq!(w[0].end, Some(RevisionEnd { result: RolloutResult::Complete, at: 150 }));
        assert_eq!(w[1].end, None);
    }

    #[test]
    fn a_record_whose_labels_do_not_hold_up_is_no_record() {
        let ok = labels(&[(labels::POOL, "w"), (labels::REVISION, "3"), (labels::TEMPLATE_HASH, "a")]);
        assert!(history_record_from("poolctl-rev-w-3", &ok, 1).is_some());
        // Another pool's name, a number that is none, no template, an unknown result, not ours.
        assert!(history_record_from("poolctl-rev-x-3", &ok, 1).is_none());
        let mut bad = ok.clone();
        bad.insert(labels::REVISION.into(), "-1".into());
        assert!(history_record_from("poolctl-rev-w--1", &bad, 1).is_none());
        let mut bad = ok.clone();
        bad.remove(labels::TEMPLATE_HASH);
        assert!(history_record_from("poolctl-rev-w-3", &bad, 1).is_none());
        let mut bad = ok.clone();
        bad.insert(labels::REVISION_RESULT.into(), "Maybe".into());
        assert!(history_record_from("poolctl-rev-w-3-end", &bad, 1).is_none());
        assert!(history_record_from("someone-elses", &ok, 1).is_none());
    }
}
