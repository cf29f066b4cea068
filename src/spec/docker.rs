//! Docker's own grammars for the container settings of a template (`on-failure:3`,
//! `/run:size=64m`, `127.0.0.1:8080:80/udp`, `512m`...), read in one place so that validation
//! and the Docker backend can never read a value two ways.
//!
//! Each grammar is the one `docker run` takes for the flag of the same name; where the Docker
//! API wants something else than the flag's text (a port map, nano-CPUs, bytes), the value is
//! converted here too.

use std::net::IpAddr;

/// A restart policy, as `docker run --restart` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    No,
    Always,
    UnlessStopped,
    /// Restart when the container exits non-zero, at most `max_retries` times if given.
    OnFailure {
        max_retries: Option<u32>,
    },
}

/// Reads `no`, `always`, `unless-stopped`, `on-failure` or `on-failure:N`.
pub fn parse_restart(text: &str) -> Result<Restart, String> {
    let expected = "expected no, always, unless-stopped, on-failure or on-failure:N";
    match text.split_once(':') {
        None => match text {
            "no" => Ok(Restart::No),
            "always" => Ok(Restart::Always),
            "unless-stopped" => Ok(Restart::UnlessStopped),
            "on-failure" => Ok(Restart::OnFailure { max_retries: None }),
            _ => Err(format!("unknown restart policy {text:?}: {expected}")),
        },
        Some(("on-failure", count)) => match digits(count).and_then(|c| c.parse::<u32>().ok()) {
            Some(n) => Ok(Restart::OnFailure { max_retries: Some(n) }),
            None => Err(format!("restart policy {text:?}: the retry count {count:?} is not a whole number")),
        },
        Some((name @ ("no" | "always" | "unless-stopped"), _)) => {
            Err(format!("restart policy {text:?}: only on-failure takes a retry count ({name} does not)"))
        }
        Some(_) => Err(format!("unknown restart policy {text:?}: {expected}")),
    }
}

/// `text` if it is a non-empty run of ASCII digits (`str::parse` would also take a `+`).
fn digits(text: &str) -> Option<&str> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())).then_some(text)
}

/// One entry of `volumes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Volume<'a> {
    /// A bare container path (`/var`): a fresh anonymous volume, removed with the container.
    Anonymous(&'a str),
    /// `src:dst[:options]`: a bind mount (an absolute `src`) or a named volume, which outlives
    /// the container.
    Mount(&'a str),
}

/// Docker bind mount options accepted after `src:dst:`.
const VOLUME_OPTIONS: [&str; 11] =
    ["ro", "rw", "z", "Z", "nocopy", "shared", "rshared", "slave", "rslave", "private", "rprivate"];

/// Reads a `volumes` entry: `/container/path`, or `src:dst[:options]` as `docker run -v`.
pub fn parse_volume(volume: &str) -> Result<Volume<'_>, String> {
    let parts: Vec<&str> = volume.split(':').collect();
    let expected = "expected /path (an anonymous volume), src:dst or src:dst:ro|rw";
    let (src, dst, options) = match parts.as_slice() {
        [path] => {
            return match container_path_problem(path) {
                None => Ok(Volume::Anonymous(path)),
                Some(problem) => Err(format!("volume {volume:?}: {problem} ({expected})")),
            };
        }
        [src, dst] => (*src, *dst, None),
        [src, dst, options] => (*src, *dst, Some(*options)),
        _ => return Err(format!("volume {volume:?} is not of the form {expected}")),
    };
    if src.is_empty() || dst.is_empty() {
        return Err(format!("volume {volume:?} has an empty side: {expected}"));
    }
    if let Some(problem) = container_path_problem(dst) {
        return Err(format!("volume {volume:?}: {problem}"));
    }
    if !src.starts_with('/') && !is_object_name(src) {
        // Docker would refuse it only when the container is created, at apply.
        return Err(format!(
            "volume {volume:?}: the host path {src:?} must be absolute (Docker bind sources are; \
             a source without / is a named volume)"
        ));
    }
    match options.and_then(|o| o.split(',').find(|o| !VOLUME_OPTIONS.contains(o))) {
        Some(bad) => Err(format!("volume {volume:?} has an unknown option {bad:?}: {expected}")),
        None => Ok(Volume::Mount(volume)),
    }
}

/// Whether `name` can name a Docker volume or container: `[a-zA-Z0-9][a-zA-Z0-9_.-]*`, as the
/// daemon checks.
pub(super) fn is_object_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Why `path` cannot be where something is mounted in the container, if it cannot.
fn container_path_problem(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        Some(format!("the container path {path:?} must be absolute"))
    } else if path.trim_end_matches('/').is_empty() {
        Some("nothing can be mounted over the container's root, /".to_owned())
    } else {
        None
    }
}

