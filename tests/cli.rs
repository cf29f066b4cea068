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

#[test]
fn every_command_explains_its_exit_statuses() {
    let s = Scenario::new();
    for command in ["plan", "apply", "watch", "validate", "schema", "completions"] {
        let out = s.run_bare(&[command, "--help"]).expect_code(0);
        for status in ["0 success", "1 error", "2 changes pending", "130"] {
            assert!(out.stdout.contains(status), "{command} --help lacks {status:?}:\n{}", out.stdout);
        }
    }
}

#[test]
fn a_typo_is_never_answered_with_a_destructive_flag() {
    let s = Scenario::new();
    for (command, typo) in
        [("plan", "--dryrun"), ("apply", "--dryrun"), ("watch", "--prun"), ("apply", "--adpot")]
    {
        let out = s.run_bare(&[command, typo, "--source", "x"]).expect_code(1);
        assert!(out.stderr.contains(typo), "{}", out.stderr);
        for flag in ["--prune", "--adopt"] {
            assert!(!out.stderr.contains(flag), "{command} {typo} suggests {flag}:\n{}", out.stderr);
        }
    }
    // Harmless suggestions stay.
    let out = s.run_bare(&["apply", "--dryrun", "--source", "x"]).expect_code(1);
    assert!(out.stderr.contains("similar argument exists: '--dry-run'"), "{}", out.stderr);
}

#[test]
fn completions_are_printed_for_each_shell() {
    let s = Scenario::new();
    for (shell, marker) in
        [("bash", "complete -F _poolctl"), ("zsh", "#compdef poolctl"), ("fish", "complete -c poolctl")]
    {
        let out = s.run_bare(&["completions", shell]).expect_code(0);
        assert!(out.stdout.contains(marker), "{shell}: {}", out.stdout);
        assert!(out.stdout.contains("detailed-exitcode"), "{shell} completes the flags");
    }
}

/// A valid pool file, for the cases below to break.
const GOOD: &str = "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: w\nspec:\n  replicas: 1\n  template:\n    image: x\n";

/// Bad and hostile pool files (issue 10): each must exit 1 with a clear, located message
/// (never a panic, never a hang), or, for the good ones, exit 0.
#[test]
fn validate_answers_every_hostile_input_clearly() {
    let deep = format!("a: {}\n", "[".repeat(100_000));
    let bomb = (1..9).fold("a0: &a0 [x,x,x,x,x,x,x,x,x]\n".to_owned(), |text, i| {
        let refs = vec![format!("*a{}", i - 1); 9].join(",");
        format!("{text}a{i}: &a{i} [{refs}]\n")
    });
    let bom = format!("\u{feff}{GOOD}");
    let huge_replicas = GOOD.replace("replicas: 1", "replicas: 1000000000000");
    let drain_zero = format!("{GOOD}  rollout:\n    drainTimeout: 0s\n");
    let all_at_once = format!(
        "{}    bogus: 1\n  rollout:\n    drainTimeout: 5 minutes\n    maxSurge: 0\n",
        GOOD.replace("replicas: 1", "replicas: -1")
    );
    let tagged = GOOD.replace("image: x", "image: !Ref x");
    let escape_key = GOOD.replace("image: x", "image: x\n    \"a\\e[2J\": 1");
    let cases: Vec<(&str, &str, i32, Vec<&str>)> = vec![
        ("alias to an unknown anchor", "a: *x\n", 1, vec!["p.yaml:1:4: alias references unknown anchor"]),
        ("10^5 nested [", &deep, 1, vec!["p.yaml:1:", "nested deeper than 64 levels"]),
        ("alias bomb", &bomb, 1, vec!["p.yaml:", "aliases expand to more than 100000 nodes"]),
        ("byte-order mark", &bom, 0, vec![]),
        ("control character", "a: 1\nb: 2\nc: x\u{1}y\n", 1, vec!["p.yaml:3:4: unexpected character"]),
        ("unterminated quote", "a: 1\nb: \"abc\nc: 2\n", 1, vec!["p.yaml:2:4: unclosed quote"]),
        ("unknown tag", &tagged, 1, vec!["p.yaml:8:", "unsupported tag `!Ref`"]),
        (
            "replicas 10^12",
            &huge_replicas,
            1,
            vec!["p.yaml:6:13: spec.replicas: must be at most 1000, got 1000000000000"],
        ),
        (
            "drainTimeout 0s",
            &drain_zero,
            1,
            vec!["p.yaml:10:19: spec.rollout.drainTimeout: must be longer than 0s"],
        ),
        (
            "control characters in a key",
            &escape_key,
            1,
            vec!["spec.template.a\\u{1b}[2J: unknown field `a\\u{1b}[2J`"],
        ),
        (
            "unknown field, bad duration and two semantic errors at once",
            &all_at_once,
            1,
            vec![
                "p.yaml:9:5: spec.template.bogus: unknown field `bogus`",
                "p.yaml:11:19: spec.rollout.drainTimeout: invalid duration \"5 minutes\"",
                "p.yaml:6:13: spec.replicas: must be 0 or more, got -1",
                "p.yaml:12:15: spec.rollout.maxSurge: maxSurge and maxUnavailable are both 0",
            ],
        ),
        ("the good file", GOOD, 0, vec![]),
    ];
    for (what, text, code, expected) in cases {
        let s = Scenario::new();
        s.write("p.yaml", text);
        let out = s.run("validate", &[]);
        assert_eq!(out.code, code, "{what}:\n{}{}", out.stdout, out.stderr);
        assert!(!out.stderr.contains("panicked"), "{what}: {}", out.stderr);
        assert!(!out.stderr.contains('\u{1b}'), "{what}: a raw escape reached the terminal");
        for part in expected {
            assert!(out.stderr.contains(part), "{what}: {part:?} missing from\n{}", out.stderr);
        }
    }
}
