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

use super::decode::{Problem, decode};
use super::locate::{FieldPath, escape_controls};
use super::tree::{Located, SpanMap, YamlNode, parse_stream};
use super::{API_VERSION, KIND_POOL, Pool};

/// The apiVersion group of poolctl documents.
const GROUP: &str = "poolctl.dev";

/// The largest pool file poolctl reads: far above any real one, low enough that a runaway
/// file fails fast instead of filling memory.
pub const MAX_FILE_BYTES: usize = 64 * 1024 * 1024;

/// One pool document and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub pool: Pool,
    /// The file, relative to the source root.
    pub file: String,
    /// Where each field of the document was written, so that later checks can point at a
    /// line. `None` for documents built in code; their errors then carry no line.
    pub spans: Option<Arc<SpanMap>>,
}

impl Document {
    fn locate(&self, path: &FieldPath) -> Option<(usize, usize)> {
        self.spans.as_ref().and_then(|spans| spans.locate(path))
    }

    /// An error about `path` in this document, located when the text is known.
    pub(crate) fn error_at(&self, path: &FieldPath, message: String) -> SpecError {
        SpecError::at(&self.file, self.locate(path), Some(path.to_string()), message)
    }

    /// `file:line:col` of `path` in this document (`file` alone when it cannot be located).
    pub(crate) fn place_of(&self, path: &FieldPath) -> String {
        match self.locate(path) {
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
    fn at(file: &str, at: Option<(usize, usize)>, field: Option<String>, message: String) -> Self {
        Self {
            file: file.to_owned(),
            line: at.map(|(line, _)| line),
            column: at.map(|(_, column)| column),
            field,
            message,
        }
    }

    fn from_problem(file: &str, problem: Problem) -> Self {
        let field = (!problem.path.is_root()).then(|| problem.path.to_string());
        Self::at(file, problem.at, field, problem.message)
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Everything here may come from a repository: escape what could drive a terminal.
        f.write_str(&escape_controls(&self.file))?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        f.write_str(": ")?;
        if let Some(field) = &self.field {
            write!(f, "{}: ", escape_controls(field))?;
        }
        f.write_str(&escape_controls(&self.message))
    }
}

/// Every problem found in a source, displayed one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.iter().map(SpecError::to_string).collect::<Vec<_>>().join("\n"))
    }
}

/// What to do with one YAML document, judged from its apiVersion and kind.
enum Verdict {
    Skip,
    Pool,
    /// About `field` of the document, or about the document as a whole.
    Invalid {
        field: Option<&'static str>,
        message: String,
    },
}

fn judge(root: &Located) -> Verdict {
    if let YamlNode::Seq(items) = &root.node
        && items.iter().any(|item| !matches!(judge(item), Verdict::Skip))
    {
        return Verdict::Invalid {
            field: None,
            message: "a top-level list is not a Pool document: write each Pool as a document of its own, \
                      separated by `---` lines"
                .to_owned(),
        };
    }
    if !matches!(root.node, YamlNode::Map(_)) {
        return Verdict::Skip;
    }
    let string = |key| match root.get(key).map(|v| &v.node) {
        Some(YamlNode::Str(s)) => Some(s.as_str()),
        _ => None,
    };
    let kind = string("kind");
    let Some(api_version) = string("apiVersion") else {
        return if kind == Some(KIND_POOL) {
            Verdict::Invalid {
                field: Some("apiVersion"),
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
            field: Some("apiVersion"),
            message: format!("unsupported version {api_version:?}: this poolctl reads {API_VERSION}"),
        };
    }
    match kind {
        Some(KIND_POOL) => Verdict::Pool,
        Some(other) => Verdict::Invalid {
            field: Some("kind"),
            message: format!("unknown kind {other:?} in {API_VERSION}: expected {KIND_POOL}"),
        },
        None => {
            Verdict::Invalid { field: Some("kind"), message: format!("is missing: expected {KIND_POOL}") }
        }
    }
}

/// Parse every `poolctl.dev` document of one file (see the module docs for what is skipped).
/// Fails if any document of the file is bad.
pub fn load_documents(file: &str, text: &str) -> Result<Vec<Document>, Vec<SpecError>> {
    let parsed = parse_file(file, text);
    if parsed.errors.is_empty() { Ok(parsed.good) } else { Err(parsed.errors) }
}

/// Load all files of a source, given as (path relative to the source root, text) in the order
/// they should be read, and validate them together. Every error of every file is returned:
/// the good documents of a file with a bad one are still validated, and so are documents with
/// bad fields, with defaults standing in for those fields, so that one run reports all.
pub fn load_files<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<Document>, SpecErrors> {
    let mut checked = Vec::new();
    let mut errors = Vec::new();
    for (file, text) in files {
        let parsed = parse_file(file, text);
        checked.extend(parsed.good);
        checked.extend(parsed.flawed);
        errors.extend(parsed.errors);
    }
    if let Err(failed) = super::validate_pools(&checked) {
        errors.extend(failed);
    }
    // No error means no flawed document either: every checked document is a good one.
    if errors.is_empty() { Ok(checked) } else { Err(SpecErrors(errors)) }
}

/// One file, read: its good pools, the pools that decoded only with defaults standing in for
/// bad fields (worth checking, never worth using), and every error. A bad document does not
/// stop the documents after it; a YAML syntax error does, because the parser cannot find its
/// footing again after one.
struct Parsed {
    good: Vec<Document>,
    flawed: Vec<Document>,
    errors: Vec<SpecError>,
}

fn parse_file(file: &str, text: &str) -> Parsed {
    let mut parsed = Parsed { good: Vec::new(), flawed: Vec::new(), errors: Vec::new() };
    if text.len() > MAX_FILE_BYTES {
        parsed.errors.push(SpecError::at(
            file,
            None,
            None,
            format!("is {} bytes long; pool files may have at most {MAX_FILE_BYTES} bytes", text.len()),
        ));
        return parsed;
    }
    // Editors on Windows start files with a byte-order mark; YAML allows it, and it is no
    // part of the first key.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for tree in parse_stream(text) {
        let tree = match tree {
            Ok(tree) => tree,
            Err(err) => {
                parsed.errors.push(SpecError::at(file, err.at, None, err.message));
                continue;
            }
        };
        match judge(&tree.root) {
            Verdict::Skip => {}
            Verdict::Invalid { field, message } => {
                let at = field.and_then(|f| tree.root.get(f)).unwrap_or(&tree.root).place();
                parsed.errors.push(SpecError::at(file, Some(at), field.map(str::to_owned), message));
            }
            Verdict::Pool => {
                let (pool, problems) = decode::<Pool>(&tree.root, tree.nodes);
                let flawed = !problems.is_empty();
                parsed.errors.extend(problems.into_iter().map(|p| SpecError::from_problem(file, p)));
                if let Some(pool) = pool {
                    let spans = Some(Arc::new(SpanMap::of(tree.root)));
                    let doc = Document { pool, file: file.to_owned(), spans };
                    if flawed { parsed.flawed.push(doc) } else { parsed.good.push(doc) }
                }
            }
        }
    }
    parsed
}
