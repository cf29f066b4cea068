//! Typed decoding of a located tree that reports every error of a document, not the first.
//!
//! serde's derived `Deserialize` stops at the first error. Two things let one run report them
//! all: unknown fields are set aside (and recorded) before the derived code sees them, and a
//! field whose value fails is recorded and left out on a new attempt, so that its default
//! stands in and the rest of the document is still checked (semantic rules included). Each
//! attempt walks a tree already in memory, and attempts are bounded by a work budget.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};

use super::locate::FieldPath;
use super::tree::{Located, Place, YamlNode};

/// Nodes walked over all attempts of one document before poolctl stops looking for more
/// errors in it.
const WORK_BUDGET: usize = 4_000_000;

/// One error of a document, with the field and the place it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub(crate) path: FieldPath,
    pub(crate) at: Option<Place>,
    pub(crate) message: String,
}

/// Decodes `root` into `T`, collecting every problem. Returns the value when one could be
/// built (even with problems, with defaults standing in for the fields that failed), so that
/// semantic checks can still run on it.
pub(crate) fn decode<T: de::DeserializeOwned>(root: &Located, nodes: usize) -> (Option<T>, Vec<Problem>) {
    let mut removed: HashSet<*const Located> = HashSet::new();
    let mut removed_paths: Vec<FieldPath> = Vec::new();
    let mut problems = Vec::new();
    let mut work = 0usize;
    loop {
        let ctx = Ctx { removed: &removed, unknown: RefCell::new(Vec::new()) };
        let result = T::deserialize(De { node: root, path: FieldPath::default(), ctx: &ctx });
        work = work.saturating_add(nodes.max(1));
        let unknown = ctx.unknown.into_inner();
        match result {
            Ok(value) => {
                problems.extend(unknown);
                return (Some(value), sorted(problems));
            }
            Err(err) => {
                let path = err.path.clone().unwrap_or_default();
                let caused_by_removal =
                    err.missing.is_some_and(|field| removed_paths.contains(&path.key(field)));
                if !caused_by_removal {
                    problems.push(Problem {
                        path: path.clone(),
                        at: err.at.or(Some(root.place())),
                        message: err.message,
                    });
                }
                match err.entry {
                    Some((entry, entry_path)) if err.missing.is_none() && work < WORK_BUDGET => {
                        removed.insert(entry);
                        removed_paths.push(entry_path);
                    }
                    _ => {
                        problems.extend(unknown);
                        if work >= WORK_BUDGET {
                            problems.push(Problem {
                                path: FieldPath::default(),
                                at: Some(root.place()),
                                message: "too many errors in this document; fix these and run again"
                                    .to_owned(),
                            });
                        }
                        return (None, sorted(problems));
                    }
                }
            }
        }
    }
}

fn sorted(mut problems: Vec<Problem>) -> Vec<Problem> {
    problems.sort_by_key(|p| p.at);
    problems.dedup();
    problems
}

/// What every attempt shares: the fields left out, and the unknown fields met.
struct Ctx<'r> {
    removed: &'r HashSet<*const Located>,
    unknown: RefCell<Vec<Problem>>,
}

/// The error of one attempt: where it arose, and which mapping entry to leave out next time.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Error {
    message: String,
    path: Option<FieldPath>,
    at: Option<Place>,
    /// The innermost mapping value around the failure, and its path.
    entry: Option<(*const Located, FieldPath)>,
    /// Set for "missing field": leaving a field out cannot fix that.
    missing: Option<&'static str>,
}

impl de::Error for Error {
    fn custom<M: fmt::Display>(msg: M) -> Self {
        Self { message: msg.to_string(), path: None, at: None, entry: None, missing: None }
    }

    fn missing_field(field: &'static str) -> Self {
        Self { missing: Some(field), ..Self::custom(format_args!("missing field `{field}`")) }
    }
}

impl Error {
    /// Gives an error from below its place, unless it has one already.
    fn placed(mut self, path: &FieldPath, node: &Located, entry: bool) -> Self {
        if self.path.is_none() {
            self.path = Some(path.clone());
            self.at = Some(node.place());
        }
        if entry && self.entry.is_none() {
            self.entry = Some((std::ptr::from_ref(node), path.clone()));
        }
        self
    }
}

struct De<'a, 'r> {
    node: &'a Located,
    path: FieldPath,
    ctx: &'a Ctx<'r>,
}

impl<'a, 'r> De<'a, 'r> {
    fn child(&self, node: &'a Located, path: FieldPath) -> Self {
        Self { node, path, ctx: self.ctx }
    }

