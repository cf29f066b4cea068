//! Disruption windows end to end (`spec.disruption.windows`), for a container-only pool against
//! the real Docker daemon: a deny window open now holds a template change back whole and says
//! until when, `apply --ignore-windows` rolls it all the same, and `watch` wakes by itself when
//! an allow window opens, and rolls then.
//!
//! The world's clock is the Docker daemon's, on this machine: the windows are written from this
//! process's clock, with a margin where it matters.

use poolctl::model::Container;

use crate::support::cli::Stream;
use crate::support::scenario::{PoolYaml, Scenario};

/// This scenario's pool of two, saying `v`.
fn spec(s: &Scenario, v: &str) -> PoolYaml {
    s.pool().replicas(2).env("V", v)
}

/// A cron schedule with seconds that matches `at` alone (once a year), in `zone`.
fn schedule_at(at: &jiff::Zoned) -> String {
    format!("{} {} {} {} {} *", at.second(), at.minute(), at.hour(), at.day(), at.month())
}

fn now_in(zone: &str) -> jiff::Zoned {
    jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::get(zone).expect("a known zone"))
}

fn ids(containers: &[Container]) -> Vec<String> {
    containers.iter().map(|c| c.id.clone()).collect()
}

#[tokio::test]
async fn a_deny_window_open_now_holds_a_template_change_and_ignore_windows_rolls_it() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&spec(&s, "1"));
    s.run("apply", &["--yes"]).expect_code(0);
    let before = s.containers().await;
    assert_eq!(before.len(), 2);

    // Opened ten minutes ago, in Berlin, for an hour.
    let opened = now_in("Europe/Berlin") - jiff::SignedDuration::from_mins(10);
    let schedule = schedule_at(&opened);
    let window = format!("{{kind: deny, schedule: \"{schedule}\", duration: 1h, timeZone: Europe/Berlin}}");
    s.write_pool(&spec(&s, "2").window(&window));
    let closes = (&opened + jiff::SignedDuration::from_hours(1)).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string();

    let plan = s.run("plan", &["--detailed-exitcode"]).expect_code(2);
    let said = format!(
        "rollout blocked by window spec.disruption.windows[0] (deny \"{schedule}\" for 1h) until {closes} \
         (Europe/Berlin): keeps"
    );
    assert!(plan.stdout.contains(&said), "{}", plan.stdout);
    assert!(plan.stdout.contains("held by disruption windows"), "{}", plan.stdout);
    let json = s.run("plan", &["-o", "json"]).expect_code(0);
    let json: serde_json::Value = serde_json::from_str(&json.stdout).expect("a JSON plan");
    let pool = &json["pools"][0];
    assert_eq!(pool["steps"].as_array().map(Vec::len), Some(0), "no disruptive step, no surge: {pool:#}");
    assert_eq!(pool["windows"][0]["until"], closes.as_str(), "{pool:#}");
    assert_eq!(pool["windows"][0]["window"], "spec.disruption.windows[0]");
    assert_eq!(json["summary"]["window_held"], 2);

    let status = s.run("status", &[]).expect_code(0);
    assert!(status.stdout.contains(&said), "{}", status.stdout);

    // apply holds it too: nothing is created, nothing retired.
    s.run("apply", &["--yes"]).expect_code(0);
    assert_eq!(ids(&s.containers().await), ids(&before));

    // --ignore-windows rolls it, and says so.
    let apply = s.run("apply", &["--yes", "--ignore-windows"]).expect_code(0);
    assert!(
        apply.stdout.contains("--ignore-windows: rollout goes ahead although blocked by window"),
        "{}",
        apply.stdout
    );
    let after = s.containers().await;
    assert_eq!(after.len(), 2, "{after:#?}");
    assert!(after.iter().all(|c| !ids(&before).contains(&c.id)), "every instance replaced: {after:#?}");
    assert!(
        after
            .iter()
            .all(|c| c.template_hash == after[0].template_hash && c.template_hash != before[0].template_hash)
    );
}

#[tokio::test]
async fn watch_rolls_by_itself_when_an_allow_window_opens() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&spec(&s, "1"));
    s.run("apply", &["--yes"]).expect_code(0);
    let before = s.containers().await;
    // Hour-long intervals: nothing but the window's opening can start the rollout.
    let mut watch = s.spawn("watch", &["--interval", "1h", "--resync", "1h"]);
    watch.wait_for(Stream::Stdout, "No changes. The world matches the source.");

    // An allow window that opens in 5 seconds.
    let opens = now_in("UTC") + jiff::SignedDuration::from_secs(5);
    let schedule = schedule_at(&opens);
    s.write_pool(&spec(&s, "2").window(&format!("{{kind: allow, schedule: \"{schedule}\", duration: 1h}}")));
    let at = opens.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string();
    let held = watch.wait_for(Stream::Stdout, "blocked by window");
    assert!(held.contains(&format!("(allow \"{schedule}\" for 1h) until {at} (UTC)")), "{held}");
    watch.applied();
    watch.signal("TERM");

    let after = s.containers().await;
    assert_eq!(after.len(), 2, "{after:#?}");
    assert!(after.iter().all(|c| !ids(&before).contains(&c.id)), "every instance replaced: {after:#?}");
    // Made once the window was open, by the daemon's clock.
    let opened = opens.timestamp().as_second();
    assert!(after.iter().all(|c| c.created >= opened), "created at {after:?}, window opened at {opened}");
}
