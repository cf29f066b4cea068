//! The binary's offline behaviour: validate, schema, help, and errors that need no Docker.

use std::fs;

use crate::support::scenario::Scenario;

fn repo_file(rel: &str) -> String {
    format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn schema_prints_the_committed_schema() {
    let s = Scenario::new();
    let out = s.run_bare(&["schema"]).expect_code(0);
    let committed = fs::read_to_string(repo_file("schema/pool.schema.json")).unwrap();
    assert_eq!(out.stdout, committed, "regenerate with: cargo run -- schema > schema/pool.schema.json");
}

#[test]
fn validate_accepts_the_examples() {
    let s = Scenario::new();
    let out = s.run_bare(&["validate", "--source", &repo_file("examples/quickstart")]).expect_code(0);
    assert!(out.stdout.contains("1 pool valid"), "{}", out.stdout);
    assert!(out.stdout.contains("quickstart (pool.yaml, 3 replicas, template "), "{}", out.stdout);
}

#[test]
fn validate_reports_every_error_once_with_its_place() {
    let s = Scenario::new();
    s.write(
        "a.yaml",
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: a\nspec:\n  replicas: 1\n  template:\n    image: x\n    imagee: y\n",
    );
    s.write(
        "b.yaml",
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: Bad_Name\nspec:\n  replicas: -1\n  template:\n    image: x\n",
    );
    let out = s.run("validate", &[]).expect_code(1);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    let err = &out.stderr;
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(err.matches("error: ").count(), 1, "printed once: {err}");
    assert!(err.contains("a.yaml:9:5: spec.template.imagee: unknown field `imagee`"), "{err}");
    assert!(err.contains("b.yaml:4:9: metadata.name:"), "{err}");
    assert!(err.contains("b.yaml:6:13: spec.replicas:"), "{err}");
}

#[test]
fn plan_refuses_a_bad_spec_before_touching_docker() {
    let s = Scenario::new();
    s.write("p.yaml", "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata: [\n");
    // An unreachable daemon proves the spec is checked first.
    let out = s.command("plan", &[]).env("DOCKER_HOST", "unix:///nonexistent/docker.sock").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("p.yaml:"), "{err}");
    assert!(!err.contains("nonexistent"), "{err}");
}

#[test]
fn an_unreachable_docker_daemon_is_one_clear_line() {
    let s = Scenario::new();
    let out = s
        .poolctl(&["plan", "--source", &repo_file("examples/quickstart")])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("/nonexistent/docker.sock"), "{err}");
}

#[test]
fn a_missing_source_names_it() {
    let s = Scenario::new();
    let out = s.run_bare(&["validate", "--source", "/no/such/pools"]).expect_code(1);
    assert!(out.stderr.contains("/no/such/pools"), "{}", out.stderr);
}

#[test]
fn help_explains_the_commands() {
    let s = Scenario::new();
    let out = s.run_bare(&["--help"]).expect_code(0);
    for word in ["plan", "apply", "validate", "schema", "cordon, drain"] {
        assert!(out.stdout.contains(word), "{word} missing from --help:\n{}", out.stdout);
    }
    let out = s.run_bare(&["plan", "--help"]).expect_code(0);
    assert!(out.stdout.contains("--detailed-exitcode"), "{}", out.stdout);
}

#[test]
fn a_usage_error_exits_1_not_2() {
    // 2 means "changes pending" with --detailed-exitcode; a typo must not read as that.
    let s = Scenario::new();
    let out = s.run_bare(&["plan", "--detailed-exitcod", "--source", "x"]).expect_code(1);
    assert!(out.stderr.contains("--detailed-exitcod"), "{}", out.stderr);
    s.run_bare(&["--version"]).expect_code(0);
}
