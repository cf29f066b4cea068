//! The fake API server's TLS and its fault switches, seen through the plain kube client: what
//! other tests rely on when they turn them on.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::support::fake_kube::{Access, ClientCert, FakeKube, FakeKubeOptions, Trust};

/// Guards against a hang only; no assertion depends on it.
const LIMIT: Duration = Duration::from_secs(60);

fn fake() -> FakeKube {
    FakeKube::start(FakeKubeOptions::default())
}

#[tokio::test]
async fn the_server_speaks_tls_only_with_a_client_certificate_of_its_ca() {
    let fk = fake();
    fk.add_node("n1", true);
    assert!(fk.url().starts_with("https://127.0.0.1:"));
    let nodes: Api<Node> = Api::all(fk.client());
    assert_eq!(nodes.list(&ListParams::default()).await.unwrap().items.len(), 1);
    assert_eq!(fk.handshake_failures(), Vec::<String>::new());

    let other_ca = Access { trust: Trust::OtherCa, ..Access::default() };
    let distrusting: Api<Node> = Api::all(kube::Client::try_from(fk.config_with(other_ca)).unwrap());
    distrusting.list(&ListParams::default()).await.unwrap_err();
    // Recorded before the next handshake starts, so that the two are in order.
    tokio::time::timeout(LIMIT, fk.handshake_failures_once(1)).await.expect("recorded");

    let stranger = Access { client: ClientCert::UnknownCa, ..Access::default() };
    let refused: Api<Node> = Api::all(kube::Client::try_from(fk.config_with(stranger)).unwrap());
    refused.list(&ListParams::default()).await.unwrap_err();

    // The server saw both handshakes fail, and no request from either.
    let failures = tokio::time::timeout(LIMIT, fk.handshake_failures_once(2)).await.expect("recorded");
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(failures[0].contains("received fatal alert"), "the client refused the server: {failures:?}");
    assert!(failures[1].contains("invalid peer certificate"), "the server refused the client: {failures:?}");
    assert_eq!(fk.requests().len(), 1);
    assert_eq!(fk.connections(), 3);
}

#[tokio::test]
async fn a_failure_window_answers_every_request_with_its_status() {
    let fk = fake();
    fk.add_node("n1", true);
    fk.fail_for(503, LIMIT);
    let nodes: Api<Node> = Api::all(fk.client());
    let err = nodes.get("n1").await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 503), "{err:?}");
    let err = nodes.list(&ListParams::default()).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 503), "{err:?}");
    let statuses: Vec<u16> = fk.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [503, 503]);
}

#[tokio::test]
async fn hidden_nodes_are_absent_to_every_request_until_shown() {
    let fk = fake();
    fk.add_node_with_labels("n1", true, &[("poolctl.dev/pool", "workers")]);
    let nodes: Api<Node> = Api::all(fk.client());
    fk.hide_nodes(true);

    assert!(nodes.list(&ListParams::default()).await.unwrap().items.is_empty());
    assert!(
        nodes.list(&ListParams::default().labels("poolctl.dev/pool=workers")).await.unwrap().items.is_empty()
    );
    assert!(nodes.get_opt("n1").await.unwrap().is_none());
    let cordon = Patch::Merge(json!({"spec": {"unschedulable": true}}));
    let err = nodes.patch("n1", &PatchParams::default(), &cordon).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 404), "{err:?}");
    // A watch sees nothing while hidden, and ends once the Nodes are shown, so that a client
    // lists again.
    let wp = WatchParams::default().fields("metadata.name=n1").timeout(300);
    let mut stream = nodes.watch(&wp, "0").await.unwrap().boxed();
    let (ended, ()) = tokio::join!(
        async { tokio::time::timeout(LIMIT, stream.next()).await.expect("the watch ends") },
        async {
            fk.wait_until(|s| {
                s.requests().iter().any(|r| r.query.as_deref().is_some_and(|q| q.contains("watch")))
            })
            .await;
            fk.hide_nodes(false);
        }
    );
    assert!(ended.is_none(), "no event while hidden: {ended:?}");

    // Shown again: the Node was there all along, untouched.
    let node = nodes.get("n1").await.unwrap();
    assert_eq!(node.spec.unwrap().unschedulable, None);
    let mut stream = nodes.watch(&wp, "0").await.unwrap().boxed();
    let added = tokio::time::timeout(LIMIT, stream.next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(added, WatchEvent::Added(_)), "{added:?}");
}
