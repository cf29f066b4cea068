//! A pool's disruption windows (`spec.disruption.windows`) at the world's time: which kinds of
//! disruption they hold back now, which window does, and when that kind is next allowed (what
//! `watch` wakes at). Pure: the time is the world's, the tz database the bundled one.

use crate::spec::{DisruptionReason, DisruptionSpec, DisruptionWindow, WindowKind};

/// How far ahead the next allowed time is looked for, in seconds: past it, a pool is said to be
/// held with no end found (a deny window open round the clock, say).
const HORIZON: i64 = 400 * 24 * 3600;

/// How many windows opening or closing are stepped over looking for the next allowed time, at
/// most: a deny window that reopens before it closes is open for good.
const MAX_STEPS: usize = 512;

/// One window, read.
struct Read<'a> {
    index: usize,
    window: &'a DisruptionWindow,
    cron: croner::Cron,
    zone: jiff::tz::TimeZone,
    /// How long it stays open, in whole seconds (at least 1, as validation requires).
    seconds: i64,
}

impl Read<'_> {
    fn at(&self, t: i64) -> Option<jiff::Zoned> {
        Some(jiff::Timestamp::from_second(t).ok()?.to_zoned(self.zone.clone()))
    }

    /// When it closes, if it is open at `t`: its last opening (at `t` or before) is less than
    /// its duration ago.
    fn open_at(&self, t: i64) -> Option<i64> {
        let opened = self.cron.find_previous_occurrence(&self.at(t)?, true).ok()?.timestamp().as_second();
        let closes = opened.saturating_add(self.seconds);
        (t < closes).then_some(closes)
    }

    /// When it next opens after `t`.
    fn opens_after(&self, t: i64) -> Option<i64> {
        Some(self.cron.find_next_occurrence(&self.at(t)?, false).ok()?.timestamp().as_second())
    }
}

/// What keeps a kind of disruption from happening at a time.
enum Block {
    /// A deny window is open, until then.
    Deny { index: usize, closes: i64 },
    /// Allow windows govern it and none is open: the one that opens first, and when (if ever).
    Outside { index: usize, opens: Option<i64> },
}

/// A kind of disruption the windows hold back now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Held {
    /// The window that holds it: an open deny window, or the allow window that opens first.
    pub index: usize,
    pub kind: WindowKind,
    pub schedule: String,
    pub duration: crate::spec::Duration,
    pub zone: String,
    /// When it is next allowed (seconds since the Unix epoch), unless none was found within
    /// [`HORIZON`].
    pub until: Option<i64>,
    /// `until` in the window's zone, as RFC 3339.
    pub until_local: Option<String>,
}

/// A pool's windows, read once per plan.
pub(super) struct Windows<'a> {
    read: Vec<Read<'a>>,
}

impl<'a> Windows<'a> {
    /// The windows of `spec`; one that cannot be read (validation refuses it) is left out.
    pub(super) fn of(spec: &'a DisruptionSpec) -> Self {
        let read = spec
            .windows
            .iter()
            .enumerate()
            .filter_map(|(index, window)| {
                let (cron, zone) = window.read().ok()?;
                let seconds = i64::try_from(window.duration.get().as_secs()).unwrap_or(i64::MAX).max(1);
                Some(Read { index, window, cron, zone, seconds })
            })
            .collect();
        Self { read }
    }

    /// Whether the pool has any window.
    pub(super) fn is_empty(&self) -> bool {
        self.read.is_empty()
    }

    /// Whether disruption for `reason` is held back at `now`, by which window, and until when.
    pub(super) fn held(&self, reason: DisruptionReason, now: i64) -> Option<Held> {
        let index = match self.block(reason, now)? {
            Block::Deny { index, .. } | Block::Outside { index, .. } => index,
        };
        let read = self.read.iter().find(|r| r.index == index)?;
        let until = self.next_allowed(reason, now);
        let until_local = until.and_then(|t| Some(read.at(t)?.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()));
        Some(Held {
            index,
            kind: read.window.kind,
            schedule: read.window.schedule.clone(),
            duration: read.window.duration,
            zone: read.window.zone_name().to_owned(),
            until,
            until_local,
        })
    }

