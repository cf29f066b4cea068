//! The semantic rules of pool documents: what parses but cannot work.

use std::collections::HashMap;

use super::locate::FieldPath;
use super::names;
use super::{Document, EnvValue, IN_CLUSTER, IntOrPercent, Pool, SpecError, ValueFrom};

/// Pool names are DNS-1123 labels short enough that `<pool>-<10 hex>-<5 chars>`, the instance
/// name and hostname, fits the 63 characters of a label.
pub const MAX_POOL_NAME_LEN: usize = 63 - 1 - super::HASH_LEN - 1 - 5;

/// The most instances a pool may have, and the most `maxSurge` and `maxUnavailable` may be: a
/// Docker host runs a few hundred node containers at most, and a typo such as
/// `replicas: 1000000000000` must fail here, not as an allocation failure in the planner.
pub const MAX_REPLICAS: i64 = 1000;

/// The most entries of any list or map in a pool (env, labels, volumes, bootstrap steps...).
pub const MAX_ITEMS: usize = 1000;

/// The longest duration: a timeout beyond a day is a mistake, and it keeps deadlines far from
/// overflowing.
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Label and annotation keys under this prefix are poolctl's own bookkeeping.
pub(super) const RESERVED_PREFIX: &str = "poolctl.dev/";

const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// Check documents from all files of a source together: the rules of each pool, and that no
/// pool name is declared twice. Every error is returned, in document order.
pub fn validate_pools(docs: &[Document]) -> Result<(), Vec<SpecError>> {
    let mut errors = Vec::new();
    let mut first_seen: HashMap<&str, &Document> = HashMap::new();
    let name_path = FieldPath::of("metadata.name");
    for doc in docs {
        for (path, message) in check_pool(&doc.pool) {
            errors.push(doc.error_at(&path, message));
        }
        let name = doc.pool.metadata.name.as_str();
        match first_seen.get(name) {
            Some(first) => errors.push(doc.error_at(
                &name_path,
                format!("pool {name:?} is declared twice: also at {}", first.place_of(&name_path)),
            )),
            None => {
                first_seen.insert(name, doc);
            }
        }
    }
    errors.extend(dependency_errors(docs));
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// `spec.dependsOn` names pools of the source, never the pool itself, and forms no cycle (a
/// pool that waits for itself, through others, would never move).
fn dependency_errors(docs: &[Document]) -> Vec<SpecError> {
    let depends: HashMap<&str, &[String]> =
        docs.iter().map(|d| (d.pool.metadata.name.as_str(), d.pool.spec.depends_on.as_slice())).collect();
    let mut errors = Vec::new();
    for doc in docs {
        let name = doc.pool.metadata.name.as_str();
        for (i, on) in doc.pool.spec.depends_on.iter().enumerate() {
            let at = FieldPath::of("spec.dependsOn").index(i);
            let message = if on == name {
                Some(format!("pool {name:?} cannot depend on itself"))
            } else if !depends.contains_key(on.as_str()) {
                Some(format!("no pool {on:?} in this source to depend on"))
            } else {
                cycle(&depends, name, on).map(|path| format!("a cycle of dependsOn: {}", path.join(" -> ")))
            };
            if let Some(message) = message {
                errors.push(doc.error_at(&at, message));
            }
        }
    }
    errors
}

/// The path by which `from`'s dependency `on` leads back to `from`, if one does.
fn cycle<'a>(depends: &HashMap<&'a str, &'a [String]>, from: &'a str, on: &'a str) -> Option<Vec<&'a str>> {
    // Depth-first over the pools, each looked at once: at most as many steps as pools.
    let mut stack = vec![vec![from, on]];
    let mut seen = std::collections::HashSet::from([on]);
    while let Some(path) = stack.pop() {
        let last = *path.last().expect("never empty");
        for next in depends.get(last).copied().unwrap_or_default() {
            if next == from {
                return Some([path.as_slice(), &[from]].concat());
            }
            if seen.insert(next.as_str()) {
                stack.push([path.as_slice(), &[next.as_str()]].concat());
            }
        }
    }
    None
}

/// The rule violations of one pool, as (field path, message).
fn check_pool(pool: &Pool) -> Vec<(FieldPath, String)> {
    let mut errors = Vec::new();
    if let Some(problem) = name_problem(&pool.metadata.name) {
        errors.push((FieldPath::of("metadata.name"), problem));
    }

    let spec = &pool.spec;
    if let Some(problem) = int_or_percent_problem(IntOrPercent::Count(spec.replicas), false) {
        errors.push((FieldPath::of("spec.replicas"), problem));
    }
    errors.extend(rollout_problems(spec));
    errors.extend(health_problems(&spec.health));
    errors.extend(drain_problems(&spec.drain, spec.node.is_some()));
    errors.extend(disruption_problems(&spec.disruption));
    errors.extend(bound_problems(spec));

    let template = FieldPath::of("spec.template");
    let t = &spec.template;
    if t.image.is_empty() {
        if t.copy_from.is_none() {
            errors.push((
                template.key("image"),
                "must name an image (unless copyFrom names a container to copy)".to_owned(),
            ));
        }
    } else if let Some(problem) = names::image_problem(&t.image) {
        errors.push((template.key("image"), problem));
    }
    for (key, value) in &t.env {
        if key.is_empty() {
            errors.push((template.key("env"), "an environment variable has an empty name".to_owned()));
        } else if key.contains('=') {
            let problem = "an environment variable name cannot contain '='".to_owned();
            errors.push((template.key("env").key(key), problem));
        }
        if let EnvValue::Secret(secret) = value {
            let at = template.key("env").key(key).key("valueFrom");
            errors.extend(value_from_problems(&secret.value_from, &at));
        }
    }
    for key in t.labels.keys() {
        if let Some(problem) = reserved_problem(key).or_else(|| names::container_label_problem(key)) {
            errors.push((template.key("labels").key(key), problem));
        }
    }
    errors.extend(container_setting_problems(spec));
    errors.extend(file_and_copy_problems(t));

    for (i, step) in spec.bootstrap.iter().enumerate() {
        let at = FieldPath::of("spec.bootstrap").index(i);
        match step.exec.first() {
            None => errors.push((at.key("exec"), "must name a command to run".to_owned())),
            Some(program) if program.trim().is_empty() => {
                errors.push((at.key("exec").index(0), "the command must not be empty".to_owned()));
            }
            Some(_) => {}
        }
    }

    errors.extend(join_problems(spec));
    errors.extend(spec.node.iter().flat_map(node_problems));
    errors.extend(spec.docker.iter().flat_map(docker_problems));
    errors
}

/// Why a label key cannot be set, if its prefix is poolctl's own.
fn reserved_problem(key: &str) -> Option<String> {
    key.starts_with(RESERVED_PREFIX)
        .then(|| format!("the label prefix {RESERVED_PREFIX} is reserved for poolctl's own labels"))
}

/// The rules of `maxSurge` and `maxUnavailable`: bounded counts, or percentages of replicas
/// rounded as a Deployment rounds them, and never both 0.
fn rollout_problems(spec: &super::PoolSpec) -> Vec<(FieldPath, String)> {
    let mut errors = Vec::new();
    let rollout = &spec.rollout;
    let replicas = spec.replicas.clamp(0, MAX_REPLICAS);
    let surge = rollout.surge(replicas);
    let unavailable = rollout.unavailable(replicas);
    for (field, value, resolved) in [
        ("spec.rollout.maxSurge", rollout.max_surge, surge),
        ("spec.rollout.maxUnavailable", rollout.max_unavailable, unavailable),
    ] {
        let path = FieldPath::of(field);
        // A Deployment refuses more than 100% unavailable: there is nothing beyond all.
        if let Some(problem) = int_or_percent_problem(value, field.ends_with("maxUnavailable")) {
            errors.push((path, problem));
            continue;
        }
        match value {
            IntOrPercent::Percent(p) if resolved > MAX_REPLICAS => errors.push((
                path,
                format!("{p}% of {replicas} replicas is {resolved}; at most {MAX_REPLICAS} are allowed"),
            )),
            _ => {}
        }
    }
    errors.extend(duration_problems(spec));
    errors.extend(canary_problems(rollout));
    if let Some(after) = &rollout.after
        && rollout.after_secs().is_none()
    {
        errors.push((
            FieldPath::of("spec.rollout.after"),
            format!("{after:?} is not an RFC 3339 time, e.g. 2026-12-04T10:00:00Z"),
        ));
    }
    // A pool of 0 replicas written with percentages has nothing to replace; written as two
    // zeros it is the same mistake at any size.
    let both_written_zero = rollout.max_surge.is_zero() && rollout.max_unavailable.is_zero();
    if surge == 0 && unavailable == 0 && (replicas > 0 || both_written_zero) {
        let rounded = if both_written_zero {
            String::new()
        } else {
            format!(
                " ({} and {} of {replicas} replicas round to 0: maxSurge rounds up, maxUnavailable down)",
                rollout.max_surge, rollout.max_unavailable
            )
        };
        errors.push((
            FieldPath::of("spec.rollout.maxSurge"),
            format!(
                "maxSurge and maxUnavailable are both 0{rounded}, so a rollout could never replace an \
                 instance: set maxSurge (create first) or maxUnavailable (retire first) to 1 or more"
            ),
        ));
    }
    errors
}

/// What is wrong with a count or percentage of instances: a count below 0 or above
/// [`MAX_REPLICAS`], or, where a percentage means a part of the pool (`whole`), one above 100%.
fn int_or_percent_problem(value: IntOrPercent, whole: bool) -> Option<String> {
    match value {
        IntOrPercent::Count(n) if n < 0 => Some(format!("must be 0 or more, got {n}")),
        IntOrPercent::Count(n) if n > MAX_REPLICAS => {
            Some(format!("must be at most {MAX_REPLICAS}, got {n}"))
        }
        IntOrPercent::Percent(p) if whole && p > 100 => {
            Some(format!("a percentage must be at most 100%, got {p}%"))
        }
        _ => None,
    }
}

/// The rules of `canary` and `autoPromote`: a count of 0 or more (more than `replicas` is
/// taken as all of them) or a percentage up to 100%; canaries only where a new template rolls by
/// itself; `autoPromote` only with canaries to promote, and a wait that can end.
fn canary_problems(rollout: &super::RolloutSpec) -> Vec<(FieldPath, String)> {
    let mut errors = Vec::new();
    let path = FieldPath::of("spec.rollout.canary");
    match rollout.canary {
        Some(c) if let Some(problem) = int_or_percent_problem(c, true) => errors.push((path, problem)),
        Some(c) if !c.is_zero() && rollout.strategy == super::Strategy::OnDelete => errors.push((
            path,
            "strategy OnDelete rolls nothing by itself, so there is no rollout for canaries to lead: \
             remove canary or use strategy RollingUpdate"
                .to_owned(),
        )),
        _ => {}
    }
    let Some(wait) = rollout.auto_promote else { return errors };
    let path = FieldPath::of("spec.rollout.autoPromote");
    if rollout.canary.is_none_or(IntOrPercent::is_zero) {
        errors.push((path, "promotes canaries, and spec.rollout.canary asks for none".to_owned()));
    } else if let Some(problem) = too_long(wait) {
        errors.push((path, problem));
    }
    errors
}

/// The longest any wait of a rollout may be set to: a week. A longer one is a typo (`9000h`)
/// that would leave a rollout hanging for a year.
const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Why a wait is too long, if it is longer than [`MAX_WAIT`].
fn too_long(wait: super::Duration) -> Option<String> {
    (wait.get() > MAX_WAIT)
        .then(|| format!("must be at most {}, got {wait}", super::Duration::from(MAX_WAIT)))
}

/// Durations that cannot work: `0s` where a wait or a deadline is needed (nothing could ever
/// finish in it), a wait beyond [`MAX_WAIT`], and a `progressDeadline` that a new instance
/// cannot meet because it must first stay up for longer (`minReadySeconds` and `monitor`).
fn duration_problems(spec: &super::PoolSpec) -> Vec<(FieldPath, String)> {
    let (rollout, health) = (&spec.rollout, &spec.health);
    let mut waits: Vec<(FieldPath, super::Duration)> = vec![
        (FieldPath::of("spec.rollout.progressDeadline"), rollout.progress_deadline),
        (FieldPath::of("spec.rollout.drainTimeout"), rollout.drain_timeout),
        (FieldPath::of("spec.health.nodeStartupTimeout"), health.node_startup_timeout),
        (FieldPath::of("spec.health.containerTimeout"), health.container_timeout),
    ];
    waits.extend(rollout.hook_timeout.map(|d| (FieldPath::of("spec.rollout.hookTimeout"), d)));
    waits.extend(
        rollout.volume_detach_timeout.map(|d| (FieldPath::of("spec.rollout.volumeDetachTimeout"), d)),
    );
    for (i, condition) in health.unhealthy_conditions.iter().enumerate() {
        let path = FieldPath::of("spec.health").key("unhealthyConditions").index(i).key("timeout");
        waits.push((path, condition.timeout));
    }
    let mut errors = Vec::new();
    for (path, wait) in waits {
        if wait.get().is_zero() {
            errors.push((path, "must be more than 0s: nothing can finish in no time".to_owned()));
        } else if let Some(problem) = too_long(wait) {
            errors.push((path, problem));
        }
    }
    // 0s is allowed: `kubectl drain --grace-period 0` too asks for an immediate end.
    if let Some(problem) = spec.drain.pod_grace_period.and_then(too_long) {
        errors.push((FieldPath::of("spec.drain.podGracePeriod"), problem));
    }
    let stay_up = rollout.min_ready_seconds.get() + rollout.monitor.get();
    if let Some(age) = rollout.max_age.filter(|age| age.get() <= stay_up) {
        errors.push((
            FieldPath::of("spec.rollout.maxAge"),
            format!(
                "{age} is no longer than a new instance must stay up before it counts ({} of \
                 minReadySeconds and monitor): every instance would expire before it served",
                super::Duration::from(stay_up)
            ),
        ));
    }
    if let Some(problem) = too_long(rollout.monitor) {
        errors.push((FieldPath::of("spec.rollout.monitor"), problem));
    }
    // The previous template is rebuilt from the instances' labels, which never keep a
    // `valueFrom` value: such a rollback could never happen.
    let secret = spec.template.env.values().any(|v| matches!(v, super::EnvValue::Secret(_)));
    if rollout.failure_action == super::FailureAction::Rollback && secret {
        errors.push((
            FieldPath::of("spec.rollout.failureAction"),
            "rollback can never happen with `valueFrom` env values, which no label keeps to rebuild the previous \
             template from: use failureAction: pause"
                .to_owned(),
        ));
    }
    let deadline = rollout.progress_deadline.get();
    if !deadline.is_zero() && deadline <= stay_up {
        errors.push((
            FieldPath::of("spec.rollout.progressDeadline"),
            format!(
                "{} is no longer than a new instance must stay up before it counts ({} of minReadySeconds and \
                 monitor): no rollout could make progress in time",
                rollout.progress_deadline,
                super::Duration::from(stay_up)
            ),
        ));
    }
    errors
}

/// The rules of `spec.disruption`: each window's schedule, time zone and duration.
fn disruption_problems(disruption: &super::DisruptionSpec) -> Vec<(FieldPath, String)> {
    let mut errors = Vec::new();
    for (i, window) in disruption.windows.iter().enumerate() {
        let at = FieldPath::of("spec.disruption").key("windows").index(i);
        errors.extend(super::window::problems(window).into_iter().map(|(field, why)| (at.key(field), why)));
    }
    errors
}

/// The rules of `spec.health`: conditions a Node can have, and a bounded `maxUnhealthy`.
fn health_problems(health: &super::HealthSpec) -> Vec<(FieldPath, String)> {
    let mut errors = Vec::new();
    let at = FieldPath::of("spec.health");
    for (i, condition) in health.unhealthy_conditions.iter().enumerate() {
        let path = at.key("unhealthyConditions").index(i);
        if condition.kind.trim().is_empty() {
            errors.push((path.key("type"), "must name a Node condition type, e.g. Ready".to_owned()));
        }
        if !matches!(condition.status.as_str(), "True" | "False" | "Unknown") {
            let got = &condition.status;
            errors.push((path.key("status"), format!("must be True, False or Unknown, got {got:?}")));
        }
    }
    if let Some(problem) = int_or_percent_problem(health.max_unhealthy, true) {
        errors.push((at.key("maxUnhealthy"), problem));
    }
    errors
}

/// The rules of `spec.drain`: selectors the API server would accept, orders of 0 or more; a
/// `timeoutAction` that goes on only where there is a Node to drain (`nodes`).
fn drain_problems(drain: &super::DrainSpec, nodes: bool) -> Vec<(FieldPath, String)> {
    let mut errors = Vec::new();
    // An escalation with no Node to drain would be a promise the plan could not show kept.
    if !nodes && !drain.timeout_action.is_halt() {
        errors.push((
            FieldPath::of("spec.drain.timeoutAction"),
            format!(
                "{} acts on the drain of a Node, and the pool has no node: section (nothing is drained)",
                drain.timeout_action
            ),
        ));
    }
    for (i, rule) in drain.rules.iter().enumerate() {
        let path = FieldPath::of("spec.drain").key("rules").index(i);
        if rule.order < 0 {
            errors.push((path.key("order"), format!("must be 0 or more, got {}", rule.order)));
        }
        for (j, e) in rule.pods.iter().flat_map(|p| p.match_expressions.iter().enumerate()) {
            let path = path.key("pods").key("matchExpressions").index(j);
            let problem = match (e.operator.as_str(), e.values.is_empty()) {
                ("In" | "NotIn", true) => Some(format!("{} needs values", e.operator)),
                ("Exists" | "DoesNotExist", false) => Some(format!("{} takes no values", e.operator)),
                ("In" | "NotIn" | "Exists" | "DoesNotExist", _) => None,
                (other, _) => {
                    Some(format!("operator must be In, NotIn, Exists or DoesNotExist, got {other:?}"))
                }
            };
            if let Some(problem) = problem {
                errors.push((path, problem));
            }
        }
        for (j, ns) in rule.namespaces.iter().enumerate() {
            if ns.trim().is_empty() {
                errors.push((path.key("namespaces").index(j), "must name a namespace".to_owned()));
            }
        }
    }
    errors
}

/// Node labels and taints by Kubernetes' rules, so that a Node poolctl would label or taint
/// never refuses it after the instance was created.
fn node_problems(node: &super::NodeSpec) -> Vec<(FieldPath, String)> {
    let mut errors = Vec::new();
    let at = FieldPath::of("spec.node");
    errors.extend(kubeconfig_problem(node).map(|(key, problem)| (at.key(key), problem)));
    for (key, value) in &node.labels {
        let path = at.key("labels").key(key);
        if let Some(problem) = reserved_problem(key) {
            errors.push((path, problem));
            continue;
        }
        let problems = [names::qualified_name_problem(key), names::label_value_problem(value)];
        errors.extend(problems.into_iter().flatten().map(|problem| (path.clone(), problem)));
    }
    let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, taint) in node.taints.iter().enumerate() {
        let at = at.key("taints").index(i);
        if let Some(problem) = names::qualified_name_problem(&taint.key) {
            errors.push((at.key("key"), problem));
        }
        if let Some(problem) = taint.value.as_deref().and_then(names::label_value_problem) {
            errors.push((at.key("value"), problem));
        }
        if !TAINT_EFFECTS.contains(&taint.effect.as_str()) {
            errors.push((
                at.key("effect"),
                format!(
                    "unknown taint effect {:?}: expected one of {}",
                    taint.effect,
                    TAINT_EFFECTS.join(", ")
                ),
            ));
        }
        // Kubernetes keeps one taint per key and effect.
        if let Some(first) = seen.insert((taint.key.as_str(), taint.effect.as_str()), i) {
            errors.push((
                at.key("key"),
                format!(
                    "taint {:?} with effect {} is already declared at spec.node.taints[{first}]",
                    taint.key, taint.effect
                ),
            ));
        }
    }
    errors
}

