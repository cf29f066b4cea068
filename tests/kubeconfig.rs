//! Kubeconfigs as kubectl reads them, through the binary against the fake API server: lists
//! with missing files, proxies, token files, exec credential plugins.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::support::cli::Run;
use crate::support::fake_kube::{FakeKube, FakeKubeOptions};
use crate::support::scenario::Scenario;

/// A node pool whose `node:` names no kubeconfig: `$KUBECONFIG` decides.
const POOL: &str = "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: kc\nspec:\n  replicas: 1\n  template:\n    image: x\n  node:\n    readyTimeout: 10s\n";

/// `poolctl plan` of [`POOL`] with these environment variables.
fn plan(s: &Scenario, env: &[(&str, &str)]) -> Run {
    Run::of(&mut plan_command(s, env))
}

fn plan_command(s: &Scenario, env: &[(&str, &str)]) -> std::process::Command {
    let mut cmd = s.command("plan", &[]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    for k in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"] {
        if !env.iter().any(|(name, _)| name == &k) {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// A scenario with [`POOL`] and a fake cluster whose kubeconfig is `kubeconfig` beside it.
fn setup() -> (Scenario, FakeKube, String) {
    let s = Scenario::new();
    s.write("pool.yaml", POOL);
    let fake = FakeKube::start(FakeKubeOptions::default());
    let path = s.path("kubeconfig");
    fake.write_kubeconfig(&path).unwrap();
    (s, fake, path.display().to_string())
}

/// Adds lines to the kubeconfig's user entry.
fn add_to_user(kubeconfig: &str, lines: &str) {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let text = text.replacen("  user:\n", &format!("  user:\n{lines}"), 1);
    std::fs::write(kubeconfig, text).unwrap();
}

fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_kubeconfig_list_skips_missing_files_as_kubectl_does() {
    let (s, fake, kubeconfig) = setup();
    let missing = s.path("missing").display().to_string();
    let out = plan(&s, &[("KUBECONFIG", &format!("{missing}:{kubeconfig}"))]).expect_code(0);
    assert!(out.stdout.contains("Plan: 1 to create"), "{}", out.stdout);
    assert!(!fake.requests().is_empty(), "the existing file's cluster was asked");

    let out = plan(&s, &[("KUBECONFIG", &missing)]).expect_code(1);
    assert!(out.stderr.contains("KUBECONFIG names no file that exists"), "{}", out.stderr);
}

#[test]
fn a_token_file_with_a_trailing_newline_works() {
    let (s, fake, kubeconfig) = setup();
    let token = s.path("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    add_to_user(&kubeconfig, &format!("    tokenFile: {}\n", token.display()));
    plan(&s, &[("KUBECONFIG", &kubeconfig)]).expect_code(0);
    let auth: Vec<Option<String>> = fake.requests().into_iter().map(|r| r.authorization).collect();
    assert!(!auth.is_empty() && auth.iter().all(|a| a.as_deref() == Some("Bearer s3cret-token")), "{auth:?}");
}

#[test]
fn an_exec_plugin_runs_once_and_its_failure_is_a_few_clear_lines() {
    let (s, fake, kubeconfig) = setup();
    let plugin = s.path("plugin.sh");
    let calls = s.path("plugin.calls");
    script(
        &plugin,
        &format!(
            "echo run >> {}\necho '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"from-exec\"}}}}'\n",
            calls.display()
        ),
    );
    add_to_user(
        &kubeconfig,
        &format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      interactiveMode: Never\n      installHint: \"install it with: apt-get install fake-login\"\n",
            plugin.display()
        ),
    );
    plan(&s, &[("KUBECONFIG", &kubeconfig)]).expect_code(0);
    assert_eq!(std::fs::read_to_string(&calls).unwrap().lines().count(), 1, "the plugin ran once");
    assert!(fake.requests().iter().all(|r| r.authorization.as_deref() == Some("Bearer from-exec")));

    script(&plugin, "echo 'starting login' >&2\necho 'error: the refresh token expired' >&2\nexit 3\n");
    let out = plan(&s, &[("KUBECONFIG", &kubeconfig)]).expect_code(1);
    let err = out.stderr;
    assert!(err.contains(&format!("credential plugin {} failed (exit status 3)", plugin.display())), "{err}");
    assert!(err.contains("error: the refresh token expired"), "{err}");
    assert!(err.contains("install it with: apt-get install fake-login"), "{err}");
    assert!(!err.contains("certificate-authority") && !err.contains("KUBERNETES_EXEC_INFO"), "{err}");
    assert!(err.lines().count() <= 6, "a few lines, not a dump:\n{err}");
}

/// An HTTP CONNECT proxy that counts the tunnels it opened.
async fn connect_proxy() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let tunnels = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&tunnels);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let mut client = BufReader::new(client);
                let mut line = String::new();
                client.read_line(&mut line).await.ok()?;
                let target = line.strip_prefix("CONNECT ")?.split_whitespace().next()?.to_owned();
                loop {
                    let mut header = String::new();
                    client.read_line(&mut header).await.ok()?;
                    if header.trim().is_empty() {
                        break;
                    }
                }
                let mut upstream = TcpStream::connect(&target).await.ok()?;
                count.fetch_add(1, Ordering::SeqCst);
                client.get_mut().write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.ok()?;
                tokio::io::copy_bidirectional(client.get_mut(), &mut upstream).await.ok()
            });
        }
    });
    (port, tunnels)
}

