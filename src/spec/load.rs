//! Reading pool documents out of YAML text, with file, line, column and field path in every
//! error.
//!
//! A file may hold many documents, and only those whose apiVersion is in the `poolctl.dev`
//! group are ours: a GitOps repository mixes pool files with Kubernetes manifests, Kustomize
//! files and Helm values. So a document is skipped when it is empty, is not a mapping, or has an
//! apiVersion of another group. A document without any apiVersion is skipped too (Helm values
//! and many kustomization.yaml files have none), except when it says `kind: Pool`: that is a
//! pool whose apiVersion was forgotten, and skipping it would silently drop the pool.

use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde_yaml::Value;

use super::locate::{FieldPath, locate};
use super::{API_VERSION, KIND_POOL, Pool};

/// The apiVersion group of poolctl documents.
const GROUP: &str = "poolctl.dev";

/// One pool document and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub pool: Pool,
    /// The file, relative to the source root.
    pub file: String,
    /// The text the document was read from, so that later checks can point at a line. `None`
    /// for documents built in code; their errors then carry no line.
    pub text: Option<DocumentText>,
}

/// The file text a document came from and its position among the file's documents.
#[derive(Clone, PartialEq, Eq)]
pub struct DocumentText {
    text: Arc<str>,
    /// 0-based index of the document in the file's `---`-separated stream.
    index: usize,
}

impl fmt::Debug for DocumentText {
    // The whole file text would drown any debug output a Document appears in.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DocumentText").field("index", &self.index).finish_non_exhaustive()
    }
}

impl Document {
    /// An error about `path` in this document, located when the text is known.
    pub(crate) fn error_at(&self, path: &FieldPath, message: String) -> SpecError {
        let at = self.text.as_ref().and_then(|t| locate(&t.text, t.index, path));
        SpecError {
            file: self.file.clone(),
            line: at.map(|(line, _)| line),
            column: at.map(|(_, column)| column),
            field: Some(path.to_string()),
            message,
        }
    }

    /// `file:line:col` of `path` in this document (`file` alone when it cannot be located).
    pub(crate) fn place_of(&self, path: &FieldPath) -> String {
        match self.text.as_ref().and_then(|t| locate(&t.text, t.index, path)) {
            Some((line, column)) => format!("{}:{line}:{column}", self.file),
            None => self.file.clone(),
        }
    }
}

/// One problem in a source, located as precisely as the input allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub file: String,
    /// 1-based.
    pub line: Option<usize>,
    /// 1-based.
    pub column: Option<usize>,
    /// The field path, e.g. `spec.template.image`.
    pub field: Option<String>,
    pub message: String,
}

impl SpecError {
    /// Converts a `serde_yaml` error, moving its position and field path out of the message.
    fn from_yaml(file: &str, err: &serde_yaml::Error) -> Self {
        let location = err.location();
        let mut text = err.to_string();
        if let Some(at) = &location {
            let suffix = format!(" at line {} column {}", at.line(), at.column());
            if let Some(start) = text.find(&suffix) {
                text.replace_range(start..start + suffix.len(), "");
            }
        }
        let (field, message) = split_path(&text);
        Self {
            file: file.to_owned(),
            line: location.as_ref().map(serde_yaml::Location::line),
            column: location.as_ref().map(serde_yaml::Location::column),
            field,
            message,
        }
    }
}