/// What is wrong with where a pool's Nodes are reached: `in-cluster` is a keyword, spelt one
/// way (a near miss would be read as a file name and fail only when connecting), and the Pod's
/// credentials have no contexts to choose from.
fn kubeconfig_problem(node: &super::NodeSpec) -> Option<(&'static str, String)> {
    let kubeconfig = node.kubeconfig.as_deref()?;
    if kubeconfig.trim().is_empty() {
        return Some(("kubeconfig", "must not be empty: leave it out for the default".to_owned()));
    }
    let squashed: String =
        kubeconfig.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect();
    // A path (`./incluster`) is a file, whatever its name.
    if kubeconfig != IN_CLUSTER && !kubeconfig.contains('/') && squashed == "incluster" {
        return Some((
            "kubeconfig",
            format!(
                "{kubeconfig:?} is not a keyword: write `{IN_CLUSTER}` for the Pod's service account, \
                 or ./{kubeconfig} for a file of that name"
            ),
        ));
    }
    if kubeconfig == IN_CLUSTER && node.context.is_some() {
        return Some((
            "context",
            format!("the Pod's credentials (kubeconfig: {IN_CLUSTER}) have no contexts; remove `context`"),
        ));
    }
    None
}

/// What is wrong with a pool's `docker:` section: it names one endpoint, of a kind poolctl
/// can reach.
fn docker_problems(docker: &super::DockerSpec) -> Vec<(FieldPath, String)> {
    let at = FieldPath::of("spec.docker");
    match (&docker.context, &docker.host) {
        (Some(_), Some(_)) => vec![(at, "give either context or host, not both".to_owned())],
        (None, None) => vec![(at, "must name a context or a host".to_owned())],
        (Some(context), None) if context.trim().is_empty() => {
            vec![(at.key("context"), "must not be empty".to_owned())]
        }
        (Some(_), None) => Vec::new(),
        (None, Some(host)) => {
            super::docker_host_problem(host).map(|p| (at.key("host"), p)).into_iter().collect()
        }
    }
}