    /// What keeps disruption for `reason` from happening at `t`, if anything. Deny wins: an open
    /// deny window holds it whatever allow window is open.
    fn block(&self, reason: DisruptionReason, t: i64) -> Option<Block> {
        let governing = || self.read.iter().filter(move |r| r.window.governs(reason));
        let mut deny = governing().filter(|r| r.window.kind == WindowKind::Deny);
        if let Some((index, closes)) = deny.find_map(|r| Some((r.index, r.open_at(t)?))) {
            return Some(Block::Deny { index, closes });
        }
        let allow: Vec<&Read<'_>> = governing().filter(|r| r.window.kind == WindowKind::Allow).collect();
        if allow.is_empty() || allow.iter().any(|r| r.open_at(t).is_some()) {
            return None;
        }
        let next = allow.iter().map(|r| (r.opens_after(t), r.index));
        // The first to open; one that never does only when none will.
        let (opens, index) = next.min_by_key(|(opens, index)| (opens.is_none(), *opens, *index))?;
        Some(Block::Outside { index, opens })
    }

    /// The first time from `now` on when disruption for `reason` is allowed: stepping over each
    /// deny window to its close and to each allow window's opening, until nothing blocks.
    fn next_allowed(&self, reason: DisruptionReason, now: i64) -> Option<i64> {
        let mut t = now;
        for _ in 0..MAX_STEPS {
            if t.saturating_sub(now) > HORIZON {
                return None;
            }
            t = match self.block(reason, t) {
                None => return Some(t),
                Some(Block::Deny { closes, .. }) => closes,
                Some(Block::Outside { opens, .. }) => opens?,
            };
        }
        None
    }
}

impl Held {
    /// `blocked by window spec.disruption.windows[0] (deny "0 9 * * MON-FRI" for 8h) until
    /// 2026-12-07T17:00:00+01:00 (Europe/Berlin)`.
    pub(super) fn describe(&self) -> String {
        let until = match &self.until_local {
            Some(at) => format!("until {at} ({})", self.zone),
            None => format!("with no opening within a year ({})", self.zone),
        };
        format!(
            "blocked by window spec.disruption.windows[{}] ({} {:?} for {}) {until}",
            self.index,
            self.kind.as_str(),
            self.schedule,
            self.duration
        )
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::Windows;
    use crate::spec::{DisruptionReason, DisruptionSpec, DisruptionWindow, Duration, WindowKind};

    /// One field of a cron schedule, valid or not for its place.
    fn field() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => Just("*".to_owned()),
            4 => (1..13u32).prop_map(|n| n.to_string()),
            1 => (0..70u32).prop_map(|n| n.to_string()),
            2 => (1..8u32).prop_map(|n| format!("*/{n}")),
            2 => (1..7u32, 0..6u32).prop_map(|(a, b)| format!("{a}-{}", a + b)),
            1 => (1..7u32, 1..7u32, 1..4u32).prop_map(|(a, b, c)| format!("{a},{b}-12/{c}")),
            1 => prop::sample::select(vec![
                "L", "5L", "15W", "LW", "MON#2", "FRI#5", "SUN-SAT", "FEB", "?", "2099"
            ])
            .prop_map(str::to_owned),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// No schedule, zone or time makes reading or judging a window panic.
        #[test]
        fn any_schedule_is_judged_without_panicking(
            schedule in prop_oneof![
                1 => "[0-9*/,LW#?@ A-Za-z-]{0,30}",
                4 => prop::collection::vec(field(), 5..=6).prop_map(|fields| fields.join(" ")),
            ],
            zone in prop::sample::select(vec!["UTC", "Europe/Berlin", "America/St_Johns", "Pacific/Chatham", "Nowhere"]),
            seconds in 0..(40 * 24 * 3600u64),
            allow: bool,
            now in -100_000_000_000i64..100_000_000_000,
        ) {
            let kind = if allow { WindowKind::Allow } else { WindowKind::Deny };
            let window = DisruptionWindow {
                kind,
                schedule,
                duration: Duration::from_secs(seconds),
                time_zone: Some(zone.to_owned()),
                reasons: Vec::new(),
            };
            let _ = crate::spec::window_problems(&window);
            let spec = DisruptionSpec { windows: vec![window] };
            let windows = Windows::of(&spec);
            if let Some(held) = windows.held(DisruptionReason::Rollout, now) {
                prop_assert!(held.until.is_none_or(|t| t >= now));
                let _ = held.describe();
            }
        }
    }
}
