//! End to end: the `poolctl` binary against the real Docker daemon, for container-only pools.
//!
//! Each scenario writes pool files into a temporary directory (or Git repository), runs the
//! binary, and reads the outcome back from Docker: the containers that exist, and the daemon's
//! own event log for what happened in between.

use std::fs;
use std::process::Command;
use std::time::SystemTime;

use poolctl::model::{Container, ContainerState};

use crate::support::cli::{Run, Stream};
use crate::support::scenario::{PoolYaml, Scenario, write_file};

/// This scenario's pool of `replicas`, saying `greeting`.
fn spec(s: &Scenario, replicas: u32, greeting: &str) -> PoolYaml {
    s.pool().replicas(replicas).env("GREETING", greeting)
}

/// Writes [`spec`] to the source.
fn write(s: &Scenario, replicas: u32, greeting: &str) {
    s.write_pool(&spec(s, replicas, greeting));
}

/// Applies `replicas` saying hello; returns the names of the running instances.
async fn applied(s: &Scenario, replicas: u32) -> Vec<String> {
    write(s, replicas, "hello");
    s.run("apply", &["--yes"]).expect_code(0);
    s.running().await.into_iter().map(|c| c.name).collect()
}

#[tokio::test]
async fn apply_creates_the_pool_and_then_has_nothing_to_do() {
    let Some(s) = Scenario::with_docker().await else { return };
    write(&s, 3, "hello");
    let plan = s.run("plan", &["--detailed-exitcode"]).expect_code(2);
    assert!(plan.stdout.contains("Plan: 3 to create, 0 to retire, 0 unchanged."), "{}", plan.stdout);
    assert!(s.containers().await.is_empty(), "plan changed nothing");

    let apply = s.run("apply", &["--yes"]).expect_code(0);
    assert!(apply.stdout.contains("Apply complete: 6 steps done."), "{}", apply.stdout);
    assert!(apply.stdout.contains("[1/6] create "), "{}", apply.stdout);
    let running = s.running().await;
    assert_eq!(running.len(), 3);
    let hash = &running[0].template_hash;
    for c in &running {
        assert_eq!(&c.template_hash, hash);
        assert!(c.name.starts_with(&format!("{}-{hash}-", s.pool_name())), "{}", c.name);
        assert_eq!(
            c.scope.as_deref(),
            Some(format!("path:{}", fs::canonicalize(s.dir()).unwrap().display()).as_str())
        );
    }

    let again = s.run("plan", &["--detailed-exitcode"]).expect_code(0);
    assert!(again.stdout.contains("No changes. The world matches the source."), "{}", again.stdout);
    s.run("apply", &["--yes"]).expect_code(0);
    assert_eq!(s.running().await.len(), 3);
}

#[tokio::test]
async fn a_template_change_rolls_over_without_dropping_below_replicas() {
    let Some(s) = Scenario::with_docker().await else { return };
    let old = applied(&s, 3).await;

    write(&s, 3, "bonjour");
    let plan = s.run("plan", &[]).expect_code(0);
    assert!(
        plan.stdout.contains("-      GREETING: hello") || plan.stdout.contains("-    GREETING: hello"),
        "{}",
        plan.stdout
    );
    assert!(plan.stdout.contains("GREETING: bonjour"), "{}", plan.stdout);
    assert!(plan.stdout.contains("Plan: 3 to create, 3 to retire, 0 unchanged."), "{}", plan.stdout);

    let since = SystemTime::now();
    s.run("apply", &["--yes"]).expect_code(0);
    let events = s.docker().events(since);

    // Replay the daemon's log from the known start: 3 running, 3 existing.
    let (mut running, mut existing) = (3i32, 3i32);
    let (mut min_running, mut max_existing) = (running, existing);
    for e in &events {
        match e.action.as_str() {
            "create" => existing += 1,
            "destroy" => existing -= 1,
            "start" => running += 1,
            "die" => running -= 1,
            _ => {}
        }
        min_running = min_running.min(running);
        max_existing = max_existing.max(existing);
    }
    let count = |a: &str| events.iter().filter(|e| e.action == a).count();
    assert_eq!((count("create"), count("destroy")), (3, 3), "{events:?}");
    assert!(min_running >= 3, "running pool containers dropped to {min_running}: {events:?}");
    assert!(max_existing <= 4, "{max_existing} pool containers existed at once: {events:?}");

    let now_running = s.running().await;
    assert_eq!(now_running.len(), 3);
    assert!(now_running.iter().all(|c| !old.contains(&c.name)), "every old instance was replaced");
    // Each old container was stopped before it was removed.
    for name in &old {
        let die = events.iter().position(|e| &e.name == name && e.action == "die");
        let destroy = events.iter().position(|e| &e.name == name && e.action == "destroy");
        assert!(die.is_some() && die < destroy, "{name}: {events:?}");
    }
}

