//! Up records, and the times Docker keeps of a container in trouble: what lets the planner
//! tell *starting* from *serving*, and a blip from a failure, without a state file.
//!
//! An instance's coming up (bootstrap, join and Ready wait done) is recorded as the last step of
//! its creation by an *up record*: a Docker volume named `poolctl-up-<instance>`, labelled with
//! the pool and the ID of the instance container it vouches for; a pool's rollout record is the
//! volume `poolctl-rollout-<pool>`. A label cannot change after creation and a file inside the
//! instance would take one read per instance per plan; one list call of volumes reads them all.
//!
//! Volumes, not containers: `docker container prune` and `docker system prune` (which people run
//! often) delete never-started containers, and named volumes are left alone by both (and by
//! `docker volume prune` since Docker 23, which takes only anonymous ones unless `--all`); nor do
//! they clutter `docker ps -a`. A record removed all the same costs no capacity: an instance
//! that looks up counts as up whatever its record says (see the planner). Records that an
//! earlier poolctl kept as never-started containers are still read, and removed with what they
//! record.

use std::collections::HashMap;

use bollard::models::{ContainerInspectResponse, HealthStatusEnum, Volume, VolumeCreateRequest};
use bollard::query_parameters::{RemoveContainerOptions, RemoveVolumeOptions};
use k8s_openapi::jiff::Timestamp;

use super::{DockerBackend, status_of};
use crate::backend::BackendError;
use crate::model::{Container, ContainerState, Health, RolloutRecord, labels};

/// The name of the rollout record of `pool`.
pub(super) fn rollout_record_name(pool: &str) -> String {
    format!("poolctl-rollout-{pool}")
}

/// The rollout record named `name` with `labels`, made at `created` (seconds since the Unix
/// epoch), by pool; `None` for anything that is not one. A volume now, a container for an
/// earlier poolctl: read the same.
pub(super) fn rollout_record_from(
    name: &str,
    labels: &HashMap<String, String>,
    created: i64,
) -> Option<(String, RolloutRecord)> {
    let template_hash = labels.get(labels::ROLLOUT_OF)?.clone();
    let pool = name.strip_prefix("poolctl-rollout-")?.to_owned();
    let rolled_back_from = labels.get(labels::ROLLED_BACK_FROM).cloned();
    Some((pool, RolloutRecord { template_hash, since: created, rolled_back_from, progressed: None }))
}

/// The name of the progress record of `pool`.
pub(super) fn progress_record_name(pool: &str) -> String {
    format!("poolctl-progress-{pool}")
}

/// The pool whose progress record is the volume `name` with `labels`; `None` for anything else.
pub(super) fn progress_record_of(name: &str, labels: &HashMap<String, String>) -> Option<String> {
    let pool = name.strip_prefix("poolctl-progress-")?;
    (labels.get(labels::PROGRESS_OF).map(String::as_str) == Some(pool)).then(|| pool.to_owned())
}

/// When a record volume was made, in seconds since the Unix epoch.
pub(super) fn volume_created(volume: &Volume) -> i64 {
    time(volume.created_at.as_deref()).unwrap_or_default()
}

/// The name of the up record of `instance`.
pub(super) fn up_record_name(instance: &str) -> String {
    format!("poolctl-up-{instance}")
}

/// One up record, as the list shows it.
pub(super) struct UpRecord {
    /// The instance container it vouches for.
    of: String,
    /// When it was written: when the instance came up.
    created: i64,
}

/// The up record named `name` with `labels`, made at `created`, by instance name; `None` for
/// anything that is not one. A volume now, a container for an earlier poolctl: read the same.
pub(super) fn up_record_from(
    name: &str,
    labels: &HashMap<String, String>,
    created: i64,
) -> Option<(String, UpRecord)> {
    let of = labels.get(labels::UP_OF)?.clone();
    let instance = name.strip_prefix("poolctl-up-")?.to_owned();
    Some((instance, UpRecord { of, created }))
}

/// Join the instances of a list with their up records: an instance that keeps them came up when
/// its record was written, if the record vouches for this very container.
pub(super) fn join_up_records(containers: &mut [Container], records: &HashMap<String, UpRecord>) {
    for c in containers {
        if c.came_up.is_none()
            && let Some(record) = records.get(&c.name).filter(|r| r.of == c.id)
        {
            c.came_up = Some(record.created);
        }
    }
}

