//! `maxSurge` and `maxUnavailable` as a Deployment reads them: a count (`1`) or a percentage of
//! `replicas` (`25%`), the surge rounded up and the unavailable rounded down.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A number of instances, or a percentage of the pool's `replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntOrPercent {
    Count(i64),
    Percent(u32),
}

/// Which way a percentage rounds to whole instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// `maxSurge`: 25% of 3 replicas is 1.
    Up,
    /// `maxUnavailable`: 25% of 3 replicas is 0.
    Down,
}

impl IntOrPercent {
    /// The number of instances this stands for in a pool of `replicas` (a count as written,
    /// negative or not: validation judges it).
    pub fn resolve(self, replicas: i64, rounding: Rounding) -> i64 {
        match self {
            Self::Count(n) => n,
            Self::Percent(p) => {
                let scaled = i128::from(p) * i128::from(replicas.max(0));
                let whole = match rounding {
                    Rounding::Up => (scaled + 99) / 100,
                    Rounding::Down => scaled / 100,
                };
                i64::try_from(whole).unwrap_or(i64::MAX)
            }
        }
    }

    /// Whether the value is written as zero (`0` or `0%`).
    pub fn is_zero(self) -> bool {
        matches!(self, Self::Count(0) | Self::Percent(0))
    }
}

impl From<i64> for IntOrPercent {
    fn from(n: i64) -> Self {
        Self::Count(n)
    }
}

impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Count(n) => write!(f, "{n}"),
            Self::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Serialize for IntOrPercent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Count(n) => serializer.serialize_i64(*n),
            Self::Percent(_) => serializer.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrPercent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScaleVisitor;

        impl serde::de::Visitor<'_> for ScaleVisitor {
            type Value = IntOrPercent;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number such as 1, or a percentage of replicas such as 25%")
            }

            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<IntOrPercent, E> {
                Ok(IntOrPercent::Count(n))
            }

            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<IntOrPercent, E> {
                // Far above every bound; validation says so with the value.
                Ok(IntOrPercent::Count(i64::try_from(n).unwrap_or(i64::MAX)))
            }

            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<IntOrPercent, E> {
                let digits =
                    s.strip_suffix('%').filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
                let Some(digits) = digits else {
                    return Err(E::custom(format_args!(
                        "invalid value {s:?}: expected a whole number such as 1, or a percentage of \
                         replicas such as 25%"
                    )));
                };
                digits
                    .parse()
                    .map(IntOrPercent::Percent)
                    .map_err(|_| E::custom(format_args!("the percentage {s:?} is far too large")))
            }
        }

        deserializer.deserialize_any(ScaleVisitor)
    }
}

impl JsonSchema for IntOrPercent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "IntOrPercent".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "oneOf": [
                {"type": "integer", "minimum": 0, "maximum": super::MAX_REPLICAS},
                {"type": "string", "pattern": "^[0-9]+%$"}
            ],
            "description": "A number of instances, or a percentage of replicas such as 25% (maxSurge \
                            rounds up, maxUnavailable rounds down, as a Deployment does)."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_as_a_deployment_does() {
        let p = IntOrPercent::Percent(25);
        assert_eq!(p.resolve(3, Rounding::Up), 1);
        assert_eq!(p.resolve(3, Rounding::Down), 0);
        assert_eq!(p.resolve(4, Rounding::Up), 1);
        assert_eq!(p.resolve(4, Rounding::Down), 1);
        assert_eq!(p.resolve(10, Rounding::Up), 3);
        assert_eq!(p.resolve(10, Rounding::Down), 2);
        assert_eq!(p.resolve(0, Rounding::Up), 0);
        assert_eq!(IntOrPercent::Percent(u32::MAX).resolve(1000, Rounding::Up), 42_949_672_950);
        assert_eq!(IntOrPercent::Count(-2).resolve(10, Rounding::Up), -2);
    }

    #[test]
    fn reads_counts_and_percentages_and_writes_them_back() {
        let read = |yaml: &str| serde_json::from_str::<IntOrPercent>(yaml);
        assert_eq!(read("3").unwrap(), IntOrPercent::Count(3));
        assert_eq!(read("\"25%\"").unwrap(), IntOrPercent::Percent(25));
        for bad in ["\"25\"", "\"%\"", "\"-5%\"", "\"2.5%\"", "\"25 %\"", "\"99999999999%\"", "1.5"] {
            assert!(read(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(serde_json::to_string(&IntOrPercent::Percent(25)).unwrap(), "\"25%\"");
        assert_eq!(serde_json::to_string(&IntOrPercent::Count(2)).unwrap(), "2");
    }
}
