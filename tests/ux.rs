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
        serde_json::from_str::<Value>(l).is_ok_and(|v| v["pools"][0]["instances"][0]["container"] != "running")
    });
    let next: Value = serde_json::from_str(&next).unwrap();
    assert_eq!(next["pools"][0]["in_sync"], false, "{next}");
    watch.assert_alive();
}