/// The name of the update record of `instance`: what it runs since it was updated in place.
pub fn updated_record_name(instance: &str) -> String {
    format!("poolctl-updated-{instance}")
}

/// One update record, as the list shows it.
pub(super) struct UpdatedRecord {
    /// The instance container it vouches for.
    of: String,
    template_hash: String,
    template: Option<String>,
}

/// The update record named `name` with `labels`, by instance name; `None` for anything that is
/// not one.
pub(super) fn updated_record_from(
    name: &str,
    labels: &HashMap<String, String>,
) -> Option<(String, UpdatedRecord)> {
    let of = labels.get(labels::UPDATED_OF)?.clone();
    let instance = name.strip_prefix("poolctl-updated-")?.to_owned();
    let template_hash = labels.get(labels::TEMPLATE_HASH)?.clone();
    let template = labels.get(labels::TEMPLATE).cloned();
    Some((instance, UpdatedRecord { of, template_hash, template }))
}

/// Join the instances of a list with their update records: an instance updated in place runs
/// the record's template, if the record vouches for this very container (a record left by an
/// earlier container of the same name says nothing of this one). Without its record it shows
/// the template it was created from, and is updated again: a lost record costs an update.
pub(super) fn join_updated_records(containers: &mut [Container], records: &HashMap<String, UpdatedRecord>) {
    for c in containers {
        if let Some(record) = records.get(&c.name).filter(|r| r.of == c.id) {
            c.template_hash.clone_from(&record.template_hash);
            c.template.clone_from(&record.template);
        }
    }
}

/// Whether the planner needs to know since when the container has not been serving: Docker's
/// list says only that it restarts or fails its HEALTHCHECK, not since when.
pub(super) fn needs_since(c: &Container) -> bool {
    c.state == ContainerState::Restarting
        || (c.state == ContainerState::Running && matches!(c.health, Health::Unhealthy | Health::Starting))
}

/// Docker's restart backoff: 100ms, doubling after each restart, at most a minute (its restart
/// manager resets it once a run lasted 10s).
fn restart_backoff_secs(restarts: i64) -> i64 {
    let waits_ms = (0..restarts.clamp(0, 1000)).map(|n| (100_i64 << n.min(10)).min(60_000));
    waits_ms.sum::<i64>() / 1000
}

/// Since when the inspected container has not been serving, from Docker's own records: for a
/// failing HEALTHCHECK, the start of the oldest failing probe of the current streak that the
/// health log keeps (at most five: never earlier than the truth); for a restart loop, its last
/// exit less the backoff its restart count implies.
pub(super) fn since(inspect: &ContainerInspectResponse) -> Option<i64> {
    let state = inspect.state.as_ref()?;
    if state.restarting == Some(true) {
        let finished = time(state.finished_at.as_deref())?;
        return Some(finished - restart_backoff_secs(inspect.restart_count.unwrap_or(0)));
    }
    let health = state.health.as_ref()?;
    match health.status {
        Some(HealthStatusEnum::UNHEALTHY | HealthStatusEnum::STARTING) => {}
        _ => return None,
    }
    let log = health.log.as_deref().unwrap_or_default();
    let streak = log.iter().rev().take_while(|probe| probe.exit_code != Some(0));
    match streak.last() {
        Some(oldest) => time(oldest.start.as_deref()),
        // No failing probe yet (still starting): since it last started.
        None => time(state.started_at.as_deref()),
    }
}

/// An RFC 3339 time (`...T10:00:00.123456789Z`) in nanoseconds since the Unix epoch; 0 for one
/// that does not read.
pub(super) fn nanos_since_epoch(text: &str) -> i128 {
    text.parse::<Timestamp>().map_or(0, Timestamp::as_nanosecond)
}

/// An RFC 3339 time as Docker writes it, in seconds since the Unix epoch; Docker's zero time
/// (`0001-01-01T00:00:00Z`) is no time.
pub(super) fn time(text: Option<&str>) -> Option<i64> {
    let at: Timestamp = text?.parse().ok()?;
    let secs = at.as_second();
    (secs > 0).then_some(secs)
}

