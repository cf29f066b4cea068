//! One pass of a YAML stream into located trees: every node with its line and column.
//!
//! serde-saphyr parses (it never panics, and its budgets stop alias bombs and deep nesting in
//! linear time); this module keeps what it hands out as a tree, so that a document is parsed
//! once and everything after (apiVersion checks, typed decoding with every error collected,
//! locating semantic errors) reads the tree instead of parsing the text again.

use std::collections::HashMap;
use std::fmt;
use std::io::Cursor;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use super::locate::FieldPath;

/// Deepest nesting of sequences and mappings in a document; a pool needs 5.
pub const MAX_DEPTH: usize = 64;
/// Most nodes in one document, aliases expanded; a pool needs a few hundred.
pub const MAX_NODES: usize = 250_000;
/// Most aliases (`*name`) in one document.
pub const MAX_ALIASES: usize = 10_000;
/// Most nodes that aliases may replay in one document: what stops an alias bomb early.
pub const MAX_ALIAS_EXPANSION: usize = 100_000;

/// A 1-based line and column.
pub(crate) type Place = (usize, usize);

/// A scalar as YAML 1.2's core schema reads it, with its text kept for string fields (a
/// label value `1.10` is the string "1.10", not a number).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum YamlNode {
    Null(String),
    Bool(bool, String),
    Int(i128, String),
    Float(f64, String),
    Str(String),
    Seq(Vec<Located>),
    Map(Vec<(Located, Located)>),
}

/// A node and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Located {
    pub(crate) line: usize,
    pub(crate) column: usize,
    /// Character offset and length of the node in the (BOM-less) text, to recover the text of
    /// plain scalars.
    offset: usize,
    len: usize,
    pub(crate) node: YamlNode,
}

impl Located {
    pub(crate) fn place(&self) -> Place {
        (self.line, self.column)
    }

    /// The text of a scalar, as a string field would read it.
    pub(crate) fn scalar_text(&self) -> Option<&str> {
        match &self.node {
            YamlNode::Null(raw)
            | YamlNode::Bool(_, raw)
            | YamlNode::Int(_, raw)
            | YamlNode::Float(_, raw)
            | YamlNode::Str(raw) => Some(raw),
            YamlNode::Seq(_) | YamlNode::Map(_) => None,
        }
    }

    /// The value of `key` in a mapping.
    pub(crate) fn get(&self, key: &str) -> Option<&Located> {
        match &self.node {
            YamlNode::Map(entries) => {
                entries.iter().find(|(k, _)| k.scalar_text() == Some(key)).map(|(_, v)| v)
            }
            _ => None,
        }
    }

    fn count(&self) -> usize {
        1 + match &self.node {
            YamlNode::Seq(items) => items.iter().map(Self::count).sum(),
            YamlNode::Map(entries) => entries.iter().map(|(k, v)| k.count() + v.count()).sum(),
            _ => 0,
        }
    }

    /// Fills in the text of plain non-string scalars, which the parser only hands out typed.
    fn fill_raw(&mut self, text: &CharIndex<'_>) {
        let (offset, len) = (self.offset, self.len);
        match &mut self.node {
            YamlNode::Null(raw)
            | YamlNode::Bool(_, raw)
            | YamlNode::Int(_, raw)
            | YamlNode::Float(_, raw) => {
                text.slice(offset, len).trim().clone_into(raw);
            }
            YamlNode::Str(_) => {}
            YamlNode::Seq(items) => items.iter_mut().for_each(|item| item.fill_raw(text)),
            YamlNode::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
                k.fill_raw(text);
                v.fill_raw(text);
            }),
        }
    }
}

/// Maps the parser's character offsets to byte offsets, without a table for ASCII text and
/// with one entry per 64 characters otherwise.
struct CharIndex<'t> {
    text: &'t str,
    samples: Option<Vec<usize>>,
}

const SAMPLE: usize = 64;

