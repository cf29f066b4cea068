//! The record of joining instances in a node pool's Lease, through the real kube client: it
//! survives the renewals that run beside it, a release keeps a Lease that still records some
//! (without a holder), and `poolctl unlock` does not lose it.

use std::time::Duration;

use poolctl::backend::kube::KubeCluster;
use poolctl::backend::{Cluster, LockError, Locks};

use crate::support::fake_kube::{FakeKube, FakeKubeOptions};

const LEASE: Duration = Duration::from_secs(30);

fn lease_of(fake: &FakeKube) -> Option<k8s_openapi::api::coordination::v1::Lease> {
    fake.lease("kube-system", "poolctl-p")
}

fn recorded(fake: &FakeKube) -> Vec<String> {
    let lease = lease_of(fake).expect("the Lease exists");
    let annotations = lease.metadata.annotations.unwrap_or_default();
    annotations.keys().filter_map(|k| k.strip_prefix("joining.poolctl.dev/")).map(str::to_owned).collect()
}

fn holder(fake: &FakeKube) -> Option<String> {
    lease_of(fake)?.spec?.holder_identity
}

#[tokio::test]
async fn a_renewal_keeps_what_was_recorded_beside_it_and_a_release_keeps_the_record() {
    let fake = FakeKube::start(FakeKubeOptions::default());
    let cluster = KubeCluster::from_config(fake.config(), "p").unwrap();
    let held = cluster.acquire("p", "poolctl apply (pid 1 on here)", LEASE, None).await.unwrap();
    cluster.note_joining("p-0123456789-abcde").await.unwrap();
    cluster.note_joining("p-0123456789-fghij").await.unwrap();

    // The record moved the Lease's resourceVersion on: the renewal still proves the lock its
    // own, and writes the record back.
    let renewed = cluster.renew("p", &held, LEASE).await.unwrap();
    assert_ne!(renewed.version, held.version);
    assert_eq!(recorded(&fake), ["p-0123456789-abcde", "p-0123456789-fghij"]);
    assert_eq!(cluster.joining(&renewed).await.unwrap(), Some(recorded(&fake)));

    // Released while a name is still recorded: the Lease stays, without a holder, so the next
    // plan still finds that instance's Node; the pool is not locked.
    cluster.forget_joining(&["p-0123456789-abcde".to_owned()]).await.unwrap();
    cluster.release("p", &renewed).await.unwrap();
    assert_eq!(holder(&fake), None);
    assert_eq!(recorded(&fake), ["p-0123456789-fghij"]);
    assert_eq!(cluster.inspect("p").await.unwrap(), None);

    // The next run takes the lock over the record, keeps it, and once it forgot the last name
    // its release deletes the Lease.
    let next = cluster.acquire("p", "poolctl apply (pid 2 on here)", LEASE, None).await.unwrap();
    assert_eq!(recorded(&fake), ["p-0123456789-fghij"]);
    cluster.forget_joining(&["p-0123456789-fghij".to_owned()]).await.unwrap();
    cluster.release("p", &next).await.unwrap();
    assert!(lease_of(&fake).is_none());
}

#[tokio::test]
async fn a_broken_lock_keeps_its_record_and_its_holder_learns_it_lost_the_lock() {
    let fake = FakeKube::start(FakeKubeOptions::default());
    let cluster = KubeCluster::from_config(fake.config(), "p").unwrap();
    let held = cluster.acquire("p", "poolctl apply (pid 1 on here)", LEASE, None).await.unwrap();
    cluster.note_joining("p-0123456789-abcde").await.unwrap();

    // `poolctl unlock` breaks the lock as it sees it.
    let seen = cluster.inspect("p").await.unwrap().expect("held");
    cluster.release("p", &seen).await.unwrap();
    assert_eq!(holder(&fake), None);
    assert_eq!(recorded(&fake), ["p-0123456789-abcde"]);

    let lost = cluster.renew("p", &held, LEASE).await.unwrap_err();
    assert!(matches!(&lost, LockError::Lost { why, .. } if why == "it was broken"), "{lost}");
    assert_eq!(cluster.joining(&held).await.unwrap(), None, "no longer this run's record to tidy");

    // Another run took it since: the first run's release leaves that one alone.
    let other = cluster.acquire("p", "poolctl apply (pid 2 on here)", LEASE, None).await.unwrap();
    let refused = cluster.release("p", &held).await.unwrap_err();
    assert!(matches!(&refused, LockError::Lost { why, .. } if why.contains("pid 2")), "{refused}");
    assert_eq!(holder(&fake).as_deref(), Some("poolctl apply (pid 2 on here)"));
    cluster.release("p", &other).await.unwrap();
    assert_eq!(recorded(&fake), ["p-0123456789-abcde"]);
}