/// tmpfs mount flags that take no value (mount(8), plus Docker's `tmpcopyup`).
const TMPFS_FLAGS: [&str; 31] = [
    "rw",
    "ro",
    "exec",
    "noexec",
    "suid",
    "nosuid",
    "dev",
    "nodev",
    "sync",
    "async",
    "dirsync",
    "atime",
    "noatime",
    "diratime",
    "nodiratime",
    "relatime",
    "norelatime",
    "strictatime",
    "nostrictatime",
    "mand",
    "nomand",
    "tmpcopyup",
    "notmpcopyup",
    "private",
    "rprivate",
    "shared",
    "rshared",
    "slave",
    "rslave",
    "unbindable",
    "runbindable",
];

/// Reads a `tmpfs` entry, `PATH[:OPTIONS]` as `docker run --tmpfs` takes it, into the path and
/// the options (`/run:size=64m,mode=755` is a tmpfs at `/run` of at most 64 MiB).
pub fn parse_tmpfs(entry: &str) -> Result<(&str, &str), String> {
    let (path, options) = entry.split_once(':').unwrap_or((entry, ""));
    if let Some(problem) = container_path_problem(path) {
        return Err(format!("tmpfs {entry:?}: {problem}"));
    }
    if entry.contains(':') {
        for option in options.split(',') {
            if let Some(problem) = tmpfs_option_problem(option) {
                return Err(format!("tmpfs {entry:?}: {problem}"));
            }
        }
    }
    Ok((path, options))
}

/// Why `option` is not a tmpfs mount option, if it is not.
fn tmpfs_option_problem(option: &str) -> Option<String> {
    let Some((key, value)) = option.split_once('=') else {
        return (!TMPFS_FLAGS.contains(&option)).then(|| {
            format!(
                "unknown option {option:?}: expected size=, mode=, uid=, gid=, nr_inodes=, \
                 nr_blocks=, huge=, mpol= or a mount flag such as noexec"
            )
        });
    };
    let ok = match key {
        // A size in bytes with an optional k, m or g suffix, or a percentage of the RAM.
        "size" | "nr_blocks" | "nr_inodes" => {
            let number = value.strip_suffix(['k', 'K', 'm', 'M', 'g', 'G', '%']).unwrap_or(value);
            digits(number).is_some()
        }
        "mode" => value.len() <= 4 && !value.is_empty() && value.bytes().all(|b| (b'0'..=b'7').contains(&b)),
        "uid" | "gid" => digits(value).is_some_and(|v| v.parse::<u32>().is_ok()),
        "huge" => ["never", "always", "within_size", "advise", "deny", "force"].contains(&value),
        "mpol" => !value.is_empty(),
        _ => return Some(format!("unknown option {key:?}")),
    };
    (!ok).then(|| format!("option {option:?} has a bad value"))
}

/// A device made visible in the container, as `docker run --device` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device<'a> {
    pub host: &'a str,
    pub container: &'a str,
    /// Some of `r` (read), `w` (write) and `m` (mknod); default all three.
    pub permissions: &'a str,
}

/// Reads `HOST[:CONTAINER][:PERMISSIONS]` (`/dev/fuse`, `/dev/sda:/dev/xvdc:r`).
pub fn parse_device(text: &str) -> Result<Device<'_>, String> {
    // Some of r, w and m, each at most once.
    let is_mode = |m: &str| {
        !m.is_empty()
            && m.bytes().enumerate().all(|(i, b)| b"rwm".contains(&b) && !m.as_bytes()[i + 1..].contains(&b))
    };
    let parts: Vec<&str> = text.split(':').collect();
    let (host, container, permissions) = match parts.as_slice() {
        [host] => (*host, *host, "rwm"),
        [host, mode] if is_mode(mode) => (*host, *host, *mode),
        [host, container] => (*host, *container, "rwm"),
        [host, container, mode] => (*host, *container, *mode),
        _ => return Err(format!("device {text:?} is not of the form HOST[:CONTAINER][:rwm]")),
    };
    if !is_mode(permissions) {
        return Err(format!("device {text:?}: permissions {permissions:?} must be some of r, w and m"));
    }
    for path in [host, container] {
        if !path.starts_with('/') {
            return Err(format!("device {text:?}: the path {path:?} must be absolute"));
        }
    }
    Ok(Device { host, container, permissions })
}