#[tokio::test]
async fn scaling_down_retires_the_extra_instances_only() {
    let Some(s) = Scenario::with_docker().await else { return };
    write(&s, 3, "hello");
    s.run("apply", &["--yes"]).expect_code(0);
    let before = s.running().await;

    write(&s, 1, "hello");
    let plan = s.run("plan", &[]).expect_code(0);
    assert!(plan.stdout.contains("Plan: 0 to create, 2 to retire, 1 unchanged."), "{}", plan.stdout);
    s.run("apply", &["--yes"]).expect_code(0);
    let after = s.running().await;
    assert_eq!(after.len(), 1);
    assert!(before.iter().any(|c| c.name == after[0].name), "the kept instance is one of the old ones");
    assert_eq!(s.containers().await.len(), 1, "the retired containers are removed, not just stopped");
}

#[tokio::test]
async fn a_killed_container_is_replaced_by_the_next_apply() {
    let Some(s) = Scenario::with_docker().await else { return };
    write(&s, 3, "hello");
    s.run("apply", &["--yes"]).expect_code(0);
    let victim = s.running().await[1].name.clone();
    s.docker().kill(&victim).await;

    let plan = s.run("plan", &["--detailed-exitcode"]).expect_code(2);
    assert!(plan.stdout.contains("Plan: 1 to create, 1 to retire, 2 unchanged."), "{}", plan.stdout);
    assert!(plan.stdout.contains(&victim), "{}", plan.stdout);
    // Docker will not start it again (no restart policy): no blip, replaced without waiting.
    assert!(plan.stdout.contains(&format!("{victim}: unhealthy: exited (137): replace")), "{}", plan.stdout);
    s.run("apply", &["--yes"]).expect_code(0);
    let running = s.running().await;
    assert_eq!(running.len(), 3);
    assert!(s.containers().await.iter().all(|c| c.name != victim), "the dead container is removed");
}

#[tokio::test]
async fn a_failing_bootstrap_halts_with_the_old_instances_untouched() {
    let Some(s) = Scenario::with_docker().await else { return };
    let old = applied(&s, 2).await;

    // The bootstrap passes only once the gate file exists on the host: the same spec fails
    // first and succeeds later, so the retry below is not helped by a changed template.
    let gate = s.path("gate");
    fs::create_dir(&gate).unwrap();
    let gated = spec(&s, 2, "bonjour")
        .bootstrap(&["sh", "-c", "test -f /gate/open || { echo join refused >&2; exit 7; }"], Some("5s"))
        .volume(&format!("{}:/gate:ro", gate.display()));
    s.write_pool(&gated);
    let apply = s.run("apply", &["--yes"]).expect_code(1);
    assert!(apply.stdout.contains("Apply halted:"), "{}", apply.stdout);
    assert!(apply.stdout.contains("exited with code 7, its output:\n      join refused"), "{}", apply.stdout);
    assert!(apply.stdout.contains("not started: stop "), "{}", apply.stdout);
    assert!(apply.stderr.contains("apply halted"), "{}", apply.stderr);
    let running: Vec<String> = s.running().await.into_iter().map(|c| c.name).collect();
    assert_eq!(running.len(), 2, "only the old instances run: {running:?}");
    for name in &old {
        assert!(running.contains(name), "old instance {name} still serves: {running:?}");
    }
    let failed: Vec<String> =
        s.containers().await.into_iter().map(|c| c.name).filter(|n| !old.contains(n)).collect();
    assert_eq!(failed.len(), 1, "the failed instance is kept, stopped, for its logs");

    // Same spec, gate open: the next apply replaces the failed instance and converges.
    fs::write(gate.join("open"), "").unwrap();
    let plan = s.run("plan", &[]).expect_code(0);
    assert!(plan.stdout.contains(&failed[0]), "the failed instance is retired: {}", plan.stdout);
    s.run("apply", &["--yes"]).expect_code(0);
    let after = s.containers().await;
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(after.iter().all(|c| c.state == ContainerState::Running && !old.contains(&c.name)));
    assert!(after.iter().all(|c| c.name != failed[0]), "{after:?}");
}

