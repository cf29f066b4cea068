//! The container template against a real daemon: the kind and k3d examples' containers, created
//! by poolctl, compared field by field in `docker inspect` with the settings kind and k3d give
//! their own nodes; every other setting as `docker run` would send it; and bad settings caught
//! offline, with file, line and field.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use poolctl::backend::Containers;
use poolctl::backend::docker::{DockerBackend, DockerEnv, Timeouts, endpoint, resolve_copies};
use poolctl::backend::endpoints::Endpoints;
use poolctl::model::{Desired, DesiredPool, Origin, labels};
use poolctl::rollout::execute::new_container;
use poolctl::spec::{
    Pool, SpecError, Template, TemplateFile, load_documents, load_files, template_hash, validate_pools,
};
use serde_json::{Value, json};

use crate::support::docker::{CASE_LABEL, HEALTHY_IMAGE, IMAGE, RUN_LABEL, TestDocker, docker, run_id};
use crate::support::scenario::Scenario;

/// Only keeps a broken test from hanging; nothing is timed.
const UP: Duration = Duration::from_secs(60);

/// A shell loop that exits on SIGTERM, for entrypoints the test image stands in for.
const IDLE: &str = "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done";

/// The pool of `examples/<dir>/pool.yaml`, read and validated as `poolctl validate` does.
fn example(dir: &str) -> Pool {
    example_file(dir, "pool.yaml")
}

/// The pool of `examples/<dir>/<file>`, read and validated as `poolctl validate` does.
fn example_file(dir: &str, file: &str) -> Pool {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(dir).join(file);
    let text = std::fs::read_to_string(&path).expect("the example");
    let docs = load_documents("pool.yaml", &text).expect("the example loads");
    validate_pools(&docs).expect("the example is valid");
    docs.into_iter().next().expect("a pool").pool
}

/// Networks and named volumes a test made, removed when the test ends, even when it fails.
/// Declare it before the [`TestDocker`], so that its containers are gone first.
#[derive(Default)]
struct Scratch {
    networks: Vec<String>,
    volumes: Vec<String>,
}

impl Scratch {
    /// A new bridge network, in place of kind's or k3d's own.
    fn network(&mut self, d: &TestDocker) -> String {
        self.network_named(d, "net")
    }

    /// A new bridge network, `suffix` telling it from the test's others.
    fn network_named(&mut self, d: &TestDocker, suffix: &str) -> String {
        let name = format!("{}-{suffix}", d.pool);
        let label = format!("{RUN_LABEL}={}", run_id());
        docker_cli(&["network", "create", "--label", &label, &name]);
        self.networks.push(name.clone());
        name
    }

    /// A name for a named volume, which Docker creates on first use.
    fn volume(&mut self, d: &TestDocker) -> String {
        let name = format!("{}-images", d.pool);
        self.volumes.push(name.clone());
        name
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for (kind, names) in [("network", &self.networks), ("volume", &self.volumes)] {
            for name in names {
                let removed = Command::new("docker").args([kind, "rm", name]).output();
                if !removed.is_ok_and(|o| o.status.success()) {
                    eprintln!("test cleanup: `docker {kind} rm {name}` failed; it may remain");
                }
            }
        }
    }
}