    fn kept<'e>(
        &self,
        entries: &'e [(Located, Located)],
    ) -> impl Iterator<Item = &'e (Located, Located)> + use<'e, 'r> {
        let removed = self.ctx.removed;
        entries.iter().filter(move |(_, v)| !removed.contains(&std::ptr::from_ref(v)))
    }
}

impl<'de> de::Deserializer<'de> for De<'_, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.node.node {
            YamlNode::Null(_) => visitor.visit_unit(),
            YamlNode::Bool(b, _) => visitor.visit_bool(*b),
            YamlNode::Int(i, _) => match (i64::try_from(*i), u64::try_from(*i)) {
                (Ok(i), _) => visitor.visit_i64(i),
                (_, Ok(u)) => visitor.visit_u64(u),
                _ => visitor.visit_i128(*i),
            },
            YamlNode::Float(x, _) => visitor.visit_f64(*x),
            YamlNode::Str(s) => visitor.visit_str(s),
            YamlNode::Seq(items) => visitor.visit_seq(Seq { de: &self, items: items.iter().enumerate() }),
            YamlNode::Map(entries) => {
                let entries: Vec<_> = self.kept(entries).collect();
                visitor.visit_map(Map { de: &self, entries: entries.into_iter(), value: None })
            }
        }
    }

    /// Strings are read by the target type, not the scalar's inferred type: a label value
    /// written `1.10` is the string "1.10".
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.node.node {
            YamlNode::Str(s) => visitor.visit_str(s),
            YamlNode::Null(raw)
            | YamlNode::Bool(_, raw)
            | YamlNode::Int(_, raw)
            | YamlNode::Float(_, raw)
                if !raw.is_empty() =>
            {
                visitor.visit_str(raw)
            }
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.node.node {
            YamlNode::Null(_) => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let YamlNode::Map(entries) = &self.node.node else {
            // serde would read a sequence as the struct's fields in order, and complain about
            // the first one's type: say what is wrong with the value itself.
            if matches!(self.node.node, YamlNode::Seq(_)) {
                let e = <Error as de::Error>::custom("expected a mapping, found a sequence");
                return Err(e.placed(&self.path, self.node, false));
            }
            return self.deserialize_any(visitor);
        };
        // Unknown fields are recorded here and hidden from the derived code, which would stop
        // at the first.
        let mut known = Vec::new();
        for entry in self.kept(entries) {
            let (key, _) = entry;
            match key.scalar_text() {
                Some(name) if fields.contains(&name) => known.push(entry),
                name => self.ctx.unknown.borrow_mut().push(Problem {
                    path: self.path.key(name.unwrap_or("?")),
                    at: Some(key.place()),
                    message: <Error as de::Error>::unknown_field(name.unwrap_or("?"), fields).message,
                }),
            }
        }
        visitor.visit_map(Map { de: &self, entries: known.into_iter(), value: None })
    }

    /// A unit variant is written as its name (`cgroupns: private`).
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match &self.node.node {
            YamlNode::Str(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            _ => self.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf unit
        unit_struct newtype_struct seq tuple tuple_struct map identifier ignored_any
    }
}

struct Seq<'d, 'a, 'r, I> {
    de: &'d De<'a, 'r>,
    items: I,
}

impl<'de, 'a, I: Iterator<Item = (usize, &'a Located)>> SeqAccess<'de> for Seq<'_, 'a, '_, I> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        let Some((i, item)) = self.items.next() else { return Ok(None) };
        let path = self.de.path.index(i);
        seed.deserialize(self.de.child(item, path.clone()))
            .map(Some)
            .map_err(|e| e.placed(&path, item, false))
    }
}

struct Map<'d, 'a, 'r, I> {
    de: &'d De<'a, 'r>,
    entries: I,
    value: Option<(&'a Located, FieldPath)>,
}

impl<'de, 'a, I: Iterator<Item = &'a (Located, Located)>> MapAccess<'de> for Map<'_, 'a, '_, I> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else { return Ok(None) };
        let path = self.de.path.key(key.scalar_text().unwrap_or("?"));
        self.value = Some((value, path.clone()));
        // A key is a string for every map of the pool file; read it as one.
        let name = key.scalar_text().unwrap_or_default();
        seed.deserialize(name.into_deserializer()).map(Some).map_err(|e: de::value::Error| {
            let mut err = <Error as de::Error>::custom(e).placed(&path, key, false);
            err.entry = Some((std::ptr::from_ref(value), path.clone()));
            err
        })
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let Some((value, path)) = self.value.take() else {
            return Err(de::Error::custom("a value was asked for before its key"));
        };
        seed.deserialize(self.de.child(value, path.clone())).map_err(|e| e.placed(&path, value, true))
    }
}
