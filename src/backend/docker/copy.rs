//! `spec.template.copyFrom` at the Docker edge: a running container read (one inspect of it,
//! one of its image, one diff) into the [`Template`] that would create its like, and the pools
//! that name one resolved into their effective template before anything is planned, so that the
//! template hash and the plan's diff cover what was copied.
//!
//! Only what the container was given is copied, not what its image gives anyway (its env,
//! labels, volumes, entrypoint...): those come with the image, and would follow it if the
//! template names another.

use std::collections::{BTreeMap, HashSet};

use bollard::models::{
    ChangeType, ContainerConfig, ContainerInspectResponse, DeviceMapping, HostConfig,
    HostConfigCgroupnsModeEnum, ImageConfig, MountType, RestartPolicy, RestartPolicyNameEnum,
};

use super::{DockerBackend, archive};
use crate::backend::BackendError;
use crate::backend::endpoints::Endpoints;
use crate::model::{Desired, DesiredPool};
use crate::spec::{self, CgroupnsMode, CopiedFrom, ImagePolicy, Template, TemplateFile, UsernsMode};

/// Where k3s reads the cluster's registry mirrors, which k3d writes into every node it makes
/// (and copies from a node when it adds one).
const K3S_REGISTRIES: &str = "/etc/rancher/k3s/registries.yaml";

/// The size of `/dev/shm` Docker gives a container run without `--shm-size`.
const DEFAULT_SHM: i64 = 64 << 20;

/// The `PATH` Docker sets in a container whose image has none.
const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Whether a file written into the container (not its image) is copied: the entrypoint itself
/// when it was written in, k3d's (v5.6 and later) `/bin/k3d-entrypoint.sh` and the
/// `/bin/k3d-entrypoint-*.sh` fixes it runs, and k3s's `registries.yaml`.
fn is_copied_file(path: &str, entrypoint: Option<&str>) -> bool {
    let k3d = path.starts_with("/bin/k3d-entrypoint")
        && std::path::Path::new(path).extension().is_some_and(|e| e == "sh");
    k3d || path == K3S_REGISTRIES || entrypoint == Some(path)
}

/// Why a pool's `copyFrom` could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The container is missing or does not run.
    #[error("pool {pool}: spec.template.copyFrom: {why}")]
    Source { pool: String, why: String },
    /// `imagePolicy: digest` and the image is not on the pool's endpoint.
    #[error(
        "pool {pool}: spec.template.imagePolicy: digest: image {image} is not on the Docker endpoint {host}: \
         pull it (docker pull {image}) or load it (kind load docker-image {image}) first"
    )]
    NoImage { pool: String, image: String, host: String },
    /// Docker did not answer as it should about the image.
    #[error("pool {pool}: spec.template.imagePolicy: digest: cannot read image {image}")]
    Image {
        pool: String,
        image: String,
        #[source]
        source: BackendError,
    },
    /// Docker did not answer as it should.
    #[error("pool {pool}: spec.template.copyFrom: cannot read container {container}")]
    Docker {
        pool: String,
        container: String,
        #[source]
        source: BackendError,
    },
}

impl CopyError {
    /// The pool whose template could not be resolved.
    pub fn pool(&self) -> &str {
        match self {
            Self::Source { pool, .. }
            | Self::NoImage { pool, .. }
            | Self::Image { pool, .. }
            | Self::Docker { pool, .. } => pool,
        }
    }
}

/// `desired` with each pool that has `copyFrom` at its effective template, and each pool with
/// `imagePolicy: digest` with its image's ID in it (hash taken again): the named container's
/// settings on the pool's endpoint, with the template's own on top (see [`spec::merge`]), its
/// hash taken again, and the container it came from noted.
pub async fn resolve_copies(
    mut desired: Desired,
    docker: &Endpoints<DockerBackend>,
) -> Result<Desired, CopyError> {
    for pool in &mut desired.pools {
        resolve_pool(pool, docker).await?;
    }
    Ok(desired)
}

/// [`resolve_copies`] for what only shows the world (`status`): a pool whose settings cannot be
/// read (its `copyFrom` container stopped, say) is left as its file writes it, with why.
pub async fn resolve_copies_leniently(
    mut desired: Desired,
    docker: &Endpoints<DockerBackend>,
) -> (Desired, Vec<CopyError>) {
    let mut failed = Vec::new();
    for pool in &mut desired.pools {
        let written = pool.clone();
        if let Err(e) = resolve_pool(pool, docker).await {
            *pool = written;
            failed.push(e);
        }
    }
    (desired, failed)
}

