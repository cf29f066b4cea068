//! From a [`NewContainer`] to the body of Docker's create call: what `docker run` would send
//! for the same flags.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, ContainerUpdateBody, DeviceMapping, HostConfig, HostConfigCgroupnsModeEnum,
    PortBinding, ResourcesUlimits, RestartPolicy, RestartPolicyNameEnum,
};

use crate::backend::{LiveUpdate, NewContainer};
use crate::spec::docker::{self, Restart, Volume};
use crate::spec::{CgroupnsMode, UsernsMode};

/// The create body for `spec`, or why one of its settings cannot be read (validation refuses
/// such a template first, so this only catches a caller that skipped it). Public so that a
/// client other than poolctl (the rollout benchmark's floor) creates exactly what poolctl does.
pub fn create_body(spec: &NewContainer) -> Result<ContainerCreateBody, String> {
    let mut binds = Vec::new();
    let mut anonymous = Vec::new();
    for volume in &spec.volumes {
        match docker::parse_volume(volume)? {
            // `docker run -v /var` sends the path as a volume of the config, not as a bind.
            Volume::Anonymous(path) => anonymous.push(path.to_owned()),
            Volume::Mount(mount) => binds.push(mount.to_owned()),
        }
    }
    let mut tmpfs = HashMap::new();
    for entry in &spec.tmpfs {
        let (path, options) = docker::parse_tmpfs(entry)?;
        tmpfs.insert(path.to_owned(), options.to_owned());
    }
    let devices = spec
        .devices
        .iter()
        .map(|text| {
            docker::parse_device(text).map(|d| DeviceMapping {
                path_on_host: Some(d.host.to_owned()),
                path_in_container: Some(d.container.to_owned()),
                cgroup_permissions: Some(d.permissions.to_owned()),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut exposed = Vec::new();
    let mut port_bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
    for text in &spec.ports {
        let port = docker::parse_port(text)?;
        for (container_port, host_port) in port.bindings() {
            if !exposed.contains(&container_port) {
                exposed.push(container_port.clone());
            }
            let binding = PortBinding { host_ip: port.host_ip.clone(), host_port: Some(host_port) };
            port_bindings
                .entry(container_port)
                .or_insert_with(|| Some(Vec::new()))
                .get_or_insert_default()
                .push(binding);
        }
    }
    // The docker CLI turns this option into empty masked and read-only path lists, and the daemon
    // refuses it as an option, so it is sent the same way here.
    let unconfined_paths = spec.security_opt.iter().any(|o| o == docker::SYSTEMPATHS_UNCONFINED);
    let security_opt: Vec<String> =
        spec.security_opt.iter().filter(|o| *o != docker::SYSTEMPATHS_UNCONFINED).cloned().collect();

    let host_config = HostConfig {
        binds: (!binds.is_empty()).then_some(binds),
        tmpfs: (!tmpfs.is_empty()).then_some(tmpfs),
        network_mode: spec.network.clone(),
        privileged: Some(spec.privileged),
        security_opt: (!security_opt.is_empty()).then_some(security_opt),
        masked_paths: unconfined_paths.then(Vec::new),
        readonly_paths: unconfined_paths.then(Vec::new),
        cgroupns_mode: spec.cgroupns.map(|mode| match mode {
            CgroupnsMode::Private => HostConfigCgroupnsModeEnum::PRIVATE,
            CgroupnsMode::Host => HostConfigCgroupnsModeEnum::HOST,
        }),
        userns_mode: spec.userns.map(|UsernsMode::Host| "host".to_owned()),
        init: spec.init,
        restart_policy: spec.restart.as_deref().map(docker::parse_restart).transpose()?.map(restart_policy),
        devices: (!devices.is_empty()).then_some(devices),
        cap_add: (!spec.cap_add.is_empty()).then(|| spec.cap_add.clone()),
        cap_drop: (!spec.cap_drop.is_empty()).then(|| spec.cap_drop.clone()),
        sysctls: (!spec.sysctls.is_empty())
            .then(|| spec.sysctls.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        port_bindings: (!port_bindings.is_empty()).then_some(port_bindings),
        extra_hosts: (!spec.extra_hosts.is_empty()).then(|| spec.extra_hosts.clone()),
        dns: (!spec.dns.is_empty()).then(|| spec.dns.clone()),
        nano_cpus: spec.cpus.as_deref().map(docker::parse_cpus).transpose()?,
        memory: spec.memory.as_deref().map(docker::parse_memory).transpose()?,
        shm_size: spec.shm_size.as_deref().map(docker::parse_shm_size).transpose()?,
        pids_limit: spec.pids_limit,
        ulimits: (!spec.ulimits.is_empty()).then(|| ulimits(&spec.ulimits)).transpose()?,
        ..Default::default()
    };
    Ok(ContainerCreateBody {
        image: Some(spec.image.clone()),
        hostname: Some(spec.name.clone()),
        labels: Some(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        env: Some(
            spec.env
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .chain(spec.secret_env.iter().map(|(k, v)| format!("{k}={}", v.expose())))
                .collect(),
        ),
        cmd: spec.command.clone(),
        entrypoint: spec.entrypoint.clone(),
        tty: spec.tty.then_some(true),
        user: spec.user.clone(),
        working_dir: spec.workdir.clone(),
        stop_signal: spec.stop_signal.clone(),
        volumes: (!anonymous.is_empty()).then_some(anonymous),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        host_config: Some(host_config),
        ..Default::default()
    })
}

/// The `--ulimit`s as the Docker API takes them.
fn ulimits(limits: &std::collections::BTreeMap<String, String>) -> Result<Vec<ResourcesUlimits>, String> {
    limits
        .iter()
        .map(|(name, value)| {
            let (soft, hard) = docker::parse_ulimit(name, value)?;
            Ok(ResourcesUlimits { name: Some(name.clone()), soft: Some(soft), hard: Some(hard) })
        })
        .collect()
}

/// The `docker update` of a running container's live settings, as a container created with
/// them would have them: a memory limit brings the swap limit Docker gives a new container
/// (twice the memory), or raising the memory past the old swap limit is refused.
pub(super) fn update_body(update: &LiveUpdate) -> Result<ContainerUpdateBody, String> {
    let memory = update.memory.as_deref().map(docker::parse_memory).transpose()?;
    let restart = update.restart.as_deref().map(docker::parse_restart).transpose()?;
    Ok(ContainerUpdateBody {
        memory,
        memory_swap: memory.map(|m| m.saturating_mul(2)),
        nano_cpus: update.cpus.as_deref().map(docker::parse_cpus).transpose()?,
        pids_limit: update.pids_limit,
        restart_policy: Some(restart_policy(restart.unwrap_or(Restart::No))),
        ..Default::default()
    })
}

fn restart_policy(restart: Restart) -> RestartPolicy {
    let (name, max_retries) = match restart {
        Restart::No => (RestartPolicyNameEnum::NO, None),
        Restart::Always => (RestartPolicyNameEnum::ALWAYS, None),
        Restart::UnlessStopped => (RestartPolicyNameEnum::UNLESS_STOPPED, None),
        Restart::OnFailure { max_retries } => (RestartPolicyNameEnum::ON_FAILURE, max_retries),
    };
    RestartPolicy { name: Some(name), maximum_retry_count: max_retries.map(i64::from) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_bare_volume_is_anonymous_and_tmpfs_options_are_options() {
        let spec = NewContainer {
            name: "n".to_owned(),
            image: "i".to_owned(),
            volumes: strings(&["/var", "/lib/modules:/lib/modules:ro"]),
            tmpfs: strings(&["/tmp", "/run:size=64m,mode=755"]),
            ..NewContainer::default()
        };
        let body = create_body(&spec).unwrap();
        assert_eq!(body.volumes, Some(strings(&["/var"])));
        let host = body.host_config.unwrap();
        assert_eq!(host.binds, Some(strings(&["/lib/modules:/lib/modules:ro"])));
        let tmpfs = host.tmpfs.unwrap();
        assert_eq!(tmpfs.get("/run").map(String::as_str), Some("size=64m,mode=755"));
        assert_eq!(tmpfs.get("/tmp").map(String::as_str), Some(""));
        assert_eq!(tmpfs.len(), 2);
    }

    #[test]
    fn unset_settings_are_left_to_the_daemon() {
        let body =
            create_body(&NewContainer { name: "n".into(), image: "i".into(), ..NewContainer::default() })
                .unwrap();
        let host = body.host_config.unwrap();
        assert_eq!(
            (body.tty, body.user, body.stop_signal, body.volumes, body.exposed_ports),
            (None, None, None, None, None)
        );
        assert_eq!(
            (host.init, host.restart_policy, host.cgroupns_mode, host.memory, host.nano_cpus),
            (None, None, None, None, None)
        );
        assert_eq!((host.shm_size, host.pids_limit, host.ulimits), (None, None, None));
        assert_eq!((host.security_opt, host.masked_paths, host.port_bindings), (None, None, None));
    }

    #[test]
    fn flags_become_the_api_fields_docker_run_sends() {
        let spec = NewContainer {
            name: "n".to_owned(),
            image: "i".to_owned(),
            security_opt: strings(&["seccomp=unconfined", "systempaths=unconfined"]),
            restart: Some("on-failure:1".to_owned()),
            ports: strings(&["127.0.0.1:8080:80", "53/udp"]),
            devices: strings(&["/dev/fuse"]),
            cpus: Some("1.5".to_owned()),
            memory: Some("512m".to_owned()),
            shm_size: Some("256m".to_owned()),
            pids_limit: Some(100),
            ulimits: [("nofile".to_owned(), "1024:2048".to_owned()), ("nproc".to_owned(), "64".to_owned())]
                .into(),
            ..NewContainer::default()
        };
        let body = create_body(&spec).unwrap();
        let host = body.host_config.unwrap();
        assert_eq!((host.shm_size, host.pids_limit), (Some(256 << 20), Some(100)));
        let ulimit = |name: &str, soft, hard| ResourcesUlimits {
            name: Some(name.into()),
            soft: Some(soft),
            hard: Some(hard),
        };
        assert_eq!(host.ulimits, Some(vec![ulimit("nofile", 1024, 2048), ulimit("nproc", 64, 64)]));
        assert_eq!(host.security_opt, Some(strings(&["seccomp=unconfined"])));
        assert_eq!((host.masked_paths, host.readonly_paths), (Some(Vec::new()), Some(Vec::new())));
        assert_eq!(
            host.restart_policy,
            Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::ON_FAILURE),
                maximum_retry_count: Some(1)
            })
        );
        let mut exposed = body.exposed_ports.unwrap();
        exposed.sort();
        assert_eq!(exposed, strings(&["53/udp", "80/tcp"]));
        let bindings = host.port_bindings.unwrap();
        assert_eq!(
            bindings["80/tcp"],
            Some(vec![PortBinding { host_ip: Some("127.0.0.1".into()), host_port: Some("8080".into()) }])
        );
        assert_eq!(
            bindings["53/udp"],
            Some(vec![PortBinding { host_ip: None, host_port: Some(String::new()) }])
        );
        assert_eq!(host.devices.unwrap()[0].cgroup_permissions.as_deref(), Some("rwm"));
        assert_eq!((host.nano_cpus, host.memory), (Some(1_500_000_000), Some(512 << 20)));
    }

    #[test]
    fn an_unreadable_setting_is_an_error_not_a_guess() {
        let spec = NewContainer { restart: Some("sometimes".to_owned()), ..NewContainer::default() };
        assert!(create_body(&spec).unwrap_err().contains("sometimes"));
    }
}