#[tokio::test]
async fn a_missing_image_stops_apply_before_anything_changes() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&spec(&s, 2, "hello").image("poolctl-test-busybox:no-such-tag"));
    let apply = s.run("apply", &["--yes"]).expect_code(1);
    assert!(apply.stderr.contains("poolctl-test-busybox:no-such-tag"), "{}", apply.stderr);
    assert!(apply.stderr.contains("nothing was changed"), "{}", apply.stderr);
    assert!(s.containers().await.is_empty());
}

#[tokio::test]
async fn apply_without_a_terminal_or_yes_refuses() {
    let Some(s) = Scenario::with_docker().await else { return };
    write(&s, 1, "hello");
    let apply = s.run("apply", &[]).expect_code(1);
    assert!(apply.stderr.contains("pass --yes"), "{}", apply.stderr);
    assert!(s.containers().await.is_empty());
}

#[tokio::test]
async fn apply_dry_run_prints_the_plan_and_changes_nothing() {
    let Some(s) = Scenario::with_docker().await else { return };
    write(&s, 2, "hello");
    let dry = s.run("apply", &["--dry-run"]).expect_code(0);
    assert!(dry.stdout.contains("Plan: 2 to create, 0 to retire, 0 unchanged."), "{}", dry.stdout);
    assert!(!dry.stdout.contains("Do you want to perform these actions?"), "{}", dry.stdout);
    assert_eq!(dry.stdout.lines().last(), Some("Dry run: nothing was changed."), "{}", dry.stdout);
    // JSON says it twice: on the plan event, and as the last message.
    let json = s.run("apply", &["--dry-run", "-o", "json"]).expect_code(0).stdout;
    let events: Vec<serde_json::Value> = json.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!((events[0]["event"].as_str(), events[0]["dry_run"].as_bool()), (Some("plan"), Some(true)));
    assert_eq!(events.last().unwrap()["message"], "Dry run: nothing was changed.", "{json}");
    assert!(s.containers().await.is_empty());
}

#[tokio::test]
async fn a_pool_removed_from_the_source_is_kept_unless_pruned() {
    let Some(s) = Scenario::with_docker().await else { return };
    write(&s, 2, "hello");
    s.run("apply", &["--yes"]).expect_code(0);
    fs::remove_file(s.dir().join("pool.yaml")).unwrap();

    // A source with no pool left is refused unless it is empty on purpose.
    let refused = s.run("plan", &["--prune"]).expect_code(1);
    assert!(refused.stderr.contains("no pool found"), "{}", refused.stderr);
    // Left alone, but the world differs from the source: --detailed-exitcode says so.
    let plan = s.run("plan", &["--detailed-exitcode", "--allow-empty"]).expect_code(2);
    assert!(plan.stdout.contains("--prune"), "{}", plan.stdout);
    assert!(plan.stdout.contains("left alone: 1 pool no longer declared"), "{}", plan.stdout);
    s.run("apply", &["--yes", "--allow-empty"]).expect_code(0);
    assert_eq!(s.running().await.len(), 2, "a deleted file does not wipe the pool");

    let pruned = s.run("plan", &["--prune", "--detailed-exitcode", "--allow-empty"]).expect_code(2);
    assert!(pruned.stdout.contains("2 to retire"), "{}", pruned.stdout);
    s.run("apply", &["--yes", "--prune", "--allow-empty"]).expect_code(0);
    assert!(s.containers().await.is_empty());
}

