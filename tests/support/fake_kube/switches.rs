//! Fault switches that act on connections and whole classes of requests rather than on one
//! request: a window of failing answers, a server that accepts and then says nothing, Nodes that
//! the API hides, watches it refuses; and what the connection layer saw (connections, failed TLS handshakes).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// Where a silent server stops talking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Silence {
    /// It answers.
    #[default]
    Off,
    /// It accepts the TCP connection and never starts the TLS handshake.
    AfterAccept,
    /// It completes the TLS handshake, reads the request and never answers it.
    AfterRequest,
}

pub struct Switches {
    /// Until when every request is answered with which status.
    fail: Mutex<Option<(Instant, u16)>>,
    silence: watch::Sender<Silence>,
    hidden: watch::Sender<bool>,
    /// Every watch is answered 403, as for credentials that may list but not watch.
    watches_refused: AtomicBool,
    connections: AtomicUsize,
    /// Watched, so that a test can wait for the server's side of a handshake its client
    /// already saw fail.
    handshake_failures: watch::Sender<Vec<String>>,
}

impl Default for Switches {
    fn default() -> Self {
        Self {
            fail: Mutex::new(None),
            silence: watch::channel(Silence::Off).0,
            hidden: watch::channel(false).0,
            watches_refused: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            handshake_failures: watch::channel(Vec::new()).0,
        }
    }
}

impl Switches {
    pub fn fail_for(&self, status: u16, window: Duration) {
        *self.fail.lock().expect("fail lock") = Some((Instant::now() + window, status));
    }

    /// The status to answer with now, if a failure window is open.
    pub fn failing(&self) -> Option<u16> {
        let mut fail = self.fail.lock().expect("fail lock");
        match *fail {
            Some((until, status)) if Instant::now() < until => Some(status),
            Some(_) => {
                *fail = None;
                None
            }
            None => None,
        }
    }

    pub fn set_silence(&self, silence: Silence) {
        self.silence.send_replace(silence);
    }

    pub fn silence(&self) -> Silence {
        *self.silence.borrow()
    }

    pub fn hide_nodes(&self, hidden: bool) {
        self.hidden.send_replace(hidden);
    }

    pub fn nodes_hidden(&self) -> bool {
        *self.hidden.borrow()
    }

    /// Resolves once Nodes are no longer hidden.
    pub fn nodes_shown(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.hidden.subscribe();
        async move {
            let _ = rx.wait_for(|h| !*h).await;
        }
    }

    pub fn refuse_watches(&self, refused: bool) {
        self.watches_refused.store(refused, Ordering::SeqCst);
    }

    pub fn watches_refused(&self) -> bool {
        self.watches_refused.load(Ordering::SeqCst)
    }

    pub fn connection_accepted(&self) {
        self.connections.fetch_add(1, Ordering::SeqCst);
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn handshake_failed(&self, error: String) {
        self.handshake_failures.send_modify(|failures| failures.push(error));
    }

    pub fn handshake_failures(&self) -> Vec<String> {
        self.handshake_failures.borrow().clone()
    }

    /// The handshake failures, once there are at least `n` (callers bound the wait).
    pub async fn at_least_handshake_failures(&self, n: usize) -> Vec<String> {
        let mut failures = self.handshake_failures.subscribe();
        // The sender lives as long as `self`: the wait ends only with the condition.
        let seen = failures.wait_for(|f| f.len() >= n).await.expect("the switches outlive the wait");
        seen.clone()
    }
}