impl DockerBackend {
    /// Write the up record of `instance`, vouching for the container of that name as it is now,
    /// with `labels` (the pool's, and the template's own, so that whatever removes the pool's
    /// things by label removes it too). A record left by an earlier container of the same name
    /// is replaced.
    pub(super) async fn write_up_record(
        &self,
        instance: &str,
        record_labels: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        let doing = || format!("record that {instance} came up");
        let id = self
            .inspect(instance)
            .await?
            .and_then(|c| c.id)
            .ok_or_else(|| BackendError::NotFound(format!("container {instance}")))?;
        let mut labels: HashMap<String, String> = record_labels.clone().into_iter().collect();
        labels.insert(labels::UP_OF.to_owned(), id.clone());
        let name = up_record_name(instance);
        for attempt in 0..2 {
            let made = self.create_record(&name, labels.clone(), &doing()).await?;
            if made.labels.get(labels::UP_OF) == Some(&id) {
                return Ok(());
            }
            if attempt == 0 {
                self.remove_volume(&name).await?;
            }
        }
        Err(BackendError::Failed(format!("{}: the volume {name} stays someone else's", doing())))
    }

    /// Write the update record of `instance` (container `id`): it runs `update`'s template now.
    /// A record of an earlier update, or of an earlier container of the name, is replaced.
    pub(super) async fn write_updated_record(
        &self,
        instance: &str,
        id: &str,
        update: &crate::backend::LiveUpdate,
        record_labels: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        let name = updated_record_name(instance);
        let mut labels: HashMap<String, String> = record_labels.clone().into_iter().collect();
        labels.insert(labels::UPDATED_OF.to_owned(), id.to_owned());
        labels.insert(labels::TEMPLATE_HASH.to_owned(), update.template_hash.clone());
        labels.insert(labels::TEMPLATE.to_owned(), update.template.clone());
        // A volume's labels cannot change either: the record is made anew.
        self.remove_volume(&name).await?;
        let made =
            self.create_record(&name, labels.clone(), &format!("record that {instance} was updated")).await?;
        if made.labels != labels {
            return Err(BackendError::Failed(format!("the volume {name} stays someone else's")));
        }
        Ok(())
    }

    /// Write `pool`'s rollout record: its rollout to `template_hash` begins now. The record of an
    /// earlier rollout is replaced.
    pub(super) async fn write_rollout_record(
        &self,
        pool: &str,
        template_hash: &str,
        rolled_back_from: Option<&str>,
        record_labels: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        let name = rollout_record_name(pool);
        self.remove_volume(&name).await?;
        self.remove_legacy(&name).await?;
        let mut labels: HashMap<String, String> = record_labels.clone().into_iter().collect();
        labels.insert(labels::ROLLOUT_OF.to_owned(), template_hash.to_owned());
        labels.extend(rolled_back_from.map(|from| (labels::ROLLED_BACK_FROM.to_owned(), from.to_owned())));
        self.create_record(&name, labels, &format!("record the rollout of pool {pool}")).await.map(drop)
    }

    /// Write `pool`'s progress record: its rollout stepped forward now. The volume is made
    /// anew, its creation time being the record; lost between the two calls, the rollout's
    /// progress falls back to its start and its instances' coming up, the cautious side.
    pub(super) async fn write_progress_record(
        &self,
        pool: &str,
        record_labels: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        let name = progress_record_name(pool);
        self.remove_volume(&name).await?;
        let mut labels: HashMap<String, String> = record_labels.clone().into_iter().collect();
        labels.insert(labels::PROGRESS_OF.to_owned(), pool.to_owned());
        self.create_record(&name, labels, &format!("record the progress of pool {pool}")).await.map(drop)
    }

    /// Make the record volume `name` with `labels`, saying `doing` should it fail, and return it
    /// as Docker has it: Docker answers a create of an existing volume with that volume, as it
    /// is, so a caller whose record must say what it wrote compares its labels.
    pub(super) async fn create_record(
        &self,
        name: &str,
        labels: HashMap<String, String>,
        doing: &str,
    ) -> Result<Volume, BackendError> {
        let request =
            VolumeCreateRequest { name: Some(name.to_owned()), labels: Some(labels), ..Default::default() };
        self.call(self.docker.create_volume(request)).await.map_err(|e| self.error(doing, e))
    }

    /// Remove the up record of `instance`, if there is one.
    pub(super) async fn remove_up_record(&self, instance: &str) -> Result<(), BackendError> {
        let name = up_record_name(instance);
        self.remove_volume(&name).await?;
        self.remove_legacy(&name).await
    }

