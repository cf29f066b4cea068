//! Human durations such as `30s`, `5m` or `1h30m`, as written in pool files.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A non-negative duration written as a sequence of `<integer><unit>` with units `ms`, `s`,
/// `m` and `h` (`90s`, `5m`, `1h30m`). Kept as whole milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(std::time::Duration);

impl Duration {
    pub const fn from_secs(secs: u64) -> Self {
        Self(std::time::Duration::from_secs(secs))
    }
    pub const fn from_millis(ms: u64) -> Self {
        Self(std::time::Duration::from_millis(ms))
    }
    pub const fn get(self) -> std::time::Duration {
        self.0
    }
}

impl From<std::time::Duration> for Duration {
    /// Kept to whole milliseconds, as everywhere else.
    fn from(d: std::time::Duration) -> Self {
        Self::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

impl From<Duration> for std::time::Duration {
    fn from(d: Duration) -> Self {
        d.0
    }
}

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: expected e.g. 30s, 5m or 1h30m (units ms, s, m, h)")]
pub struct ParseDurationError {
    input: String,
}

impl FromStr for Duration {
    type Err = ParseDurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseDurationError { input: s.to_owned() };
        let mut rest = s.trim();
        if rest.is_empty() {
            return Err(err());
        }
        let mut total_ms: u64 = 0;
        while !rest.is_empty() {
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            if digits == 0 {
                return Err(err());
            }
            let n: u64 = rest[..digits].parse().map_err(|_| err())?;
            rest = &rest[digits..];
            let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
            let per_unit_ms = match &rest[..unit_len] {
                "ms" => 1,
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                _ => return Err(err()),
            };
            rest = &rest[unit_len..];
            total_ms = n.checked_mul(per_unit_ms).and_then(|ms| total_ms.checked_add(ms)).ok_or_else(err)?;
        }
        Ok(Self::from_millis(total_ms))
    }
}

impl fmt::Display for Duration {
    /// Writes the shortest form that parses back to the same value (`90s` becomes `1m30s`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ms = u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 {
            return f.write_str("0s");
        }
        for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
            if ms >= size {
                write!(f, "{}{unit}", ms / size)?;
                ms %= size;
            }
        }
        Ok(())
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // A visitor rather than `String::deserialize(..)?.parse()`: an error raised inside the
        // visitor is what serde_yaml tags with the value's own line, column and field path.
        struct DurationVisitor;

        impl serde::de::Visitor<'_> for DurationVisitor {
            type Value = Duration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 30s, 5m or 1h30m")
            }

            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Duration, E> {
                s.parse().map_err(E::custom)
            }
        }

        deserializer.deserialize_str(DurationVisitor)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^([0-9]+(ms|s|m|h))+$",
            "description": "A duration such as 30s, 5m or 1h30m (units ms, s, m, h)."
        })
    }
}

/// A duration that may also be written as a whole number of seconds (`30` is `30s`), for a
/// field Kubernetes users know in seconds (a Deployment's `minReadySeconds`).
pub(super) fn seconds_or_duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    struct Visitor;

    impl serde::de::Visitor<'_> for Visitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a whole number of seconds or a duration such as 30s, 5m or 1h30m")
        }

        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Duration, E> {
            n.checked_mul(1_000)
                .map(Duration::from_millis)
                .ok_or_else(|| E::custom(format!("{n} seconds is out of range")))
        }

        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Duration, E> {
            let n = u64::try_from(n).map_err(|_| E::custom(format!("{n}: a duration cannot be negative")))?;
            self.visit_u64(n)
        }

        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Duration, E> {
            s.parse().map_err(E::custom)
        }
    }

    deserializer.deserialize_any(Visitor)
}

/// The schema of [`seconds_or_duration`].
pub(super) fn seconds_or_duration_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "anyOf": [
            {"type": "integer", "minimum": 0},
            {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"}
        ],
        "description": "A whole number of seconds, or a duration such as 30s, 5m or 1h30m (units ms, s, m, h)."
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_round_trip() {
        for (text, ms, shown) in [
            ("30s", 30_000, "30s"),
            ("5m", 300_000, "5m"),
            ("1h30m", 5_400_000, "1h30m"),
            ("90s", 90_000, "1m30s"),
            ("250ms", 250, "250ms"),
            ("0s", 0, "0s"),
        ] {
            let d: Duration = text.parse().unwrap();
            assert_eq!(d.get().as_millis(), ms, "{text}");
            assert_eq!(d.to_string(), shown);
            assert_eq!(shown.parse::<Duration>().unwrap(), d);
        }
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        for bad in ["", "5", "m", "-5s", "5 m", "5d", "1.5s", "s5"] {
            assert!(bad.parse::<Duration>().is_err(), "{bad:?} parsed");
        }
    }
}
