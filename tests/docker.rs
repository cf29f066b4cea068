//! The Docker backend against the real daemon: what it creates, what it observes, and how it
//! reports failures.

use std::time::Duration;

use poolctl::backend::docker::{DockerBackend, Endpoint, Timeouts};
use poolctl::backend::{BackendError, Containers};
use poolctl::model::labels;
use poolctl::model::{ContainerState, Health};

use crate::support::docker::{HEALTHY_IMAGE, IMAGE, TestDocker, docker};

/// Generous bounds: they only keep a broken test from hanging, nothing is timed.
const UP: Duration = Duration::from_secs(60);
const GRACE: Duration = Duration::from_secs(10);

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

#[tokio::test]
async fn create_then_list_reports_labels_state_and_settings() {
    let Some(d) = docker().await else { return };
    let mut spec = d.container("a");
    spec.labels.insert(labels::TEMPLATE.to_owned(), r#"{"image":"x"}"#.to_owned());
    spec.labels.insert(labels::SCOPE.to_owned(), "dir:/somewhere".to_owned());
    spec.env.insert("GREETING".to_owned(), "hello there".to_owned());
    spec.tmpfs.push("/scratch".to_owned());
    d.backend.create(&spec).await.expect("create");

    let listed = d.containers().await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let c = &listed[0];
    assert_eq!(c.name, spec.name);
    assert_eq!(c.pool, d.pool);
    assert_eq!(c.template_hash, "test-hash");
    assert_eq!(c.template.as_deref(), Some(r#"{"image":"x"}"#));
    assert_eq!(c.scope.as_deref(), Some("dir:/somewhere"));
    assert_eq!(c.image, IMAGE);
    assert_eq!(c.state, ContainerState::Running);
    assert_eq!(c.health, Health::None);
    assert!(c.created > 1_600_000_000, "created = {}", c.created);
    assert!(!c.id.is_empty());

    // Hostname = name, env and tmpfs as asked.
    let run =
        async |cmd: &str| d.backend.exec(&spec.name, &argv(&["sh", "-c", cmd]), UP).await.expect("exec");
    assert_eq!(run("hostname").await.output.trim(), spec.name);
    assert_eq!(run("echo \"$GREETING\"").await.output.trim(), "hello there");
    let mounts = run("grep ' /scratch ' /proc/mounts").await;
    assert_eq!(mounts.exit_code, 0, "no tmpfs at /scratch: {}", mounts.output);
    assert!(mounts.output.starts_with("tmpfs "), "{}", mounts.output);
}

/// The calls one `list` makes: one, plus one inspect for each container (any test's, as the
/// daemon is shared) that restarts or fails or starts its HEALTHCHECK, whose since-when the
/// list does not say. Healthy running containers, however many, cost nothing more.
async fn calls_of_one_list(d: &TestDocker) -> (usize, u64, u64) {
    let before = d.backend.api_calls();
    let all = d.backend.list().await.expect("list");
    let calls = d.backend.api_calls() - before;
    let inspected = all
        .iter()
        .filter(|c| {
            c.state == ContainerState::Restarting
                || (c.state == ContainerState::Running
                    && matches!(c.health, Health::Unhealthy | Health::Starting))
        })
        .count();
    let mine = all.iter().filter(|c| c.pool == d.pool).count();
    // One list of containers and one of the records (volumes), whatever the pool size.
    (mine, calls, 2 + inspected as u64)
}

#[tokio::test]
async fn a_list_is_two_api_calls_whatever_the_pool_size() {
    let Some(d) = docker().await else { return };
    d.backend.create(&d.container("0")).await.expect("create");
    let (mine, calls, expected) = calls_of_one_list(&d).await;
    assert_eq!(mine, 1);
    assert_eq!(calls, expected);

    for i in 1..5 {
        d.backend.create(&d.container(&i.to_string())).await.expect("create");
    }
    let (mine, calls, expected) = calls_of_one_list(&d).await;
    assert_eq!(mine, 5);
    assert_eq!(calls, expected, "five of this pool cost no more than one");
}

#[tokio::test]
async fn exec_reports_exit_code_and_both_streams() {
    let Some(d) = docker().await else { return };
    let spec = d.container("x");
    d.backend.create(&spec).await.expect("create");
    let out = d
        .backend
        .exec(&spec.name, &argv(&["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"]), UP)
        .await
        .expect("exec");
    assert_eq!(out.exit_code, 3);
    assert!(out.output.contains("to-stdout"), "{:?}", out.output);
    assert!(out.output.contains("to-stderr"), "{:?}", out.output);

    let ok = d.backend.exec(&spec.name, &argv(&["true"]), UP).await.expect("exec");
    assert_eq!(ok, poolctl::backend::ExecOutput { exit_code: 0, output: String::new() });
}

#[tokio::test]
async fn exec_output_is_capped() {
    let Some(d) = docker().await else { return };
    let spec = d.container("cap");
    d.backend.create(&spec).await.expect("create");
    let script = "i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done";
    let out = d.backend.exec(&spec.name, &argv(&["sh", "-c", script]), UP).await.expect("exec");
    assert_eq!(out.exit_code, 0);
    assert!(out.output.len() < 8 * 1024, "{} bytes kept", out.output.len());
    assert!(
        out.output.ends_with("line-19999\n"),
        "the end is kept: {:?}",
        &out.output[out.output.len() - 40..]
    );
}

#[tokio::test]
async fn exec_times_out() {
    let Some(d) = docker().await else { return };
    let spec = d.container("slow");
    d.backend.create(&spec).await.expect("create");
    let err = d
        .backend
        .exec(&spec.name, &argv(&["sleep", "600"]), Duration::from_millis(500))
        .await
        .expect_err("sleep 600 outlasts the timeout");
    assert!(matches!(err, BackendError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains(&spec.name), "{err}");
}

#[tokio::test]
async fn exec_in_a_missing_container_is_not_found() {
    let Some(d) = docker().await else { return };
    let err = d.backend.exec(&d.name("ghost"), &argv(&["true"]), UP).await.expect_err("no container");
    assert!(matches!(err, BackendError::NotFound(_)), "{err:?}");
}

#[tokio::test]
async fn wait_up_waits_for_a_healthcheck_to_pass() {
    let Some(d) = docker().await else { return };
    let mut spec = d.container("h");
    spec.image = HEALTHY_IMAGE.to_owned();
    d.backend.create(&spec).await.expect("create");
    d.backend.wait_up(&spec.name, UP).await.expect("comes up healthy");
    let listed = d.containers().await;
    assert_eq!(listed[0].health, Health::Healthy, "{listed:?}");
    assert!(listed[0].is_up());
}

#[tokio::test]
async fn wait_up_fails_when_the_healthcheck_fails() {
    let Some(d) = docker().await else { return };
    let mut spec = d.container("sick");
    spec.image = HEALTHY_IMAGE.to_owned();
    // Never creates /tmp/ready, so the check fails three times and the container turns unhealthy.
    spec.command = Some(argv(&["sh", "-c", "echo feeling-unwell; trap 'exit 0' TERM; sleep 600 & wait"]));
    d.backend.create(&spec).await.expect("create");
    let err = d.backend.wait_up(&spec.name, UP).await.expect_err("turns unhealthy");
    let msg = err.to_string();
    assert!(msg.contains("unhealthy"), "{msg}");
    assert!(msg.contains("feeling-unwell"), "the logs are in the message: {msg}");
    assert_eq!(d.containers().await[0].health, Health::Unhealthy);
}

#[tokio::test]
async fn wait_up_fails_with_the_logs_of_a_container_that_exits() {
    let Some(d) = docker().await else { return };
    let mut spec = d.container("crash");
    // With a HEALTHCHECK it cannot count as up before a check passes, and no check can pass
    // (it never creates /tmp/ready): without one, it might be seen running before it exits.
    spec.image = HEALTHY_IMAGE.to_owned();
    spec.command = Some(argv(&["sh", "-c", "echo first-line; echo about-to-fail >&2; exit 7"]));
    d.backend.create(&spec).await.expect("create");
    let err = d.backend.wait_up(&spec.name, UP).await.expect_err("exits");
    let msg = err.to_string();
    assert!(msg.contains(&spec.name), "{msg}");
    assert!(msg.contains("exited with code 7"), "{msg}");
    assert!(msg.contains("first-line") && msg.contains("about-to-fail"), "{msg}");
}

#[tokio::test]
async fn wait_up_of_a_missing_container_is_not_found() {
    let Some(d) = docker().await else { return };
    let err = d.backend.wait_up(&d.name("ghost"), UP).await.expect_err("no container");
    assert!(matches!(err, BackendError::NotFound(_)), "{err:?}");
}

#[tokio::test]
async fn wait_up_of_a_plain_running_container_succeeds() {
    let Some(d) = docker().await else { return };
    let spec = d.container("plain");
    d.backend.create(&spec).await.expect("create");
    d.backend.wait_up(&spec.name, UP).await.expect("up");
}

#[tokio::test]
async fn a_container_that_cannot_start_stays_and_is_reported() {
    let Some(d) = docker().await else { return };
    let mut spec = d.container("nostart");
    spec.entrypoint = Some(argv(&["/no/such/binary"]));
    let err = d.backend.create(&spec).await.expect_err("start fails");
    let msg = err.to_string();
    assert!(msg.contains("start container") && msg.contains("/no/such/binary"), "{msg}");
    // Left for the next plan to replace.
    let listed = d.containers().await;
    assert_eq!(listed.len(), 1);
    assert_ne!(listed[0].state, ContainerState::Running);
    assert!(!listed[0].is_up());
    // And waiting for it fails at once, with the reason.
    let err = d.backend.wait_up(&spec.name, UP).await.expect_err("never starts");
    assert!(err.to_string().contains("could not start"), "{err}");
}

#[tokio::test]
async fn wait_up_times_out_saying_what_the_container_was_doing() {
    let Some(d) = docker().await else { return };
    let spec = d.container("idle");
    // Created but never started: it would wait forever.
    let body = bollard::models::ContainerCreateBody {
        image: Some(spec.image.clone()),
        labels: Some(spec.labels.clone().into_iter().collect()),
        ..Default::default()
    };
    let options = bollard::query_parameters::CreateContainerOptions {
        name: Some(spec.name.clone()),
        ..Default::default()
    };
    d.backend.client().create_container(Some(options), body).await.expect("create");
    let err = d.backend.wait_up(&spec.name, Duration::from_millis(300)).await.expect_err("never started");
    assert!(matches!(err, BackendError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("created, not started"), "{err}");
}

#[tokio::test]
async fn stop_then_remove() {
    let Some(d) = docker().await else { return };
    let spec = d.container("s");
    d.backend.create(&spec).await.expect("create");
    // A running container is not removed by force.
    let err = d.backend.remove(&spec.name).await.expect_err("still running");
    assert!(matches!(err, BackendError::Failed(_)), "{err:?}");

    d.backend.stop(&spec.name, GRACE).await.expect("stop");
    assert_eq!(d.containers().await[0].state, ContainerState::Exited);
    d.backend.stop(&spec.name, GRACE).await.expect("stopping a stopped container succeeds");

    d.backend.remove(&spec.name).await.expect("remove");
    assert!(d.containers().await.is_empty());
}

#[tokio::test]
async fn may_run_is_docker_s_word_at_this_moment() {
    let Some(d) = docker().await else { return };
    let spec = d.container("m");
    d.backend.create(&spec).await.expect("create");
    assert!(d.backend.may_run(&spec.name).await.unwrap(), "running");
    d.backend.stop(&spec.name, GRACE).await.expect("stop");
    assert!(!d.backend.may_run(&spec.name).await.unwrap(), "exited");
    d.backend.remove(&spec.name).await.expect("remove");
    assert!(!d.backend.may_run(&spec.name).await.unwrap(), "gone");
}

#[tokio::test]
async fn stop_and_remove_of_a_missing_container_succeed() {
    let Some(d) = docker().await else { return };
    d.backend.stop(&d.name("ghost"), GRACE).await.expect("stop missing");
    d.backend.remove(&d.name("ghost")).await.expect("remove missing");
}

#[tokio::test]
async fn ensure_image_finds_local_images_and_names_the_one_it_cannot_pull() {
    let Some(d) = docker().await else { return };
    assert!(!d.backend.ensure_image(&d.pool, IMAGE).await.expect("present"));
    // A registry that refuses connections: fails at once, whatever the network.
    let missing = format!("localhost:1/{}-missing:latest", d.pool);
    let err = d.backend.ensure_image(&d.pool, &missing).await.expect_err("cannot pull");
    let msg = err.to_string();
    assert!(msg.contains(&missing), "{msg}");
    assert!(!msg.contains('\n'), "one line: {msg}");
}

#[tokio::test]
async fn network_exists() {
    let Some(d) = docker().await else { return };
    assert!(d.backend.network_exists(&d.pool, "bridge").await.expect("inspect"));
    assert!(!d.backend.network_exists(&d.pool, &format!("{}-no-such-net", d.pool)).await.expect("inspect"));
}

#[tokio::test]
async fn a_container_joins_the_named_network() {
    let Some(d) = docker().await else { return };
    let mut spec = d.container("net");
    spec.network = Some("bridge".to_owned());
    d.backend.create(&spec).await.expect("create");
    let inspect = d.backend.client().inspect_container(&spec.name, None).await.expect("inspect");
    let mode = inspect.host_config.and_then(|h| h.network_mode);
    assert_eq!(mode.as_deref(), Some("bridge"));
}

#[tokio::test]
async fn an_unreachable_daemon_is_one_line_naming_where_it_looked() {
    // No daemon needed: this is about the error.
    let err = DockerBackend::connect(&Endpoint::at("unix:///nonexistent/docker.sock"), Timeouts::default())
        .await
        .expect_err("no socket");
    assert!(matches!(err, BackendError::Unreachable { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("unix:///nonexistent/docker.sock"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");

    let err = DockerBackend::connect(&Endpoint::at("tcp://127.0.0.1:1"), Timeouts::default())
        .await
        .expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains("tcp://127.0.0.1:1"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
}