    /// Remove `pool`'s rollout and progress records, if there are: the pool is gone.
    pub(super) async fn remove_rollout_record(&self, pool: &str) -> Result<(), BackendError> {
        let name = rollout_record_name(pool);
        self.remove_volume(&progress_record_name(pool)).await?;
        self.remove_volume(&name).await?;
        self.remove_legacy(&name).await
    }

    pub(super) async fn remove_volume(&self, name: &str) -> Result<(), BackendError> {
        match self.call(self.docker.remove_volume(name, Some(RemoveVolumeOptions { force: true }))).await {
            Ok(()) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(self.error(&format!("remove the record {name}"), e)),
        }
    }

    /// Remove the record `name` that an earlier poolctl kept as a container, if the last list
    /// showed one: no call otherwise.
    async fn remove_legacy(&self, name: &str) -> Result<(), BackendError> {
        if !self.listed().legacy.remove(name) {
            return Ok(());
        }
        let options = RemoveContainerOptions { v: true, force: true, link: false };
        match self.call(self.docker.remove_container(name, Some(options))).await {
            Ok(()) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(self.error(&format!("remove the record {name}"), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use bollard::models::{ContainerState as DockerState, Health as DockerHealth, HealthcheckResult};

    use super::*;

    fn probe(start: &str, code: i64) -> HealthcheckResult {
        HealthcheckResult { start: Some(start.to_owned()), exit_code: Some(code), ..Default::default() }
    }

    #[test]
    fn a_failing_healthcheck_counts_from_the_first_failing_probe_of_its_streak() {
        let inspect = ContainerInspectResponse {
            state: Some(DockerState {
                health: Some(DockerHealth {
                    status: Some(HealthStatusEnum::UNHEALTHY),
                    failing_streak: Some(2),
                    log: Some(vec![
                        probe("2026-12-04T10:00:00Z", 1),
                        probe("2026-12-04T10:00:30Z", 0),
                        probe("2026-12-04T10:01:00.5Z", 1),
                        probe("2026-12-04T10:01:30Z", 1),
                    ]),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let expected: Timestamp = "2026-12-04T10:01:00Z".parse().unwrap();
        assert_eq!(since(&inspect), Some(expected.as_second()));
    }

    #[test]
    fn a_restart_loop_counts_back_its_backoff_from_the_last_exit() {
        let inspect = ContainerInspectResponse {
            restart_count: Some(10),
            state: Some(DockerState {
                restarting: Some(true),
                finished_at: Some("2026-12-04T10:00:00Z".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let finished: Timestamp = "2026-12-04T10:00:00Z".parse().unwrap();
        // Ten waits of 0.1, 0.2, ... 51.2 s: 102.3 s.
        assert_eq!(since(&inspect), Some(finished.as_second() - 102));
        assert_eq!(time(Some("0001-01-01T00:00:00Z")), None, "Docker's zero time is no time");
    }

    #[test]
    fn a_creation_time_label_reads_to_the_nanosecond() {
        let at = nanos_since_epoch("2026-12-05T10:00:00.123456789Z");
        assert_eq!(at % 1_000_000_000, 123_456_789);
        assert_eq!(at / 1_000_000_000, 1_796_464_800);
        assert_eq!(nanos_since_epoch("not a time"), 0);
    }

    #[test]
    fn a_record_vouches_only_for_the_container_it_names() {
        let labels = HashMap::from([(labels::UP_OF.to_owned(), "id-1".to_owned())]);
        let (instance, record) = up_record_from("poolctl-up-w-1", &labels, 42).unwrap();
        assert_eq!(instance, "w-1");
        let mut containers = vec![
            Container { came_up: None, ..crate::testing::build::container("w-1", "w", "h", 1) },
            Container {
                came_up: None,
                id: "id-other".into(),
                ..crate::testing::build::container("w-2", "w", "h", 1)
            },
        ];
        containers[0].id = "id-1".into();
        let records = HashMap::from([
            (instance, record),
            ("w-2".to_owned(), UpRecord { of: "id-2".into(), created: 7 }),
        ]);
        join_up_records(&mut containers, &records);
        assert_eq!(containers[0].came_up, Some(42));
        assert_eq!(containers[1].came_up, None, "a record of another container of that name");
        assert!(up_record_from("poolctl-up-w-1", &HashMap::new(), 42).is_none());
    }
}
