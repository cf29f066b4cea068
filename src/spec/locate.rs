//! Field paths (`spec.bootstrap[0].exec`) and finding where one was written in a YAML file.
//!
//! `serde_yaml` does not hand out the positions of the nodes it parses, only the position of an
//! error. So to locate a field, the document is parsed again with a visitor that walks down the
//! path and fails on purpose when it arrives: the error carries the line and column of the node.
//! This runs only when there is an error to report, so its cost does not matter.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

/// A path from the document root to a field, displayed the way `serde_yaml` shows paths:
/// `spec.template.volumes[1]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FieldPath(Vec<Segment>);

impl FieldPath {
    /// The path of dotted keys, e.g. `FieldPath::of("spec.template.image")`.
    pub(crate) fn of(dotted: &str) -> Self {
        Self(dotted.split('.').map(|k| Segment::Key(k.to_owned())).collect())
    }

    pub(crate) fn key(&self, key: &str) -> Self {
        let mut next = self.clone();
        next.0.push(Segment::Key(key.to_owned()));
        next
    }

    pub(crate) fn index(&self, index: usize) -> Self {
        let mut next = self.clone();
        next.0.push(Segment::Index(index));
        next
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(key) if i == 0 => f.write_str(key)?,
                Segment::Key(key) => write!(f, ".{key}")?,
                Segment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// The 1-based line and column of the node at `path` in the `index`th document of `text`, or
/// of its nearest ancestor that exists (a defaulted field has no position of its own).
pub(crate) fn locate(text: &str, index: usize, path: &FieldPath) -> Option<(usize, usize)> {
    (0..=path.0.len()).rev().find_map(|len| locate_exact(text, index, &path.0[..len]))
}

fn locate_exact(text: &str, index: usize, path: &[Segment]) -> Option<(usize, usize)> {
    let document = serde_yaml::Deserializer::from_str(text).nth(index)?;
    let seek = Seek { path };
    match seek.deserialize(document) {
        Err(err) if err.to_string().contains(FOUND) => err.location().map(|at| (at.line(), at.column())),
        Ok(()) | Err(_) => None,
    }
}

/// The message of the deliberate error that marks the node as found.
const FOUND: &str = "poolctl-locate: found";

/// Walks down `path`; fails with [`FOUND`] on the node at its end, returns `Ok` if it is absent.
struct Seek<'p> {
    path: &'p [Segment],
}

impl Seek<'_> {
    fn leaf<E: de::Error>(self) -> Result<(), E> {
        if self.path.is_empty() { Err(E::custom(FOUND)) } else { Ok(()) }
    }
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.leaf()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.leaf()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.leaf()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.leaf()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.leaf()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.leaf()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.leaf()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        let mut i = 0;
        while let Some(()) = match first {
            Segment::Index(want) if *want == i => seq.next_element_seed(Seek { path: rest })?,
            _ => seq.next_element::<IgnoredAny>()?.map(drop),
        } {
            i += 1;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            match first {
                Segment::Key(want) if key.as_str() == Some(want) => {
                    map.next_value_seed(Seek { path: rest })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
kind: Other
---
a:
  b: 1
  list:
    - x
    - {y: 2}
";

    #[test]
    fn finds_keys_and_list_items_in_a_later_document() {
        assert_eq!(locate(TEXT, 1, &FieldPath::of("a.b")), Some((4, 6)));
        assert_eq!(locate(TEXT, 1, &FieldPath::of("a.list").index(0)), Some((6, 7)));
        assert_eq!(locate(TEXT, 1, &FieldPath::of("a.list").index(1).key("y")), Some((7, 11)));
    }

    #[test]
    fn falls_back_to_the_nearest_ancestor() {
        assert_eq!(locate(TEXT, 1, &FieldPath::of("a.missing")), locate(TEXT, 1, &FieldPath::of("a")));
        assert_eq!(locate(TEXT, 1, &FieldPath::of("a")), Some((4, 3)));
    }

    #[test]
    fn displays_like_serde_yaml() {
        let path = FieldPath::of("spec.bootstrap").index(2).key("exec");
        assert_eq!(path.to_string(), "spec.bootstrap[2].exec");
    }
}