/// The durations and counts of a pool that are out of bounds, as (field path, message).
fn bound_problems(spec: &super::PoolSpec) -> Vec<(FieldPath, String)> {
    let mut errors = Vec::new();
    let mut fail = |path: FieldPath, message: String| errors.push((path, message));
    let rollout = &spec.rollout;
    let template = FieldPath::of("spec.template");
    let t = &spec.template;
    // Timeouts bound a wait, and a wait of 0 fails at once (a drain of 0s would leave every
    // Node cordoned); a grace period of 0 is Docker's `stop -t 0`, a kill at once, and is allowed.
    let mut durations = vec![
        (FieldPath::of("spec.rollout.drainTimeout"), rollout.drain_timeout, true),
        (FieldPath::of("spec.rollout.stopGracePeriod"), rollout.stop_grace_period, false),
    ];
    for (i, step) in spec.bootstrap.iter().enumerate() {
        durations.push((FieldPath::of("spec.bootstrap").index(i).key("timeout"), step.timeout, true));
    }
    if let Some(node) = &spec.node {
        durations.push((FieldPath::of("spec.node.readyTimeout"), node.ready_timeout, true));
    }
    if let Some(kubeadm) = spec.join.as_ref().and_then(|j| j.kubeadm.as_ref()) {
        durations.push((FieldPath::of("spec.join.kubeadm.timeout"), kubeadm.timeout, true));
    }
    for (path, duration, is_timeout) in durations {
        if is_timeout && duration.get().is_zero() {
            fail(path, "must be longer than 0s".to_owned());
        } else if duration.get() > MAX_DURATION {
            fail(path, format!("must be at most {}, got {duration}", super::Duration::from(MAX_DURATION)));
        }
    }

    let mut counts: Vec<(FieldPath, usize)> = [
        ("command", t.command.as_ref().map_or(0, Vec::len)),
        ("entrypoint", t.entrypoint.as_ref().map_or(0, Vec::len)),
        ("env", t.env.len()),
        ("labels", t.labels.len()),
        ("volumes", t.volumes.len()),
        ("tmpfs", t.tmpfs.len()),
    ]
    .into_iter()
    .map(|(field, count)| (template.key(field), count))
    .collect();
    counts.push((FieldPath::of("spec.bootstrap"), spec.bootstrap.len()));
    for (i, step) in spec.bootstrap.iter().enumerate() {
        counts.push((FieldPath::of("spec.bootstrap").index(i).key("exec"), step.exec.len()));
    }
    if let Some(node) = &spec.node {
        counts.push((FieldPath::of("spec.node.labels"), node.labels.len()));
        counts.push((FieldPath::of("spec.node.taints"), node.taints.len()));
    }
    for (path, count) in counts {
        if count > MAX_ITEMS {
            fail(path, format!("has {count} entries; at most {MAX_ITEMS} are allowed"));
        }
    }
    errors
}

