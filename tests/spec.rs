//! The pool file end to end: loading, validation, error messages, the schema and the examples.

use poolctl::spec::{Document, SpecError, SpecErrors, load_documents, validate_pools};

/// Loads one file and validates it, returning every error as display lines.
fn errors_of(file: &str, text: &str) -> Vec<String> {
    let result = load_documents(file, text).and_then(|docs| validate_pools(&docs));
    match result {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(SpecError::to_string).collect(),
    }
}

#[test]
fn probe() {
    for text in [
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: a\nspec:\n  replicas: \"three\"\n  template:\n    image: x\n",
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: a\nspec:\n  replicas: 3\n  template:\n    image: x\n    imagee: y\n",
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: a\nspec:\n  replicas: 3\n  template:\n    image: x\n  rollout:\n    maxSurge: 2\n    drainTimeout: 5 minutes\n",
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: a\nspec:\n  replicas: 3\n  template:\n    image: [x\n",
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: a\nspec:\n  replicas: 3\n  template: {}\n",
        "a: 1\n---\napiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: a\n  name: b\nspec:\n  replicas: 3\n  template: {image: x}\n---\nkind: Pool\n",
        "a: b: c\n",
    ] {
        eprintln!("{:#?}", errors_of("f.yaml", text));
    }
}
