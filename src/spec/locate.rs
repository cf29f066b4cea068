//! Field paths (`spec.bootstrap[0].exec`): how errors name the field they are about.
//!
//! Where a path was written is looked up in a document's [`super::tree::SpanMap`].

use std::fmt;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

/// A path from the document root to a field, displayed as `spec.template.volumes[1]`, with
/// control characters in keys escaped so that a key cannot drive the terminal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
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

    /// This path, then its parent, and so on up to the root (the empty path).
    pub(crate) fn ancestors(&self) -> impl Iterator<Item = Self> + '_ {
        (0..=self.0.len()).rev().map(|len| Self(self.0[..len].to_vec()))
    }

    pub(crate) fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(key) if i == 0 => f.write_str(&escape_controls(key))?,
                Segment::Key(key) => write!(f, ".{}", escape_controls(key))?,
                Segment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// `text` with control characters escaped (`\u{1b}`), so that a file name, key or value from
/// a repository cannot clear or recolour the terminal it is printed on.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(char::is_control) {
        text.chars()
            .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
            .collect()
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_dotted_with_indices() {
        let path = FieldPath::of("spec.bootstrap").index(2).key("exec");
        assert_eq!(path.to_string(), "spec.bootstrap[2].exec");
    }

    #[test]
    fn escapes_control_characters_in_keys() {
        let path = FieldPath::of("spec").key("a\u{1b}[2Jb");
        assert_eq!(path.to_string(), "spec.a\\u{1b}[2Jb");
        assert_eq!(
            FieldPath::of("a.b").ancestors().map(|p| p.to_string()).collect::<Vec<_>>(),
            ["a.b", "a", ""]
        );
    }
}