/// One pool at its effective template: its `copyFrom` container's settings under its own, and
/// its image's ID with `imagePolicy: digest`.
async fn resolve_pool(pool: &mut DesiredPool, docker: &Endpoints<DockerBackend>) -> Result<(), CopyError> {
    let backend = docker.of_pool_backend(pool.name());
    if let Some(copy) = pool.pool.spec.template.copy_from.clone() {
        let (template, id) = backend.copied_template(&copy.container).await.map_err(|e| match e {
            Copied::Source(why) => CopyError::Source { pool: pool.name().to_owned(), why },
            Copied::Docker(source) => {
                CopyError::Docker { pool: pool.name().to_owned(), container: copy.container.clone(), source }
            }
        })?;
        pool.pool.spec.template = spec::merge(&pool.pool.spec.template, &template);
        pool.template_hash = spec::template_hash(&pool.pool.spec);
        pool.copied_from = Some(CopiedFrom { container: copy.container, id });
    }
    if pool.pool.spec.template.image_policy == ImagePolicy::Digest {
        let image = pool.pool.spec.template.image.clone();
        let id = match backend.call(backend.docker.inspect_image(&image)).await {
            Ok(inspected) => inspected.id.unwrap_or_default(),
            Err(e) if super::status_of(&e) == Some(404) => {
                let host = backend.host.clone();
                return Err(CopyError::NoImage { pool: pool.name().to_owned(), image, host });
            }
            Err(e) => {
                let source = backend.error(&format!("inspect image {image}"), e);
                return Err(CopyError::Image { pool: pool.name().to_owned(), image, source });
            }
        };
        pool.pool.spec.template.image_id = Some(id);
        pool.template_hash = spec::template_hash(&pool.pool.spec);
    }
    Ok(())
}

/// Why a container's settings could not be read.
enum Copied {
    Source(String),
    Docker(BackendError),
}

impl DockerBackend {
    /// The template that would create a container like `name`, and its ID.
    async fn copied_template(&self, name: &str) -> Result<(Template, String), Copied> {
        let at = &self.host;
        let inspect = self.inspect(name).await.map_err(Copied::Docker)?.ok_or_else(|| {
            Copied::Source(format!("container {name} not found on the Docker endpoint {at}"))
        })?;
        let state =
            inspect.state.as_ref().and_then(|s| s.status).map_or("unknown".to_owned(), |s| s.to_string());
        if inspect.state.as_ref().and_then(|s| s.running) != Some(true) {
            return Err(Copied::Source(format!(
                "container {name} is {state}, not running: start it (docker start {name}) or name a running one"
            )));
        }
        let id = inspect.id.clone().unwrap_or_default();
        let image_id = inspect.image.clone().unwrap_or_default();
        let image = self
            .call(self.docker.inspect_image(&image_id))
            .await
            .map_err(|e| Copied::Docker(self.error(&format!("inspect image {image_id} of {name}"), e)))?;
        let mut template = template_of(&inspect, &image.config.unwrap_or_default());
        template.files =
            self.copied_files(&id, template.entrypoint.as_ref()).await.map_err(Copied::Docker)?;
        // The networks it was connected to besides the first, which a template names apart.
        let mut others: Vec<String> = inspect
            .network_settings
            .as_ref()
            .and_then(|n| n.networks.as_ref())
            .map(|n| {
                // Without a network of its own, a container is on Docker's default bridge.
                let primary = template.network.as_deref().unwrap_or("bridge");
                n.keys().filter(|k| *k != primary).cloned().collect()
            })
            .unwrap_or_default();
        others.sort();
        template.extra_networks = others;
        Ok((template, id))
    }

    /// The files written into the container that are copied (see [`is_copied_file`]), with
    /// their modes.
    async fn copied_files(
        &self,
        id: &str,
        entrypoint: Option<&Vec<String>>,
    ) -> Result<Vec<TemplateFile>, BackendError> {
        let changes = self
            .call(self.docker.container_changes(id))
            .await
            .map_err(|e| self.error(&format!("list the files written in container {id}"), e))?
            .unwrap_or_default();
        let first = entrypoint.and_then(|e| e.first()).map(String::as_str);
        let mut paths: Vec<&str> = changes
            .iter()
            .filter(|c| c.kind != ChangeType::_2 && is_copied_file(&c.path, first))
            .map(|c| c.path.as_str())
            .collect();
        paths.sort_unstable();
        let mut files = Vec::new();
        for path in paths {
            let doing = || format!("copy {path} out of container {id}");
            match self.download(id, path).await? {
                archive::Entry::File(bytes, mode) => {
                    let content = String::from_utf8(bytes)
                        .map_err(|_| BackendError::Failed(format!("{}: it is not UTF-8 text", doing())))?;
                    files.push(TemplateFile { path: path.to_owned(), content, mode: format!("{mode:04o}") });
                }
                // A link written into the container points at a file of the image.
                archive::Entry::Symlink(_) => {}
            }
        }
        Ok(files)
    }
}