impl<'t> CharIndex<'t> {
    fn new(text: &'t str) -> Self {
        let samples =
            (!text.is_ascii()).then(|| text.char_indices().step_by(SAMPLE).map(|(byte, _)| byte).collect());
        Self { text, samples }
    }

    fn byte(&self, chars: usize) -> usize {
        match &self.samples {
            None => chars.min(self.text.len()),
            Some(samples) => {
                let Some(&start) = samples.get(chars / SAMPLE) else { return self.text.len() };
                self.text[start..]
                    .char_indices()
                    .nth(chars % SAMPLE)
                    .map_or(self.text.len(), |(b, _)| start + b)
            }
        }
    }

    fn slice(&self, offset: usize, len: usize) -> &'t str {
        let start = self.byte(offset);
        let end = self.byte(offset.saturating_add(len)).max(start);
        &self.text[start..end]
    }
}

impl<'de> Deserialize<'de> for Located {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<YamlNode>::deserialize(deserializer)?;
        let at = spanned.referenced;
        Ok(Self {
            line: usize::try_from(at.line()).unwrap_or(usize::MAX),
            column: usize::try_from(at.column()).unwrap_or(usize::MAX),
            offset: usize::try_from(at.span().offset()).unwrap_or(usize::MAX),
            len: usize::try_from(at.span().len()).unwrap_or(0),
            node: spanned.value,
        })
    }
}