/// The Linux capabilities (capabilities(7)) that `capAdd` and `capDrop` may name.
const CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// Why `name` is not a capability Docker knows, if it is not. Like Docker, the `CAP_` prefix
/// and the case are optional, and `ALL` means every capability.
pub fn capability_problem(name: &str) -> Option<String> {
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    (bare != "ALL" && !CAPABILITIES.contains(&bare)).then(|| {
        format!("unknown capability {name:?}: expected ALL or a name such as SYS_ADMIN or CAP_NET_ADMIN")
    })
}

/// The security option the docker CLI turns into empty masked and read-only path lists rather
/// than passing it on; the Docker API does the same for poolctl.
pub const SYSTEMPATHS_UNCONFINED: &str = "systempaths=unconfined";

/// Why `option` is not a `--security-opt` Docker takes, if it is not.
pub fn security_opt_problem(option: &str) -> Option<String> {
    let (key, value) = option.split_once('=').unwrap_or((option, ""));
    let ok = match key {
        // The API takes a profile's JSON, not a path to it as the docker CLI does.
        "seccomp" if value == "unconfined" || value == "builtin" => true,
        "seccomp" => {
            return Some(format!(
                "security option {option:?}: seccomp takes unconfined or builtin here; a \
                 profile file is read by the docker CLI, not by the Docker API poolctl uses"
            ));
        }
        "apparmor" => !value.is_empty(),
        "label" => {
            value == "disable"
                || value == "nested"
                || value.split_once(':').is_some_and(|(k, v)| {
                    ["user", "role", "type", "level", "filetype"].contains(&k) && !v.is_empty()
                })
        }
        "no-new-privileges" => option == key || value == "true" || value == "false",
        "writable-cgroups" => value == "true" || value == "false",
        "systempaths" => value == "unconfined",
        _ => {
            return Some(format!(
                "unknown security option {option:?}: expected seccomp=, apparmor=, label=, \
                 no-new-privileges, systempaths=unconfined or writable-cgroups="
            ));
        }
    };
    (!ok).then(|| format!("security option {option:?} has a bad value"))
}

/// The sysctls `docker run --sysctl` allows: those namespaced per container.
const SYSCTLS: [&str; 8] = [
    "kernel.msgmax",
    "kernel.msgmnb",
    "kernel.msgmni",
    "kernel.sem",
    "kernel.shmall",
    "kernel.shmmax",
    "kernel.shmmni",
    "kernel.shm_rmid_forced",
];

/// Why a sysctl cannot be set in a container, if it cannot. `host_network`: the container shares
/// the host's network namespace, whose `net.*` settings are the host's own.
pub fn sysctl_problem(key: &str, value: &str, host_network: bool) -> Option<String> {
    let namespaced = SYSCTLS.contains(&key) || key.starts_with("fs.mqueue.") || key.starts_with("net.");
    if !namespaced {
        Some(format!(
            "sysctl {key:?} is not namespaced, so a container cannot set it: Docker allows net.*, \
             fs.mqueue.* and the kernel IPC settings (kernel.shmmax...)"
        ))
    } else if host_network && key.starts_with("net.") {
        Some(format!("sysctl {key:?} cannot be set on the host network: it would change the host's own"))
    } else if value.trim().is_empty() || value.contains(['\n', '\r']) {
        Some(format!("sysctl {key:?} needs a value on one line"))
    } else {
        None
    }
}

/// Why `entry` is not an `--add-host` entry (`NAME:IP`, or `NAME:host-gateway` for the host's
/// address), if it is not.
pub fn extra_host_problem(entry: &str) -> Option<String> {
    let expected = "expected NAME:IP or NAME:host-gateway";
    let Some((name, ip)) = entry.split_once(':') else {
        return Some(format!("extra host {entry:?}: {expected}"));
    };
    let name_ok = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if !name_ok {
        Some(format!("extra host {entry:?}: {name:?} is not a host name ({expected})"))
    } else if ip != "host-gateway" && ip.parse::<IpAddr>().is_err() {
        Some(format!("extra host {entry:?}: {ip:?} is not an IP address ({expected})"))
    } else {
        None
    }
}

/// Why `user` is not `NAME|UID[:GROUP|GID]`, if it is not.
pub fn user_problem(user: &str) -> Option<String> {
    let part_ok = |p: &str| !p.is_empty() && !p.contains(|c: char| c.is_whitespace() || c.is_control());
    let ok = match user.split_once(':') {
        None => part_ok(user),
        Some((name, group)) => part_ok(name) && part_ok(group) && !group.contains(':'),
    };
    (!ok).then(|| format!("user {user:?}: expected NAME or UID, optionally :GROUP or :GID"))
}

