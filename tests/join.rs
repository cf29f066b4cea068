//! Joining without secrets in the repository, against the real daemon: `join.kubeadm` through
//! a stand-in control plane whose `kubeadm` records what it is asked and answers as the real
//! one does, `join.k3s` through a stand-in server holding a node token, and `valueFrom` env
//! values. Each checks that the credential reaches the new container and nothing else: not
//! `docker inspect` (env, labels, command), the plan text or JSON, or the logs at `-vv`.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use poolctl::backend::Containers;
use poolctl::model::ContainerState;
use serde_json::Value;

use crate::support::cli::Run;
use crate::support::docker::{IMAGE, TestDocker};
use crate::support::scenario::Scenario;

/// The token the stand-in control plane hands out, and its secret half, which must show
/// nowhere but in the joining container.
const TOKEN: &str = "pcjoin.s3cr3tt0k3nval1d";
const TOKEN_SECRET: &str = "s3cr3tt0k3nval1d";
const CA_HASH: &str = "sha256:2f1d1f9f4a5e8c3b7a6d0e9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a";

/// The stand-in k3s server's node token.
const K3S_TOKEN: &str = "K10c0ffee0123456789::server:k3s-n0de-t0ken-s3cret";

/// A shell loop that exits on SIGTERM, as the stand-ins' main process.
const IDLE: &str = "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done";

/// `kubeadm` on the stand-in control plane: records its arguments, prints what the real one
/// prints for `token create --print-join-command` and `token delete`.
fn control_plane_kubeadm(endpoint: &str) -> String {
    format!(
        "#!/bin/sh\necho \"$*\" >> /tmp/kubeadm-calls\ncase \"$1 $2\" in\n\
         'token create') echo \"kubeadm join {endpoint}:6443 --token {TOKEN} --discovery-token-ca-cert-hash {CA_HASH} \" ;;\n\
         'token delete') echo \"bootstrap token \\\"$3\\\" deleted\" ;;\n\
         *) echo \"unknown command $*\" >&2; exit 1 ;;\nesac\n"
    )
}

/// `kubeadm` on a joining node: records its arguments and the join configuration it was given;
/// with `fail`, the join fails and echoes that configuration, token included, as a verbose
/// kubeadm might.
fn node_kubeadm(fail: bool) -> String {
    let join = if fail {
        "echo 'error execution phase preflight: could not validate the API server'; cat \"$3\"; exit 1"
    } else {
        "echo 'This node has joined the cluster'"
    };
    format!(
        "#!/bin/sh\necho \"$*\" >> /tmp/kubeadm-calls\ncase \"$1\" in\n\
         version) echo v1.31.0 ;;\n\
         join) cat \"$3\" > /tmp/join-config; {join} ;;\n\
         *) exit 1 ;;\nesac\n"
    )
}

/// A bootstrap step that installs `script` as `/bin/kubeadm` in the new container.
fn install_step(script: &str) -> String {
    let command = format!("cat > /bin/kubeadm <<'EOF'\n{script}EOF\nchmod 755 /bin/kubeadm");
    format!("    - exec: [\"sh\", \"-c\", {}]\n", json(&command))
}