impl<'de> Deserialize<'de> for YamlNode {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = YamlNode;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }
    fn visit_bool<E>(self, v: bool) -> Result<YamlNode, E> {
        Ok(YamlNode::Bool(v, String::new()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<YamlNode, E> {
        Ok(YamlNode::Int(v.into(), String::new()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<YamlNode, E> {
        Ok(YamlNode::Int(v.into(), String::new()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<YamlNode, E> {
        Ok(YamlNode::Int(v, String::new()))
    }
    fn visit_u128<E>(self, v: u128) -> Result<YamlNode, E> {
        Ok(i128::try_from(v).map_or_else(
            |_| YamlNode::Float(f64::INFINITY, String::new()),
            |v| YamlNode::Int(v, String::new()),
        ))
    }
    fn visit_f64<E>(self, v: f64) -> Result<YamlNode, E> {
        Ok(YamlNode::Float(v, String::new()))
    }
    fn visit_str<E>(self, v: &str) -> Result<YamlNode, E> {
        Ok(YamlNode::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<YamlNode, E> {
        Ok(YamlNode::Str(v))
    }
    fn visit_unit<E>(self) -> Result<YamlNode, E> {
        Ok(YamlNode::Null(String::new()))
    }
    fn visit_none<E>(self) -> Result<YamlNode, E> {
        Ok(YamlNode::Null(String::new()))
    }
    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<YamlNode, D::Error> {
        YamlNode::deserialize(deserializer)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<YamlNode, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(YamlNode::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<YamlNode, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key()? {
            entries.push((key, map.next_value()?));
        }
        Ok(YamlNode::Map(entries))
    }
}

/// A YAML error that ends the reading of a file, with its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub(crate) at: Option<Place>,
    pub(crate) message: String,
}

/// One document of a stream: its tree and how many nodes it has.
pub(crate) struct Tree {
    pub(crate) root: Located,
    pub(crate) nodes: usize,
}

/// Every document of `text` (without a byte-order mark) as a tree, and the errors met, in
/// file order. After a syntax error or a breached limit the rest of the file is not read: the
/// parser cannot find its footing again.
pub(crate) fn parse_stream(text: &str) -> Vec<Result<Tree, SyntaxError>> {
    let mut alias_limits = serde_saphyr::options::AliasLimits::default();
    alias_limits.max_total_replayed_events = MAX_ALIAS_EXPANSION;
    alias_limits.max_replay_stack_depth = MAX_DEPTH;
    let options = serde_saphyr::options! {
        with_snippet: false,
        // YAML 1.2's core schema, as Kubernetes tooling reads it: `yes`, `on`, `0755` and
        // `1_000` are strings, not booleans or numbers.
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::AsString,
        // `image: !Ref x` would otherwise be read as `image: x`, silently.
        reject_unsupported_tags: true,
        alias_limits: alias_limits,
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: None,
            max_depth: MAX_DEPTH,
            max_nodes: MAX_NODES,
            max_aliases: MAX_ALIASES,
        },
    };
    let index = CharIndex::new(text);
    let mut cursor = Cursor::new(text.as_bytes());
    serde_saphyr::read_with_options::<_, Located>(&mut cursor, options)
        .map(|result| match result {
            Ok(mut root) => {
                root.fill_raw(&index);
                let nodes = root.count();
                Ok(Tree { root, nodes })
            }
            Err(err) => Err(syntax_error(&err)),
        })
        .collect()
}

fn syntax_error(err: &serde_saphyr::Error) -> SyntaxError {
    let at = err.location().map(|at| {
        (usize::try_from(at.line()).unwrap_or(usize::MAX), usize::try_from(at.column()).unwrap_or(usize::MAX))
    });
    let text = err.to_string();
    // The place is given apart; the parser's own " at line 1, column 4" would repeat it.
    let message = text.find(" at line ").map_or(text.as_str(), |end| &text[..end]);
    SyntaxError { at: at.filter(|&(line, _)| line > 0), message: explain(message) }
}

/// Says which of poolctl's limits a breached budget is, in words.
fn explain(message: &str) -> String {
    let limit = |what: &str| format!("{what} (a limit of poolctl's, against runaway or hostile files)");
    if message.starts_with("recursion limit exceeded") || message.contains("Depth") {
        limit(&format!("nested deeper than {MAX_DEPTH} levels"))
    } else if message.contains("budget breached: Nodes") {
        limit(&format!("the document has more than {MAX_NODES} nodes, aliases expanded"))
    } else if message.contains("budget breached: Aliases") {
        limit(&format!("the document has more than {MAX_ALIASES} aliases"))
    } else if message.to_ascii_lowercase().contains("alias") && message.contains("limit") {
        limit(&format!("aliases expand to more than {MAX_ALIAS_EXPANSION} nodes (an alias bomb?)"))
    } else {
        message.to_owned()
    }
}

/// Where each node of a document is, by field path. The index is built on the first lookup,
/// once per document, so that locating any number of errors costs one walk of the tree, and a
/// valid document (the common case, thousands in a large source) never pays for it.
pub struct SpanMap {
    root: Located,
    index: std::sync::OnceLock<HashMap<FieldPath, Place>>,
}

impl PartialEq for SpanMap {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root
    }
}

impl fmt::Debug for SpanMap {
    // Every node of the document would drown any debug output a Document appears in.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpanMap").field("root", &self.root.place()).finish_non_exhaustive()
    }
}

impl SpanMap {
    pub(crate) fn of(root: Located) -> Self {
        Self { root, index: std::sync::OnceLock::new() }
    }

    fn index(root: &Located) -> HashMap<FieldPath, Place> {
        let mut map = HashMap::new();
        let mut stack = vec![(FieldPath::default(), root)];
        while let Some((path, node)) = stack.pop() {
            match &node.node {
                YamlNode::Seq(items) => {
                    stack.extend(items.iter().enumerate().map(|(i, item)| (path.index(i), item)));
                }
                YamlNode::Map(entries) => {
                    for (key, value) in entries {
                        let name = key.scalar_text().unwrap_or("?");
                        stack.push((path.key(name), value));
                    }
                }
                _ => {}
            }
            map.entry(path).or_insert(node.place());
        }
        map
    }

    /// The place of the node at `path`, or of its nearest ancestor that exists (a defaulted
    /// field has no place of its own).
    pub(crate) fn locate(&self, path: &FieldPath) -> Option<Place> {
        let index = self.index.get_or_init(|| Self::index(&self.root));
        path.ancestors().find_map(|p| index.get(&p).copied())
    }
}