/// The signals a container's stop signal may name, without `SIG`; real-time signals are
/// written `RTMIN+N` / `RTMAX-N` (systemd, as in kind's image, stops on `SIGRTMIN+3`).
const SIGNALS: [&str; 31] = [
    "ABRT", "ALRM", "BUS", "CHLD", "CLD", "CONT", "FPE", "HUP", "ILL", "INT", "IO", "IOT", "KILL", "PIPE",
    "POLL", "PROF", "PWR", "QUIT", "SEGV", "STKFLT", "STOP", "SYS", "TERM", "TRAP", "TSTP", "TTIN", "TTOU",
    "URG", "USR1", "USR2", "VTALRM",
];

/// Why `signal` is not a signal Docker can send, if it is not: a name as `kill -l` prints it,
/// with or without `SIG`, in any case (`SIGTERM`, `rtmin+3`), or a number from 1 to 64.
pub fn signal_problem(signal: &str) -> Option<String> {
    let upper = signal.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let offset = |prefix: &str, max: u32| {
        name.strip_prefix(prefix)
            .and_then(digits)
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| (1..=max).contains(&n))
    };
    let ok = SIGNALS.contains(&name)
        || ["WINCH", "XCPU", "XFSZ", "RTMIN", "RTMAX"].contains(&name)
        || offset("RTMIN+", 15)
        || offset("RTMAX-", 14)
        || digits(signal).and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| (1..=64).contains(&n));
    (!ok)
        .then(|| format!("unknown signal {signal:?}: expected e.g. SIGTERM, SIGRTMIN+3 or a number up to 64"))
}

/// Reads a memory size as `docker run --memory` does: a number with an optional unit `b`, `k`,
/// `m`, `g`, `t` (powers of 1024), e.g. `512m` or `1.5g`. At least 6 MiB, Docker's minimum.
pub fn parse_memory(text: &str) -> Result<i64, String> {
    const MIN: i64 = 6 << 20;
    let bytes = parse_size(text, "memory")?;
    if bytes < MIN {
        return Err(format!("memory {text:?} is below Docker's minimum of 6m"));
    }
    Ok(bytes)
}

/// Reads a size as `docker run --shm-size` does: like [`parse_memory`], more than 0 bytes.
pub fn parse_shm_size(text: &str) -> Result<i64, String> {
    let bytes = parse_size(text, "shmSize")?;
    if bytes <= 0 {
        return Err(format!("shmSize {text:?}: a size of more than 0 bytes"));
    }
    Ok(bytes)
}

/// A size with an optional unit `b`, `k`, `m`, `g`, `t` (powers of 1024); `what` names it in
/// the error.
fn parse_size(text: &str, what: &str) -> Result<i64, String> {
    let bad = || format!("{what} {text:?}: expected a size such as 512m or 2g (units b, k, m, g, t)");
    let lower = text.trim().to_ascii_lowercase();
    let unit_at = lower.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(lower.len());
    let (number, unit) = lower.split_at(unit_at);
    let shift = match unit.trim_start().trim_end_matches('b').trim_end_matches('i') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(bad()),
    };
    // Docker rounds a fraction of a byte down, as here.
    let (bytes, _) = scaled(number, 1_i64 << shift).ok_or_else(bad)?;
    Ok(bytes)
}

/// The resource limits `--ulimit` knows, as the kernel names them without `RLIMIT_`.
const ULIMITS: &[&str] = &[
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
];

/// Reads one `--ulimit NAME=SOFT[:HARD]` as `(soft, hard)`: whole numbers, `-1` for unlimited,
/// the soft limit no higher than the hard one.
pub fn parse_ulimit(name: &str, value: &str) -> Result<(i64, i64), String> {
    if !ULIMITS.contains(&name) {
        return Err(format!("ulimit {name:?}: not a resource limit; one of {}", ULIMITS.join(", ")));
    }
    let bad =
        || format!("ulimit {name}: {value:?}: expected SOFT or SOFT:HARD, whole numbers (-1: unlimited)");
    let number = |t: &str| t.trim().parse::<i64>().ok().filter(|n| *n >= -1).ok_or_else(bad);
    let (soft, hard) = value.split_once(':').unwrap_or((value, value));
    let (soft, hard) = (number(soft)?, number(hard)?);
    let unlimited = |n: i64| n == -1;
    if !unlimited(hard) && (unlimited(soft) || soft > hard) {
        return Err(format!("ulimit {name}: the soft limit {soft} is above the hard limit {hard}"));
    }
    Ok((soft, hard))
}