/// `serde_yaml` writes errors as `path: message`; split that, and put the name of an unknown field
/// into the path, where a reader looks for it.
fn split_path(text: &str) -> (Option<String>, String) {
    let (path, message) = match text.split_once(": ") {
        Some((path, message))
            if !path.is_empty() && !path.contains(char::is_whitespace) && !path.contains('`') =>
        {
            (Some(path.to_owned()), message.to_owned())
        }
        _ => (None, text.to_owned()),
    };
    let unknown =
        message.strip_prefix("unknown field `").and_then(|rest| rest.split_once('`')).map(|(name, _)| name);
    let path = match (path, unknown) {
        (Some(path), Some(name)) => Some(format!("{path}.{name}")),
        (None, Some(name)) => Some(name.to_owned()),
        (path, None) => path,
    };
    (path, message)
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        f.write_str(": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in a source, displayed one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl From<Vec<SpecError>> for SpecErrors {
    fn from(errors: Vec<SpecError>) -> Self {
        Self(errors)
    }
}

/// What to do with one YAML document, judged from its apiVersion and kind.
enum Verdict {
    Skip,
    Pool,
    Invalid { field: &'static str, message: String },
}

fn judge(value: &Value) -> Verdict {
    let Value::Mapping(map) = value else {
        return Verdict::Skip;
    };
    let kind = map.get("kind").and_then(Value::as_str);
    let Some(api_version) = map.get("apiVersion").and_then(Value::as_str) else {
        return if kind == Some(KIND_POOL) {
            Verdict::Invalid {
                field: "apiVersion",
                message: format!("is missing: a Pool needs `apiVersion: {API_VERSION}`"),
            }
        } else {
            Verdict::Skip
        };
    };
    let group = api_version.split_once('/').map_or(api_version, |(group, _)| group);
    if group != GROUP {
        return Verdict::Skip;
    }
    if api_version != API_VERSION {
        return Verdict::Invalid {
            field: "apiVersion",
            message: format!("unsupported version {api_version:?}: this poolctl reads {API_VERSION}"),
        };
    }
    match kind {
        Some(KIND_POOL) => Verdict::Pool,
        Some(other) => Verdict::Invalid {
            field: "kind",
            message: format!("unknown kind {other:?} in {API_VERSION}: expected {KIND_POOL}"),
        },
        None => Verdict::Invalid { field: "kind", message: format!("is missing: expected {KIND_POOL}") },
    }
}

/// Parse every `poolctl.dev` document of one file (see the module docs for what is skipped).
/// Fails if any document of the file is bad; [`parse_documents`] also keeps the good ones.
pub fn load_documents(file: &str, text: &str) -> Result<Vec<Document>, Vec<SpecError>> {
    let (docs, errors) = parse_documents(file, text);
    if errors.is_empty() { Ok(docs) } else { Err(errors) }
}

/// Load all files of a source, given as (path relative to the source root, text) in the order
/// they should be read, and validate them together. Every error of every file is returned:
/// the good documents of a file with a bad one are still validated.
pub fn load_files<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<Document>, SpecErrors> {
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    for (file, text) in files {
        let (found, failed) = parse_documents(file, text);
        docs.extend(found);
        errors.extend(failed);
    }
    if let Err(failed) = super::validate_pools(&docs) {
        errors.extend(failed);
    }
    if errors.is_empty() { Ok(docs) } else { Err(SpecErrors(errors)) }
}

/// Parse what can be parsed: the good pool documents of one file, and the errors of the bad
/// ones. A bad document does not stop the documents after it; a YAML syntax error does,
/// because the parser cannot find its footing again after one.
pub fn parse_documents(file: &str, text: &str) -> (Vec<Document>, Vec<SpecError>) {
    let text: Arc<str> = Arc::from(text);
    let mut docs = Vec::new();
    let mut errors: Vec<SpecError> = Vec::new();
    // The stream is walked twice in step: once into a Value to read apiVersion and kind, and
    // once straight into a Pool, so that its errors keep their line and column.
    let raw = serde_yaml::Deserializer::from_str(&text);
    let typed = serde_yaml::Deserializer::from_str(&text);
    for (index, (raw, typed)) in raw.zip(typed).enumerate() {
        let value = match Value::deserialize(raw) {
            Ok(value) => value,
            Err(err) => {
                let err = SpecError::from_yaml(file, &err);
                // After a syntax error serde_yaml yields the same error for ever.
                if errors.last() == Some(&err) {
                    break;
                }
                errors.push(err);
                continue;
            }
        };
        let located = DocumentText { text: Arc::clone(&text), index };
        match judge(&value) {
            Verdict::Skip => {}
            Verdict::Invalid { field, message } => {
                let at = locate(&text, index, &FieldPath::of(field));
                errors.push(SpecError {
                    file: file.to_owned(),
                    line: at.map(|(line, _)| line),
                    column: at.map(|(_, column)| column),
                    field: Some(field.to_owned()),
                    message,
                });
            }
            Verdict::Pool => match Pool::deserialize(typed) {
                Ok(pool) => docs.push(Document { pool, file: file.to_owned(), text: Some(located) }),
                Err(err) => errors.push(SpecError::from_yaml(file, &err)),
            },
        }
    }
    (docs, errors)
}
