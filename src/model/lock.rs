//! Who holds a pool's lock: the one actor (an apply, a watch reconcile) allowed to change the
//! pool at a time, since when, and until when unless it renews the lock.

use std::time::{Duration, SystemTime};

use serde::Serialize;

/// The holder of a pool's lock, as the lock itself records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    /// Who took it: the command, its process ID and host, e.g.
    /// `poolctl apply (pid 4242 on devbox)`.
    pub who: String,
    /// When this holder took it.
    pub since: SystemTime,
    /// When it lapses unless renewed, by the holder's own clock. Only a figure to show: the
    /// clock of another machine may be far off, so no run decides by it whether the lock
    /// lapsed; a standby takes a lock over once it saw it unchanged for a lease by its own
    /// monotonic clock (see [`crate::rollout::lock`]).
    pub expires: SystemTime,
}

impl LockHolder {
    /// Whether this is the very lock `other` describes: the same holder, taken at the same
    /// moment (a renewal moves only the expiry; a takeover, even by the same holder, the time).
    pub fn is(&self, other: &LockHolder) -> bool {
        self.who == other.who && self.since == other.since
    }

    /// Whether the lock lapsed by `now`, by the holder's own figure: a hint for people and for
    /// the planner's reading of the world, never grounds to take the lock over.
    pub fn expired(&self, now: SystemTime) -> bool {
        now >= self.expires
    }

    /// One line for people: who, since when, and how long it still holds by its holder's own
    /// figure, e.g. `poolctl apply (pid 4242 on devbox) since 2025-06-01T12:00:00Z (by its
    /// holder's clock, expires in 12s unless renewed)`.
    pub fn describe(&self, now: SystemTime) -> String {
        let expiry = match self.expires.duration_since(now) {
            Ok(left) => format!("expires in {} unless renewed", whole_seconds(left)),
            Err(e) => format!("expired {} ago", whole_seconds(e.duration())),
        };
        format!("{} since {} (by its holder's clock, {expiry})", self.who, timestamp(self.since))
    }
}

/// The lock as `plan -o json` shows it: times in RFC 3339, UTC.
impl Serialize for LockHolder {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Json<'a> {
            holder: &'a str,
            since: String,
            expires: String,
        }
        Json { holder: &self.who, since: timestamp(self.since), expires: timestamp(self.expires) }
            .serialize(serializer)
    }
}

/// `2025-06-01T12:00:00Z`, to the second; a time outside what RFC 3339 can write (which no
/// clock gives) as seconds since the epoch.
pub fn timestamp(t: SystemTime) -> String {
    match k8s_openapi::jiff::Timestamp::try_from(t) {
        Ok(ts) => ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Err(_) => format!(
            "{}s after the epoch",
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs()
        ),
    }
}

/// A span rounded up to whole seconds (`0s` only for none at all), as `12s` or `3m20s`.
fn whole_seconds(d: Duration) -> String {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    crate::spec::Duration::from(Duration::from_secs(secs)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_reads_as_who_since_when_and_how_long_it_still_holds() {
        let since = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
        let holder = LockHolder {
            who: "poolctl apply (pid 7 on box)".into(),
            since,
            expires: since + Duration::from_secs(15),
        };
        assert_eq!(
            holder.describe(since + Duration::from_millis(2500)),
            "poolctl apply (pid 7 on box) since 2025-06-15T15:06:40Z (by its holder's clock, expires in 13s \
             unless renewed)"
        );
        assert!(!holder.expired(since + Duration::from_secs(14)));
        assert!(holder.expired(since + Duration::from_secs(15)));
        assert!(
            holder
                .describe(since + Duration::from_secs(200))
                .ends_with("(by its holder's clock, expired 3m5s ago)")
        );
        let json = serde_json::to_value(&holder).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"holder": "poolctl apply (pid 7 on box)",
                               "since": "2025-06-15T15:06:40Z", "expires": "2025-06-15T15:06:55Z"})
        );
    }
}
