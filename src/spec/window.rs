//! Disruption windows (`spec.disruption.windows`): when poolctl may disrupt a pool's instances,
//! as cron schedules in a time zone, and the reading of both.
//!
//! Time zones come from the tz database bundled into the binary, never the system's: what a
//! window means does not depend on the machine that plans (nor on its files, which keeps the
//! planner pure), and poolctl's image, built FROM scratch, has no `/usr/share/zoneinfo`.

use std::str::FromStr as _;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Duration;

/// The longest a window may last: a year. A freeze over the holidays is weeks; longer is a typo.
pub const MAX_WINDOW: std::time::Duration = std::time::Duration::from_secs(366 * 24 * 3600);

/// When the pool's instances may be disrupted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DisruptionSpec {
    /// Windows of time, each opening on a cron schedule for a duration, that allow or deny
    /// disruption, as Karpenter's disruption budgets with schedules and Argo CD's sync windows.
    /// A `deny` window that is open holds back the kinds of disruption it governs; with at least
    /// one `allow` window governing a kind, that kind happens only while one is open
    /// (default-deny); with only `deny` windows, whenever none is. Deny wins over allow. Judged
    /// by the world's clock (the Docker daemon's). `poolctl apply --ignore-windows` overrides
    /// them. Not covered by the template hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<DisruptionWindow>,
}

/// One disruption window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DisruptionWindow {
    /// `allow` (disruption only while open) or `deny` (no disruption while open).
    pub kind: WindowKind,
    /// When the window opens: a cron schedule of 5 fields (`minute hour day-of-month month
    /// day-of-week`, e.g. `0 22 * * MON-FRI`), or 6 with seconds first; `@daily` and the like.
    #[schemars(length(min = 1))]
    pub schedule: String,
    /// How long it stays open each time, e.g. `8h` (at most 8784h, a year).
    pub duration: Duration,
    /// The IANA time zone the schedule is read in, e.g. `Europe/Berlin` (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// The kinds of disruption it governs (default: all): `rollout` (a new template, or
    /// `spec.rollout.after`), `scaleDown` (more instances than `replicas`), `remediation` (an
    /// instance that does not serve replaced), `replace` (`--replace`, the `poolctl.dev/replace`
    /// label) and `expiry` (`spec.rollout.maxAge`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<DisruptionReason>,
}

/// Whether a window allows or denies disruption while it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WindowKind {
    Allow,
    Deny,
}

impl WindowKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
        }
    }
}

/// Why an instance is disrupted: what a window governs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum DisruptionReason {
    /// It runs an outdated template (or was made before `spec.rollout.after`).
    Rollout,
    /// The pool has more instances than `replicas`.
    ScaleDown,
    /// It does not serve and is replaced.
    Remediation,
    /// It is marked for replacement (`--replace`, the `poolctl.dev/replace` label).
    Replace,
    /// It is older than `spec.rollout.maxAge`.
    Expiry,
}

impl DisruptionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rollout => "rollout",
            Self::ScaleDown => "scaleDown",
            Self::Remediation => "remediation",
            Self::Replace => "replace",
            Self::Expiry => "expiry",
        }
    }
}

impl DisruptionWindow {
    /// Whether the window governs disruption for `reason`.
    pub fn governs(&self, reason: DisruptionReason) -> bool {
        self.reasons.is_empty() || self.reasons.contains(&reason)
    }

    /// The name of its time zone, as the plan shows it.
    pub fn zone_name(&self) -> &str {
        self.time_zone.as_deref().unwrap_or("UTC")
    }

    /// The schedule and the zone, read; validation refuses a window for which this fails.
    pub fn read(&self) -> Result<(croner::Cron, jiff::tz::TimeZone), WindowError> {
        Ok((schedule(&self.schedule)?, zone(self.zone_name())?))
    }
}

/// Why a window cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error(
        "{schedule:?} is not a cron schedule ({why}): expected 5 fields (minute hour day-of-month month day-of-week), e.g. \"0 22 * * MON-FRI\", or 6 with seconds first"
    )]
    Schedule { schedule: String, why: String },
    #[error("{schedule:?} never comes: no time matches it")]
    Never { schedule: String },
    #[error(
        "unknown time zone {zone:?}: expected an IANA name such as Europe/Berlin, America/New_York or UTC"
    )]
    Zone { zone: String },
}

/// Read a cron schedule.
pub fn schedule(text: &str) -> Result<croner::Cron, WindowError> {
    croner::Cron::from_str(text)
        .map_err(|e| WindowError::Schedule { schedule: text.to_owned(), why: e.to_string() })
}

/// Look a time zone up in the bundled tz database.
pub fn zone(name: &str) -> Result<jiff::tz::TimeZone, WindowError> {
    jiff::tz::TimeZoneDatabase::bundled().get(name).map_err(|_| WindowError::Zone { zone: name.to_owned() })
}

/// The problems of a window, as (field, message), `field` under the window.
pub(crate) fn problems(window: &DisruptionWindow) -> Vec<(&'static str, String)> {
    let mut errors = Vec::new();
    match schedule(&window.schedule) {
        // A schedule that parses but matches no time (`0 0 30 2 *`) would hold a pool for ever
        // with its allow window, or deny nothing: either way not what was meant.
        Ok(cron) => {
            let start = jiff::Timestamp::UNIX_EPOCH.to_zoned(jiff::tz::TimeZone::UTC);
            if cron.find_next_occurrence(&start, true).is_err() {
                errors
                    .push(("schedule", WindowError::Never { schedule: window.schedule.clone() }.to_string()));
            }
        }
        Err(e) => errors.push(("schedule", e.to_string())),
    }
    if let Some(name) = &window.time_zone
        && let Err(e) = zone(name)
    {
        errors.push(("timeZone", e.to_string()));
    }
    let duration = window.duration.get();
    if duration < std::time::Duration::from_secs(1) {
        errors.push(("duration", "must be 1s or more: a window open for no time never opens".to_owned()));
    } else if duration > MAX_WINDOW {
        errors.push((
            "duration",
            format!("must be at most {}, got {}", Duration::from(MAX_WINDOW), window.duration),
        ));
    }
    errors
}