/// Where a join writes the credential inside a new container (see `crate::rollout::execute`): no mount
/// of the template may hide it.
pub const JOIN_DIR: &str = "/etc/poolctl";

/// The environment variables a k3s join sets on the new agent.
pub const K3S_JOIN_ENV: [&str; 3] = ["K3S_URL", "K3S_TOKEN", "K3S_TOKEN_FILE"];

/// The problems of a `valueFrom`: exactly one source, and a usable one.
fn value_from_problems(from: &ValueFrom, at: &FieldPath) -> Vec<(FieldPath, String)> {
    match (&from.file, &from.env) {
        (None, None) => vec![(at.clone(), "needs `file` or `env`".to_owned())],
        (Some(_), Some(_)) => vec![(at.clone(), "takes `file` or `env`, not both".to_owned())],
        (Some(file), None) if file.trim().is_empty() => {
            vec![(at.key("file"), "must not be empty".to_owned())]
        }
        (None, Some(name)) if name.is_empty() || name.contains('=') || name.contains('\0') => {
            vec![(at.key("env"), format!("{name:?} is not an environment variable name"))]
        }
        _ => Vec::new(),
    }
}

/// The problems of `spec.join`: one method, a container name Docker accepts, and nothing in
/// the template that would fight the join.
fn join_problems(spec: &super::PoolSpec) -> Vec<(FieldPath, String)> {
    let mut errors = Vec::new();
    let Some(join) = &spec.join else { return errors };
    let at = FieldPath::of("spec.join");
    match (&join.kubeadm, &join.k3s) {
        (None, None) => errors.push((at.clone(), "needs `kubeadm` or `k3s`".to_owned())),
        (Some(_), Some(_)) => errors.push((at.clone(), "takes `kubeadm` or `k3s`, not both".to_owned())),
        (Some(kubeadm), None) => {
            let problem = container_name_problem(&kubeadm.control_plane);
            errors.extend(problem.map(|p| (at.key("kubeadm").key("controlPlane"), p)));
        }
        (None, Some(k3s)) => {
            errors.extend(container_name_problem(&k3s.server).map(|p| (at.key("k3s").key("server"), p)));
            if let Some(url) = &k3s.url
                && !(url.starts_with("https://") && url.len() > "https://".len())
            {
                errors.push((at.key("k3s").key("url"), format!("{url:?} is not an https:// URL")));
            }
            for key in K3S_JOIN_ENV.iter().filter(|k| spec.template.env.contains_key(**k)) {
                errors.push((
                    FieldPath::of("spec.template.env").key(key),
                    format!("{key} is set by join.k3s; leave it out of the template"),
                ));
            }
        }
    }
    // The credential is written under JOIN_DIR; a mount there (or over /etc) would hide it.
    for (path, field) in mount_paths(&spec.template) {
        let path = path.trim_end_matches('/');
        if path == "/etc" || path == JOIN_DIR || path.starts_with(&format!("{JOIN_DIR}/")) {
            errors.push((
                field,
                format!("a mount at {path} would hide the join credential poolctl writes to {JOIN_DIR}"),
            ));
        }
    }
    errors
}

/// The container path of every volume and tmpfs mount that can be read, with its field.
fn mount_paths(t: &super::Template) -> Vec<(&str, FieldPath)> {
    use super::docker;
    let at = FieldPath::of("spec.template");
    let volume_paths = t.volumes.iter().enumerate().filter_map(|(i, v)| match docker::parse_volume(v) {
        Ok(docker::Volume::Anonymous(path)) => Some((path, at.key("volumes").index(i))),
        Ok(docker::Volume::Mount(m)) => m.split(':').nth(1).map(|path| (path, at.key("volumes").index(i))),
        Err(_) => None,
    });
    let tmpfs_paths = t.tmpfs.iter().enumerate().filter_map(|(i, entry)| {
        docker::parse_tmpfs(entry).ok().map(|(path, _)| (path, at.key("tmpfs").index(i)))
    });
    volume_paths.chain(tmpfs_paths).collect()
}

