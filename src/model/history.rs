//! A pool's rollout history, as `kubectl rollout history` shows a Deployment's: one revision per
//! rollout of a template (its number, template, where it came from, when it began), and how it
//! ended. The world keeps it (records beside the pool's instances, see
//! `backend::docker::history`), so that a rollback finds the last template that was fully
//! rolled out even when no instance of it survives.

use serde::Serialize;

/// How many revisions of a pool are kept, as a Deployment's default `revisionHistoryLimit`:
/// writing a newer one removes the oldest beyond it.
pub const REVISION_HISTORY_LIMIT: u64 = 10;

/// One rollout of a pool to a template, as its revision record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Revision {
    /// 1 for the pool's first recorded rollout, one more for each later one.
    pub number: u64,
    pub template_hash: String,
    /// The canonical template JSON it rolled out (as instances carry it in their template
    /// label): what a rollback rebuilds the template from. `None` when the record lacks it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Where the spec came from, as the plan header names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The Git commit the spec came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// When it began, in seconds since the Unix epoch, by the Docker daemon's clock.
    pub started: i64,
    /// Set for a rollback: the template whose rollout it gave up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolled_back_from: Option<String>,
    /// How it ended, once recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<RevisionEnd>,
}

/// How a revision's rollout ended, and when (seconds since the Unix epoch, by the Docker
/// daemon's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RevisionEnd {
    pub result: RolloutResult,
    pub at: i64,
}

/// How a rollout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum RolloutResult {
    /// Every replica ran its template and served: what a rollback may go back to.
    Complete,
    /// It passed its `progressDeadline` and was left where it stood (`failureAction: pause`).
    Degraded,
    /// It passed its `progressDeadline` (or `apply --rollback` gave it up) and the pool went
    /// back to an earlier template.
    RolledBack,
    /// A newer rollout began before it ended.
    Superseded,
}

impl RolloutResult {
    /// The name a record keeps and `history` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "Complete",
            Self::Degraded => "Degraded",
            Self::RolledBack => "RolledBack",
            Self::Superseded => "Superseded",
        }
    }

    /// The result a record's label names; `None` for anything else (a label can hold anything).
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Complete, Self::Degraded, Self::RolledBack, Self::Superseded]
            .into_iter()
            .find(|r| r.as_str() == text)
    }
}

impl std::fmt::Display for RolloutResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How each revision of `history` (oldest first) ended, as far as the world says: its recorded
/// end; else, when a later revision began, `RolledBack` if that one rolled back from its
/// template and `Superseded` if not, at the later one's start; else `None` (under way). A
/// rollback that gave up a revision tells its end even when a `Degraded` was recorded first:
/// the later fact is the one that stands.
pub fn ends(history: &[Revision]) -> Vec<Option<RevisionEnd>> {
    history
        .iter()
        .enumerate()
        .map(|(i, revision)| {
            let next = history.get(i + 1);
            let rolled_back = next.filter(|n| n.rolled_back_from.as_ref() == Some(&revision.template_hash));
            match (revision.end, next) {
                (Some(end), _) if end.result == RolloutResult::Complete => Some(end),
                (Some(end), _) if rolled_back.is_some() => {
                    Some(RevisionEnd { result: RolloutResult::RolledBack, at: end.at })
                }
                (Some(end), _) => Some(end),
                (None, Some(next)) if rolled_back.is_some() => {
                    Some(RevisionEnd { result: RolloutResult::RolledBack, at: next.started })
                }
                (None, Some(next)) => {
                    Some(RevisionEnd { result: RolloutResult::Superseded, at: next.started })
                }
                (None, None) => None,
            }
        })
        .collect()
}

/// The revision a rollback of a pool whose spec has template `spec_hash` goes back to: the
/// latest one that was rolled out completely, of another template.
pub fn rollback_target<'h>(history: &'h [Revision], spec_hash: &str) -> Option<&'h Revision> {
    let ends = ends(history);
    history
        .iter()
        .zip(&ends)
        .rev()
        .find(|(r, end)| {
            r.template_hash != spec_hash && end.is_some_and(|e| e.result == RolloutResult::Complete)
        })
        .map(|(r, _)| r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revision(number: u64, hash: &str, end: Option<RolloutResult>) -> Revision {
        Revision {
            number,
            template_hash: hash.to_owned(),
            template: None,
            source: None,
            commit: None,
            started: i64::try_from(number).unwrap() * 100,
            rolled_back_from: None,
            end: end.map(|result| RevisionEnd { result, at: i64::try_from(number).unwrap() * 100 + 50 }),
        }
    }

    #[test]
    fn an_unended_revision_followed_by_another_was_superseded_or_rolled_back() {
        let mut rollback = revision(3, "a", Some(RolloutResult::Complete));
        rollback.rolled_back_from = Some("b".into());
        let history = [
            revision(1, "a", Some(RolloutResult::Complete)),
            revision(2, "b", None),
            rollback,
            revision(4, "c", None),
            revision(5, "d", None),
        ];
        let results: Vec<Option<(RolloutResult, i64)>> =
            ends(&history).iter().map(|e| e.map(|e| (e.result, e.at))).collect();
        assert_eq!(
            results,
            [
                Some((RolloutResult::Complete, 150)),
                Some((RolloutResult::RolledBack, 300)),
                Some((RolloutResult::Complete, 350)),
                Some((RolloutResult::Superseded, 500)),
                None,
            ]
        );
    }

    #[test]
    fn a_rollback_goes_to_the_latest_complete_revision_of_another_template() {
        let history = [
            revision(1, "a", Some(RolloutResult::Complete)),
            revision(2, "b", Some(RolloutResult::Complete)),
            revision(3, "c", Some(RolloutResult::Degraded)),
            revision(4, "d", None),
        ];
        assert_eq!(rollback_target(&history, "d").map(|r| r.number), Some(2));
        assert_eq!(rollback_target(&history, "b").map(|r| r.number), Some(1), "not the spec's own");
        assert_eq!(rollback_target(&history[2..], "d"), None, "nothing complete to go back to");
        assert_eq!(RolloutResult::parse("RolledBack"), Some(RolloutResult::RolledBack));
        assert_eq!(RolloutResult::parse("rolledback; rm -rf /"), None);
    }
}