/// Runs the docker CLI and returns its stdout, failing the test if it fails.
fn docker_cli(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("the docker CLI runs");
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `docker inspect` of one container.
fn inspect(name: &str) -> Value {
    let all: Value = serde_json::from_str(&docker_cli(&["inspect", name])).expect("inspect is JSON");
    all[0].clone()
}

/// Creates one container of `pool` the way apply does (template, `new_container`, the Docker
/// backend), labelled for the test's cleanup, and returns its name.
async fn create(d: &TestDocker, pool: Pool) -> String {
    let template_hash = template_hash(&pool.spec);
    let desired = DesiredPool { pool, file: "pool.yaml".to_owned(), template_hash, copied_from: None };
    let origin = Origin::Path { path: "examples".to_owned() };
    let name = d.name("0");
    let mut spec = new_container(&desired, &origin, &name, None);
    spec.labels.insert(labels::POOL.to_owned(), d.pool.clone());
    spec.labels.insert(RUN_LABEL.to_owned(), run_id().to_owned());
    spec.labels.insert(CASE_LABEL.to_owned(), d.case.clone());
    d.backend.create(&spec).await.expect("create");
    name
}

/// Checks each (JSON pointer into the inspect output, expected value, the flag that sets it),
/// and reports every mismatch at once.
fn compare(inspect: &Value, expected: &[(&str, Value, &str)]) {
    let mismatches: Vec<String> = expected
        .iter()
        .filter_map(|(pointer, want, flag)| {
            let got = inspect.pointer(pointer).unwrap_or(&Value::Null);
            (got != want).then(|| format!("{flag}: {pointer} is {got}, expected {want}"))
        })
        .collect();
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// The effective template of `pool` (a `copyFrom` variant) copying `source`, as a plan
/// resolves it.
async fn copied_template(mut pool: Pool, source: &str) -> Template {
    let copy = pool.spec.template.copy_from.as_mut().expect("a copyFrom variant");
    source.clone_into(&mut copy.container);
    let template_hash = template_hash(&pool.spec);
    let desired = Desired {
        origin: Origin::Path { path: "examples".to_owned() },
        pools: vec![DesiredPool {
            pool,
            file: "copy-from.yaml".to_owned(),
            template_hash,
            copied_from: None,
        }],
    };
    let endpoint = endpoint::current(&DockerEnv::from_process()).expect("the current endpoint");
    let backend = DockerBackend::connect(&endpoint, Timeouts::default()).await.expect("connect");
    let resolved = resolve_copies(desired, &Endpoints::single("test", backend)).await.expect("resolved");
    let pool = resolved.pools.into_iter().next().expect("the pool");
    assert_eq!(pool.copied_from.map(|c| c.container), Some(source.to_owned()));
    pool.pool.spec.template
}

/// Runs a shell command in the container and returns its output.
async fn sh(d: &TestDocker, name: &str, command: &str) -> String {
    let argv = ["sh", "-c", command].map(str::to_owned);
    let out = d.backend.exec(name, &argv, UP).await.expect("exec");
    assert_eq!(out.exit_code, 0, "{command}: {}", out.output);
    out.output
}

#[tokio::test]
async fn the_kind_example_creates_what_kind_creates() {
    let mut scratch = Scratch::default();
    let modules = tempfile::tempdir().expect("a temp dir");
    let Some(d) = docker().await else { return };
    let mut pool = example("kind-workers");
    let t = &mut pool.spec.template;
    assert_eq!(t.image, "kindest/node:v1.31.0");
    assert!(t.privileged, "kind runs its nodes --privileged");
    // The test variant. This host refuses --privileged containers, so that one flag is left out
    // (and checked in the template above); the test image stands in for kindest/node; a network
    // of the test's own for kind's; and, since the host may have no /lib/modules (Docker would
    // create it there), a directory of the test's own is mounted in its place.
    t.privileged = false;
    t.image = IMAGE.to_owned();
    let network = scratch.network(&d);
    t.network = Some(network.clone());
    let kernel_modules = "/lib/modules:/lib/modules:ro".to_owned();
    assert!(t.volumes.contains(&kernel_modules), "{:?}", t.volumes);
    let modules_bind = format!("{}:/lib/modules:ro", modules.path().display());
    t.volumes = t
        .volumes
        .iter()
        .map(|v| if *v == kernel_modules { modules_bind.clone() } else { v.clone() })
        .collect();

    let explicit = pool.spec.template.clone();
    let name = create(&d, pool).await;
    let inspect = inspect(&name);
    // kind's commonArgs and runArgsForNode (pkg/cluster/internal/providers/docker/provision.go).
    compare(
        &inspect,
        &[
            ("/Config/Hostname", json!(name), "--hostname NAME"),
            ("/Config/Tty", json!(true), "--tty"),
            (
                "/HostConfig/RestartPolicy",
                json!({"Name": "on-failure", "MaximumRetryCount": 1}),
                "--restart=on-failure:1",
            ),
            ("/HostConfig/Init", json!(false), "--init=false"),
            ("/HostConfig/CgroupnsMode", json!("private"), "--cgroupns=private"),
            (
                "/HostConfig/SecurityOpt",
                json!(["seccomp=unconfined", "apparmor=unconfined"]),
                "--security-opt seccomp=unconfined --security-opt apparmor=unconfined",
            ),
            ("/HostConfig/Tmpfs", json!({"/tmp": "", "/run": ""}), "--tmpfs /tmp --tmpfs /run"),
            ("/Config/Volumes", json!({"/var": {}}), "--volume /var"),
            ("/HostConfig/Binds", json!([modules_bind]), "--volume /lib/modules:/lib/modules:ro"),
            ("/HostConfig/NetworkMode", json!(network), "--net kind"),
            ("/Config/Labels/io.x-k8s.kind.cluster", json!("dev"), "--label io.x-k8s.kind.cluster=dev"),
            ("/Config/Labels/io.x-k8s.kind.role", json!("worker"), "--label io.x-k8s.kind.role=worker"),
            ("/Config/StopSignal", json!("SIGRTMIN+3"), "kindest/node's STOPSIGNAL"),
            ("/HostConfig/Privileged", json!(false), "--privileged, left out on this host"),
            ("/State/Running", json!(true), "a node that runs"),
        ],
    );

    // The copyFrom variant, copying this node, gets the template written out above.
    let copied = copied_template(example_file("kind-workers", "copy-from.yaml"), &name).await;
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(
        (&copied.image, &copied.network, copied.tty, &copied.restart, copied.init, copied.cgroupns),
        (
            &explicit.image,
            &explicit.network,
            explicit.tty,
            &explicit.restart,
            explicit.init,
            explicit.cgroupns
        )
    );
    assert_eq!((&copied.security_opt, &copied.stop_signal), (&explicit.security_opt, &explicit.stop_signal));
    assert_eq!(
        (&copied.volumes, sorted(copied.tmpfs.clone())),
        (&explicit.volumes, sorted(explicit.tmpfs.clone()))
    );
    assert_eq!((&copied.entrypoint, &copied.command, copied.env.len()), (&None, &None, 0), "the image's own");
    for key in ["io.x-k8s.kind.cluster", "io.x-k8s.kind.role"] {
        assert_eq!(copied.labels.get(key), explicit.labels.get(key), "{key}");
    }

    // --volume /var is an anonymous volume, and removing the container removes it.
    let mounts = inspect["Mounts"].as_array().expect("mounts");
    let var = mounts.iter().find(|m| m["Destination"] == "/var").expect("a mount at /var");
    assert_eq!(var["Type"], "volume", "{var}");
    let volume = var["Name"].as_str().expect("the volume's name").to_owned();
    assert!(Command::new("docker").args(["volume", "inspect", &volume]).output().unwrap().status.success());
    d.backend.stop(&name, Duration::ZERO).await.expect("stop");
    d.backend.remove(&name).await.expect("remove");
    let gone = Command::new("docker").args(["volume", "inspect", &volume]).output().unwrap();
    assert!(!gone.status.success(), "the anonymous volume {volume} outlived its container");
}

/// What the test image lacks for the k3d example's scripts, standing in and recording what it
/// was asked: k3s (it idles once it has run, and the image's HEALTHCHECK then passes), and
/// iptables with Docker's rules for its DNS server.
fn k3d_stand_ins() -> Vec<TemplateFile> {
    let file = |path: &str, content: &str| TemplateFile {
        path: path.to_owned(),
        content: content.to_owned(),
        mode: "0755".to_owned(),
    };
    vec![
        file(
            "/bin/k3s",
            &format!("#!/bin/sh\necho \"$@\" >/tmp/k3s-args\ntouch /tmp/ready\nexec sh -c \"{IDLE}\"\n"),
        ),
        file(
            "/usr/local/bin/iptables-save",
            "#!/bin/sh\ncat <<'EOF'\n*nat\n:OUTPUT ACCEPT [0:0]\n:DOCKER_OUTPUT - [0:0]\n\
             -A OUTPUT -d 127.0.0.11/32 -j DOCKER_OUTPUT\n\
             -A DOCKER_OUTPUT -d 127.0.0.11/32 -p udp -m udp --dport 53 -j DNAT --to-destination 127.0.0.11:41234\n\
             -A DOCKER_POSTROUTING -s 127.0.0.11/32 -p udp -m udp --sport 41234 -j SNAT --to-source :53\nCOMMIT\nEOF\n",
        ),
        file("/usr/local/bin/iptables-restore", "#!/bin/sh\ncat >/tmp/iptables-restored\n"),
    ]
}

/// Checks, inside the agent `name`, that k3d's files are there as k3d writes them (executable,
/// before the start) and did what k3d's do.
async fn k3d_entrypoint_ran(d: &TestDocker, name: &str, k3d_files: &[TemplateFile]) {
    // k3d's files, as k3d writes them: executable, in place before the start.
    for file in k3d_files {
        let written = sh(d, name, &format!("stat -c %a {0}; cat {0}", file.path)).await;
        assert_eq!(written, format!("755\n{}", file.content), "{}", file.path);
    }
    // The entrypoint ran each fix, in k3d's order, then k3s with the agent's command.
    let log = sh(d, name, "cat /var/log/k3d-entrypoints_*.log").await;
    let ran: Vec<&str> = log.lines().filter_map(|l| l.split("running ").nth(1)).collect();
    assert_eq!(
        ran,
        ["/bin/k3d-entrypoint-cgroupv2.sh", "/bin/k3d-entrypoint-dns.sh", "/bin/k3d-entrypoint-mounts.sh"],
        "{log}"
    );
    assert_eq!(sh(d, name, "cat /tmp/k3s-args").await, "agent\n");
    // The DNS fix: Docker's rules for its DNS server now answer at the gateway, pods' traffic
    // (PREROUTING) included, and resolv.conf names the gateway.
    let gateway = sh(d, name, "ip -4 route show default | cut -d' ' -f3").await.trim().to_owned();
    assert!(!gateway.is_empty(), "a default route on the cluster network");
    let rules = sh(d, name, "cat /tmp/iptables-restored").await;
    for rule in [
        format!("-A OUTPUT -d {gateway}/32 -j DOCKER_OUTPUT"),
        format!("-A PREROUTING -d {gateway}/32 -j DOCKER_OUTPUT"),
        format!("--to-source {gateway}:53"),
    ] {
        assert!(rules.contains(&rule), "{rule} missing from\n{rules}");
    }
    assert!(!rules.contains("-d 127.0.0.11"), "{rules}");
    let resolv = sh(d, name, "cat /etc/resolv.conf").await;
    assert!(resolv.contains(&format!("nameserver {gateway}")) && !resolv.contains("127.0.0.11"), "{resolv}");
    // The mounts fix: Docker mounts a container's root private; the fix made it shared.
    let root = sh(d, name, "grep ' / / ' /proc/self/mountinfo").await;
    assert!(root.contains(" shared:"), "{root}");
}

#[tokio::test]
async fn the_k3d_example_creates_what_k3d_creates() {
    let mut scratch = Scratch::default();
    let Some(d) = docker().await else { return };
    let mut pool = example("k3d-agents");
    let t = &mut pool.spec.template;
    assert!(t.image.starts_with("rancher/k3s:"), "{}", t.image);
    assert!(t.privileged, "k3d runs its nodes privileged");
    // k3d v5.6+ starts its nodes through its entrypoint and the fixes it writes before the
    // start, k3s's own /bin/k3s last (pkg/types/fixes, NodeStart in pkg/client/node.go).
    assert_eq!(t.entrypoint, Some(vec!["/bin/k3d-entrypoint.sh".to_owned()]));
    let k3d_files: Vec<TemplateFile> = t.files.clone();
    let paths: Vec<&str> = k3d_files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/bin/k3d-entrypoint.sh",
            "/bin/k3d-entrypoint-dns.sh",
            "/bin/k3d-entrypoint-mounts.sh",
            "/bin/k3d-entrypoint-cgroupv2.sh"
        ]
    );
    assert!(k3d_files[0].content.contains("exec /bin/k3s \"$@\""), "{}", k3d_files[0].content);
    // The test variant. This host refuses --privileged containers, so that one flag is left out
    // (and checked in the template above), and SYS_ADMIN, which it grants, given alone for the
    // mounts fix; the test image stands in for rancher/k3s, with stand-ins for what its
    // scripts call (see `k3d_stand_ins`); a network and an image volume of the test's own stand
    // in for the cluster's.
    t.privileged = false;
    t.cap_add = vec!["SYS_ADMIN".to_owned()];
    t.image = HEALTHY_IMAGE.to_owned();
    t.files.extend(k3d_stand_ins());
    let network = scratch.network(&d);
    t.network = Some(network.clone());
    assert_eq!(t.volumes, ["k3d-dev-images:/k3d/images"]);
    let images = format!("{}:/k3d/images", scratch.volume(&d));
    t.volumes = vec![images.clone()];

    let explicit = pool.spec.template.clone();
    let name = create(&d, pool).await;
    // Healthy once the entrypoint has run every fix and started "k3s".
    d.backend.wait_up(&name, UP).await.expect("the agent comes up through the k3d entrypoint");
    let inspect = inspect(&name);
    // k3d's TranslateNodeToContainer (pkg/runtimes/docker/translate.go), with the agent's
    // command, env, labels and image volume from pkg/client (ClusterCreate, NodeCreate).
    compare(
        &inspect,
        &[
            ("/Config/Hostname", json!(name), "Hostname: the node's name"),
            ("/Config/Entrypoint", json!(["/bin/k3d-entrypoint.sh"]), "Entrypoint: k3d's"),
            ("/Config/Cmd", json!(["agent"]), "Cmd: agent"),
            ("/HostConfig/Init", json!(true), "Init: true"),
            ("/HostConfig/RestartPolicy/Name", json!("unless-stopped"), "RestartPolicy: unless-stopped"),
            ("/HostConfig/UsernsMode", json!("host"), "UsernsMode: host"),
            ("/HostConfig/Tmpfs", json!({"/run": "", "/var/run": ""}), "Tmpfs: DefaultTmpfsMounts"),
            ("/HostConfig/Binds", json!([images]), "Binds: the cluster's image volume at /k3d/images"),
            ("/HostConfig/NetworkMode", json!(network), "the cluster network"),
            ("/Config/Labels/app", json!("k3d"), "label app=k3d"),
            ("/Config/Labels/k3d.cluster", json!("dev"), "label k3d.cluster"),
            ("/Config/Labels/k3d.role", json!("agent"), "label k3d.role"),
            ("/HostConfig/Privileged", json!(false), "Privileged, left out on this host"),
            ("/State/Running", json!(true), "a node that runs"),
        ],
    );
    let env: Vec<&str> =
        inspect["Config"]["Env"].as_array().expect("env").iter().filter_map(Value::as_str).collect();
    // k3d passes the token itself as K3S_TOKEN; the example's join passes the path of a file
    // that holds it (see tests/join.rs), so that it is not in this inspect.
    for var in [
        "K3S_URL=https://k3d-dev-server-0:6443",
        "K3S_TOKEN_FILE=/etc/poolctl/k3s-token",
        "K3S_KUBECONFIG_OUTPUT=/output/kubeconfig.yaml",
    ] {
        assert!(env.contains(&var), "{var} missing from {env:?}");
    }
    assert!(!env.iter().any(|v| v.starts_with("K3S_TOKEN=")), "{env:?}");
    // k3d writes host.k3d.internal into /etc/hosts after the start; the example has Docker do it.
    let hosts = sh(&d, &name, "cat /etc/hosts").await;
    assert!(hosts.lines().any(|l| l.split_whitespace().nth(1) == Some("host.k3d.internal")), "{hosts}");

    k3d_entrypoint_ran(&d, &name, &k3d_files).await;

    // The copyFrom variant, copying this agent, gets the template written out above: k3d's
    // files included, not the test's stand-ins.
    let copied = copied_template(example_file("k3d-agents", "copy-from.yaml"), &name).await;
    let mut k3d_sorted = k3d_files.clone();
    k3d_sorted.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(copied.files, k3d_sorted, "in the order the diff lists them");
    assert_eq!(
        (&copied.entrypoint, &copied.command),
        (&Some(vec!["/bin/k3d-entrypoint.sh".to_owned()]), &Some(vec!["agent".to_owned()]))
    );
    assert_eq!(
        (&copied.image, &copied.network, copied.init, &copied.restart, copied.userns),
        (&explicit.image, &explicit.network, explicit.init, &explicit.restart, explicit.userns)
    );
    assert_eq!(
        (&copied.tmpfs, &copied.volumes, &copied.extra_hosts),
        (&explicit.tmpfs, &explicit.volumes, &explicit.extra_hosts)
    );
    for key in ["app", "k3d.cluster", "k3d.role"] {
        assert_eq!(copied.labels.get(key), explicit.labels.get(key), "{key}");
    }
    assert_eq!(copied.env.get("K3S_KUBECONFIG_OUTPUT"), explicit.env.get("K3S_KUBECONFIG_OUTPUT"));
}