/// The problems of `files` (absolute paths without `..`, each once, octal modes) and of
/// `copyFrom` (a container name; whether it runs is a plan's to find out).
fn file_and_copy_problems(t: &super::Template) -> Vec<(FieldPath, String)> {
    let mut errors = Vec::new();
    if let Some(problem) = t.copy_from.as_ref().and_then(|c| container_name_problem(&c.container)) {
        errors.push((FieldPath::of("spec.template.copyFrom.container"), problem));
    }
    let at = FieldPath::of("spec.template.files");
    for (i, file) in t.files.iter().enumerate() {
        let path = &file.path;
        if !path.starts_with('/') || path.ends_with('/') || path.split('/').any(|p| p == "..") {
            errors.push((
                at.index(i).key("path"),
                format!("{path:?} must be an absolute path to a file, without .."),
            ));
        } else if t.files[..i].iter().any(|f| f.path == *path) {
            errors.push((at.index(i).key("path"), format!("{path} is written by an earlier entry")));
        }
        if file.mode_bits().is_none() {
            errors.push((
                at.index(i).key("mode"),
                format!("mode {:?}: expected permission bits in octal, such as \"0755\"", file.mode),
            ));
        }
    }
    if t.files.len() > MAX_ITEMS {
        errors.push((at, format!("has {} entries; at most {MAX_ITEMS} are allowed", t.files.len())));
    }
    errors
}

/// Why `extraNetworks[i]` cannot be connected besides `network`, if it cannot.
fn extra_network_problem(t: &super::Template, i: usize, network: &str) -> Option<String> {
    if network.trim().is_empty() {
        Some("must name a network".to_owned())
    } else if ["host", "none"].contains(&network) || network.starts_with("container:") {
        Some(format!("{network:?} is a network mode, not a network a container can join besides another"))
    } else if matches!(t.network.as_deref(), Some("host" | "none")) {
        Some(format!(
            "a container with network {:?} joins no other network",
            t.network.as_deref().unwrap_or_default()
        ))
    } else if t.network.as_deref() == Some(network) || t.extra_networks[..i].iter().any(|n| n == network) {
        Some(format!("{network} is named twice"))
    } else {
        None
    }
}

/// Why Docker would refuse `name` as a container name, if it would.
fn container_name_problem(name: &str) -> Option<String> {
    (!super::docker::is_object_name(name))
        .then(|| format!("{name:?} is not a container name ([a-zA-Z0-9][a-zA-Z0-9_.-]*)"))
}

/// Why `name` cannot be a pool name, if it cannot.
fn name_problem(name: &str) -> Option<String> {
    let label_chars = name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let alnum_ends = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if name.is_empty() {
        Some("must not be empty".to_owned())
    } else if !label_chars || !alnum_ends {
        Some(format!(
            "{name:?} is not a DNS-1123 label: use lowercase letters, digits and '-', \
             starting and ending with a letter or digit"
        ))
    } else if name.len() > MAX_POOL_NAME_LEN {
        Some(format!(
            "{name:?} is {} characters long; at most {MAX_POOL_NAME_LEN} are allowed, so that \
             instance names (<pool>-<hash>-<suffix>) fit in 63",
            name.len()
        ))
    } else {
        None
    }
}

/// What is wrong with the template's resource limits (`at` is the template's path).
fn limit_problems(t: &super::Template, at: &FieldPath) -> Vec<(FieldPath, String)> {
    use super::docker;

    let mut errors = Vec::new();
    if let Some(Err(problem)) = t.cpus.as_deref().map(docker::parse_cpus) {
        errors.push((at.key("cpus"), problem));
    }
    if let Some(Err(problem)) = t.memory.as_deref().map(docker::parse_memory) {
        errors.push((at.key("memory"), problem));
    }
    if let Some(Err(problem)) = t.shm_size.as_deref().map(docker::parse_shm_size) {
        errors.push((at.key("shmSize"), problem));
    }
    if let Some(limit) = t.pids_limit.filter(|n| *n < 1) {
        errors.push((
            at.key("pidsLimit"),
            format!("pidsLimit {limit}: at least 1 (leave it out for no limit)"),
        ));
    }
    for (name, value) in &t.ulimits {
        if let Err(problem) = docker::parse_ulimit(name, value) {
            errors.push((at.key("ulimits").key(name), problem));
        }
    }
    errors
}

