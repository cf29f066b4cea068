//! `poolctl history POOL`: the pool's rollout history, as `kubectl rollout history` shows a
//! Deployment's, read from the records the world keeps beside the pool's instances (see
//! [`crate::model::Revision`]). Reads only: it takes no lock and changes nothing.

use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::Serialize;

use super::common::load_source;
use super::exit::Exit;
use crate::backend::{Connections, Containers};
use crate::config::{Format, HistoryConfig, Ui};
use crate::model::{REVISION_HISTORY_LIMIT, Revision, RevisionEnd, ends, timestamp};
use crate::report::write_stdout;
use crate::style::Style;

pub(super) async fn history_command(config: &HistoryConfig, ui: Ui) -> Result<Exit> {
    let pool = config.pool.as_str();
    let desired = load_source(&config.source)?;
    let connections = Connections::once();
    // The pool's records live on its Docker endpoint, which the source names.
    let docker = connections.docker(&desired).await?;
    docker.list().await.context("cannot list the pool's records")?;
    let revisions = docker.history().remove(pool).unwrap_or_default();
    let spec_hash = desired.pools.iter().find(|p| p.name() == pool).map(|p| p.template_hash.as_str());
    let shown = History::of(pool, &revisions, spec_hash);
    write_stdout(|out| match config.format {
        Format::Json => {
            writeln!(out, "{}", serde_json::to_string_pretty(&shown).map_err(std::io::Error::other)?)
        }
        Format::Text => render_text(&shown, spec_hash.is_some(), ui.color.stdout(), out),
    })?;
    Ok(Exit::Success)
}

/// A pool's history, as shown.
#[derive(Debug, Serialize)]
struct History<'a> {
    pool: &'a str,
    /// The spec's template hash, when the source declares the pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    template_hash: Option<&'a str>,
    revisions: Vec<Shown<'a>>,
}

/// One revision, as shown: its end as recorded or as the later revisions tell it.
#[derive(Debug, Serialize)]
struct Shown<'a> {
    revision: u64,
    template_hash: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    commit: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'a str>,
    started: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    ended: Option<String>,
    /// `Complete`, `Degraded`, `RolledBack`, `Superseded`, or `Progressing` while under way.
    result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    rolled_back_from: Option<&'a str>,
}

impl<'a> History<'a> {
    fn of(pool: &'a str, revisions: &'a [Revision], spec_hash: Option<&'a str>) -> Self {
        let shown = revisions
            .iter()
            .zip(ends(revisions))
            .map(|(r, end): (&Revision, Option<RevisionEnd>)| Shown {
                revision: r.number,
                template_hash: &r.template_hash,
                commit: r.commit.as_deref(),
                source: r.source.as_deref(),
                started: at(r.started),
                ended: end.map(|e| at(e.at)),
                result: end.map_or("Progressing", |e| e.result.as_str()),
                rolled_back_from: r.rolled_back_from.as_deref(),
            })
            .collect();
        Self { pool, template_hash: spec_hash, revisions: shown }
    }
}

/// A time of the world (seconds since the Unix epoch) as RFC 3339.
fn at(secs: i64) -> String {
    timestamp(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
}

/// The history as a table, oldest first, as `kubectl rollout history` lists it.
fn render_text(
    history: &History<'_>,
    declared: bool,
    style: Style,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let pool = history.pool;
    if history.revisions.is_empty() {
        let why = if declared { "" } else { " (the source does not declare it)" };
        return writeln!(out, "Pool {pool} has no recorded rollouts{why}.");
    }
    writeln!(
        out,
        "{}",
        style.bold(&format!("Pool {pool}: rollout history (the last {REVISION_HISTORY_LIMIT} kept)"))
    )?;
    let mut rows =
        vec![["REVISION", "TEMPLATE", "COMMIT", "STARTED", "ENDED", "RESULT"].map(str::to_owned).to_vec()];
    for r in &history.revisions {
        let origin = r.commit.map(|c| c.get(..12).unwrap_or(c)).or(r.source).unwrap_or("-");
        let result = match r.rolled_back_from {
            Some(from) => format!("{} (rollback from {from})", r.result),
            None => r.result.to_owned(),
        };
        let current = history.template_hash == Some(r.template_hash);
        let template = if current { format!("{} *", r.template_hash) } else { r.template_hash.to_owned() };
        rows.push(vec![
            r.revision.to_string(),
            template,
            origin.to_owned(),
            r.started.clone(),
            r.ended.clone().unwrap_or_else(|| "-".to_owned()),
            result,
        ]);
    }
    let paint = |row: usize, column: usize, text: &str| match (row, column, text) {
        (0, _, _) => style.dim(text),
        (_, 5, t) if t.starts_with("Complete") => style.green(text),
        (_, 5, t) if t.starts_with("Degraded") || t.starts_with("RolledBack") => style.red(text),
        _ => text.to_owned(),
    };
    crate::plan::table(&rows, "", &paint, out)?;
    if history.template_hash.is_some_and(|h| history.revisions.iter().any(|r| r.template_hash == h)) {
        writeln!(out, "{}", style.dim("* the source's template"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RolloutResult;

    fn revision(number: u64, hash: &str, result: Option<RolloutResult>) -> Revision {
        let started = 1_764_950_400 + i64::try_from(number).unwrap() * 60;
        Revision {
            number,
            template_hash: hash.to_owned(),
            template: None,
            source: Some("pools/ file w.yaml".to_owned()),
            commit: (number == 2).then(|| "0123456789abcdef0123".to_owned()),
            started,
            rolled_back_from: None,
            end: result.map(|result| RevisionEnd { result, at: started + 30 }),
        }
    }

    #[test]
    fn the_history_lists_each_revision_with_its_result_oldest_first() {
        let mut rollback = revision(3, "aaaa", Some(RolloutResult::Complete));
        rollback.rolled_back_from = Some("bbbb".to_owned());
        let revisions =
            [revision(1, "aaaa", Some(RolloutResult::Complete)), revision(2, "bbbb", None), rollback];
        let history = History::of("w", &revisions, Some("bbbb"));
        let mut text = Vec::new();
        render_text(&history, true, Style::default(), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Pool w: rollout history (the last 10 kept)");
        assert!(lines[1].starts_with("REVISION  TEMPLATE  COMMIT"), "{text}");
        assert!(
            lines[2].starts_with("1         aaaa      pools/ file w.yaml  2025-12-05T16:01:00Z"),
            "{text}"
        );
        assert!(lines[2].ends_with("Complete"), "{text}");
        // Revision 2 has no end of its own: the rollback that followed tells it.
        assert!(
            lines[3].contains("bbbb *")
                && lines[3].contains("0123456789ab")
                && lines[3].ends_with("RolledBack"),
            "{text}"
        );
        assert!(lines[4].ends_with("Complete (rollback from bbbb)"), "{text}");
        assert_eq!(lines[5], "* the source's template");

        let json = serde_json::to_value(&history).unwrap();
        assert_eq!(json["revisions"][1]["result"], "RolledBack");
        assert_eq!(json["revisions"][1]["ended"], json["revisions"][2]["started"]);
        assert_eq!(json["revisions"][2]["rolled_back_from"], "bbbb");

        let mut text = Vec::new();
        render_text(&History::of("x", &[], None), false, Style::default(), &mut text).unwrap();
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "Pool x has no recorded rollouts (the source does not declare it).\n"
        );
    }
}