#[tokio::test(flavor = "multi_thread")]
async fn https_proxy_is_honoured_and_no_proxy_bypasses_it() {
    let (s, _fake, kubeconfig) = setup();
    let (port, tunnels) = connect_proxy().await;
    let proxy = format!("http://127.0.0.1:{port}");
    // The proxy runs on this test's runtime: the child poolctl is waited for off it.
    let run = |env: Vec<(&'static str, String)>| {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut cmd = plan_command(&s, &env);
        tokio::task::spawn_blocking(move || Run::of(&mut cmd).code)
    };
    let code = run(vec![("KUBECONFIG", kubeconfig.clone()), ("HTTPS_PROXY", proxy.clone())]).await.unwrap();
    assert_eq!(code, 0);
    let through = tunnels.load(Ordering::SeqCst);
    assert!(through >= 1, "the API server was reached through the proxy");

    let env = vec![("KUBECONFIG", kubeconfig), ("HTTPS_PROXY", proxy), ("NO_PROXY", "127.0.0.1".to_owned())];
    assert_eq!(run(env).await.unwrap(), 0);
    assert_eq!(tunnels.load(Ordering::SeqCst), through, "NO_PROXY matched the API server's host");
}

/// Every line of `err` is short: it names the one thing to fix, not a dump.
#[track_caller]
fn short_lines(err: &str) {
    assert!(err.lines().all(|l| l.chars().count() < 300), "a line of 300 characters or more:\n{err}");
}

#[test]
fn a_missing_kubeconfig_is_named_once() {
    let s = Scenario::new();
    let missing = s.path("no-such-kubeconfig").display().to_string();
    s.write(
        "pool.yaml",
        &POOL.replace("    readyTimeout", &format!("    kubeconfig: {missing}\n    readyTimeout")),
    );
    let err = plan(&s, &[]).expect_code(1).stderr;
    assert_eq!(err.matches(&missing).count(), 1, "{err}");
    assert!(err.contains("no such file") && !err.contains("'\""), "{err}");
    short_lines(&err);
}

#[test]
fn a_credential_plugin_that_needs_the_cluster_gets_it_and_its_failure_is_short() {
    let (s, fake, kubeconfig) = setup();
    let plugin = s.path("plugin.sh");
    let seen = s.path("exec-info.json");
    script(
        &plugin,
        &format!(
            "printf '%s' \"$KUBERNETES_EXEC_INFO\" > {}\necho '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"from-exec\"}}}}'\n",
            seen.display()
        ),
    );
    add_to_user(
        &kubeconfig,
        &format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      provideClusterInfo: true\n      interactiveMode: Never\n",
            plugin.display()
        ),
    );
    plan(&s, &[("KUBECONFIG", &kubeconfig)]).expect_code(0);
    let info: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(info["spec"]["cluster"]["server"].as_str(), Some(fake.url().trim_end_matches('/')), "{info}");
    assert!(info["spec"]["cluster"]["certificate-authority-data"].is_string(), "{info}");

    script(&plugin, "echo 'error: the refresh token expired' >&2\nexit 3\n");
    let err = plan(&s, &[("KUBECONFIG", &kubeconfig)]).expect_code(1).stderr;
    assert!(err.contains(&format!("credential plugin {} failed (exit status 3)", plugin.display())), "{err}");
    assert!(err.contains("error: the refresh token expired"), "{err}");
    assert!(!err.contains("KUBERNETES_EXEC_INFO") && !err.contains("certificate-authority"), "{err}");
    short_lines(&err);
}

#[test]
fn a_credential_plugin_that_is_not_installed_is_named_with_its_install_hint() {
    let (s, _fake, kubeconfig) = setup();
    add_to_user(
        &kubeconfig,
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: poolctl-test-no-such-login\n      provideClusterInfo: true\n      installHint: \"install it with: apt-get install fake-login\"\n",
    );
    let err = plan(&s, &[("KUBECONFIG", &kubeconfig)]).expect_code(1).stderr;
    assert!(err.contains("credential plugin poolctl-test-no-such-login is not installed"), "{err}");
    assert!(err.contains("\n  install it with: apt-get install fake-login"), "{err}");
    short_lines(&err);
}

#[test]
fn a_cluster_that_refuses_connections_fails_at_the_first_contact_naming_it() {
    let s = Scenario::new();
    s.write("pool.yaml", POOL);
    // A port nothing listens on any more: every connection is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let kubeconfig = s.path("kubeconfig");
    let server = format!("https://127.0.0.1:{port}");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .unwrap();
    let err = plan(&s, &[("KUBECONFIG", &kubeconfig.display().to_string())]).expect_code(1).stderr;
    assert!(err.contains(&server) && err.to_lowercase().contains("connection refused"), "{err}");
    // Not retried: no "retrying" warning came before the error.
    assert!(!err.contains("retrying"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    short_lines(&err);
}

#[test]
fn a_relative_kubeconfig_is_read_beside_the_pool_file_whatever_the_working_directory() {
    let s = Scenario::new();
    let fake = FakeKube::start(FakeKubeOptions::default());
    s.write(
        "pools/pool.yaml",
        &POOL.replace("    readyTimeout", "    kubeconfig: dev.kubeconfig\n    readyTimeout"),
    );
    fake.write_kubeconfig(&s.dir().join("pools/dev.kubeconfig")).unwrap();
    let mut cmd = plan_command(&s, &[]);
    cmd.env_remove("KUBECONFIG").current_dir(s.path(""));
    let out = Run::of(&mut cmd).expect_code(0);
    assert!(out.stdout.contains("Plan: 1 to create"), "{}", out.stdout);
    assert!(!fake.requests().is_empty(), "the kubeconfig beside the pool file was used");
}