/// The problems of the template's Docker settings (volumes, tmpfs, ports, limits...), each
/// read with the grammar `docker run` has for it, as (field path, message).
fn container_setting_problems(spec: &super::PoolSpec) -> Vec<(FieldPath, String)> {
    use super::docker;

    let mut errors = Vec::new();
    let at = FieldPath::of("spec.template");
    let t = &spec.template;
    let each = |errors: &mut Vec<(FieldPath, String)>,
                field: &str,
                items: &[String],
                check: &dyn Fn(&str) -> Option<String>| {
        for (i, item) in items.iter().enumerate() {
            if let Some(problem) = check(item) {
                errors.push((at.key(field).index(i), problem));
            }
        }
    };
    each(&mut errors, "volumes", &t.volumes, &|v| docker::parse_volume(v).err());
    each(&mut errors, "tmpfs", &t.tmpfs, &|v| docker::parse_tmpfs(v).err());
    each(&mut errors, "securityOpt", &t.security_opt, &docker::security_opt_problem);
    each(&mut errors, "devices", &t.devices, &|v| docker::parse_device(v).err());
    each(&mut errors, "capAdd", &t.cap_add, &docker::capability_problem);
    each(&mut errors, "capDrop", &t.cap_drop, &docker::capability_problem);
    each(&mut errors, "extraHosts", &t.extra_hosts, &docker::extra_host_problem);
    each(&mut errors, "dns", &t.dns, &|v| {
        v.parse::<std::net::IpAddr>().is_err().then(|| format!("DNS server {v:?} is not an IP address"))
    });

    // Docker mounts one thing per container path; a second one is refused at create time.
    let mut mounted: HashMap<&str, FieldPath> = HashMap::new();
    for (path, field) in mount_paths(t) {
        if let Some(first) = mounted.get(path) {
            errors.push((field, format!("{path} is already mounted by {first}")));
        } else {
            mounted.insert(path, field);
        }
    }

    for (i, network) in t.extra_networks.iter().enumerate() {
        if let Some(problem) = extra_network_problem(t, i, network) {
            errors.push((at.key("extraNetworks").index(i), problem));
        }
    }

    let host_network = t.network.as_deref() == Some("host");
    for (key, value) in &t.sysctls {
        if let Some(problem) = docker::sysctl_problem(key, value, host_network) {
            errors.push((at.key("sysctls").key(key), problem));
        }
    }
    for (i, port) in t.ports.iter().enumerate() {
        match docker::parse_port(port) {
            Err(problem) => errors.push((at.key("ports").index(i), problem)),
            // Two containers cannot bind one host port, and a rollout that surges runs the new
            // instance beside the old one.
            Ok(p) if p.fixed_host_port() && (spec.replicas > 1 || spec.rollout.surge(spec.replicas) > 0) => {
                errors.push((
                    at.key("ports").index(i),
                    format!(
                        "port {port:?} binds a fixed host port, which only one container can have: \
                         it needs replicas at most 1 and rollout.maxSurge 0 (set maxUnavailable: 1), \
                         or leave the host port out to let Docker choose one per container"
                    ),
                ));
            }
            Ok(_) => {}
        }
    }
    if let Some(Err(problem)) = t.restart.as_deref().map(docker::parse_restart) {
        errors.push((at.key("restart"), problem));
    }
    if let Some(problem) = t.user.as_deref().and_then(docker::user_problem) {
        errors.push((at.key("user"), problem));
    }
    if t.image_id.is_some() {
        let why = "is read from the Docker endpoint when a plan is made (imagePolicy: digest), not written";
        errors.push((at.key("imageId"), why.to_owned()));
    }
    if let Some(dir) = t.workdir.as_deref().filter(|d| !d.starts_with('/')) {
        errors.push((at.key("workdir"), format!("working directory {dir:?} must be absolute")));
    }
    if let Some(problem) = t.stop_signal.as_deref().and_then(docker::signal_problem) {
        errors.push((at.key("stopSignal"), problem));
    }
    errors.extend(limit_problems(t, &at));

    let counts = [
        ("securityOpt", t.security_opt.len()),
        ("devices", t.devices.len()),
        ("capAdd", t.cap_add.len()),
        ("capDrop", t.cap_drop.len()),
        ("sysctls", t.sysctls.len()),
        ("ports", t.ports.len()),
        ("extraHosts", t.extra_hosts.len()),
        ("dns", t.dns.len()),
        ("extraNetworks", t.extra_networks.len()),
    ];
    for (field, count) in counts {
        if count > MAX_ITEMS {
            errors.push((at.key(field), format!("has {count} entries; at most {MAX_ITEMS} are allowed")));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The errors of a pool whose `spec` ends with `tail`, as `file:line:col: field: message`.
    fn errors(tail: &str) -> Vec<String> {
        let text = format!(
            "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: w\nspec:\n  replicas: 1\n{tail}"
        );
        match super::super::load_files([("a.yaml", text.as_str())]) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn files_and_copy_from_are_checked_offline() {
        let found = errors(
            "  template:\n    copyFrom: {container: 'dev worker'}\n    files:\n      \
             - {path: bin/x.sh, content: ''}\n      - {path: /bin/x.sh, content: '', mode: '0755'}\n      \
             - {path: /bin/x.sh, content: '', mode: '755'}\n      - {path: /a/../b, content: '', mode: rwx}\n",
        );
        let expected = [
            "a.yaml:8:27: spec.template.copyFrom.container: \"dev worker\" is not a container name ([a-zA-Z0-9][a-zA-Z0-9_.-]*)",
            "a.yaml:10:16: spec.template.files[0].path: \"bin/x.sh\" must be an absolute path to a file, without ..",
            "a.yaml:12:16: spec.template.files[2].path: /bin/x.sh is written by an earlier entry",
            "a.yaml:13:16: spec.template.files[3].path: \"/a/../b\" must be an absolute path to a file, without ..",
            "a.yaml:13:44: spec.template.files[3].mode: mode \"rwx\": expected permission bits in octal, such as \"0755\"",
        ];
        assert_eq!(found, expected);
        let networks = errors(
            "  template:\n    image: i\n    network: kind\n    extraNetworks: [kind, host, '', extra, extra]\n",
        );
        let expected = [
            "a.yaml:10:21: spec.template.extraNetworks[0]: kind is named twice",
            "a.yaml:10:27: spec.template.extraNetworks[1]: \"host\" is a network mode, not a network a container can join besides another",
            "a.yaml:10:33: spec.template.extraNetworks[2]: must name a network",
            "a.yaml:10:44: spec.template.extraNetworks[4]: extra is named twice",
        ];
        assert_eq!(networks, expected);
        // With copyFrom, the image may be left out: the source's is the default.
        assert_eq!(errors("  template:\n    copyFrom: {container: dev-worker}\n"), Vec::<String>::new());
    }

    #[test]
    fn drain_rules_are_checked_offline_where_they_are_written() {
        let found = errors(
            "  template: {image: i}\n  drain:\n    rules:\n      - {order: -1}\n      \
             - pods: {matchExpressions: [{key: app, operator: Near, values: [a]}, {key: b, operator: In}]}\n        \
             namespaces: ['']\n",
        );
        assert_eq!(
            sorted(found),
            [
                "a.yaml:10:17: spec.drain.rules[0].order: must be 0 or more, got -1",
                "a.yaml:11:35: spec.drain.rules[1].pods.matchExpressions[0]: operator must be In, NotIn, Exists or DoesNotExist, got \"Near\"",
                "a.yaml:11:76: spec.drain.rules[1].pods.matchExpressions[1]: In needs values",
                "a.yaml:12:22: spec.drain.rules[1].namespaces[0]: must name a namespace",
            ]
        );
        let unknown = errors("  template: {image: i}\n  drain:\n    rules:\n      - {behavior: Later}\n");
        assert!(unknown.len() == 1 && unknown[0].starts_with("a.yaml:10:"), "{unknown:?}");
        assert!(unknown[0].contains("Later") && unknown[0].contains("WaitCompleted"), "{unknown:?}");
    }

    #[test]
    fn a_drain_timeout_action_is_checked_where_it_is_written() {
        let node = "  node: {kubeconfig: k}\n";
        let ok = errors(&format!("  template: {{image: i}}\n{node}  drain:\n    timeoutAction: Force\n"));
        assert_eq!(ok, Vec::<String>::new());
        let unknown =
            errors(&format!("  template: {{image: i}}\n{node}  drain:\n    timeoutAction: Later\n"));
        assert!(
            unknown.len() == 1 && unknown[0].starts_with("a.yaml:10:20: spec.drain.timeoutAction:"),
            "{unknown:?}"
        );
        assert!(unknown[0].contains("Later") && unknown[0].contains("Proceed"), "{unknown:?}");
        let no_node = errors("  template: {image: i}\n  drain:\n    timeoutAction: Proceed\n");
        assert_eq!(
            no_node,
            [
                "a.yaml:9:20: spec.drain.timeoutAction: Proceed acts on the drain of a Node, and the pool has no node: \
                 section (nothing is drained)"
            ]
        );
    }

    #[test]
    fn a_value_from_names_one_source() {
        let found = errors(
            "  template:\n    image: i\n    env:\n      A: {valueFrom: {}}\n      \
             B: {valueFrom: {file: /a, env: B}}\n      C: {valueFrom: {env: ''}}\n      \
             D: {valueFrom: {file: ' '}}\n      E: {valueFrom: {url: x}}\n",
        );
        assert_eq!(
            sorted(found),
            [
                "a.yaml:10:22: spec.template.env.A.valueFrom: needs `file` or `env`",
                "a.yaml:11:22: spec.template.env.B.valueFrom: takes `file` or `env`, not both",
                "a.yaml:12:28: spec.template.env.C.valueFrom.env: \"\" is not an environment variable name",
                "a.yaml:13:29: spec.template.env.D.valueFrom.file: must not be empty",
                "a.yaml:14:22: spec.template.env.E.valueFrom: needs `file` or `env`",
                "a.yaml:14:23: spec.template.env.E.valueFrom.url: unknown field `url`, expected `file` or `env`",
            ]
        );
    }

    #[test]
    fn health_and_rollout_settings_are_checked_with_their_place() {
        let found = errors(
            "  template:\n    image: i\n  rollout:\n    after: yesterday\n    deletePolicy: Oldest\n  \
             health:\n    maxUnhealthy: 120%\n    unhealthyConditions:\n      - {type: Ready, status: Maybe, timeout: 5m}\n",
        );
        assert_eq!(
            sorted(found),
            [
                "a.yaml:10:12: spec.rollout.after: \"yesterday\" is not an RFC 3339 time, e.g. 2026-12-04T10:00:00Z",
                "a.yaml:13:19: spec.health.maxUnhealthy: a percentage must be at most 100%, got 120%",
                "a.yaml:15:31: spec.health.unhealthyConditions[0].status: must be True, False or Unknown, got \"Maybe\"",
            ]
        );
        let policy = errors("  template:\n    image: i\n  rollout:\n    deletePolicy: Newer\n");
        assert!(
            policy.iter().any(|e| e.contains("spec.rollout.deletePolicy") && e.contains("Newer")),
            "{policy:?}"
        );
    }

    #[test]
    fn durations_that_cannot_work_are_refused_with_their_place() {
        let found = errors(
            "  template:\n    image: i\n  rollout:\n    progressDeadline: 0s\n    hookTimeout: 0s\n    \
             volumeDetachTimeout: 9000h\n  health:\n    nodeStartupTimeout: 0s\n    containerTimeout: 0s\n    \
             unhealthyConditions:\n      - {type: Ready, status: Unknown, timeout: 0s}\n",
        );
        let fields: Vec<&str> = found.iter().filter_map(|e| e.split(": ").nth(1)).collect();
        for field in [
            "spec.rollout.progressDeadline",
            "spec.rollout.hookTimeout",
            "spec.rollout.volumeDetachTimeout",
            "spec.health.nodeStartupTimeout",
            "spec.health.containerTimeout",
            "spec.health.unhealthyConditions[0].timeout",
        ] {
            assert!(fields.contains(&field), "{field} not in {found:#?}");
        }
        assert!(found.iter().all(|e| e.starts_with("a.yaml:")), "each with its place: {found:#?}");
        let short = errors(
            "  template:\n    image: i\n  rollout:\n    progressDeadline: 30s\n    minReadySeconds: 30\n",
        );
        assert!(
            short.iter().any(|e| e.contains("spec.rollout.progressDeadline: 30s is no longer than")),
            "{short:?}"
        );
        let never = errors(
            "  template:\n    image: i\n    env:\n      T: {valueFrom: {file: /t}}\n  rollout:\n    failureAction: rollback\n",
        );
        assert!(
            never.iter().any(|e| e.contains("spec.rollout.failureAction: rollback can never happen")),
            "{never:?}"
        );
        let fine =
            errors("  template:\n    image: i\n  rollout:\n    progressDeadline: 1m\n    monitor: 0s\n");
        assert!(fine.is_empty(), "{fine:?}");
        // minReadySeconds takes a duration as every other field does, and seconds as a
        // Deployment's; both count against the deadline.
        let as_duration = errors(
            "  template:\n    image: i\n  rollout:\n    progressDeadline: 1m\n    minReadySeconds: 1m\n",
        );
        assert!(
            as_duration.iter().any(|e| e.contains("spec.rollout.progressDeadline: 1m is no longer than")),
            "{as_duration:?}"
        );
        let negative = errors("  template:\n    image: i\n  rollout:\n    minReadySeconds: -1\n");
        assert!(negative.iter().any(|e| e.contains("cannot be negative")), "{negative:?}");
        // An instance must be able to serve before it expires.
        let expired = errors("  template:\n    image: i\n  rollout:\n    maxAge: 5s\n    monitor: 5s\n");
        assert!(
            expired
                .iter()
                .any(|e| e.starts_with("a.yaml:") && e.contains("spec.rollout.maxAge: 5s is no longer than")),
            "{expired:?}"
        );
        let lives = errors("  template:\n    image: i\n  rollout:\n    maxAge: 720h\n");
        assert!(lives.is_empty(), "{lives:?}");
    }

    /// Canaries are counted as surges are, refused where they cannot lead a rollout, and
    /// `autoPromote` needs canaries to promote; each error says where it is.
    #[test]
    fn canary_and_auto_promote_are_checked_offline() {
        let rollout = |lines: &str| errors(&format!("  template:\n    image: i\n  rollout:\n{lines}"));
        let negative = rollout("    canary: -1\n");
        assert_eq!(
            negative,
            ["a.yaml:10:13: spec.rollout.canary: must be 0 or more, got -1"],
            "{negative:?}"
        );
        let over = rollout("    canary: 150%\n");
        assert!(over.iter().any(|e| e.contains("at most 100%, got 150%")), "{over:?}");
        let bad = rollout("    canary: ten\n");
        assert!(bad.iter().any(|e| e.starts_with("a.yaml:10:") && e.contains("canary")), "{bad:?}");
        let on_delete = rollout("    canary: 1\n    strategy: OnDelete\n");
        assert!(
            on_delete.iter().any(|e| e.contains("spec.rollout.canary: strategy OnDelete")),
            "{on_delete:?}"
        );
        let alone = rollout("    autoPromote: 5s\n");
        assert!(alone.iter().any(|e| e.contains("spec.rollout.autoPromote: promotes canaries")), "{alone:?}");
        // More canaries than replicas is all of them, not a mistake.
        for fine in ["    canary: 5\n    autoPromote: 5m\n", "    canary: 25%\n", "    canary: 0\n"] {
            assert!(rollout(fine).is_empty(), "{fine}: {:?}", rollout(fine));
        }
    }

    #[test]
    fn canaries_resolve_as_a_count_rounded_up_within_replicas() {
        let spec = |canary: Option<IntOrPercent>| super::super::RolloutSpec { canary, ..Default::default() };
        assert_eq!(spec(None).canaries(10), 0);
        assert_eq!(spec(Some(IntOrPercent::Count(0))).canaries(10), 0);
        assert_eq!(spec(Some(IntOrPercent::Percent(25))).canaries(10), 3);
        assert_eq!(spec(Some(IntOrPercent::Percent(1))).canaries(3), 1);
        assert_eq!(spec(Some(IntOrPercent::Count(5))).canaries(3), 3);
        assert_eq!(spec(Some(IntOrPercent::Count(2))).canaries(0), 0);
    }

    fn sorted(mut errors: Vec<String>) -> Vec<String> {
        errors.sort();
        errors
    }

    #[test]
    fn a_join_has_one_method_and_nothing_in_the_template_fights_it() {
        let both =
            errors("  template: {image: i}\n  join: {kubeadm: {controlPlane: cp}, k3s: {server: s}}\n");
        assert_eq!(both, ["a.yaml:8:9: spec.join: takes `kubeadm` or `k3s`, not both"], "{both:#?}");
        let none = errors("  template: {image: i}\n  join: {}\n");
        assert_eq!(none, ["a.yaml:8:9: spec.join: needs `kubeadm` or `k3s`"], "{none:#?}");
        let found = errors(
            "  template:\n    image: i\n    env: {K3S_TOKEN: t, K3S_URL: u}\n    tmpfs: [/etc/poolctl]\n  \
             join:\n    k3s: {server: 'bad name', url: 'http://s:6443'}\n",
        );
        assert_eq!(
            sorted(found),
            [
                "a.yaml:10:13: spec.template.tmpfs[0]: a mount at /etc/poolctl would hide the join credential \
                 poolctl writes to /etc/poolctl",
                "a.yaml:12:19: spec.join.k3s.server: \"bad name\" is not a container name ([a-zA-Z0-9][a-zA-Z0-9_.-]*)",
                "a.yaml:12:36: spec.join.k3s.url: \"http://s:6443\" is not an https:// URL",
                "a.yaml:9:22: spec.template.env.K3S_TOKEN: K3S_TOKEN is set by join.k3s; leave it out of the template",
                "a.yaml:9:34: spec.template.env.K3S_URL: K3S_URL is set by join.k3s; leave it out of the template",
            ]
        );
        let kubeadm = errors(
            "  template: {image: i, volumes: ['/etc']}\n  join: {kubeadm: {controlPlane: cp, timeout: 0s}}\n",
        );
        assert_eq!(
            sorted(kubeadm),
            [
                "a.yaml:7:34: spec.template.volumes[0]: a mount at /etc would hide the join credential poolctl \
                 writes to /etc/poolctl",
                "a.yaml:8:47: spec.join.kubeadm.timeout: must be longer than 0s",
            ]
        );
        assert!(
            errors("  template: {image: i}\n  join: {kubeadm: {controlPlane: kind-control-plane}}\n")
                .is_empty()
        );
    }

    #[test]
    fn in_cluster_is_a_keyword_without_contexts() {
        let node = |fields: &str| errors(&format!("  template: {{image: i}}\n  node: {{{fields}}}\n"));
        assert_eq!(node("kubeconfig: in-cluster"), Vec::<String>::new());
        assert_eq!(node("kubeconfig: ./in_cluster.yaml"), Vec::<String>::new());
        assert_eq!(node("kubeconfig: ./In_Cluster"), Vec::<String>::new(), "a path is a file");
        assert_eq!(
            node("kubeconfig: In_Cluster"),
            ["a.yaml:8:22: spec.node.kubeconfig: \"In_Cluster\" is not a keyword: write `in-cluster` for \
                 the Pod's service account, or ./In_Cluster for a file of that name"]
        );
        assert_eq!(
            node("kubeconfig: in-cluster, context: kind-a"),
            ["a.yaml:8:43: spec.node.context: the Pod's credentials (kubeconfig: in-cluster) have no \
                 contexts; remove `context`"]
        );
        assert_eq!(
            node("kubeconfig: ' '"),
            ["a.yaml:8:22: spec.node.kubeconfig: must not be empty: leave it out for the default"]
        );
    }

    #[test]
    fn pool_names_are_short_dns_labels() {
        for good in ["a", "workers", "w-1", "0pool", &"a".repeat(MAX_POOL_NAME_LEN)] {
            assert_eq!(name_problem(good), None, "{good}");
        }
        for bad in ["", "Workers", "-w", "w-", "w_1", "w.1", "wörk", &"a".repeat(47)] {
            assert!(name_problem(bad).is_some(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_docker_section_names_one_reachable_kind_of_endpoint() {
        let spec = |context: Option<&str>, host: Option<&str>| super::super::DockerSpec {
            context: context.map(str::to_owned),
            host: host.map(str::to_owned),
        };
        let problems =
            |d| docker_problems(&d).into_iter().map(|(p, m)| format!("{p}: {m}")).collect::<Vec<_>>();
        assert!(problems(spec(Some("remote"), None)).is_empty());
        assert!(problems(spec(None, Some("unix:///run/user/1000/docker.sock"))).is_empty());
        assert!(problems(spec(None, Some("tcp://10.0.0.2:2376"))).is_empty());
        assert_eq!(
            problems(spec(Some("a"), Some("tcp://b:2376"))),
            ["spec.docker: give either context or host, not both"]
        );
        assert_eq!(problems(spec(None, None)), ["spec.docker: must name a context or a host"]);
        assert_eq!(problems(spec(Some(" "), None)), ["spec.docker.context: must not be empty"]);
        let ssh = problems(spec(None, Some("ssh://me@far")));
        assert!(
            ssh[0].starts_with("spec.docker.host: \"ssh://me@far\": ssh:// endpoints are not supported"),
            "{ssh:?}"
        );
        let bare = problems(spec(None, Some("10.0.0.2:2376")));
        assert!(bare[0].contains("is not an address"), "{bare:?}");
    }

    #[test]
    fn a_disruption_window_with_a_bad_schedule_zone_or_duration_is_refused_where_it_is_written() {
        let found = errors(
            "  template:\n    image: i\n  disruption:\n    windows:\n    \
             - {kind: deny, schedule: '0 25 * * *', duration: 1h}\n    \
             - {kind: allow, schedule: '0 0 30 2 *', duration: 1h, timeZone: Mars/Olympus}\n    \
             - {kind: deny, schedule: '@daily', duration: 0s, reasons: [rollout]}\n    \
             - {kind: allow, schedule: '*/5 * * * * *', duration: 9000h}\n    \
             - {kind: allow, schedule: '0 22 * * MON-FRI', duration: 8h, timeZone: Europe/Berlin}\n",
        );
        let expected = [
            "a.yaml:11:30: spec.disruption.windows[0].schedule: \"0 25 * * *\" is not a cron schedule",
            "a.yaml:12:31: spec.disruption.windows[1].schedule: \"0 0 30 2 *\" never comes: no time matches it",
            "a.yaml:12:69: spec.disruption.windows[1].timeZone: unknown time zone \"Mars/Olympus\"",
            "a.yaml:13:50: spec.disruption.windows[2].duration: must be 1s or more",
            "a.yaml:14:58: spec.disruption.windows[3].duration: must be at most 8784h, got 9000h",
        ];
        assert_eq!(found.len(), expected.len(), "{found:#?}");
        for (found, expected) in found.iter().zip(expected) {
            assert!(found.starts_with(expected), "{found}\nexpected: {expected}");
        }
        let kind = errors(
            "  template:\n    image: i\n  disruption:\n    windows:\n    \
             - {kind: sometimes, schedule: '@daily', duration: 1h}\n",
        );
        assert!(kind.len() == 1 && kind[0].starts_with("a.yaml:11:"), "{kind:?}");
        assert!(kind[0].contains("sometimes") && kind[0].contains("allow"), "{kind:?}");
        let reason = errors(
            "  template:\n    image: i\n  disruption:\n    windows:\n    \
             - {kind: deny, schedule: '@daily', duration: 1h, reasons: [rollout, upgrade]}\n",
        );
        assert!(reason.len() == 1 && reason[0].starts_with("a.yaml:11:"), "{reason:?}");
        assert!(reason[0].contains("upgrade") && reason[0].contains("scaleDown"), "{reason:?}");
    }
}