#[tokio::test]
async fn every_other_setting_reaches_docker_as_docker_run_sends_it() {
    let Some(d) = docker().await else { return };
    let yaml = r"
image: IMAGE
tmpfs: ['/scratch:size=64m,mode=1777']
securityOpt: [no-new-privileges]
capAdd: [NET_ADMIN]
capDrop: [MKNOD]
sysctls: {net.ipv4.ip_forward: '1'}
ports: ['127.0.0.1::80', '53/udp']
extraHosts: ['db.internal:192.0.2.10']
dns: [192.0.2.53]
devices: ['/dev/null:/dev/poolctl-null:rw']
user: '1000:1000'
workdir: /srv
stopSignal: SIGUSR1
cpus: 0.5
memory: 64m
"
    .replace("IMAGE", IMAGE);
    let template: Template = serde_saphyr::from_str(&yaml).expect("a template");
    let mut pool = example("quickstart");
    pool.spec.template = template;
    let name = create(&d, pool).await;
    let inspect = inspect(&name);
    compare(
        &inspect,
        &[
            (
                "/HostConfig/Tmpfs",
                json!({"/scratch": "size=64m,mode=1777"}),
                "--tmpfs /scratch:size=64m,mode=1777",
            ),
            ("/HostConfig/SecurityOpt", json!(["no-new-privileges"]), "--security-opt no-new-privileges"),
            ("/HostConfig/CapAdd", json!(["NET_ADMIN"]), "--cap-add NET_ADMIN"),
            ("/HostConfig/CapDrop", json!(["MKNOD"]), "--cap-drop MKNOD"),
            ("/HostConfig/Sysctls", json!({"net.ipv4.ip_forward": "1"}), "--sysctl net.ipv4.ip_forward=1"),
            (
                "/HostConfig/PortBindings",
                json!({"80/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}], "53/udp": [{"HostIp": "", "HostPort": ""}]}),
                "-p 127.0.0.1::80 -p 53/udp",
            ),
            ("/Config/ExposedPorts", json!({"80/tcp": {}, "53/udp": {}}), "-p exposes the ports"),
            (
                "/HostConfig/ExtraHosts",
                json!(["db.internal:192.0.2.10"]),
                "--add-host db.internal:192.0.2.10",
            ),
            ("/HostConfig/Dns", json!(["192.0.2.53"]), "--dns 192.0.2.53"),
            (
                "/HostConfig/Devices",
                json!([{"PathOnHost": "/dev/null", "PathInContainer": "/dev/poolctl-null", "CgroupPermissions": "rw"}]),
                "--device /dev/null:/dev/poolctl-null:rw",
            ),
            ("/Config/User", json!("1000:1000"), "--user 1000:1000"),
            ("/Config/WorkingDir", json!("/srv"), "--workdir /srv"),
            ("/Config/StopSignal", json!("SIGUSR1"), "--stop-signal SIGUSR1"),
            ("/HostConfig/NanoCpus", json!(500_000_000), "--cpus 0.5"),
            ("/HostConfig/Memory", json!(64 << 20), "--memory 64m"),
        ],
    );
    // And inside: the tmpfs options are options, not part of the path.
    let mount = sh(&d, &name, "grep ' /scratch ' /proc/mounts").await;
    assert!(mount.starts_with("tmpfs /scratch tmpfs ") && mount.contains("size=65536k"), "{mount}");
    assert_eq!(sh(&d, &name, "id -u; pwd; cat /proc/sys/net/ipv4/ip_forward").await, "1000\n/srv\n1\n");
    assert!(sh(&d, &name, "cat /etc/resolv.conf").await.contains("nameserver 192.0.2.53"));
    assert!(sh(&d, &name, "grep db.internal /etc/hosts").await.starts_with("192.0.2.10"));
    sh(&d, &name, "test -c /dev/poolctl-null").await;
}

#[test]
fn bad_settings_are_caught_offline_with_file_line_and_field() {
    let text = "apiVersion: poolctl.dev/v1alpha1
kind: Pool
metadata:
  name: w
spec:
  replicas: 2
  template:
    image: busybox
    volumes: [/]
    tmpfs: ['/run:size=lots']
    securityOpt: [seccomp=/etc/profile.json]
    restart: always:3
    devices: [/dev/fuse:rx]
    capAdd: [SYS_WIZARD]
    sysctls: {vm.swappiness: '1'}
    ports: ['8080:80']
    extraHosts: ['db:not-an-ip']
    dns: [one.one.one.one]
    user: 'a:b:c'
    workdir: srv
    stopSignal: SIGNONE
    cpus: 0
    memory: 1k
    cgroupns: shared
";
    let errors: Vec<String> = match load_files([("pools/a.yaml", text)]) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.iter().map(SpecError::to_string).collect(),
    };
    let expected = [
        "pools/a.yaml:9:15: spec.template.volumes[0]: volume \"/\": nothing can be mounted over the container's root",
        "pools/a.yaml:10:13: spec.template.tmpfs[0]: tmpfs \"/run:size=lots\": option \"size=lots\" has a bad value",
        "pools/a.yaml:11:19: spec.template.securityOpt[0]: security option \"seccomp=/etc/profile.json\": seccomp takes unconfined or builtin",
        "pools/a.yaml:12:14: spec.template.restart: restart policy \"always:3\": only on-failure takes a retry count",
        "pools/a.yaml:13:15: spec.template.devices[0]: device \"/dev/fuse:rx\": the path \"rx\" must be absolute",
        "pools/a.yaml:14:14: spec.template.capAdd[0]: unknown capability \"SYS_WIZARD\"",
        "pools/a.yaml:15:30: spec.template.sysctls.vm.swappiness: sysctl \"vm.swappiness\" is not namespaced",
        "pools/a.yaml:16:13: spec.template.ports[0]: port \"8080:80\" binds a fixed host port",
        "pools/a.yaml:17:18: spec.template.extraHosts[0]: extra host \"db:not-an-ip\": \"not-an-ip\" is not an IP address",
        "pools/a.yaml:18:11: spec.template.dns[0]: DNS server \"one.one.one.one\" is not an IP address",
        "pools/a.yaml:19:11: spec.template.user: user \"a:b:c\"",
        "pools/a.yaml:20:14: spec.template.workdir: working directory \"srv\" must be absolute",
        "pools/a.yaml:21:17: spec.template.stopSignal: unknown signal \"SIGNONE\"",
        "pools/a.yaml:22:11: spec.template.cpus: cpus \"0\"",
        "pools/a.yaml:23:13: spec.template.memory: memory \"1k\" is below Docker's minimum of 6m",
        "pools/a.yaml:24:15: spec.template.cgroupns: unknown variant `shared`, expected `private` or `host`",
    ];
    let mut unmatched: Vec<&String> = errors.iter().collect();
    for start in expected {
        let found = unmatched.iter().position(|e| e.starts_with(start));
        assert!(found.is_some(), "no error starts with {start:?}; got {errors:#?}");
        unmatched.remove(found.unwrap_or_default());
    }
    assert!(unmatched.is_empty(), "unexpected errors: {unmatched:#?}");
}

/// The entrypoint a k3d node starts through (k3d v5.6+ writes it before the start): it runs
/// every `/bin/k3d-entrypoint-*.sh`, then, here, records its arguments and idles.
const K3D_STYLE_ENTRYPOINT: &str = "#!/bin/sh\n\
    set -e\n\
    for fix in /bin/k3d-entrypoint-*.sh; do \"$fix\"; done\n\
    echo \"$@\" > /tmp/args\n\
    exec sh -c \"trap 'exit 0' TERM; while :; do sleep 3600 & wait \\$!; done\"\n";

/// A k3s registries.yaml, as k3d writes one for a cluster with a registry.
const K3S_REGISTRIES: &str =
    "mirrors:\n  \"registry.localhost:5000\":\n    endpoint:\n      - http://registry.localhost:5000\n";

/// A fix the entrypoint runs, as k3d's DNS and mounts fixes are run.
const K3D_STYLE_FIX: &str = "#!/bin/sh\ntouch /tmp/fixed\n";

/// `docker create` + `docker cp` + `docker start`: a container of the test's with unusual
/// settings and entrypoint files written before its start, as k3d makes its nodes.
fn source_container(
    s: &crate::support::scenario::Scenario,
    networks: [&str; 2],
    volume: &str,
    bound: &Path,
    proxy: &str,
) -> String {
    let [network, second] = networks;
    let d = s.docker();
    let name = d.name("source");
    let scripts = tempfile::tempdir().expect("a temp dir");
    let mut args: Vec<String> = [
        "create",
        "--name",
        &name,
        "--label",
        &format!("{RUN_LABEL}={}", run_id()),
        "--label",
        &format!("{CASE_LABEL}={}", d.case),
        "--label",
        "io.x-k8s.kind.cluster=dev",
        "--label",
        &format!("node.example/name={name}"),
        "--env",
        &format!("HTTP_PROXY={proxy}"),
        "--env",
        "NO_PROXY=localhost,10.0.0.0/8,.svc",
        "--env",
        "K3S_TOKEN=s3cret",
        "--memory",
        "64m",
        "--cpus",
        "0.5",
        "--pids-limit",
        "100",
        "--ulimit",
        "nofile=1024:2048",
        "--shm-size",
        "128m",
        "--sysctl",
        "net.ipv4.ip_forward=1",
        "--sysctl",
        "net.core.somaxconn=1024",
        "--tmpfs",
        "/scratch:size=64m,mode=1777",
        "--tmpfs",
        "/run",
        "--cap-add",
        "NET_ADMIN",
        "--cap-drop",
        "MKNOD",
        "--security-opt",
        "no-new-privileges",
        "--init",
        "--tty",
        "--restart",
        "on-failure:2",
        "--stop-signal",
        "SIGUSR1",
        "--cgroupns",
        "private",
        "--userns",
        "host",
        "--network",
        network,
        "--volume",
        "/data",
        "--volume",
        &format!("{volume}:/shared"),
        "--volume",
        &format!("{}:/bound:ro", bound.display()),
        "--entrypoint",
        "/bin/k3d-entrypoint.sh",
    ]
    .map(str::to_owned)
    .to_vec();
    // A device only where the host has one to give.
    if Path::new("/dev/fuse").exists() {
        args.extend(["--device".to_owned(), "/dev/fuse".to_owned()]);
    }
    args.extend([IMAGE.to_owned(), "agent".to_owned()]);
    docker_cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    for (file, text) in
        [("k3d-entrypoint.sh", K3D_STYLE_ENTRYPOINT), ("k3d-entrypoint-test.sh", K3D_STYLE_FIX)]
    {
        let path = scripts.path().join(file);
        std::fs::write(&path, text).expect("write the script");
        let chmod = Command::new("chmod").arg("0755").arg(&path).status().expect("chmod runs");
        assert!(chmod.success());
        docker_cli(&["cp", &path.display().to_string(), &format!("{name}:/bin/{file}")]);
    }
    // k3s's registry mirrors, which k3d writes into its nodes, in directories the image lacks.
    let registries = scripts.path().join("tree/etc/rancher/k3s/registries.yaml");
    std::fs::create_dir_all(registries.parent().expect("a parent")).expect("the directories");
    std::fs::write(&registries, K3S_REGISTRIES).expect("write registries.yaml");
    docker_cli(&["cp", &format!("{}/.", scripts.path().join("tree").display()), &format!("{name}:/")]);
    // A second network, connected before the start as `docker run --network a --network b` does.
    docker_cli(&["network", "connect", second, &name]);
    docker_cli(&["start", &name]);
    name
}

/// The names of the networks a container is on, from its inspect, sorted.
fn networks_of(inspect: &Value) -> Vec<String> {
    let networks = inspect["NetworkSettings"]["Networks"].as_object().expect("networks");
    let mut names: Vec<String> = networks.keys().cloned().collect();
    names.sort();
    names
}

/// The mount at `at` of a container, from its inspect.
fn mount(inspect: &Value, at: &str) -> Value {
    let mounts = inspect["Mounts"].as_array().expect("mounts");
    mounts.iter().find(|m| m["Destination"] == at).cloned().expect("a mount")
}

/// A pool of one that copies `source`, with a setting of its own over a copied one.
fn copying_pool(d: &TestDocker, source: &str) -> String {
    let labels: Vec<String> = d.labels().iter().map(|(k, v)| format!("      {k}: '{v}'")).collect();
    format!(
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: {}\nspec:\n  replicas: 1\n  \
         template:\n    copyFrom:\n      container: {source}\n    env:\n      NO_PROXY: localhost\n    \
         labels:\n{}\n  rollout:\n    stopGracePeriod: 2s\n",
        d.pool,
        labels.join("\n")
    )
}

/// The issue's "done when": a pool that copies a container created with proxy variables,
/// sysctls, tmpfs options, a device and an entrypoint written by `docker cp` creates instances
/// whose inspected configuration matches the source's in every copied field, with the scripts
/// present, executable and run.
/// Nothing of what `copy_from_creates_instances_configured_as_the_source` compares was left to
/// the daemon's defaults: the source's settings are unusual.
fn assert_unusual(src: &Value) {
    assert_eq!(
        src["HostConfig"]["Sysctls"],
        json!({"net.ipv4.ip_forward": "1", "net.core.somaxconn": "1024"})
    );
    assert_eq!(src["HostConfig"]["Tmpfs"]["/scratch"], "size=64m,mode=1777");
    assert_eq!(
        (src["HostConfig"]["Memory"].as_i64(), src["HostConfig"]["NanoCpus"].as_i64()),
        (Some(64 << 20), Some(500_000_000))
    );
    assert_eq!(
        (src["HostConfig"]["PidsLimit"].as_i64(), src["HostConfig"]["ShmSize"].as_i64()),
        (Some(100), Some(128 << 20))
    );
    assert_eq!(src["HostConfig"]["Ulimits"], json!([{"Name": "nofile", "Soft": 1024, "Hard": 2048}]));
}

#[tokio::test]
async fn copy_from_creates_instances_configured_as_the_source() {
    let mut scratch = Scratch::default();
    let bound = tempfile::tempdir().expect("a temp dir");
    let Some(s) = crate::support::scenario::Scenario::with_docker().await else { return };
    let d = s.docker();
    let network = scratch.network(d);
    let volume = scratch.volume(d);
    let second = scratch.network_named(d, "second");
    let networks = [network.as_str(), second.as_str()];
    let source = source_container(&s, networks, &volume, bound.path(), "http://proxy.example:3128");
    s.write("pool.yaml", &copying_pool(d, &source));
    let id = inspect(&source)["Id"].as_str().expect("an id").to_owned();
    let plan = s.run("plan", &[]).expect_code(0);
    assert!(plan.stdout.contains(&format!("  copyFrom {source} ({})\n", &id[..12])), "{}", plan.stdout);
    assert!(!plan.stdout.contains("s3cret"), "a credential is never copied: {}", plan.stdout);
    s.run("apply", &["--yes"]).expect_code(0);
    let instances = s.running().await;
    assert_eq!(instances.len(), 1, "{instances:?}");
    let (src, new) = (inspect(&source), inspect(&instances[0].name));

    // Every copied field, as the source has it.
    let copied = [
        "/Config/Image",
        "/Config/Entrypoint",
        "/Config/Cmd",
        "/Config/Tty",
        "/Config/StopSignal",
        "/Config/Labels/io.x-k8s.kind.cluster",
        "/HostConfig/Privileged",
        "/HostConfig/Sysctls",
        "/HostConfig/Tmpfs",
        "/HostConfig/Devices",
        "/HostConfig/CapAdd",
        "/HostConfig/CapDrop",
        "/HostConfig/SecurityOpt",
        "/HostConfig/Init",
        "/HostConfig/RestartPolicy",
        "/HostConfig/CgroupnsMode",
        "/HostConfig/UsernsMode",
        "/HostConfig/NetworkMode",
        "/HostConfig/Binds",
        "/Config/Volumes",
        "/HostConfig/Memory",
        "/HostConfig/NanoCpus",
        "/HostConfig/PidsLimit",
        "/HostConfig/Ulimits",
        "/HostConfig/ShmSize",
    ];
    let expected: Vec<(&str, Value, &str)> =
        copied.iter().map(|p| (*p, src.pointer(p).cloned().unwrap_or(Value::Null), "copied")).collect();
    compare(&new, &expected);
    assert_unusual(&src);

    let env = |c: &Value| -> Vec<String> {
        c["Config"]["Env"]
            .as_array()
            .expect("env")
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let new_env = env(&new);
    assert!(new_env.contains(&"HTTP_PROXY=http://proxy.example:3128".to_owned()), "{new_env:?}");
    assert!(new_env.contains(&"NO_PROXY=localhost".to_owned()), "the template's own wins: {new_env:?}");
    assert!(!new_env.iter().any(|e| e.starts_with("K3S_TOKEN=")), "{new_env:?}");
    let new_labels = &new["Config"]["Labels"];
    assert!(new_labels.get("node.example/name").is_none(), "names the source alone: {new_labels}");

    // On both networks, as the source.
    assert_eq!(networks_of(&new), networks_of(&src));
    assert_eq!(networks_of(&src).len(), 2, "{}", src["NetworkSettings"]);

    // Named volumes and binds are shared; the anonymous one is the instance's own.
    assert_eq!(mount(&new, "/shared")["Name"], json!(volume));
    assert_eq!(mount(&new, "/bound")["Source"], mount(&src, "/bound")["Source"]);
    assert_eq!(mount(&new, "/data")["Type"], "volume");
    assert_ne!(mount(&new, "/data")["Name"], mount(&src, "/data")["Name"]);

    // The entrypoint files were written before the start: present, executable, and run; and
    // the registries with them.
    let name = &instances[0].name;
    sh(d, name, "test -x /bin/k3d-entrypoint.sh && test -x /bin/k3d-entrypoint-test.sh").await;
    for file in ["/bin/k3d-entrypoint.sh", "/bin/k3d-entrypoint-test.sh", "/etc/rancher/k3s/registries.yaml"]
    {
        let stat = format!("stat -c %a {file}; cat {file}");
        assert_eq!(sh(d, name, &stat).await, sh(d, &source, &stat).await, "{file}");
    }
    assert_eq!(sh(d, name, "cat /tmp/args; test -f /tmp/fixed && echo fixed").await, "agent\nfixed\n");
    assert_eq!(sh(d, name, "cat /proc/sys/net/core/somaxconn").await, "1024\n");

    // Copied again by the next plan, the same settings give the same template: in sync.
    s.run("plan", &["--detailed-exitcode"]).expect_code(0);
    // The source recreated with another setting (as a kind upgrade recreates its nodes) is a
    // template change, shown in the diff like a written one.
    docker_cli(&["rm", "-f", "-v", &source]);
    source_container(&s, networks, &volume, bound.path(), "http://proxy.example:8080");
    let plan = s.run("plan", &["--detailed-exitcode"]).expect_code(2);
    let was = format!("(was {})", instances[0].template_hash);
    assert!(
        plan.stdout.contains(&was) && plan.stdout.contains("http://proxy.example:8080"),
        "{}",
        plan.stdout
    );
}

/// A source that is missing, or not running, fails the plan with what to do; `validate` stays
/// offline and passes. The stopped source is privileged, which this host refuses to start:
/// its settings are read from its config alone.
#[tokio::test]
async fn copy_from_a_missing_or_stopped_container_fails_the_plan() {
    let Some(s) = crate::support::scenario::Scenario::with_docker().await else { return };
    let d = s.docker();
    let stopped = d.name("stopped");
    let case = format!("{CASE_LABEL}={}", d.case);
    docker_cli(&["create", "--name", &stopped, "--label", &case, "--privileged", IMAGE]);
    assert_eq!(inspect(&stopped)["HostConfig"]["Privileged"], true);
    let pool = |source: &str| {
        format!(
            "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: {}\nspec:\n  replicas: 1\n  \
             template:\n    copyFrom: {{container: {source}}}\n",
            d.pool
        )
    };
    let missing = d.name("missing");
    s.write("pool.yaml", &pool(&missing));
    let validate = s.run("validate", &[]).expect_code(0);
    assert!(
        validate.stdout.contains(&format!("it covers the settings copied from {missing}")),
        "{}",
        validate.stdout
    );
    let plan = s.run("plan", &[]).expect_code(1);
    let expected = format!("pool {}: spec.template.copyFrom: container {missing} not found", d.pool);
    assert!(plan.stderr.contains(&expected), "{}", plan.stderr);
    s.write("pool.yaml", &pool(&stopped));
    let plan = s.run("plan", &[]).expect_code(1);
    let expected = format!("container {stopped} is created, not running: start it (docker start {stopped})");
    assert!(plan.stderr.contains(&expected), "{}", plan.stderr);
    assert!(s.containers().await.is_empty(), "nothing was created");
}

/// `plan --out` then `apply FILE` carries out the plan of a copy exactly; once the source
/// changed, the saved plan is stale, as after a change of the pool file.
#[tokio::test]
async fn a_saved_plan_of_a_copy_is_carried_out_or_refused_when_the_source_changed() {
    let Some(s) = crate::support::scenario::Scenario::with_docker().await else { return };
    let d = s.docker();
    let source = d.name("source");
    let case = format!("{CASE_LABEL}={}", d.case);
    let run = |proxy: &str| {
        let env = format!("HTTP_PROXY={proxy}");
        docker_cli(&["run", "-d", "--name", &source, "--label", &case, "--env", &env, IMAGE]);
    };
    run("http://proxy.example:3128");
    s.write("pool.yaml", &copying_pool(d, &source));
    let saved = tempfile::tempdir().expect("a temp dir");
    let file = saved.path().join("plan.json").display().to_string();
    s.run("plan", &["--out", &file]).expect_code(0);
    s.run_bare(&["apply", &file]).expect_code(0);
    assert_eq!(s.running().await.len(), 1);

    s.run("plan", &["--out", &file]).expect_code(0);
    docker_cli(&["rm", "-f", "-v", &source]);
    run("http://proxy.example:8080");
    let stale = s.run_bare(&["apply", &file]).expect_code(1);
    assert!(stale.stderr.contains("is stale, nothing was changed"), "{}", stale.stderr);
}

/// A new pool's plan shows what copyFrom copied. Then, with the source stopped, `status` shows
/// the pool, says its template cannot be read and why, and shows its instances against the
/// template last rolled out: in sync, as they were.
#[tokio::test]
async fn status_shows_a_pool_whose_copy_from_source_is_stopped() {
    let Some(s) = crate::support::scenario::Scenario::with_docker().await else { return };
    let d = s.docker();
    let source = d.name("source");
    let case = format!("{CASE_LABEL}={}", d.case);
    let proxy = "HTTP_PROXY=http://proxy.example:3128";
    docker_cli(&["run", "-d", "--name", &source, "--label", &case, "--env", proxy, IMAGE]);
    s.write("pool.yaml", &copying_pool(d, &source));
    // A new pool's plan shows its template whole, what was copied included.
    let plan = s.run("plan", &["-o", "json"]).expect_code(0).stdout;
    let plan: Value = serde_json::from_str(&plan).unwrap();
    let change = &plan["pools"][0]["template_change"];
    assert_eq!(change["from_hash"], "", "{change:#}");
    assert!(
        change["new"].as_str().is_some_and(|t| t.contains("HTTP_PROXY: http://proxy.example:3128")),
        "{change:#}"
    );
    let text = s.run("plan", &[]).expect_code(0).stdout;
    assert!(
        text.contains("--- template (none)") && text.contains("+    HTTP_PROXY: http://proxy.example:3128"),
        "{text}"
    );
    s.run("apply", &["--yes"]).expect_code(0);
    let instance = s.running().await.remove(0).name;
    docker_cli(&["stop", "-t", "0", &source]);

    let shown = s.run("status", &[]).expect_code(0).stdout;
    assert!(
        shown.contains(&format!("its template cannot be read: pool {}: spec.template.copyFrom", d.pool)),
        "{shown}"
    );
    assert!(shown.contains(&format!("docker start {source}")), "the way out: {shown}");
    assert!(shown.contains("shown against the template last rolled out"), "{shown}");
    assert!(shown.contains(&instance) && shown.contains("in sync"), "{shown}");
    let json: Value = serde_json::from_str(&s.run("status", &["-o", "json"]).expect_code(0).stdout).unwrap();
    assert!(json["pools"][0]["template_unread"].as_str().is_some_and(|w| w.contains(&source)), "{json:#}");
    assert_eq!(json["pools"][0]["in_sync"], true, "{json:#}");
    // plan still refuses: it cannot know what to create.
    s.run("plan", &[]).expect_code(1);
}

/// A tag of the test's own, removed when the test ends, however it ends.
struct Tag(String);

impl Drop for Tag {
    fn drop(&mut self) {
        let removed = Command::new("docker").args(["image", "rm", &self.0]).output();
        if !removed.is_ok_and(|o| o.status.success()) {
            eprintln!("test cleanup: `docker image rm {}` failed; the tag may remain", self.0);
        }
    }
}

/// `imagePolicy: digest`: another image tagged under the pool's image name (as `kind load`
/// of a new build does) makes the plan replace every instance, naming both IDs; the new
/// instances are made from the new ID. (The second image has a HEALTHCHECK on /tmp/ready.)
#[tokio::test]
async fn an_image_re_tagged_under_the_pools_name_rolls_a_pool_that_follows_digests() {
    let Some(s) = crate::support::scenario::Scenario::with_docker().await else { return };
    let d = s.docker();
    let tag = Tag(format!("{}:dev", d.pool));
    docker_cli(&["tag", IMAGE, &tag.0]);
    let id_of =
        |image: &str| docker_cli(&["image", "inspect", "--format", "{{.Id}}", image]).trim().to_owned();
    let (first, second) = (id_of(IMAGE), id_of(HEALTHY_IMAGE));
    assert_ne!(first, second);
    let labels: Vec<String> = d.labels().iter().map(|(k, v)| format!("      {k}: '{v}'")).collect();
    s.write(
        "pool.yaml",
        &format!(
            "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: {}\nspec:\n  replicas: 2\n  \
             template:\n    image: {}\n    imagePolicy: digest\n    command: [sh, -c, 'touch /tmp/ready; exec sleep 3600']\n    labels:\n{}\n  \
             rollout:\n    stopGracePeriod: 1s\n",
            d.pool,
            tag.0,
            labels.join("\n")
        ),
    );
    s.run("apply", &["--yes"]).expect_code(0);
    let before: Vec<String> = s.running().await.into_iter().map(|c| c.name).collect();
    assert_eq!(before.len(), 2);
    assert!(before.iter().all(|name| inspect(name)["Image"] == first.as_str()), "made from the ID");
    s.run("plan", &["--detailed-exitcode"]).expect_code(0);

    docker_cli(&["tag", HEALTHY_IMAGE, &tag.0]);
    let plan = s.run("plan", &["--detailed-exitcode"]).expect_code(2);
    let moved = format!("image {} is now {second} (was {first})", tag.0);
    assert!(plan.stdout.contains(&moved), "{}", plan.stdout);
    assert!(plan.stdout.contains("2 to create, 2 to retire"), "{}", plan.stdout);
    s.run("apply", &["--yes"]).expect_code(0);
    let after = s.running().await;
    assert_eq!(after.len(), 2);
    assert!(after.iter().all(|c| !before.contains(&c.name) && inspect(&c.name)["Image"] == second.as_str()));

    // A pool file cannot set the ID itself.
    s.write("pool.yaml", &format!("apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: {}\nspec:\n  replicas: 1\n  template:\n    image: {}\n    imageId: {first}\n", d.pool, tag.0));
    let refused = s.run("validate", &[]).expect_code(1);
    assert!(
        refused.stderr.contains("spec.template.imageId: is read from the Docker endpoint"),
        "{}",
        refused.stderr
    );
}

/// The IDs of the scenario's containers, by name.
async fn ids(s: &Scenario) -> BTreeMap<String, String> {
    s.containers().await.into_iter().map(|c| (c.name, c.id)).collect()
}

/// `memory` and `restart` change on the running containers (`docker update`): the plan says
/// so, the containers stay, Docker shows the new values, and the next plan is empty. An update
/// record lost (or never written: a run killed after the update) costs one more update, never a
/// container. `env` still replaces, and the plan names it as the reason.
#[tokio::test]
async fn live_settings_change_in_place_and_env_replaces() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(2).max_unavailable(1).setting("memory", "64m"));
    s.run("apply", &["--yes"]).expect_code(0);
    let before = ids(&s).await;
    assert_eq!(before.len(), 2);

    let live = s
        .pool()
        .replicas(2)
        .max_unavailable(1)
        .setting("memory", "128m")
        .setting("restart", "unless-stopped");
    s.write_pool(&live);
    let plan = s.run("plan", &[]).expect_code(0);
    for name in before.keys() {
        assert!(
            plan.stdout.contains(&format!("update-in-place {name}  (memory, restart; same container)")),
            "{}",
            plan.stdout
        );
    }
    assert!(plan.stdout.contains("0 to create, 0 to retire, 2 to update in place"), "{}", plan.stdout);
    s.run("apply", &["--yes"]).expect_code(0);
    assert_eq!(ids(&s).await, before, "the same containers");
    for name in before.keys() {
        let host = &inspect(name)["HostConfig"];
        assert_eq!(host["Memory"], json!(128 << 20), "{name}");
        assert_eq!(host["MemorySwap"], json!(256 << 20), "{name}: as a new container gets it");
        assert_eq!(host["RestartPolicy"]["Name"], json!("unless-stopped"), "{name}");
    }
    s.run("plan", &["--detailed-exitcode"]).expect_code(0);

    let first = before.keys().next().expect("an instance").clone();
    docker_cli(&["volume", "rm", &poolctl::backend::docker::updated_record_name(&first)]);
    let plan = s.run("plan", &[]).expect_code(0);
    assert!(plan.stdout.contains(&format!("update-in-place {first}")), "{}", plan.stdout);
    assert!(plan.stdout.contains("0 to create, 0 to retire, 1 to update in place"), "{}", plan.stdout);
    s.run("apply", &["--yes"]).expect_code(0);
    assert_eq!(ids(&s).await, before);
    s.run("plan", &["--detailed-exitcode"]).expect_code(0);

    s.write_pool(&live.env("LEVEL", "2"));
    let plan = s.run("plan", &[]).expect_code(0);
    assert!(plan.stdout.contains("replaced: env changed"), "{}", plan.stdout);
    assert!(!plan.stdout.contains("update-in-place"), "{}", plan.stdout);
    s.run("apply", &["--yes"]).expect_code(0);
    let after = ids(&s).await;
    assert_eq!(after.len(), 2);
    assert!(after.values().all(|id| !before.values().any(|old| old == id)), "{before:?} {after:?}");
}

/// `spec.rollout.inPlace: Never`: a change of live settings replaces, as any other.
#[tokio::test]
async fn in_place_never_replaces_a_change_of_live_settings() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().setting("memory", "64m").in_place("Never"));
    s.run("apply", &["--yes"]).expect_code(0);
    let before = ids(&s).await;
    s.write_pool(&s.pool().setting("memory", "128m").in_place("Never"));
    let plan = s.run("plan", &[]).expect_code(0);
    assert!(!plan.stdout.contains("update-in-place"), "{}", plan.stdout);
    assert!(plan.stdout.contains("1 to create, 1 to retire"), "{}", plan.stdout);
    s.run("apply", &["--yes"]).expect_code(0);
    let after = ids(&s).await;
    assert_eq!(after.len(), 1);
    assert!(after.keys().all(|name| !before.contains_key(name)), "{before:?} {after:?}");
    assert_eq!(inspect(after.keys().next().expect("one"))["HostConfig"]["Memory"], json!(128 << 20));
}
