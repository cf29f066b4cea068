//! Day-to-day use through the binary: `status` (table, JSON, `-w`), saved plans, progress that
//! follows the plan's numbering, colour and pause.

use serde_json::Value;

use crate::support::cli::{Process, Stream};
use crate::support::scenario::Scenario;

#[tokio::test]
async fn status_shows_each_instance_under_column_headers_and_whether_the_pool_is_in_sync() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(2).env("GREETING", "hello"));
    s.run("apply", &["--yes"]).expect_code(0);
    let names: Vec<String> = s.running().await.into_iter().map(|c| c.name).collect();
    let pool = s.pool_name();

    let text = s.run("status", &[]).expect_code(0).stdout;
    let header = format!("Pool {pool}: 2/2 up, template ");
    assert!(text.lines().any(|l| l.starts_with(&header) && l.ends_with(", in sync")), "{text}");
    let columns: Vec<&str> = text.lines().find(|l| l.contains("NAME")).unwrap().split_whitespace().collect();
    assert_eq!(columns, ["NAME", "TEMPLATE", "CONTAINER", "STATUS"]);
    for name in &names {
        let row = text.lines().find(|l| l.contains(name.as_str())).unwrap_or_else(|| panic!("{text}"));
        assert!(row.contains("(current)") && row.contains("running") && row.contains("  Up "), "{row}");
    }

    // A new template: the same instances, now outdated, and the pool out of sync.
    s.write_pool(&s.pool().replicas(2).env("GREETING", "bonjour"));
    let json: Value = serde_json::from_str(&s.run("status", &["-o", "json"]).expect_code(0).stdout).unwrap();
    let view = &json["pools"][0];
    assert_eq!((view["name"].as_str(), view["in_sync"].as_bool()), (Some(pool), Some(false)));
    assert!(view["pending_steps"].as_u64() > Some(0), "{view}");
    let instances = view["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 2);
    assert!(instances.iter().all(|i| i["current"] == false && i["container"] == "running"), "{view}");
    assert!(s.running().await.iter().all(|c| names.contains(&c.name)), "status changed nothing");
}

#[tokio::test]
async fn status_w_shows_a_container_that_stopped_as_soon_as_docker_reports_it() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(1));
    s.run("apply", &["--yes"]).expect_code(0);
    let name = s.running().await.remove(0).name;

    // An interval of an hour: only the Docker event can bring the next status.
    let mut watch = s.spawn("status", &["-w", "-o", "json", "--interval", "1h"]);
    let first: Value = serde_json::from_str(&watch.wait_for(Stream::Stdout, "format_version")).unwrap();
    assert_eq!(first["pools"][0]["instances"][0]["container"], "running");
    s.docker().kill(&name).await;
    let next = watch.wait_until(Stream::Stdout, "a status with the container exited", |l| {
        serde_json::from_str::<Value>(l)
            .is_ok_and(|v| v["pools"][0]["instances"][0]["container"] != "running")
    });
    let next: Value = serde_json::from_str(&next).unwrap();
    assert_eq!(next["pools"][0]["in_sync"], false, "{next}");
    watch.assert_alive();
}

/// The instances a plan creates, in plan order, from its JSON.
fn created(plan: &Value) -> Vec<String> {
    let steps = plan["pools"].as_array().unwrap().iter().flat_map(|p| p["steps"].as_array().unwrap());
    steps.filter(|s| s["action"] == "create").map(|s| s["instance"].as_str().unwrap().to_owned()).collect()
}

/// Names of the scenario's running containers, sorted.
async fn running(s: &Scenario) -> Vec<String> {
    s.running().await.into_iter().map(|c| c.name).collect()
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

#[tokio::test]
async fn plan_and_apply_name_the_same_new_instances() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(2));
    let plan: Value = serde_json::from_str(&s.run("plan", &["-o", "json"]).expect_code(0).stdout).unwrap();
    let shown = created(&plan);
    assert_eq!(shown.len(), 2);
    let text = s.run("plan", &[]).expect_code(0).stdout;
    assert!(shown.iter().all(|n| text.contains(n.as_str())), "the text plan names them too:\n{text}");
    s.run("apply", &["--yes"]).expect_code(0);
    assert_eq!(running(&s).await, sorted(shown));
}

