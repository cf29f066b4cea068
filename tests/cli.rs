//! The binary's offline behaviour: validate, schema, help, and errors that need no Docker.

use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::cli::Run;
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
// A table reads best in one piece.
#[allow(clippy::too_many_lines)]
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
    let upper_image = GOOD.replace("image: x", "image: UPPER:case");
    let spaced_image = GOOD.replace("image: x", "image: a b");
    let digest_image =
        GOOD.replace("image: x", &format!("image: localhost:5000/team/app:1.0@sha256:{}", "a".repeat(64)));
    let node_names = format!(
        "{GOOD}  node:\n    labels:\n      bad key: x\n      a/b/c: x\n      {}: x\n      ok: \"-bad\"\n      node-role.kubernetes.io/worker: \"\"\n    \
         taints:\n      - {{key: dedicated, effect: NoSchedule}}\n      - {{key: dedicated, effect: NoSchedule}}\n      \
         - {{key: x, value: a b, effect: Sometimes}}\n",
        "n".repeat(64)
    );
    let container_label = GOOD.replace("image: x", "image: x\n    labels: {\"a=b\": x, \"team\": infra}");
    let percentages = format!(
        "{}  rollout:\n    maxSurge: 25%\n    maxUnavailable: 25%\n",
        GOOD.replace("replicas: 1", "replicas: 3")
    );
    let over_100 = format!("{GOOD}  rollout:\n    maxUnavailable: 150%\n");
    let rounds_to_zero = format!(
        "{}  rollout:\n    maxSurge: 0\n    maxUnavailable: 25%\n",
        GOOD.replace("replicas: 1", "replicas: 3")
    );
    let not_a_percentage = format!("{GOOD}  rollout:\n    maxSurge: 2.5%\n");
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
        (
            "an upper-case image",
            &upper_image,
            1,
            vec![
                "p.yaml:8:12: spec.template.image: invalid image reference \"UPPER:case\": the repository name \"UPPER\" must be lowercase",
            ],
        ),
        (
            "an image with a space",
            &spaced_image,
            1,
            vec!["p.yaml:8:12: spec.template.image: invalid image reference \"a b\": it contains ' '"],
        ),
        ("an image with registry, port, tag and digest", &digest_image, 0, vec![]),
        (
            "Node labels and taints Kubernetes refuses",
            &node_names,
            1,
            vec![
                "spec.node.labels.bad key: the name part of \"bad key\" contains ' '",
                "spec.node.labels.a/b/c: \"a/b/c\" has more than one '/'",
                "is 64 characters long; at most 63 are allowed",
                "spec.node.labels.ok: the value \"-bad\" must start and end with a letter or digit",
                "spec.node.taints[1].key: taint \"dedicated\" with effect NoSchedule is already declared at spec.node.taints[0]",
                "spec.node.taints[2].value: the value \"a b\" contains ' '",
                "spec.node.taints[2].effect: unknown taint effect \"Sometimes\"",
            ],
        ),
        (
            "a container label Docker cannot express",
            &container_label,
            1,
            vec!["spec.template.labels.a=b: the label key \"a=b\" contains '='"],
        ),
        ("maxSurge and maxUnavailable as percentages", &percentages, 0, vec![]),
        (
            "maxUnavailable over 100%",
            &over_100,
            1,
            vec!["p.yaml:10:21: spec.rollout.maxUnavailable: a percentage must be at most 100%, got 150%"],
        ),
        (
            "percentages that round both to 0",
            &rounds_to_zero,
            1,
            vec![
                "spec.rollout.maxSurge: maxSurge and maxUnavailable are both 0 (0 and 25% of 3 replicas round to 0: maxSurge rounds up, maxUnavailable down)",
            ],
        ),
        (
            "a percentage that is not whole",
            &not_a_percentage,
            1,
            vec![
                "p.yaml:10:15: spec.rollout.maxSurge: invalid value \"2.5%\": expected a whole number such as 1, or a percentage of replicas such as 25%",
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

/// Runs `poolctl args...` with no Docker daemon to reach (every case below must be answered
/// before Docker is needed), and kills it should it hang, so that a regression fails instead
/// of blocking the suite.
fn run_offline(s: &Scenario, args: &[&str]) -> Run {
    let mut child = s
        .poolctl(args)
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("poolctl starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("poolctl can be waited for").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("poolctl {args:?} did not exit by itself:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Run::from_output(&child.wait_with_output().unwrap())
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// One case of the table below: what it is, the arguments, the exit code, what stderr says and
/// what nothing may print.
type SourceCase<'a> = (&'a str, Vec<&'a str>, i32, Vec<&'a str>, Vec<&'a str>);

/// Sources that cannot give a desired state (issue 10): each must exit 1 with one clear
/// message that says what is wrong, never a password, a raw control character or a hang.
// A table reads best in one piece.
#[allow(clippy::too_many_lines)]
#[test]
fn every_unreadable_or_empty_source_is_one_clear_error() {
    let s = Scenario::new();
    let tmp = tempfile::tempdir().unwrap();
    let path = |name: &str| tmp.path().join(name).to_str().unwrap().to_owned();

    let fifo = path("pools.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success());

    let latin1 = path("latin1");
    fs::create_dir(&latin1).unwrap();
    fs::write(tmp.path().join("latin1/p.yaml"), b"a: 1\nb: caf\xe9\n").unwrap();

    let escapes = path("escapes");
    fs::create_dir(&escapes).unwrap();
    fs::write(tmp.path().join("escapes/p\u{1b}[2J.yaml"), "a: *x\n").unwrap();
    let missing_escape = path("gone\u{1b}[2J");

    let empty_repo = path("empty.git");
    fs::create_dir(&empty_repo).unwrap();
    git(tmp.path(), &["init", "-q", "--bare", "empty.git"]);
    let empty_url = format!("file://{empty_repo}");

    let headless = path("headless");
    fs::create_dir(&headless).unwrap();
    git(tmp.path(), &["init", "-q", "-b", "dev", "headless"]);
    fs::write(tmp.path().join("headless/pool.yaml"), GOOD).unwrap();
    git(tmp.path().join("headless").as_path(), &["add", "."]);
    git(tmp.path().join("headless").as_path(), &["commit", "-q", "-m", "a pool on dev"]);
    git(tmp.path().join("headless").as_path(), &["symbolic-ref", "HEAD", "refs/heads/main"]);
    let headless_url = format!("file://{headless}");

    let no_pool = path("manifests");
    fs::create_dir(&no_pool).unwrap();
    fs::write(tmp.path().join("manifests/deploy.yaml"), "apiVersion: apps/v1\nkind: Deployment\n").unwrap();
    let empty_dir = path("nothing");
    fs::create_dir(&empty_dir).unwrap();

    let bad_spec = path("bad");
    fs::create_dir(&bad_spec).unwrap();
    fs::write(tmp.path().join("bad/p.yaml"), GOOD.replace("replicas: 1", "replicas: -1")).unwrap();

    let no_pool_found = "no pool found in ";
    let cases: Vec<SourceCase<'_>> = vec![
        (
            "a password in an https URL",
            vec!["validate", "--source", "https://u:s3cret@127.0.0.1:1/pools.git"],
            1,
            vec!["cannot fetch https://127.0.0.1:1/pools.git"],
            vec!["s3cret", "u@"],
        ),
        // A token as the user name, a form GitHub documents (issue 31).
        (
            "a token as the user name of an https URL",
            vec!["plan", "--source", "https://ghp_TOKEN@127.0.0.1:1/x.git"],
            1,
            vec!["cannot read the source https://127.0.0.1:1/x.git: cannot fetch https://127.0.0.1:1/x.git"],
            vec!["ghp_TOKEN"],
        ),
        (
            "a token as the user name, logged at -vv",
            vec!["plan", "-vv", "--source", "https://ghp_TOKEN@127.0.0.1:1/x.git", "--ref", "main"],
            1,
            vec!["cannot fetch https://127.0.0.1:1/x.git"],
            vec!["ghp_TOKEN"],
        ),
        (
            "watch: a token as the user name",
            vec!["watch", "-v", "--source", "https://ghp_TOKEN@127.0.0.1:1/x.git"],
            1,
            vec!["watching https://127.0.0.1:1/x.git @ HEAD", "watch cannot start"],
            vec!["ghp_TOKEN"],
        ),
        (
            "a password in an scp-like address",
            vec!["plan", "--source", "u:s3cret@git.example.com:pools", "--ref", "main"],
            1,
            vec!["Git repository not found: git.example.com:pools"],
            vec!["s3cret", "u@"],
        ),
        (
            "a user name in an scp-like address",
            vec!["plan", "--source", "ghp_TOKEN@127.0.0.1:pools.git"],
            1,
            vec!["cannot fetch 127.0.0.1:pools.git"],
            vec!["ghp_TOKEN"],
        ),
        (
            "a FIFO",
            vec!["validate", "--source", &fifo],
            1,
            vec!["is a FIFO (named pipe), not a pool file or a directory"],
            vec![],
        ),
        (
            "a device",
            vec!["plan", "--source", "/dev/null"],
            1,
            vec!["/dev/null is a character device"],
            vec![],
        ),
        (
            "a file that is not UTF-8",
            vec!["validate", "--source", &latin1],
            1,
            vec!["p.yaml is not UTF-8 text: line 2, byte 7 (byte 11 of the file) is 0xe9"],
            vec![],
        ),
        (
            "control characters in a file name",
            vec!["validate", "--source", &escapes],
            1,
            vec!["p\\u{1b}[2J.yaml:1:4: alias references unknown anchor"],
            vec![],
        ),
        (
            "control characters in a missing source",
            vec!["validate", "--source", &missing_escape],
            1,
            vec!["source not found: ", "gone\\u{1b}[2J"],
            vec![],
        ),
        (
            "an empty repository",
            vec!["validate", "--source", &empty_url],
            1,
            vec!["no ref could be resolved in ", "the repository is empty", "--ref"],
            vec![],
        ),
        (
            "a HEAD that names no branch",
            vec!["validate", "--source", &headless_url],
            1,
            vec![
                "no ref could be resolved in ",
                "its HEAD names no commit",
                "pass --ref with one of its branches (dev)",
            ],
            vec![],
        ),
        (
            "the branch that HEAD misses, named",
            vec!["validate", "--source", &headless_url, "--ref", "dev"],
            0,
            vec![],
            vec![],
        ),
        (
            "validate: no pool in the folder",
            vec!["validate", "--source", &no_pool],
            1,
            vec![
                no_pool_found,
                "its one YAML file has no document with `apiVersion: poolctl.dev/v1alpha1`",
                "--allow-empty",
            ],
            vec![],
        ),
        (
            "plan: no pool in the folder",
            vec!["plan", "--source", &no_pool],
            1,
            vec![no_pool_found],
            vec!["nonexistent"],
        ),
        (
            "apply: no pool, not even a YAML file",
            vec!["apply", "--yes", "--source", &empty_dir],
            1,
            vec![no_pool_found, "it has no .yaml or .yml file"],
            vec![],
        ),
        (
            "a typo in --path",
            vec!["validate", "--source", tmp.path().to_str().unwrap(), "--path", "manifest"],
            1,
            vec!["source not found: "],
            vec![],
        ),
        (
            "validate --allow-empty",
            vec!["validate", "--allow-empty", "--source", &no_pool],
            0,
            vec![],
            vec![],
        ),
        (
            "watch: a source that does not exist",
            vec!["watch", "--source", &missing_escape],
            1,
            vec!["watch cannot start", "source not found"],
            vec![],
        ),
        (
            "watch: a source with errors",
            vec!["watch", "--source", &bad_spec],
            1,
            vec!["watch cannot start", "p.yaml:6:13: spec.replicas: must be 0 or more"],
            vec![],
        ),
        (
            "watch: a source with no pool",
            vec!["watch", "--source", &no_pool],
            1,
            vec!["watch cannot start", no_pool_found],
            vec![],
        ),
        (
            "watch: an empty repository",
            vec!["watch", "--source", &empty_url],
            1,
            vec!["watch cannot start", "the repository is empty"],
            vec![],
        ),
    ];
    for (what, args, code, expected, absent) in cases {
        let out = run_offline(&s, &args);
        let all = format!("{}{}", out.stdout, out.stderr);
        assert_eq!(out.code, code, "{what}:\n{all}");
        assert!(!all.contains("panicked"), "{what}: {all}");
        assert!(!all.contains('\u{1b}'), "{what}: a raw escape reached the terminal: {all:?}");
        for part in expected {
            assert!(out.stderr.contains(part), "{what}: {part:?} missing from\n{}", out.stderr);
        }
        for part in absent {
            assert!(!all.contains(part), "{what}: {part:?} printed:\n{all}");
        }
        if code == 1 {
            assert_eq!(
                out.stderr.matches("error: ").count(),
                1,
                "{what}: one error, printed once:\n{}",
                out.stderr
            );
        }
    }
}

#[test]
fn log_lines_say_what_happened_and_only_verbose_ones_say_where() {
    let s = Scenario::new();
    s.write(
        "p.yaml",
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: a\nspec:\n  replicas: x\n",
    );
    // watch logs that it starts before it finds the spec invalid and gives up.
    let plain = s.run("watch", &[]).expect_code(1).stderr;
    let line = plain.lines().find(|l| l.contains("INFO")).unwrap_or_else(|| panic!("{plain}"));
    assert!(line.contains(" INFO watching "), "{line}");
    assert!(!plain.contains("poolctl::"), "no module path without -v:\n{plain}");
    let verbose = s.run("watch", &["-v"]).expect_code(1).stderr;
    assert!(verbose.contains("INFO poolctl::watch: watching "), "{verbose}");
}

#[test]
fn version_prints_the_version_as_text_or_json() {
    let s = Scenario::new();
    let version = env!("CARGO_PKG_VERSION");
    let text = s.run_bare(&["version"]).expect_code(0).stdout;
    assert!(text.starts_with(&format!("poolctl {version}")) && text.lines().count() == 1, "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&s.run_bare(&["version", "-o", "json"]).expect_code(0).stdout).unwrap();
    assert_eq!((json["name"].as_str(), json["version"].as_str()), (Some("poolctl"), Some(version)), "{json}");
}