#[tokio::test]
async fn json_plans_and_closed_pipes() {
    let Some(s) = Scenario::with_docker().await else { return };
    write(&s, 2, "hello");
    let json = s.run("plan", &["-o", "json"]).expect_code(0);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("valid JSON");
    assert_eq!(v["format_version"], 1);
    assert_eq!(v["summary"]["create"], 2);
    assert_eq!(v["pools"][0]["name"], s.pool_name());
    assert_eq!(v["pools"][0]["steps"][0]["action"], "create");

    // `poolctl plan | head -1`: the reader goes away early; poolctl must not panic.
    let mut child = s
        .command("plan", &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[tokio::test]
async fn a_new_commit_in_a_git_source_changes_the_plan() {
    let Some(mut s) = Scenario::with_docker().await else { return };
    let url = s.init_git().url();
    s.set_source(&["--source", &url, "--path", "pools"]);
    s.write("pools/pool.yaml", &spec(&s, 2, "hello").to_string());
    let first = s.commit("two workers");
    let run = |args: &[&str]| -> Run { s.run(args[0], &args[1..]) };

    let plan = run(&["plan"]).expect_code(0);
    assert!(plan.stdout.contains(&first[..7]), "the header names the commit: {}", plan.stdout);
    run(&["apply", "--yes"]).expect_code(0);
    assert_eq!(s.running().await.len(), 2);

    // An uncommitted edit is not desired state.
    s.write("pools/pool.yaml", &spec(&s, 2, "bonjour").to_string());
    let plan = run(&["plan", "--detailed-exitcode"]).expect_code(0);
    assert!(plan.stdout.contains("No changes."), "{}", plan.stdout);

    let second = s.commit("say bonjour");
    let plan = run(&["plan", "--detailed-exitcode"]).expect_code(2);
    assert!(plan.stdout.contains(&second[..7]), "{}", plan.stdout);
    assert!(plan.stdout.contains("Plan: 2 to create, 2 to retire, 0 unchanged."), "{}", plan.stdout);
    run(&["apply", "--yes"]).expect_code(0);
    let running = s.running().await;
    assert_eq!(running.len(), 2);
    // The new containers say which commit they came from.
    let out = Command::new("docker")
        .args(["inspect", "-f", "{{index .Config.Labels \"poolctl.dev/commit\"}}", &running[0].name])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), second);
}