#[tokio::test]
async fn a_saved_plan_is_carried_out_exactly_across_batches_creating_the_names_it_showed() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(2).env("V", "1"));
    s.run("apply", &["--yes"]).expect_code(0);
    s.write_pool(&s.pool().replicas(2).env("V", "2"));
    let file = s.path("rollout.plan.json");
    let file = file.to_str().unwrap();
    let made = s.run("plan", &["--out", file]).expect_code(0);
    assert!(made.stdout.contains(&format!("poolctl apply {file}")), "{}", made.stdout);
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    // The `-o json` document, with what makes it a saved plan.
    let json: Value = serde_json::from_str(&s.run("plan", &["-o", "json"]).expect_code(0).stdout).unwrap();
    assert_eq!(json, saved, "plan -o json prints the saved plan");
    assert_eq!(saved["format_version"], 1);
    assert!(saved["revision"].as_str().unwrap().starts_with("content:"), "{saved}");
    let names = created(&saved);
    assert_eq!(names.len(), 2, "two batches of maxSurge 1");

    // No --source: the file names it; no question: it was reviewed when it was saved.
    let apply = s.run_bare(&["apply", file]).expect_code(0);
    assert!(apply.stdout.contains("Carrying out the saved plan"), "{}", apply.stdout);
    assert_eq!(running(&s).await, sorted(names));
    assert!(s.containers().await.iter().all(|c| c.state == poolctl::model::ContainerState::Running));
}

#[tokio::test]
async fn a_saved_plan_is_refused_once_the_world_changed_saying_what_changed() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(2).env("V", "1"));
    s.run("apply", &["--yes"]).expect_code(0);
    s.write_pool(&s.pool().replicas(2).env("V", "2"));
    let file = s.path("p.json");
    s.run("plan", &["--out", file.to_str().unwrap()]).expect_code(0);
    let victim = s.running().await.remove(0).name;
    s.docker().kill(&victim).await;
    let before = s.containers().await;

    let refused = s.run_bare(&["apply", file.to_str().unwrap()]).expect_code(1);
    assert!(refused.stderr.contains("is stale, nothing was changed"), "{}", refused.stderr);
    assert!(
        refused.stderr.contains(&format!("container {victim}: running then, exited now")),
        "{}",
        refused.stderr
    );
    assert_eq!(s.containers().await, before, "nothing was changed");
}

#[tokio::test]
async fn a_plan_saved_on_an_empty_pool_is_refused_once_the_pool_has_instances() {
    // terraform#24078: a plan made against no state must not be applied over state made since.
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(1));
    let file = s.path("empty.json");
    s.run("plan", &["--out", file.to_str().unwrap()]).expect_code(0);
    s.run("apply", &["--yes"]).expect_code(0);
    let existing = running(&s).await;

    let refused = s.run_bare(&["apply", file.to_str().unwrap()]).expect_code(1);
    let expected = format!("pool {} had no container when the plan was made; now it has 1", s.pool_name());
    assert!(refused.stderr.contains(&expected), "{}", refused.stderr);
    assert_eq!(running(&s).await, existing, "no second instance");
}

#[tokio::test]
async fn a_saved_plan_is_refused_once_the_source_changed() {
    let Some(mut s) = Scenario::with_docker().await else { return };
    s.init_git();
    s.write_pool(&s.pool().replicas(1).env("V", "1"));
    let first = s.commit("v1");
    let dir = s.dir().display().to_string();
    s.set_source(&["--source", &dir, "--ref", "main"]);
    let file = s.path("git.json");
    s.run("plan", &["--out", file.to_str().unwrap()]).expect_code(0);
    s.write_pool(&s.pool().replicas(1).env("V", "2"));
    let second = s.commit("v2");

    let refused = s.run_bare(&["apply", file.to_str().unwrap()]).expect_code(1);
    let expected = format!("the source moved from commit {first} to {second}");
    assert!(refused.stderr.contains(&expected), "{}", refused.stderr);
    assert!(s.containers().await.is_empty(), "nothing was created");
}