/// What the container was given beyond its image, as a template; `image` is the image's config.
fn template_of(inspect: &ContainerInspectResponse, image: &ImageConfig) -> Template {
    let config = inspect.config.clone().unwrap_or_default();
    let host = inspect.host_config.clone().unwrap_or_default();
    let name = inspect.name.as_deref().unwrap_or_default().trim_start_matches('/');
    let own_names =
        [name, config.hostname.as_deref().unwrap_or_default(), inspect.id.as_deref().unwrap_or_default()];

    let mut image_env: HashSet<&str> = image.env.iter().flatten().map(String::as_str).collect();
    // What the daemon gives a container whose image sets no PATH.
    image_env.insert(DEFAULT_PATH);
    let env = spec::env_of(
        config
            .env
            .iter()
            .flatten()
            .filter(|e| !image_env.contains(e.as_str()))
            .filter_map(|e| e.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let image_labels = image.labels.clone().unwrap_or_default();
    let labels: BTreeMap<String, String> = config
        .labels
        .iter()
        .flatten()
        .filter(|(k, v)| image_labels.get(*k) != Some(*v) && spec::copies_label(k, v, &own_names))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();

    // A new entrypoint clears the image's CMD, so the command goes with it.
    let entrypoint =
        (config.entrypoint != image.entrypoint).then(|| config.entrypoint.clone().unwrap_or_default());
    let command =
        (entrypoint.is_some() || config.cmd != image.cmd).then(|| config.cmd.clone().unwrap_or_default());

    let (volumes, tmpfs) = mounts_of(&config, &host, image);

    let mut security_opt = host.security_opt.clone().unwrap_or_default();
    let privileged = host.privileged == Some(true);
    if !privileged && host.masked_paths.as_ref().is_some_and(Vec::is_empty) {
        security_opt.push(spec::docker::SYSTEMPATHS_UNCONFINED.to_owned());
    }
    let restart = host.restart_policy.as_ref().and_then(restart_of);
    let devices = host.devices.iter().flatten().filter_map(device_of).collect();

    Template {
        image: config.image.clone().unwrap_or_default(),
        command,
        entrypoint,
        env,
        labels,
        network: host.network_mode.clone().filter(|n| !n.is_empty() && n != "default"),
        privileged,
        volumes,
        tmpfs,
        security_opt,
        cgroupns: match host.cgroupns_mode {
            Some(HostConfigCgroupnsModeEnum::PRIVATE) => Some(CgroupnsMode::Private),
            Some(HostConfigCgroupnsModeEnum::HOST) => Some(CgroupnsMode::Host),
            _ => None,
        },
        userns: (host.userns_mode.as_deref() == Some("host")).then_some(UsernsMode::Host),
        tty: config.tty == Some(true),
        init: host.init,
        restart,
        devices,
        cap_add: host.cap_add.clone().unwrap_or_default(),
        cap_drop: host.cap_drop.clone().unwrap_or_default(),
        sysctls: host.sysctls.iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect(),
        extra_hosts: host.extra_hosts.clone().unwrap_or_default(),
        stop_signal: config.stop_signal.clone().filter(|s| Some(s) != image.stop_signal.as_ref()),
        // 0 is Docker's "no limit".
        memory: host.memory.filter(|m| *m > 0).map(spec::docker::show_memory),
        cpus: host.nano_cpus.filter(|n| *n > 0).map(spec::docker::show_cpus),
        // Docker's own default is no setting of the source's.
        shm_size: host.shm_size.filter(|s| *s > 0 && *s != DEFAULT_SHM).map(spec::docker::show_memory),
        pids_limit: host.pids_limit.filter(|n| *n > 0),
        ulimits: host
            .ulimits
            .iter()
            .flatten()
            .filter_map(|u| Some((u.name.clone()?, spec::docker::show_ulimit(u.soft?, u.hard?))))
            .collect(),
        ..Template::default()
    }
}

/// The volumes and tmpfs mounts the container was given: binds and named volumes as they were
/// written, `--mount`s turned into the same, and its anonymous volumes (the config's, without
/// the image's own and those a bind covers).
fn mounts_of(config: &ContainerConfig, host: &HostConfig, image: &ImageConfig) -> (Vec<String>, Vec<String>) {
    let mut volumes: Vec<String> = host.binds.clone().unwrap_or_default();
    let mut tmpfs: Vec<String> = host
        .tmpfs
        .iter()
        .flatten()
        .map(|(path, options)| if options.is_empty() { path.clone() } else { format!("{path}:{options}") })
        .collect();
    for mount in host.mounts.iter().flatten() {
        let (Some(target), source) = (mount.target.as_deref(), mount.source.as_deref().unwrap_or_default())
        else {
            continue;
        };
        let ro = if mount.read_only == Some(true) { ":ro" } else { "" };
        match mount.typ {
            Some(MountType::BIND | MountType::VOLUME) if !source.is_empty() => {
                volumes.push(format!("{source}:{target}{ro}"));
            }
            Some(MountType::VOLUME) => volumes.push(target.to_owned()),
            Some(MountType::TMPFS) => tmpfs.push(target.to_owned()),
            _ => {}
        }
    }
    // Anonymous volumes (`-v /var`): the config's, without the image's own and what a bind covers.
    let image_volumes: HashSet<&String> = image.volumes.iter().flatten().collect();
    let covered: Vec<String> =
        volumes.iter().filter_map(|v| v.split(':').nth(1)).map(str::to_owned).collect();
    let mut anonymous: Vec<String> = config
        .volumes
        .iter()
        .flatten()
        .filter(|v| !image_volumes.contains(v) && !covered.contains(v) && !volumes.contains(v))
        .cloned()
        .collect();
    anonymous.sort();
    volumes.splice(0..0, anonymous);
    tmpfs.sort();
    (volumes, tmpfs)
}

/// A restart policy as `--restart` takes it; `None` for Docker's default.
fn restart_of(policy: &RestartPolicy) -> Option<String> {
    match policy.name? {
        RestartPolicyNameEnum::EMPTY | RestartPolicyNameEnum::NO => None,
        RestartPolicyNameEnum::ALWAYS => Some("always".to_owned()),
        RestartPolicyNameEnum::UNLESS_STOPPED => Some("unless-stopped".to_owned()),
        RestartPolicyNameEnum::ON_FAILURE => Some(match policy.maximum_retry_count {
            Some(n) if n > 0 => format!("on-failure:{n}"),
            _ => "on-failure".to_owned(),
        }),
    }
}

/// A device as `--device` takes it.
fn device_of(device: &DeviceMapping) -> Option<String> {
    let (on_host, inside) = (device.path_on_host.as_deref()?, device.path_in_container.as_deref()?);
    let permissions = device.cgroup_permissions.as_deref().filter(|p| !p.is_empty()).unwrap_or("rwm");
    Some(format!("{on_host}:{inside}:{permissions}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::EnvValue;

    #[allow(clippy::unnecessary_wraps)] // the models' fields are all options
    fn strings(items: &[&str]) -> Option<Vec<String>> {
        Some(items.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn only_what_the_container_was_given_beyond_its_image_is_copied() {
        let image = ImageConfig {
            env: strings(&["PATH=/usr/bin:/bin", "container=docker"]),
            entrypoint: strings(&["/usr/local/bin/entrypoint", "/sbin/init"]),
            labels: Some([("org.opencontainers.image.title".to_owned(), "node".to_owned())].into()),
            volumes: strings(&["/var/lib/kubelet"]),
            stop_signal: Some("SIGRTMIN+3".to_owned()),
            ..ImageConfig::default()
        };
        let inspect = ContainerInspectResponse {
            id: Some("3f9a1c2b4d5e".to_owned()),
            name: Some("/dev-worker".to_owned()),
            image: Some("sha256:abc".to_owned()),
            config: Some(ContainerConfig {
                hostname: Some("dev-worker".to_owned()),
                image: Some("kindest/node:v1.31.0".to_owned()),
                env: strings(&[
                    "PATH=/usr/bin:/bin",
                    "container=docker",
                    "HTTP_PROXY=http://p:3128",
                    "HOSTNAME=dev-worker",
                ]),
                entrypoint: strings(&["/usr/local/bin/entrypoint", "/sbin/init"]),
                labels: Some(
                    [
                        ("org.opencontainers.image.title", "node"),
                        ("io.x-k8s.kind.cluster", "dev"),
                        ("io.x-k8s.kind.role", "worker"),
                        ("com.example.name", "dev-worker"),
                        ("poolctl.dev/pool", "w"),
                    ]
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .into(),
                ),
                volumes: strings(&["/var", "/var/lib/kubelet"]),
                stop_signal: Some("SIGRTMIN+3".to_owned()),
                tty: Some(true),
                ..ContainerConfig::default()
            }),
            host_config: Some(HostConfig {
                binds: strings(&["/lib/modules:/lib/modules:ro"]),
                tmpfs: Some(
                    [("/tmp".to_owned(), String::new()), ("/run".to_owned(), "size=64m".to_owned())].into(),
                ),
                network_mode: Some("kind".to_owned()),
                privileged: Some(true),
                security_opt: strings(&["seccomp=unconfined"]),
                cgroupns_mode: Some(HostConfigCgroupnsModeEnum::PRIVATE),
                init: Some(false),
                restart_policy: Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::ON_FAILURE),
                    maximum_retry_count: Some(1),
                }),
                devices: Some(vec![DeviceMapping {
                    path_on_host: Some("/dev/fuse".to_owned()),
                    path_in_container: Some("/dev/fuse".to_owned()),
                    cgroup_permissions: Some("rwm".to_owned()),
                }]),
                cap_add: strings(&["SYS_ADMIN"]),
                sysctls: Some([("net.ipv4.ip_forward".to_owned(), "1".to_owned())].into()),
                memory: Some(64 << 20),
                nano_cpus: Some(500_000_000),
                ..HostConfig::default()
            }),
            ..ContainerInspectResponse::default()
        };
        let t = template_of(&inspect, &image);
        assert_eq!(t.image, "kindest/node:v1.31.0");
        assert_eq!((t.entrypoint, t.command), (None, None), "the image's own");
        assert_eq!(t.env, BTreeMap::from([("HTTP_PROXY".to_owned(), EnvValue::plain("http://p:3128"))]));
        assert_eq!(t.labels.keys().collect::<Vec<_>>(), ["io.x-k8s.kind.cluster", "io.x-k8s.kind.role"]);
        assert_eq!(t.volumes, ["/var", "/lib/modules:/lib/modules:ro"]);
        assert_eq!(t.tmpfs, ["/run:size=64m", "/tmp"]);
        assert_eq!(t.network.as_deref(), Some("kind"));
        assert!(t.privileged && t.tty);
        assert_eq!(t.security_opt, ["seccomp=unconfined"]);
        assert_eq!(
            (t.cgroupns, t.init, t.restart.as_deref()),
            (Some(CgroupnsMode::Private), Some(false), Some("on-failure:1"))
        );
        assert_eq!(t.devices, ["/dev/fuse:/dev/fuse:rwm"]);
        assert_eq!(t.cap_add, ["SYS_ADMIN"]);
        assert_eq!(t.sysctls["net.ipv4.ip_forward"], "1");
        assert_eq!(t.stop_signal, None, "the image's own");
        assert_eq!((t.memory.as_deref(), t.cpus.as_deref()), (Some("64m"), Some("0.5")), "the limits too");
    }

    #[test]
    fn a_new_entrypoint_takes_its_command_along_and_k3d_files_are_found() {
        let image = ImageConfig {
            entrypoint: strings(&["/bin/k3s"]),
            cmd: strings(&["agent"]),
            ..ImageConfig::default()
        };
        let inspect = ContainerInspectResponse {
            config: Some(ContainerConfig {
                entrypoint: strings(&["/bin/k3d-entrypoint.sh"]),
                cmd: strings(&["agent"]),
                ..ContainerConfig::default()
            }),
            ..ContainerInspectResponse::default()
        };
        let t = template_of(&inspect, &image);
        assert_eq!((t.entrypoint, t.command), (strings(&["/bin/k3d-entrypoint.sh"]), strings(&["agent"])));
        for path in ["/bin/k3d-entrypoint.sh", "/bin/k3d-entrypoint-dns.sh", "/start.sh", K3S_REGISTRIES] {
            assert!(is_copied_file(path, Some("/start.sh")), "{path}");
        }
        for path in ["/bin/k3s", "/etc/hosts", "/bin/k3d-entrypoint.sh.bak"] {
            assert!(!is_copied_file(path, Some("/start.sh")), "{path}");
        }
    }
}
