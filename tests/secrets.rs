//! No secret in any output (issue 31): a bootstrap that prints a `valueFrom` value leaves it in
//! no line of `apply` or `watch` (their logs at `-v` included), no Kubernetes Event and no
//! webhook notification. (A Git URL's user info is checked with the other source errors, in
//! `cli.rs`.)

use serde_json::Value;

use crate::support::cli::{Process, Run, Stream};
use crate::support::rig::{LIMIT, Rig};

/// The variable poolctl reads the secret from, and its value, which must show nowhere.
const VAR: &str = "POOLCTL_SECRETS_TEST_TOKEN";
const SECRET: &str = "s3cret-bootstrap-value-31";

#[tokio::test]
async fn a_failing_bootstrap_that_prints_a_secret_leaves_it_in_no_output_event_or_webhook() {
    let Some(rig) = Rig::new().await else { return };
    // The first command prints the secret and succeeds (its output shows at -v); the second
    // prints it and fails (its output goes into the error, the Event and the notification).
    let spec = rig
        .spec()
        .replicas(1)
        .env_from("TOKEN", VAR)
        .bootstrap(&["sh", "-c", "echo \"ready with $TOKEN\""], None)
        .bootstrap(&["sh", "-c", "echo \"cannot join with $TOKEN\" >&2; exit 3"], None);
    rig.write(&spec);

    let apply = Run::of(rig.s.command("apply", &["--yes", "-v"]).env(VAR, SECRET));
    let said = format!("{}{}", apply.stdout, apply.stderr);
    assert_eq!(apply.code, 1, "the bootstrap fails:\n{said}");
    // The output is there, redacted: what would have leaked did reach the output.
    assert!(said.contains("ready with (sensitive)"), "{said}");
    assert!(said.contains("cannot join with (sensitive)"), "{said}");
    assert!(!said.contains(SECRET), "apply printed the secret:\n{said}");

    let (url, docs) = crate::service::receiver().await;
    let mut command = rig.s.command("watch", &["-v", "--notify", &url]);
    command.env(VAR, SECRET);
    let mut watch = Process::spawn(command);
    let failed = || {
        let docs = docs.lock().unwrap();
        docs.iter().find(|d| d["result"] == "failed").cloned()
    };
    let heard = async {
        loop {
            if let Some(notice) = failed() {
                return notice;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let notice = tokio::time::timeout(LIMIT, heard).await.expect("a notification says the rollout failed");
    watch.signal("TERM");
    let said = watch.output(Stream::Stderr) + &watch.output(Stream::Stdout);
    assert!(said.contains("cannot join with (sensitive)"), "{said}");
    assert!(!said.contains(SECRET), "watch printed the secret:\n{said}");

    assert!(
        notice["error"].as_str().is_some_and(|e| e.contains("cannot join with (sensitive)")),
        "{notice:#}"
    );
    let sent = Value::Array(docs.lock().unwrap().clone()).to_string();
    assert!(!sent.contains(SECRET), "a notification holds the secret: {sent}");

    // `kubectl get events` tells the failures (from apply and from watch), without the value.
    let events = rig.fake.store().k8s_events().all();
    let failures: Vec<&str> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("RolloutFailed"))
        .filter_map(|e| e.note.as_deref())
        .collect();
    assert!(failures.len() >= 2, "{events:#?}");
    assert!(failures.iter().all(|n| n.contains("cannot join with (sensitive)")), "{failures:#?}");
    let recorded = serde_json::to_string(&events).expect("Events serialize");
    assert!(!recorded.contains(SECRET), "an Event holds the secret: {recorded}");
}