/// A second pool of the scenario, `<pool>-b`, labelled so that the guard removes it too.
fn second_pool(s: &Scenario, replicas: u32, version: &str) -> String {
    let pool = s.pool_name();
    let text = s.pool().replicas(replicas).env("V", version).to_string();
    text.replacen(&format!("name: {pool}"), &format!("name: {pool}-b"), 1)
}

/// `n. verb instance` of a plan's text, by number.
fn plan_steps(text: &str) -> Vec<(usize, String, String)> {
    text.lines()
        .filter_map(|l| {
            let (n, rest) = l.trim().split_once(". ")?;
            let mut words = rest.split_whitespace();
            Some((n.parse().ok()?, words.next()?.to_owned(), words.next()?.to_owned()))
        })
        .collect()
}

#[tokio::test]
async fn apply_numbers_each_step_as_the_plan_did_across_batches_and_pools() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write("a.yaml", &s.pool().replicas(2).env("V", "1").to_string());
    s.write("b.yaml", &second_pool(&s, 2, "1"));
    s.run("apply", &["--yes"]).expect_code(0);
    s.write("a.yaml", &s.pool().replicas(2).env("V", "2").to_string());
    s.write("b.yaml", &second_pool(&s, 2, "2"));

    let planned = plan_steps(&s.run("plan", &[]).expect_code(0).stdout);
    assert_eq!(planned.len(), 16, "{planned:?}");
    let apply = s.run("apply", &["--yes"]).expect_code(0).stdout;
    // The pools run side by side, yet each step keeps the number the plan gave it.
    let mut seen = Vec::new();
    for line in apply.lines().filter(|l| l.ends_with(" ...")) {
        let (number, rest) = line.trim_start_matches('[').split_once("] ").unwrap();
        let (n, total) = number.split_once('/').unwrap();
        assert_eq!(total, "16", "{line}");
        // Two pools run side by side: each line names its pool first.
        let (pool, rest) = rest.split_once(": ").unwrap_or_else(|| panic!("{line} names no pool"));
        let mut words = rest.split_whitespace();
        let step =
            (n.parse::<usize>().unwrap(), words.next().unwrap().to_owned(), words.next().unwrap().to_owned());
        assert!(step.2.starts_with(&format!("{pool}-")), "{line}: {} is not of pool {pool}", step.2);
        assert!(planned.contains(&step), "{line} is not step {n} of the plan {planned:?}");
        seen.push(step.0);
    }
    seen.sort_unstable();
    assert_eq!(seen, (1..=16).collect::<Vec<_>>(), "{apply}");
    assert!(apply.contains("-- looked at the world again: 8 steps to go, as planned"), "{apply}");
}

#[tokio::test]
async fn apply_o_json_writes_one_event_per_line_with_durations() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(2));
    let refused = s.run("apply", &["-o", "json"]).expect_code(1);
    assert!(refused.stderr.contains("pass --yes"), "{}", refused.stderr);
    let run = s.run("apply", &["--yes", "-o", "json"]).expect_code(0);
    let events: Vec<Value> =
        run.stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert_eq!(events[0]["event"], "plan");
    let shown = created(&events[0]["plan"]);
    let of = |kind: &str| events.iter().filter(|e| e["event"] == kind).collect::<Vec<_>>();
    let (starts, dones) = (of("start"), of("done"));
    assert_eq!((starts.len(), dones.len()), (4, 4), "{}", run.stdout);
    for start in &starts {
        assert_eq!(start["total"], 4, "{start}");
        let done = dones.iter().find(|d| d["step"] == start["step"]).unwrap_or_else(|| panic!("{start}"));
        assert_eq!((&done["instance"], &done["action"]), (&start["instance"], &start["action"]));
        assert!(done["seconds"].as_f64().is_some_and(|s| s >= 0.0), "{done}");
    }
    let created_now: Vec<&str> =
        starts.iter().filter(|e| e["action"] == "create").map(|e| e["instance"].as_str().unwrap()).collect();
    assert_eq!(created_now, shown);
    assert_eq!(events.last().unwrap()["event"], "end");
    assert_eq!(events.last().unwrap()["complete"], true);
    assert!(run.stderr.is_empty() || !run.stderr.contains('{'), "logs stay on stderr: {}", run.stderr);
}