#[tokio::test]
async fn an_interrupted_apply_stops_at_a_step_boundary_and_the_next_one_converges() {
    let Some(s) = Scenario::with_docker().await else { return };
    let old = applied(&s, 2).await;

    // A slow bootstrap gives the interrupt a step to land in.
    s.write_pool(&spec(&s, 2, "bonjour").bootstrap(&["sleep", "2"], None));
    let mut apply = s.spawn("apply", &["--yes"]);
    apply.wait_until(Stream::Stdout, "a bootstrap under way", |line| {
        line.contains("] bootstrap ") && line.trim_end().ends_with("...")
    });
    let status = apply.signal("INT");
    let (seen, stderr) = (apply.output(Stream::Stdout), apply.output(Stream::Stderr));
    assert_eq!(status.code(), Some(1), "{seen}\n{stderr}");
    assert!(seen.contains("Apply interrupted:"), "{seen}");
    // The step under way finished; nothing after it started.
    assert!(seen.contains("bootstrap") && seen.contains("done ("), "{seen}");
    assert!(!seen.contains("] stop "), "no retirement started after the interrupt: {seen}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let running: Vec<String> = s.running().await.into_iter().map(|c| c.name).collect();
    assert!(old.iter().all(|o| running.contains(o)), "old instances untouched: {running:?}");

    // The surge instance got as far as its bootstrap, never served, and was stopped.
    let surge: Vec<Container> = s.containers().await.into_iter().filter(|c| !old.contains(&c.name)).collect();
    assert_eq!(surge.len(), 1, "{surge:?}");
    assert_ne!(surge[0].state, ContainerState::Running, "{surge:?}");
    assert!(seen.contains(&format!("stopped {}: it never served", surge[0].name)), "{seen}");

    // Same spec, new run: it picks up from the world, replacing the unfinished instance too.
    s.run("apply", &["--yes"]).expect_code(0);
    let after = s.containers().await;
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(after.iter().all(|c| c.state == ContainerState::Running && !old.contains(&c.name)));
    assert!(after.iter().all(|c| c.name != surge[0].name), "{after:?}");
}

/// A directory and its pool file are one source: a pool applied from one is the other's, in
/// sync, and what only a sibling file declares is neither undeclared nor pruned.
#[tokio::test]
async fn a_directory_and_its_pool_file_are_one_source() {
    let Some(s) = Scenario::with_docker().await else { return };
    let first = applied(&s, 2).await;
    let file = s.dir().join("pool.yaml");
    let from_file = |args: &[&str]| Run::of(s.poolctl(args).arg("--source").arg(&file));
    let plan = from_file(&["plan", "--detailed-exitcode"]).expect_code(0);
    assert!(!plan.stdout.contains("another source"), "{}", plan.stdout);
    from_file(&["apply", "--yes"]).expect_code(0);
    let running: Vec<String> = s.running().await.into_iter().map(|c| c.name).collect();
    assert_eq!(running, first, "nothing to do");

    // A change through the file replaces the pool's instances; the directory sees it in sync.
    s.write_pool(&spec(&s, 2, "bonjour"));
    from_file(&["apply", "--yes"]).expect_code(0);
    assert!(s.running().await.iter().all(|c| !first.contains(&c.name)));
    s.run("plan", &["--detailed-exitcode"]).expect_code(0);

    // A sibling file's pool, applied from the directory, is left alone by the first file, even
    // with --prune.
    let name = format!("{}-sib", s.pool_name());
    let sibling = spec(&s, 1, "x").to_string().replacen(
        &format!("name: {}", s.pool_name()),
        &format!("name: {name}"),
        1,
    );
    assert!(sibling.contains(&name), "{sibling}");
    s.write("sibling.yaml", &sibling);
    s.run("apply", &["--yes"]).expect_code(0);
    let plan = from_file(&["plan", "--prune", "--detailed-exitcode"]).expect_code(0);
    assert!(!plan.stdout.contains(&name), "{}", plan.stdout);
}

#[tokio::test]
async fn a_second_source_declaring_the_same_pool_leaves_it_alone_unless_it_adopts_it() {
    let Some(s) = Scenario::with_docker().await else { return };
    let first = applied(&s, 2).await;

    // The same pool, declared differently, in another directory.
    let other = s.path("other");
    write_file(&other, "pool.yaml", &spec(&s, 2, "bonjour").to_string());
    let from_other = |args: &[&str]| Run::of(s.poolctl(args).arg("--source").arg(&other));
    // Left alone, yet different from this source: --detailed-exitcode says so.
    let plan = from_other(&["plan", "--detailed-exitcode"]).expect_code(2);
    assert!(plan.stdout.contains("created from another source"), "{}", plan.stdout);
    assert!(plan.stdout.contains("left alone: 1 pool of another source"), "{}", plan.stdout);
    from_other(&["apply", "--yes"]).expect_code(0);
    let running: Vec<String> = s.running().await.into_iter().map(|c| c.name).collect();
    assert_eq!(running, first, "the other source touched nothing");

    from_other(&["apply", "--yes", "--adopt"]).expect_code(0);
    let adopted = s.running().await;
    assert_eq!(adopted.len(), 2);
    assert!(adopted.iter().all(|c| !first.contains(&c.name)), "replaced under the adopting source");
    // Now the first source is the stranger.
    let plan = s.run("plan", &["--detailed-exitcode"]).expect_code(2);
    assert!(plan.stdout.contains("created from another source"), "{}", plan.stdout);
}

/// `spec.dependsOn`: when one commit changes both pools, `apps` waits for `system`. The plan
/// says so beforehand; `apps`' first creation comes after `system`'s last retirement, in one
/// apply.
#[tokio::test]
async fn a_pool_that_depends_on_another_rolls_out_after_it() {
    let Some(s) = Scenario::with_docker().await else { return };
    let (system, apps) = (s.pool_name().to_owned(), format!("{}-apps", s.pool_name()));
    let system_v = |v: &str| s.pool().replicas(2).env("V", v);
    let apps_v = |v: &str| s.pool().named(&apps).replicas(2).env("V", v).depends_on(&[system.as_str()]);
    s.write_pool(&system_v("1"));
    s.write("apps.yaml", &apps_v("1").to_string());
    s.run("apply", &["--yes"]).expect_code(0);

    s.write_pool(&system_v("2"));
    s.write("apps.yaml", &apps_v("2").to_string());
    let plan = s.run("plan", &[]).expect_code(0).stdout;
    assert!(
        plan.contains(&format!("Steps held back until pool {system} is in sync and serving (dependsOn)")),
        "{plan}"
    );
    let out = s.run("apply", &["--yes"]).expect_code(0).stdout;
    // The progress lines, not the plan printed before them.
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with('[')).collect();
    let last_system_remove = lines
        .iter()
        .rposition(|l| {
            l.contains(" remove ") && l.contains(" done") && l.contains(&system) && !l.contains(&apps)
        })
        .unwrap_or_else(|| panic!("no removal of {system}:\n{out}"));
    let first_apps_create = lines
        .iter()
        .position(|l| l.contains(" create ") && l.contains(&format!("{apps}-")))
        .unwrap_or_else(|| panic!("no creation of {apps}:\n{out}"));
    assert!(last_system_remove < first_apps_create, "{out}");
    let apps_now = s.docker().containers_of(&apps).await;
    assert_eq!(apps_now.len(), 2, "{apps_now:#?}");
    assert!(apps_now.iter().all(|c| c.state == ContainerState::Running), "{apps_now:#?}");
}