/// A ulimit as [`parse_ulimit`] reads it back: `SOFT`, or `SOFT:HARD` when they differ.
pub fn show_ulimit(soft: i64, hard: i64) -> String {
    if soft == hard { soft.to_string() } else { format!("{soft}:{hard}") }
}

/// A memory size in bytes as `--memory` writes it, in the largest unit that holds it exactly
/// (`64m`, `1536m`, `2g`): what [`parse_memory`] reads back to the same bytes.
pub fn show_memory(bytes: i64) -> String {
    let units = [(40, "t"), (30, "g"), (20, "m"), (10, "k")];
    units
        .iter()
        .find(|(shift, _)| bytes % (1_i64 << shift) == 0)
        .map_or_else(|| format!("{bytes}b"), |(shift, unit)| format!("{}{unit}", bytes >> shift))
}

/// Nano-CPUs as `--cpus` writes them (`0.5`, `2`): what [`parse_cpus`] reads back.
pub fn show_cpus(nanos: i64) -> String {
    let (whole, fraction) = (nanos / 1_000_000_000, nanos % 1_000_000_000);
    if fraction == 0 {
        return whole.to_string();
    }
    let fraction = format!("{fraction:09}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

/// Reads `cpus` as `docker run --cpus` does (`1.5` is one and a half CPUs), into the nano-CPUs
/// the Docker API takes.
pub fn parse_cpus(text: &str) -> Result<i64, String> {
    let bad =
        || format!("cpus {text:?}: expected a positive number such as 2 or 0.5, with at most 9 decimals");
    // Docker refuses what nano-CPUs cannot hold exactly.
    match scaled(text.trim(), 1_000_000_000) {
        Some((nanos, true)) if nanos > 0 => Ok(nanos),
        _ => Err(bad()),
    }
}

/// `number` (digits, optionally `.` and more digits) times `unit`, rounded down, and whether
/// that was exact; `None` if it is not such a number or overflows.
fn scaled(number: &str, unit: i64) -> Option<(i64, bool)> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let whole: i64 = digits(whole)?.parse().ok()?;
    let mut total = whole.checked_mul(unit)?;
    let mut exact = true;
    if number.contains('.') {
        digits(fraction)?;
        // Digits past the 30th cannot matter for a unit below 2^63; they must still be digits.
        let kept = &fraction[..fraction.len().min(30)];
        let numerator: u128 = kept.parse().ok()?;
        let denominator = 10_u128.pow(u32::try_from(kept.len()).ok()?);
        let product = numerator.checked_mul(u128::try_from(unit).ok()?)?;
        exact = product % denominator == 0 && kept.len() == fraction.len();
        total = total.checked_add(i64::try_from(product / denominator).ok()?)?;
    }
    Some((total, exact))
}

/// A port published on the host, as `docker run -p` takes it:
/// `[IP:][HOST_PORT:]CONTAINER_PORT[/PROTOCOL]`, ports or ranges (`8000-8010`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub host_ip: Option<String>,
    /// The host port or range; `None` (or 0) lets Docker choose.
    pub host: Option<(u16, u16)>,
    pub container: (u16, u16),
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
}

impl Port {
    /// Whether this port takes one fixed host port per container, which two containers cannot
    /// both have.
    pub fn fixed_host_port(&self) -> bool {
        self.host.is_some_and(|(low, high)| low != 0 && (low == high || self.container.0 != self.container.1))
    }

    /// The port bindings Docker's API takes: (`80/tcp`, host port or range, empty to let Docker
    /// choose), one per container port.
    pub fn bindings(&self) -> Vec<(String, String)> {
        let (low, high) = self.container;
        (low..=high)
            .map(|port| {
                let host = match self.host {
                    None | Some((0, _)) => String::new(),
                    Some((h, _)) if low != high => (h + (port - low)).to_string(),
                    Some((h, h2)) if h == h2 => h.to_string(),
                    Some((h, h2)) => format!("{h}-{h2}"),
                };
                (format!("{port}/{}", self.protocol), host)
            })
            .collect()
    }
}

