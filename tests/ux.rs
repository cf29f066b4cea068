//! Day-to-day use through the binary: `status` (table, JSON, `-w`), saved plans, progress that
//! follows the plan's numbering, colour and pause.

use serde_json::Value;

use crate::support::cli::Stream;
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