fn json(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// A pool document for this scenario's pool, labelled for the cleanup guard; `template` and
/// `spec` are extra lines under `template:` and `spec:`.
fn pool_yaml(s: &Scenario, replicas: u32, template: &str, spec: &str) -> String {
    let labels: Vec<String> =
        s.docker().labels().iter().map(|(k, v)| format!("{}: {}", json(k), json(v))).collect();
    format!(
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: {}\nspec:\n  replicas: {replicas}\n  \
         template:\n    image: {IMAGE}\n    labels: {{{}}}\n{template}{spec}  rollout:\n    stopGracePeriod: 2s\n",
        s.pool_name(),
        labels.join(", ")
    )
}

/// A container of the test image that is no pool instance (the stand-in control plane or
/// server), removed with the test's other containers.
async fn stand_in(d: &TestDocker, suffix: &str) -> String {
    let mut spec = d.container(suffix);
    spec.labels.retain(|k, _| d.labels().iter().any(|(label, _)| label == k));
    spec.entrypoint = Some(["sh", "-c", IDLE].map(str::to_owned).to_vec());
    d.backend.create(&spec).await.expect("create the stand-in");
    d.backend.wait_up(&spec.name, Duration::from_secs(60)).await.expect("the stand-in runs");
    spec.name
}

/// `docker exec -i <container> sh -c <command>`, with `stdin`; its stdout. Fails the test when
/// the command fails.
#[track_caller]
fn sh(container: &str, command: &str, stdin: &str) -> String {
    let mut child = Command::new("docker")
        .args(["exec", "-i", container, "sh", "-c", command])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the docker CLI runs");
    child.stdin.take().expect("piped").write_all(stdin.as_bytes()).expect("write stdin");
    let out = child.wait_with_output().expect("docker exec ends");
    assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes `content` to `path` in the container, executable.
#[track_caller]
fn install(container: &str, path: &str, content: &str) {
    sh(container, &format!("mkdir -p \"$(dirname {path})\" && cat > {path} && chmod 755 {path}"), content);
}

/// `docker inspect` of one container, as text.
fn inspect(container: &str) -> String {
    let out = Command::new("docker").args(["inspect", container]).output().expect("the docker CLI runs");
    assert!(out.status.success(), "inspect {container}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Everything one run printed, for "no secret here" checks.
fn all_output(runs: &[&Run]) -> String {
    runs.iter().flat_map(|r| [r.stdout.as_str(), r.stderr.as_str()]).collect::<Vec<_>>().join("\n")
}

#[track_caller]
fn assert_nowhere(secret: &str, text: &str, what: &str) {
    assert!(!text.contains(secret), "the secret is in {what}:\n{text}");
}

#[tokio::test]
async fn a_kubeadm_join_pins_the_ca_names_the_node_and_leaves_no_token_behind() {
    let Some(s) = Scenario::with_docker().await else { return };
    let control_plane = stand_in(s.docker(), "control-plane").await;
    install(&control_plane, "/bin/kubeadm", &control_plane_kubeadm(&control_plane));
    let join = format!("  join:\n    kubeadm:\n      controlPlane: {control_plane}\n      timeout: 30s\n");
    let bootstrap = format!("  bootstrap:\n{}", install_step(&node_kubeadm(false)));
    s.write("pool.yaml", &pool_yaml(&s, 2, "", &format!("{bootstrap}{join}")));

    let plan = s.run("plan", &[]).expect_code(0);
    let joins = plan.stdout.lines().filter(|l| l.contains(" join ")).collect::<Vec<_>>();
    assert_eq!(joins.len(), 2, "{}", plan.stdout);
    assert!(
        joins[0].ends_with(&format!("(kubeadm, a new bootstrap token from {control_plane})")),
        "{joins:?}"
    );
    let json_plan = s.run("plan", &["-o", "json"]).expect_code(0);
    let v: Value = serde_json::from_str(&json_plan.stdout).expect("plan JSON");
    let actions: Vec<&str> = v["pools"][0]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| s["action"].as_str())
        .collect();
    assert_eq!(actions.iter().filter(|a| **a == "join").count(), 2, "{actions:?}");
    // Each new instance: create, bootstrap, then join, then await-ready.
    let first = &actions[..=actions.iter().position(|a| *a == "await-ready").expect("an await")];
    assert_eq!(first, ["create", "create", "bootstrap", "bootstrap", "join", "join", "await-ready"]);

    let apply = s.run("apply", &["--yes", "-vv"]).expect_code(0);
    let running = s.running().await;
    assert_eq!(running.len(), 2);
    for node in &running {
        let name = node.name.as_str();
        assert_eq!(
            sh(name, "cat /tmp/kubeadm-calls", ""),
            "version -o short\njoin --config /etc/poolctl/kubeadm-join.yaml\n"
        );
        let config: Value = serde_saphyr::from_str(&sh(name, "cat /tmp/join-config", "")).expect("YAML");
        assert_eq!(config["kind"], "JoinConfiguration");
        assert_eq!(config["apiVersion"], "kubeadm.k8s.io/v1beta4", "kubeadm v1.31 reads v1beta4");
        let discovery = &config["discovery"]["bootstrapToken"];
        assert_eq!(discovery["apiServerEndpoint"], format!("{control_plane}:6443"));
        assert_eq!(discovery["token"], TOKEN, "the node was handed the token");
        assert_eq!(discovery["caCertHashes"], serde_json::json!([CA_HASH]), "the CA is pinned");
        assert_eq!(discovery.get("unsafeSkipCAVerification"), None);
        assert_eq!(config["nodeRegistration"]["name"], name, "the Node is named after its container");
        // The configuration held the token: it is gone once the join is done.
        sh(name, "test ! -e /etc/poolctl/kubeadm-join.yaml", "");
        assert_nowhere(TOKEN_SECRET, &inspect(name), &format!("docker inspect {name}"));
    }
    // One token per node, made on the control plane and deleted after its join.
    let calls = sh(&control_plane, "cat /tmp/kubeadm-calls", "");
    let creates: Vec<&str> = calls.lines().filter(|l| l.starts_with("token create ")).collect();
    assert_eq!(creates.len(), 2, "{calls}");
    for node in &running {
        let wanted = format!(
            "token create --ttl 150s --description poolctl: join of {} --print-join-command",
            node.name
        );
        assert!(creates.contains(&wanted.as_str()), "{wanted:?} not in {calls}");
    }
    assert_eq!(calls.lines().filter(|l| *l == "token delete pcjoin").count(), 2, "{calls}");
    assert_nowhere(TOKEN_SECRET, &all_output(&[&plan, &json_plan, &apply]), "poolctl's output and logs");
}

#[tokio::test]
async fn a_failing_join_halts_the_rollout_with_the_old_instance_untouched() {
    let Some(s) = Scenario::with_docker().await else { return };
    let control_plane = stand_in(s.docker(), "control-plane").await;
    install(&control_plane, "/bin/kubeadm", &control_plane_kubeadm(&control_plane));
    s.write("pool.yaml", &pool_yaml(&s, 1, "", ""));
    s.run("apply", &["--yes"]).expect_code(0);
    let old = s.running().await;
    assert_eq!(old.len(), 1);

    let join = format!("  join:\n    kubeadm:\n      controlPlane: {control_plane}\n");
    let bootstrap = format!("  bootstrap:\n{}", install_step(&node_kubeadm(true)));
    s.write("pool.yaml", &pool_yaml(&s, 1, "", &format!("{bootstrap}{join}")));
    let apply = s.run("apply", &["--yes", "-vv"]).expect_code(1);
    let output = all_output(&[&apply]);
    assert!(
        output.contains("FAILED")
            && output.contains("`kubeadm join --config /etc/poolctl/kubeadm-join.yaml` in "),
        "{output}"
    );
    assert!(output.contains("exited with code 1"), "{output}");
    // The stand-in echoed its configuration; the token in it is redacted.
    assert!(output.contains("token: \"(sensitive)\""), "{output}");
    assert_nowhere(TOKEN_SECRET, &output, "the failed apply's output");

    // The old instance still runs, untouched; the new one was stopped, never having served.
    let after = s.containers().await;
    let still = after.iter().find(|c| c.name == old[0].name).expect("the old instance is there");
    assert_eq!(still.state, ContainerState::Running);
    let new: Vec<_> = after.iter().filter(|c| c.name != old[0].name).collect();
    assert_eq!(new.len(), 1, "{after:?}");
    assert_ne!(new[0].state, ContainerState::Running);
    // The token was deleted all the same.
    let calls = sh(&control_plane, "cat /tmp/kubeadm-calls", "");
    assert!(calls.lines().any(|l| l == "token delete pcjoin"), "{calls}");
}

#[tokio::test]
async fn a_k3s_agent_reads_the_server_token_from_a_file_that_inspect_does_not_show() {
    let Some(s) = Scenario::with_docker().await else { return };
    let server = stand_in(s.docker(), "server").await;
    // As k3s lays it out: node-token is a link to the server's token file.
    sh(
        &server,
        "mkdir -p /var/lib/rancher/k3s/server && cat > /var/lib/rancher/k3s/server/token && \
         ln -s /var/lib/rancher/k3s/server/token /var/lib/rancher/k3s/server/node-token",
        &format!("{K3S_TOKEN}\n"),
    );
    // In place of k3s: an entrypoint that fails unless the token file is there when it starts.
    let agent = format!(
        "    entrypoint: [\"sh\", \"-c\", {}]\n    command: [agent]\n",
        json(&format!(
            "cat \"$K3S_TOKEN_FILE\" > /tmp/got-token || exit 1; echo \"$K3S_URL\" > /tmp/got-url; {IDLE}"
        ))
    );
    s.write("pool.yaml", &pool_yaml(&s, 1, &agent, &format!("  join:\n    k3s:\n      server: {server}\n")));

    let plan = s.run("plan", &[]).expect_code(0);
    assert!(plan.stdout.contains(&format!("with the node token of k3s server {server})")), "{}", plan.stdout);
    let json_plan = s.run("plan", &["-o", "json"]).expect_code(0);
    assert!(json_plan.stdout.contains(&format!("\"k3s_server\": \"{server}\"")), "{}", json_plan.stdout);
    let apply = s.run("apply", &["--yes", "-vv"]).expect_code(0);

    let running = s.running().await;
    assert_eq!(running.len(), 1);
    let name = running[0].name.as_str();
    assert_eq!(sh(name, "cat /tmp/got-token", ""), K3S_TOKEN);
    assert_eq!(sh(name, "cat /tmp/got-url", "").trim(), format!("https://{server}:6443"));
    assert_eq!(sh(name, "stat -c '%a %u' /etc/poolctl /etc/poolctl/k3s-token", ""), "700 0\n600 0\n");
    let inspected = inspect(name);
    let v: Value = serde_json::from_str(&inspected).expect("inspect JSON");
    let env: Vec<&str> =
        v[0]["Config"]["Env"].as_array().expect("env").iter().filter_map(Value::as_str).collect();
    assert!(env.contains(&"K3S_TOKEN_FILE=/etc/poolctl/k3s-token"), "{env:?}");
    assert!(!env.iter().any(|e| e.starts_with("K3S_TOKEN=")), "{env:?}");
    assert_nowhere("k3s-n0de-t0ken-s3cret", &inspected, "docker inspect");
    assert_nowhere(
        "k3s-n0de-t0ken-s3cret",
        &all_output(&[&plan, &json_plan, &apply]),
        "poolctl's output and logs",
    );
}

#[tokio::test]
async fn a_value_from_secret_is_redacted_everywhere_and_a_new_value_replaces_the_instances() {
    let Some(s) = Scenario::with_docker().await else { return };
    let file = s.path("secrets/token");
    std::fs::create_dir_all(file.parent().expect("a parent")).expect("mkdir");
    std::fs::write(&file, "file-s3cret-one\n").expect("write the secret");
    let env = format!(
        "    env:\n      PLAIN: shown\n      FROM_FILE: {{valueFrom: {{file: {}}}}}\n      \
         FROM_ENV: {{valueFrom: {{env: POOLCTL_JOIN_TEST_SECRET}}}}\n",
        json(&file.display().to_string())
    );
    s.write("pool.yaml", &pool_yaml(&s, 2, &env, ""));
    let run = |command: &str, args: &[&str]| {
        Run::of(s.command(command, args).env("POOLCTL_JOIN_TEST_SECRET", "env-s3cret"))
    };
    let secrets = ["file-s3cret-one", "file-s3cret-two", "env-s3cret"];

    // validate runs offline, where the secrets are not.
    let validate = s.run("validate", &[]).expect_code(0);
    assert!(
        validate.stdout.contains("template hash set at plan time: it covers 2 sensitive values"),
        "{}",
        validate.stdout
    );
    let plan = run("plan", &[]).expect_code(0);
    let apply = run("apply", &["--yes", "-vv"]).expect_code(0);
    let first = s.running().await;
    assert_eq!(first.len(), 2);
    for c in &first {
        // The container has the values: that is what env is for.
        assert_eq!(
            sh(&c.name, "echo \"$PLAIN $FROM_FILE $FROM_ENV\"", ""),
            "shown file-s3cret-one env-s3cret\n"
        );
        let v: Value = serde_json::from_str(&inspect(&c.name)).expect("inspect JSON");
        let labels = v[0]["Config"]["Labels"].to_string();
        let template = v[0]["Config"]["Labels"]["poolctl.dev/template"].as_str().expect("the template label");
        assert!(template.contains(r#""FROM_FILE":"(sensitive sha256:"#), "{template}");
        for secret in secrets {
            assert_nowhere(secret, &labels, "the labels");
        }
    }

    // A new value of the file: the hash moves, the plan says what changed without the value.
    std::fs::write(&file, "file-s3cret-two").expect("write the secret");
    let replan = run("plan", &["--detailed-exitcode"]).expect_code(2);
    assert!(replan.stdout.contains("Plan: 2 to create, 2 to retire, 0 unchanged."), "{}", replan.stdout);
    let diff: Vec<&str> = replan.stdout.lines().filter(|l| l.trim_start().starts_with(['-', '+'])).collect();
    assert!(diff.iter().any(|l| l.contains("-    FROM_FILE: (sensitive sha256:")), "{}", replan.stdout);
    assert!(diff.iter().any(|l| l.contains("+    FROM_FILE: (sensitive sha256:")), "{}", replan.stdout);
    let json_plan = run("plan", &["-o", "json"]).expect_code(0);
    let reapply = run("apply", &["--yes", "-vv"]).expect_code(0);
    let second = s.running().await;
    assert_eq!(second.len(), 2);
    assert!(second.iter().all(|c| first.iter().all(|f| f.name != c.name)), "every instance was replaced");
    assert_eq!(sh(&second[0].name, "echo \"$FROM_FILE\"", ""), "file-s3cret-two\n");
    let output = all_output(&[&validate, &plan, &apply, &replan, &json_plan, &reapply]);
    for secret in secrets {
        assert_nowhere(secret, &output, "poolctl's output and logs");
    }

    // A secret that cannot be read stops the plan, saying where, before anything changes.
    std::fs::remove_file(&file).expect("remove the secret");
    let missing = run("plan", &[]).expect_code(1);
    assert!(
        missing.stderr.contains("spec.template.env.FROM_FILE.valueFrom: cannot read the secret file"),
        "{}",
        missing.stderr
    );
}

#[tokio::test]
async fn a_join_through_a_container_that_is_not_there_changes_nothing() {
    let Some(s) = Scenario::with_docker().await else { return };
    let missing = s.docker().name("no-such-server");
    s.write("pool.yaml", &pool_yaml(&s, 1, "", &format!("  join:\n    k3s:\n      server: {missing}\n")));
    let apply = s.run("apply", &["--yes"]).expect_code(1);
    assert!(
        apply.stderr.contains(&format!("joins through container {missing}, which is not running")),
        "{}",
        apply.stderr
    );
    assert!(s.containers().await.is_empty(), "nothing was created");
}

/// The control plane a pool's new instances join through must serve the cluster poolctl
/// observes for the pool (compared by the UID of `kube-system`): one of another cluster is
/// refused before anything is created, and the same setup joins once it serves the right one.
#[tokio::test]
async fn a_join_through_a_control_plane_of_another_cluster_is_refused_before_anything_is_created() {
    let Some(rig) = crate::support::rig::Rig::new().await else { return };
    let s = &rig.s;
    let control_plane = stand_in(s.docker(), "control-plane").await;
    install(&control_plane, "/bin/kubeadm", &control_plane_kubeadm(&control_plane));
    let kubectl = |uid: &str| format!("#!/bin/sh\necho \"$*\" >> /tmp/kubectl-calls\nprintf '%s' '{uid}'\n");
    install(&control_plane, "/bin/kubectl", &kubectl("uid-of-another-cluster"));
    let join = format!("  join:\n    kubeadm:\n      controlPlane: {control_plane}\n      timeout: 30s\n");
    let bootstrap = format!("  bootstrap:\n{}", install_step(&node_kubeadm(false)));
    let node =
        format!("  node:\n    kubeconfig: {}\n    readyTimeout: 10s\n", s.path("kubeconfig").display());
    s.write("pool.yaml", &pool_yaml(s, 1, "", &format!("{bootstrap}{join}{node}")));

    let ours = rig.fake.store().cluster_uid.clone();
    let apply = s.run("apply", &["--yes"]).expect_code(1);
    let said = format!("{}{}", apply.stdout, apply.stderr);
    assert!(said.contains(&format!("joins through {control_plane}, which serves another cluster")), "{said}");
    assert!(said.contains("uid-of-another-cluster") && said.contains(&ours), "{said}");
    assert!(s.containers().await.is_empty(), "nothing was created");
    let asked = sh(&control_plane, "cat /tmp/kubectl-calls", "");
    assert_eq!(
        asked.trim(),
        "--kubeconfig /etc/kubernetes/admin.conf get namespace kube-system -o jsonpath={.metadata.uid}"
    );

    // The same control plane, now serving the observed cluster: the instance is created and joins.
    install(&control_plane, "/bin/kubectl", &kubectl(&ours));
    s.run("apply", &["--yes"]).expect_code(0);
    assert_eq!(s.running().await.len(), 1);
}