/// Reads a `ports` entry.
pub fn parse_port(text: &str) -> Result<Port, String> {
    let expected = "expected [IP:][HOST_PORT:]CONTAINER_PORT[/tcp|udp|sctp]";
    let bad = |why: &str| format!("port {text:?}: {why} ({expected})");
    let (rest, protocol) = match text.rsplit_once('/') {
        Some((rest, protocol @ ("tcp" | "udp" | "sctp"))) => (rest, protocol),
        Some((_, other)) => return Err(bad(&format!("unknown protocol {other:?}"))),
        None => (text, "tcp"),
    };
    // An IPv6 address is written in brackets, as in a URL: [::1]:8080:80.
    let (host_ip, rest) = match rest.strip_prefix('[') {
        Some(bracketed) => {
            let (ip, after) = bracketed.split_once("]:").ok_or_else(|| bad("unclosed [ in the address"))?;
            (Some(ip), after)
        }
        None => (None, rest),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let (host_ip, host, container) = match (host_ip, parts.as_slice()) {
        (None, [container]) => (None, "", *container),
        (None, [host, container]) => (None, *host, *container),
        (None, [ip, host, container]) => (Some(*ip), *host, *container),
        (Some(ip), [host, container]) => (Some(ip), *host, *container),
        _ => return Err(bad("too many parts; an IPv6 address goes in brackets")),
    };
    if let Some(ip) = host_ip
        && ip.parse::<IpAddr>().is_err()
    {
        return Err(bad(&format!("{ip:?} is not an IP address")));
    }
    let range = |r: &str, min: u16| -> Option<(u16, u16)> {
        let (low, high) = r.split_once('-').unwrap_or((r, r));
        let low: u16 = digits(low)?.parse().ok()?;
        let high: u16 = digits(high)?.parse().ok()?;
        (low >= min && low <= high).then_some((low, high))
    };
    let container =
        range(container, 1).ok_or_else(|| bad(&format!("{container:?} is not a port (1-65535) or range")))?;
    let host = if host.is_empty() {
        None
    } else {
        Some(range(host, 0).ok_or_else(|| bad(&format!("{host:?} is not a port or range")))?)
    };
    if let Some((low, high)) = host
        && container.0 != container.1
        && high - low != container.1 - container.0
    {
        return Err(bad("the host and container ranges differ in length"));
    }
    Ok(Port { host_ip: host_ip.map(str::to_owned), host, container, protocol: protocol.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_policies_are_dockers() {
        assert_eq!(parse_restart("no"), Ok(Restart::No));
        assert_eq!(parse_restart("always"), Ok(Restart::Always));
        assert_eq!(parse_restart("unless-stopped"), Ok(Restart::UnlessStopped));
        assert_eq!(parse_restart("on-failure"), Ok(Restart::OnFailure { max_retries: None }));
        assert_eq!(parse_restart("on-failure:1"), Ok(Restart::OnFailure { max_retries: Some(1) }));
        for bad in ["", "never", "always:3", "on-failure:", "on-failure:+1", "on-failure:-1", "on-failure:x"]
        {
            assert!(parse_restart(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn volumes_are_docker_mount_strings_or_bare_paths() {
        for good in ["/a:/b", "/a:/b:ro", "/a:/b:rw", "data:/var/lib/data", "/a:/b:ro,rslave"] {
            assert_eq!(parse_volume(good), Ok(Volume::Mount(good)), "{good}");
        }
        assert_eq!(parse_volume("/var"), Ok(Volume::Anonymous("/var")));
        for bad in
            ["/", "var", "/a:", ":/b", "/a:b", "/a:/b:rx", "/a:/b:ro:x", "", "./rel:/x", "a/b:/x", "~/x:/x"]
        {
            assert!(parse_volume(bad).is_err(), "{bad:?} accepted");
        }
        let relative = parse_volume("./relative:/x").unwrap_err();
        assert!(relative.contains("the host path \"./relative\" must be absolute"), "{relative}");
    }

    #[test]
    fn tmpfs_options_are_options_not_part_of_the_path() {
        assert_eq!(parse_tmpfs("/run"), Ok(("/run", "")));
        assert_eq!(parse_tmpfs("/run:size=64m"), Ok(("/run", "size=64m")));
        assert_eq!(
            parse_tmpfs("/tmp:rw,noexec,nosuid,size=65536k,mode=1777"),
            Ok(("/tmp", "rw,noexec,nosuid,size=65536k,mode=1777"))
        );
        for bad in [
            "run",
            "/",
            "/run:",
            "/run:size=big",
            "/run:bogus",
            "/run:mode=999",
            "/run:size=64m,,ro",
            "/a:b:c",
        ] {
            assert!(parse_tmpfs(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn devices_default_to_the_same_path_and_all_permissions() {
        let dev = |host, container, permissions| Ok(Device { host, container, permissions });
        assert_eq!(parse_device("/dev/fuse"), dev("/dev/fuse", "/dev/fuse", "rwm"));
        assert_eq!(parse_device("/dev/fuse:r"), dev("/dev/fuse", "/dev/fuse", "r"));
        assert_eq!(parse_device("/dev/sda:/dev/xvdc"), dev("/dev/sda", "/dev/xvdc", "rwm"));
        assert_eq!(parse_device("/dev/sda:/dev/xvdc:rw"), dev("/dev/sda", "/dev/xvdc", "rw"));
        for bad in ["", "fuse", "/dev/a:/dev/b:rx", "/dev/a:/dev/b:rr", "/dev/a:dev/b", "/a:/b:r:w"] {
            assert!(parse_device(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn capabilities_take_docker_spellings() {
        for good in ["ALL", "all", "SYS_ADMIN", "sys_admin", "CAP_NET_ADMIN", "cap_bpf"] {
            assert_eq!(capability_problem(good), None, "{good}");
        }
        for bad in ["", "CAP_", "SYS_ADMINS", "CAP_CAP_KILL", "NET ADMIN"] {
            assert!(capability_problem(bad).is_some(), "{bad:?} accepted");
        }
    }

    #[test]
    fn security_options_are_the_ones_the_api_takes() {
        for good in [
            "seccomp=unconfined",
            "seccomp=builtin",
            "apparmor=unconfined",
            "apparmor=docker-default",
            "label=disable",
            "label=type:svirt_lxc_net_t",
            "no-new-privileges",
            "no-new-privileges=true",
            "systempaths=unconfined",
            "writable-cgroups=true",
        ] {
            assert_eq!(security_opt_problem(good), None, "{good}");
        }
        for bad in [
            "",
            "seccomp=/etc/profile.json",
            "seccomp:unconfined",
            "apparmor=",
            "label=bogus:x",
            "no-new-privileges=maybe",
            "systempaths=confined",
            "writable-cgroups",
            "privileged",
        ] {
            assert!(security_opt_problem(bad).is_some(), "{bad:?} accepted");
        }
    }

    #[test]
    fn only_namespaced_sysctls_are_allowed() {
        assert_eq!(sysctl_problem("net.ipv6.conf.all.disable_ipv6", "0", false), None);
        assert_eq!(sysctl_problem("kernel.shmmax", "1024", false), None);
        assert_eq!(sysctl_problem("fs.mqueue.msg_max", "10", true), None);
        assert!(sysctl_problem("net.ipv4.ip_forward", "1", true).is_some());
        assert!(sysctl_problem("vm.swappiness", "1", false).is_some());
        assert!(sysctl_problem("kernel.panic", "1", false).is_some());
        assert!(sysctl_problem("net.ipv4.ip_forward", "", false).is_some());
        assert!(sysctl_problem("net.ipv4.ip_forward", "1\n2", false).is_some());
    }

    #[test]
    fn extra_hosts_users_and_signals() {
        for good in ["host.k3d.internal:172.18.0.1", "h:host-gateway", "v6:::1", "db_1:10.0.0.2"] {
            assert_eq!(extra_host_problem(good), None, "{good}");
        }
        for bad in ["", "h", ":1.2.3.4", "h:", "h:not-an-ip", "a b:1.2.3.4"] {
            assert!(extra_host_problem(bad).is_some(), "{bad:?} accepted");
        }
        for good in ["root", "1000", "1000:1000", "app:staff"] {
            assert_eq!(user_problem(good), None, "{good}");
        }
        for bad in ["", ":", "a:", ":b", "a:b:c", "a b"] {
            assert!(user_problem(bad).is_some(), "{bad:?} accepted");
        }
        for good in ["SIGTERM", "TERM", "sigkill", "SIGRTMIN+3", "RTMIN", "SIGRTMAX-2", "9", "64", "SIGWINCH"]
        {
            assert_eq!(signal_problem(good), None, "{good}");
        }
        for bad in ["", "SIG", "SIGFOO", "0", "65", "SIGRTMIN+16", "SIGRTMIN+", "RTMAX-0", "+9"] {
            assert!(signal_problem(bad).is_some(), "{bad:?} accepted");
        }
    }

    #[test]
    fn memory_and_cpus_read_as_docker_reads_them() {
        assert_eq!(parse_memory("512m"), Ok(512 << 20));
        assert_eq!(parse_memory("2g"), Ok(2 << 30));
        assert_eq!(parse_memory("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_memory("8388608"), Ok(8 << 20));
        assert_eq!(parse_memory("64 MB"), Ok(64 << 20));
        assert_eq!(parse_memory("1.1g"), Ok(1_181_116_006));
        for bad in ["", "m", "5m", "1.5.2g", "12x", "-1g", "99999999999t"] {
            assert!(parse_memory(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_cpus("2"), Ok(2_000_000_000));
        assert_eq!(parse_cpus("0.5"), Ok(500_000_000));
        assert_eq!(parse_cpus("1.000000001"), Ok(1_000_000_001));
        for bad in ["", "0", "0.0", "-1", "1.0000000001", "1e3", ".5", "99999999999"] {
            assert!(parse_cpus(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn shm_sizes_and_ulimits_read_as_docker_run_reads_them() {
        assert_eq!(parse_shm_size("256m"), Ok(256 << 20));
        assert_eq!(parse_shm_size("1k"), Ok(1024), "no minimum but more than nothing");
        assert!(parse_shm_size("0").is_err());
        assert!(parse_shm_size("lots").unwrap_err().contains("shmSize"));
        assert_eq!(parse_ulimit("nofile", "1024:2048"), Ok((1024, 2048)));
        assert_eq!(parse_ulimit("nproc", "512"), Ok((512, 512)));
        assert_eq!(parse_ulimit("memlock", "-1"), Ok((-1, -1)));
        assert_eq!(parse_ulimit("core", "0:-1"), Ok((0, -1)));
        for (name, value) in
            [("nofile", "2048:1024"), ("nofile", "-1:5"), ("nofile", "x"), ("nofile", "-2"), ("files", "1")]
        {
            assert!(parse_ulimit(name, value).is_err(), "{name}={value}");
        }
        for (soft, hard) in [(1024, 2048), (512, 512), (-1, -1), (0, -1)] {
            let shown = show_ulimit(soft, hard);
            assert_eq!(parse_ulimit("nofile", &shown), Ok((soft, hard)), "{shown}");
        }
    }

    #[test]
    fn limits_a_container_has_are_written_back_as_they_read() {
        for (bytes, shown) in
            [(64 << 20, "64m"), (3 << 29, "1536m"), (2 << 30, "2g"), (1_181_116_006, "1181116006b")]
        {
            assert_eq!(show_memory(bytes), shown);
            assert_eq!(parse_memory(shown), Ok(bytes));
        }
        for (nanos, shown) in [(2_000_000_000, "2"), (500_000_000, "0.5"), (1_000_000_001, "1.000000001")] {
            assert_eq!(show_cpus(nanos), shown);
            assert_eq!(parse_cpus(shown), Ok(nanos));
        }
    }

    #[test]
    fn ports_read_as_docker_run_publish() {
        let port = |ip: Option<&str>, host, container, protocol: &str| Port {
            host_ip: ip.map(str::to_owned),
            host,
            container,
            protocol: protocol.to_owned(),
        };
        assert_eq!(parse_port("80"), Ok(port(None, None, (80, 80), "tcp")));
        assert_eq!(parse_port("8080:80"), Ok(port(None, Some((8080, 8080)), (80, 80), "tcp")));
        assert_eq!(parse_port("127.0.0.1::53/udp"), Ok(port(Some("127.0.0.1"), None, (53, 53), "udp")));
        assert_eq!(
            parse_port("[::1]:6443:6443"),
            Ok(port(Some("::1"), Some((6443, 6443)), (6443, 6443), "tcp"))
        );
        assert_eq!(parse_port("8000-8001:80-81"), Ok(port(None, Some((8000, 8001)), (80, 81), "tcp")));
        for bad in [
            "",
            "0",
            "70000",
            "80/icmp",
            "a:80",
            "1.2.3.4:80:80:80",
            "::1:80:80",
            "8000-8002:80-81",
            "90-80",
            "[::1:80",
        ] {
            assert!(parse_port(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn port_bindings_and_fixed_host_ports() {
        let bindings = |text| parse_port(text).unwrap().bindings();
        assert_eq!(bindings("80"), [("80/tcp".to_owned(), String::new())]);
        assert_eq!(bindings("8080:80/udp"), [("80/udp".to_owned(), "8080".to_owned())]);
        assert_eq!(bindings("8000-8010:80"), [("80/tcp".to_owned(), "8000-8010".to_owned())]);
        assert_eq!(
            bindings("8000-8001:80-81"),
            [("80/tcp".to_owned(), "8000".to_owned()), ("81/tcp".to_owned(), "8001".to_owned())]
        );
        let fixed = |text| parse_port(text).unwrap().fixed_host_port();
        assert!(fixed("8080:80"));
        assert!(fixed("8000-8001:80-81"));
        assert!(!fixed("80"));
        assert!(!fixed("0:80"));
        assert!(!fixed("127.0.0.1::80"));
        assert!(!fixed("8000-8010:80"));
    }
}