/// `script` running poolctl, killed if the test ends first.
struct Pty(std::process::Child);

impl Pty {
    fn wait(&mut self) -> std::process::ExitStatus {
        self.0.wait().expect("wait for script")
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `poolctl args` under a pseudo-terminal: util-linux's `script`, which every CI image
/// with Docker has, rather than a pty crate for one test file. Its output is flushed to
/// `typescript` as it comes.
fn under_pty(s: &Scenario, args: &[&str], typescript: &std::path::Path, env: &[(&str, &str)]) -> Pty {
    let line: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_poolctl").to_owned())
        .chain(args.iter().map(|a| format!("'{a}'")))
        .collect();
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-q", "-f", "-e", "-c", &line.join(" ")]).arg(typescript);
    cmd.env("POOLCTL_CACHE_DIR", s.cache()).env_remove("RUST_LOG").env_remove("NO_COLOR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Pty(cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("script runs"))
}

#[tokio::test]
async fn on_a_terminal_a_live_line_says_what_a_long_step_waits_for_and_the_plan_is_coloured() {
    let Some(s) = Scenario::with_docker().await else { return };
    let script = std::process::Command::new("script").arg("--version").output();
    assert!(script.is_ok(), "util-linux `script` is needed for the pseudo-terminal tests");
    let gate = tempfile::tempdir().unwrap();
    let wait = "until test -f /gate/open; do sleep 0.1; done";
    let spec =
        s.pool().volume(&format!("{}:/gate:ro", gate.path().display())).bootstrap(&["sh", "-c", wait], None);
    s.write_pool(&spec);
    let typescript = s.path("typescript");
    let source = s.dir().display().to_string();
    let mut child = under_pty(&s, &["apply", "--yes", "--source", &source], &typescript, &[]);

    // The live line of the bootstrap, redrawn in place, says what it waits for; only then is
    // the gate opened.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let live = loop {
        let text = std::fs::read_to_string(&typescript).unwrap_or_default();
        let redrawn = text.split("\r\x1b[K").filter(|part| part.contains("[2/3] bootstrap "));
        if redrawn.filter(|part| part.contains("s, waiting for the bootstrap commands to finish")).count() > 1
        {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "no live line:\n{text:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    std::fs::write(gate.path().join("open"), "").unwrap();
    assert!(child.wait().success());
    let text = std::fs::read_to_string(&typescript).unwrap();
    assert!(text.contains("Apply complete: 3 steps done."), "{text:?}");
    assert!(text.contains("\r\x1b[K[2/3] bootstrap ") && text.contains(" \x1b[32mdone\x1b[0m ("), "{text:?}");
    assert!(live.contains("\x1b[32mcreate     \x1b[0m"), "create is green in the plan: {live:?}");

    // In a pipe: plain lines, no live line, no colour.
    std::fs::write(gate.path().join("open"), "").unwrap();
    s.write_pool(&spec.clone().env("V", "2"));
    let piped = s.run("apply", &["--yes"]).expect_code(0).stdout;
    assert!(!piped.contains('\x1b'), "{piped:?}");
    assert!(piped.contains("[2/5] bootstrap ") && piped.contains(" ...\n"), "{piped}");
}

#[tokio::test]
async fn no_color_and_color_never_keep_a_terminal_plain_and_color_always_paints_a_pipe() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(1));
    let source = s.dir().display().to_string();
    for (args, env) in [
        (vec!["-v", "plan", "--source", source.as_str()], vec![("NO_COLOR", "1")]),
        (vec!["-v", "--color", "never", "plan", "--source", source.as_str()], vec![]),
    ] {
        let typescript = s.path("plain-typescript");
        let mut child = under_pty(&s, &args, &typescript, &env);
        assert!(child.wait().success());
        let text = std::fs::read_to_string(&typescript).unwrap();
        assert!(text.contains("Plan: 1 to create"), "{text:?}");
        assert!(!text.contains('\x1b'), "{args:?} {env:?}: neither plan nor -v logs are coloured: {text:?}");
    }
    let typescript = s.path("coloured-typescript");
    let mut child = under_pty(&s, &["-v", "plan", "--source", &source], &typescript, &[]);
    assert!(child.wait().success());
    let text = std::fs::read_to_string(&typescript).unwrap();
    assert!(text.contains("\x1b[32mcreate"), "a terminal is coloured: {text:?}");
    let piped = s.run("plan", &["--color", "always"]).expect_code(0).stdout;
    assert!(piped.contains("\x1b[32mcreate"), "{piped:?}");
}

#[tokio::test]
async fn a_paused_pool_is_planned_and_shown_but_apply_changes_nothing_in_it() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(1).env("V", "1"));
    s.run("apply", &["--yes"]).expect_code(0);
    let before = s.containers().await;
    s.write("pool.yaml", &format!("{}  paused: true\n", s.pool().replicas(2).env("V", "2")));