#[tokio::test]
async fn a_record_written_after_the_lease_went_away_is_not_lost() {
    let fake = FakeKube::start(FakeKubeOptions::default());
    let cluster = KubeCluster::from_config(fake.config(), "p").unwrap();
    cluster.note_joining("p-0123456789-abcde").await.unwrap();
    assert_eq!(holder(&fake), None);
    assert_eq!(recorded(&fake), ["p-0123456789-abcde"]);
    // Forgetting the names of a Lease that is gone is nothing to do.
    let other = KubeCluster::from_config(fake.config(), "q").unwrap();
    other.forget_joining(&["q-0123456789-abcde".to_owned()]).await.unwrap();
    assert!(fake.lease("kube-system", "poolctl-q").is_none());
}

#[tokio::test]
async fn a_recorded_name_that_is_not_the_pools_instance_is_ignored() {
    let fake = FakeKube::start(FakeKubeOptions::default());
    fake.add_node("kind-control-plane", true);
    let cluster = KubeCluster::from_config(fake.config(), "p").unwrap();
    let held = cluster.acquire("p", "poolctl apply (pid 1 on here)", LEASE, None).await.unwrap();
    // A hand-edited annotation naming another Node: never looked up, never the pool's.
    cluster.note_joining("kind-control-plane").await.unwrap();
    assert_eq!(cluster.joining(&held).await.unwrap(), Some(Vec::new()));
    let nodes: Vec<String> = cluster.nodes(&[]).await.unwrap().into_iter().map(|n| n.name).collect();
    assert!(nodes.is_empty(), "{nodes:?}");
    // Nothing of the pool's left to record: the release deletes the Lease.
    cluster.release("p", &held).await.unwrap();
    assert!(lease_of(&fake).is_none());
}

#[tokio::test]
async fn a_lease_is_taken_over_only_while_it_is_the_very_record_the_standby_saw() {
    let fake = FakeKube::start(FakeKubeOptions::default());
    let cluster = KubeCluster::from_config(fake.config(), "p").unwrap();
    let held = cluster.acquire("p", "poolctl watch (pid 1 on here)", LEASE, None).await.unwrap();
    let seen = cluster.inspect("p").await.unwrap().expect("held");
    assert_eq!(seen.lease, Some(LEASE), "the record says its lease");
    // Renewed after the standby looked: the record it saw is gone, and nothing is taken over.
    cluster.renew("p", &held, LEASE).await.unwrap();
    let refused =
        cluster.acquire("p", "poolctl watch (pid 2 on there)", LEASE, Some(&seen)).await.unwrap_err();
    let LockError::Held { record, .. } = refused else { panic!("{refused}") };
    assert_ne!(*record, seen);
    assert_eq!(holder(&fake).as_deref(), Some("poolctl watch (pid 1 on here)"));
    // The record as it is now, named as the one that lapsed, is taken over.
    let taken = cluster.acquire("p", "poolctl watch (pid 2 on there)", LEASE, Some(&record)).await.unwrap();
    assert_eq!(holder(&fake).as_deref(), Some("poolctl watch (pid 2 on there)"));
    cluster.release("p", &taken).await.unwrap();
}
