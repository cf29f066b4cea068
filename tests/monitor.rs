//! Up means stayed up (issue 27, item 0): a new instance counts as up only once it has stayed up
//! through `spec.rollout.monitor` (default 5s), so a template that crashes a second after it
//! starts never costs an old instance. Real containers, the poolctl binary, default settings.

use crate::support::scenario::Scenario;

#[tokio::test]
async fn a_template_that_crashes_after_it_starts_retires_nothing_and_reverting_it_converges() {
    let Some(s) = Scenario::with_docker().await else { return };
    // Default settings: no HEALTHCHECK, minReadySeconds 0, monitor left to its default.
    let v1 = s.pool().replicas(3).monitor(None);
    s.write_pool(&v1);
    s.run("apply", &["--yes"]).expect_code(0);
    let old: Vec<String> = s.running().await.into_iter().map(|c| c.name).collect();
    assert_eq!(old.len(), 3);

    for crash in ["sleep 1; exit 3", "exit 3"] {
        s.write_pool(&v1.clone().command(&["sh", "-c", crash]));
        let apply = s.run("apply", &["--yes"]).expect_code(1);
        let said = format!("{}{}", apply.stdout, apply.stderr);
        // A crash after the container came up is caught by the watch; one at once, before.
        let why = if crash.starts_with("sleep") {
            "the new template did not stay up"
        } else {
            "exited with code 3"
        };
        assert!(said.contains(why), "{crash}: {said}");
        let running: Vec<String> = s.running().await.into_iter().map(|c| c.name).collect();
        assert_eq!(running, old, "{crash}: every old instance still serves");
    }

    // Back to the template that works: plain applies converge.
    s.write_pool(&v1);
    s.run("apply", &["--yes"]).expect_code(0);
    assert_eq!(s.run("plan", &["--detailed-exitcode"]).code, 0, "converged");
    let running: Vec<String> = s.running().await.into_iter().map(|c| c.name).collect();
    assert_eq!(running, old, "the old instances are the current template again");
    assert_eq!(s.containers().await.len(), 3, "the failed new instances are gone");

    s.write_pool(&v1.clone().replicas(0));
    s.run("apply", &["--yes"]).expect_code(0);
    assert!(s.containers().await.is_empty(), "replicas 0 removes every instance");
}

#[tokio::test]
async fn a_healthcheck_that_fails_within_the_monitor_window_starts_it_again() {
    let Some(s) = Scenario::with_docker().await else { return };
    // Healthy at once; from 2s its HEALTHCHECK fails (unhealthy after three misses, about 5s),
    // and passes again from 9s: a flap inside a 12s window whose end would look healthy.
    let script = "touch /tmp/ready; sleep 2; rm /tmp/ready; sleep 7; touch /tmp/ready; exec sleep 100000";
    let pool = s
        .pool()
        .image(crate::support::docker::HEALTHY_IMAGE)
        .command(&["sh", "-c", script])
        .monitor(Some("12s"));
    s.write_pool(&pool);
    let apply = s.run("apply", &["--yes"]).expect_code(0);
    // Watched, not looked at once at the end: the flap was seen, and the window started again.
    let again = apply.stdout.lines().find(|l| l.contains("watching it stay up for 12s again"));
    let again = again.unwrap_or_else(|| panic!("the flap was not seen:\n{}", apply.stdout));
    assert!(again.contains("its container is not up") && again.contains("unhealthy"), "{again}");
}