    let plan = s.run("plan", &["--detailed-exitcode"]).expect_code(0).stdout;
    assert!(plan.lines().any(|l| l.starts_with(&format!("Pool {}: 2 replicas", s.pool_name())) && l.ends_with(", paused")), "{plan}");
    assert!(
        plan.contains("Steps held back (the pool is paused; apply and watch leave it as it is):"),
        "{plan}"
    );
    assert!(plan.lines().any(|l| l.trim_start().starts_with("- create ")), "unnumbered: {plan}");
    assert!(!plan.lines().any(|l| l.trim_start().starts_with("1. ")), "{plan}");
    assert!(plan.contains("No changes will be made."), "{plan}");
    let json: Value = serde_json::from_str(&s.run("plan", &["-o", "json"]).expect_code(0).stdout).unwrap();
    assert_eq!(json["pools"][0]["steps"], Value::Array(Vec::new()));
    assert!(json["pools"][0]["paused"]["steps"].as_array().is_some_and(|s| !s.is_empty()), "{json}");

    s.run("apply", &["--yes"]).expect_code(0);
    assert_eq!(s.containers().await, before, "apply changed nothing");
    let status: Value =
        serde_json::from_str(&s.run("status", &["-o", "json"]).expect_code(0).stdout).unwrap();
    assert_eq!(
        (status["pools"][0]["paused"].clone(), status["pools"][0]["in_sync"].clone()),
        (Value::Bool(true), Value::Bool(false))
    );
}

#[tokio::test]
async fn two_sigints_at_once_stop_watch_gracefully_as_one() {
    let Some(s) = Scenario::with_docker().await else { return };
    // The instance's bootstrap waits for a gate the test opens: the signals arrive mid-step.
    let gate = s.path("gate");
    std::fs::create_dir(&gate).unwrap();
    let wait = "until test -f /gate/open; do sleep 0.1; done";
    let pool =
        s.pool().volume(&format!("{}:/gate:ro", gate.display())).bootstrap(&["sh", "-c", wait], Some("2m"));
    s.write_pool(&pool);
    // A window of an hour: the second signal, sent once the first was seen, is within it
    // however slow the machine (the kernel merges two sent before the first is seen).
    let mut cmd = s.command("watch", &["--interval", "1h", "--resync", "1h"]);
    cmd.env("POOLCTL_SIGNAL_BURST", "1h");
    let mut watch = Process::spawn(cmd);
    watch.wait_until(Stream::Stdout, "the bootstrap under way", |l| {
        l.contains("] bootstrap ") && l.ends_with("...")
    });
    // What `timeout -s INT` to a process group delivers: two SIGINTs, one right after the other.
    watch.send("INT");
    watch.wait_for(Stream::Stderr, "stopping at the next step boundary");
    watch.send("INT");
    watch.wait_for(Stream::Stderr, "taken as the same one");
    std::fs::write(gate.join("open"), "").unwrap();
    let status = watch.wait();
    assert_eq!(status.code(), Some(0), "one graceful stop, not an exit at once:\n{}", watch.seen.join("\n"));
    assert!(watch.output(Stream::Stdout).contains("Stopped. Pool state"), "{}", watch.seen.join("\n"));
}

