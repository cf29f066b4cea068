//! Every Docker call is bounded: against a fake daemon on TCP that answers the version
//! negotiation and then stalls, in the one place bollard's own timeout does not reach (a body
//! that never comes after the headers), or that accepts connections and says nothing at all.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use poolctl::backend::docker::{DockerBackend, Endpoint, MAX_CALLS_IN_FLIGHT, Timeouts};
use poolctl::backend::{BackendError, Containers};
use serde_json::json;

/// Guards against a hang only; no assertion depends on it.
const LIMIT: Duration = Duration::from_secs(60);

const SHORT: Timeouts = Timeouts {
    connect: Duration::from_secs(1),
    call: Duration::from_secs(1),
    pull_stall: Duration::from_secs(1),
};

/// A daemon that negotiates the API version and has no image, then answers every other
/// request with headers and a body that never ends.
async fn stalling_daemon(listener: tokio::net::TcpListener) {
    let app = axum::Router::new().fallback(|req: Request| async move {
        let path = req.uri().path();
        if path.ends_with("/version") {
            let version = json!({"Version": "27.0.0", "ApiVersion": "1.47", "MinAPIVersion": "1.24"});
            return axum::Json(version).into_response();
        }
        if path.contains("/images/") && path.ends_with("/json") {
            let missing = json!({"message": "No such image"});
            return (axum::http::StatusCode::NOT_FOUND, axum::Json(missing)).into_response();
        }
        let never = futures::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
        Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Body::from_stream(never))
            .expect("a response")
    });
    axum::serve(listener, app).await.expect("the fake daemon serves");
}

async fn listener() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let host = format!("tcp://{}", listener.local_addr().expect("an address"));
    (listener, host)
}

#[tokio::test]
async fn a_daemon_that_stalls_after_the_headers_fails_the_call_naming_it() {
    let (listener, host) = listener().await;
    let server = tokio::spawn(stalling_daemon(listener));
    let docker =
        DockerBackend::connect(&Endpoint::at(&host), SHORT).await.expect("the version is negotiated");

    let err = tokio::time::timeout(LIMIT, docker.list()).await.expect("the call ends").unwrap_err();
    assert!(matches!(err, BackendError::Unreachable { .. }), "{err:?}");
    assert_eq!(err.to_string(), format!("cannot reach Docker at {host}: list containers: no answer in time"));

    let err = tokio::time::timeout(LIMIT, docker.network_exists("p", "kind"))
        .await
        .expect("the call ends")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("cannot reach Docker at {host}: inspect network kind: no answer in time")
    );

    // A pull may take long, but not without progress.
    let err = tokio::time::timeout(LIMIT, docker.ensure_image("p", "x:1"))
        .await
        .expect("the pull ends")
        .unwrap_err();
    assert!(matches!(err, BackendError::Timeout { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("pull image x:1: no progress from Docker at {host}: timed out after 1s")
    );
    server.abort();
}

#[tokio::test]
async fn a_daemon_that_accepts_and_never_answers_fails_the_connection() {
    let (listener, host) = listener().await;
    // Accept, keep the sockets, read nothing.
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let err = tokio::time::timeout(LIMIT, DockerBackend::connect(&Endpoint::at(&host), SHORT))
        .await
        .expect("the connection ends")
        .unwrap_err();
    assert_eq!(err.to_string(), format!("cannot reach Docker at {host}: no answer in time"));
    server.abort();
}

#[tokio::test]
async fn no_more_than_a_bounded_number_of_calls_are_in_flight_to_one_daemon() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    const ASKED: usize = 100;
    // A daemon that answers one inspect each time as many are in flight as poolctl may send
    // (and all of them once every one was asked): with the bound, that many and no more are
    // ever in flight; without it, the 100 asked for side by side arrive together.
    struct Gate {
        arrived: AtomicUsize,
        in_flight: AtomicUsize,
        most: AtomicUsize,
        answers: tokio::sync::Semaphore,
    }
    let gate = Arc::new(Gate {
        arrived: AtomicUsize::new(0),
        in_flight: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        answers: tokio::sync::Semaphore::new(0),
    });
    let (listener, host) = listener().await;
    let at_daemon = Arc::clone(&gate);
    let app = axum::Router::new().fallback(move |req: Request| {
        let gate = Arc::clone(&at_daemon);
        async move {
            if req.uri().path().ends_with("/version") {
                let version = json!({"Version": "27.0.0", "ApiVersion": "1.47", "MinAPIVersion": "1.24"});
                return axum::Json(version).into_response();
            }
            let now = gate.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            gate.most.fetch_max(now, Ordering::SeqCst);
            if gate.arrived.fetch_add(1, Ordering::SeqCst) + 1 == ASKED {
                gate.answers.add_permits(ASKED);
            } else if now >= MAX_CALLS_IN_FLIGHT {
                gate.answers.add_permits(1);
            }
            gate.answers.acquire().await.expect("never closed").forget();
            gate.in_flight.fetch_sub(1, Ordering::SeqCst);
            let missing = json!({"message": "No such container"});
            (axum::http::StatusCode::NOT_FOUND, axum::Json(missing)).into_response()
        }
    });
    let daemon = tokio::spawn(async move { axum::serve(listener, app).await });
    let docker = DockerBackend::connect(&Endpoint::at(&host), Timeouts::default()).await.expect("connect");
    let names: Vec<String> = (0..ASKED).map(|i| format!("c{i}")).collect();
    let asks = names.iter().map(|name| docker.may_run(name));
    let answers =
        tokio::time::timeout(LIMIT, futures::future::join_all(asks)).await.expect("every call ends");
    assert!(answers.iter().all(|a| matches!(a, Ok(false))), "{answers:?}");
    assert_eq!(gate.most.load(Ordering::SeqCst), MAX_CALLS_IN_FLIGHT);
    daemon.abort();
}