#[tokio::test]
async fn status_w_in_a_pipe_prints_again_only_when_a_fact_changes_not_the_uptime() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(1));
    s.run("apply", &["--yes"]).expect_code(0);
    let name = s.running().await.remove(0).name;

    let mut watch = s.spawn("status", &["-w", "-o", "json", "--interval", "100ms", "-v"]);
    let first: Value = serde_json::from_str(&watch.wait_for(Stream::Stdout, "format_version")).unwrap();
    let shown = first["pools"][0]["instances"][0]["docker_status"].as_str().unwrap().to_owned();
    // Observed again until Docker's text has moved on (`Up 1 second` -> `Up 2 seconds`), and once
    // more after that: no new document for it.
    loop {
        watch.wait_for(Stream::Stderr, "observed again: nothing changed");
        if s.running().await[0].status != shown {
            break;
        }
    }
    watch.wait_for(Stream::Stderr, "observed again: nothing changed");
    assert_eq!(watch.output(Stream::Stdout).lines().count(), 1, "{}", watch.seen.join("\n"));

    // A fact changes: the next document says it.
    s.docker().kill(&name).await;
    let next = watch.wait_for(Stream::Stdout, "format_version");
    let next: Value = serde_json::from_str(&next).unwrap();
    assert_ne!(next["pools"][0]["instances"][0]["container"], "running", "{next}");
    watch.assert_alive();
}

/// The names of the pools a plan or status document covers.
fn pool_names(doc: &Value) -> Vec<String> {
    doc["pools"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn pool_limits_plan_apply_and_status_to_the_pools_named() {
    let Some(s) = Scenario::with_docker().await else { return };
    let (a, b) = (s.pool_name().to_owned(), format!("{}-b", s.pool_name()));
    s.write_pool(&s.pool());
    s.write("other.yaml", &s.pool().named(&b).to_string());

    let plan: Value =
        serde_json::from_str(&s.run("plan", &["-o", "json", "--pool", &a]).expect_code(0).stdout).unwrap();
    assert_eq!(pool_names(&plan), [a.as_str()]);
    s.run("apply", &["--yes", "--pool", &a]).expect_code(0);
    let pools: Vec<String> = s.running().await.into_iter().map(|c| c.pool).collect();
    assert_eq!(pools, [a.as_str()], "only a was created");
    s.run("apply", &["--yes"]).expect_code(0);
    // The scenario's own helpers see pool a only: b's containers are asked of Docker by label.
    let of_b = || {
        let filter = format!("label=poolctl.dev/pool={b}");
        let out =
            std::process::Command::new("docker").args(["ps", "-q", "--filter", &filter]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let b_before = of_b();
    assert_eq!(b_before.lines().count(), 1, "{b_before}");

    // Both change; only a is rolled out. b, declared but not named, is never taken for a pool
    // no longer declared, not even with --prune.
    s.write_pool(&s.pool().env("V", "2"));
    s.write("other.yaml", &s.pool().named(&b).env("V", "2").to_string());
    s.run("apply", &["--yes", "--prune", "--pool", &a]).expect_code(0);
    assert_eq!(of_b(), b_before, "b left as it was");
    let status: Value =
        serde_json::from_str(&s.run("status", &["-o", "json", "--pool", &a]).expect_code(0).stdout).unwrap();
    assert_eq!(pool_names(&status), [a.as_str()]);
    assert_eq!(status["pools"][0]["in_sync"], true, "{status}");
    let status: Value =
        serde_json::from_str(&s.run("status", &["-o", "json", "--pool", &b]).expect_code(0).stdout).unwrap();
    assert_eq!((pool_names(&status), &status["pools"][0]["in_sync"]), (vec![b.clone()], &Value::Bool(false)));

    // A name the source does not declare is an error that lists those it does.
    for (command, args) in [
        ("plan", &["--pool", "nope"][..]),
        ("apply", &["--pool", "nope", "--yes"]),
        ("status", &["--pool", "nope"]),
    ] {
        let err = s.run(command, args).expect_code(1).stderr;
        assert!(
            err.contains("--pool nope: the source") && err.contains(&format!("declares: {a}, {b}")),
            "{command}: {err}"
        );
    }
}
