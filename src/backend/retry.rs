//! The one backoff policy of poolctl: exponential, doubling from a first delay up to a cap. The
//! Kubernetes client retries transient API failures with it, the drain waits on budgets and
//! pods with it, and watch spaces failed reconciles, source reads and event subscriptions by it.

use std::time::Duration;

use tokio::time::{Instant, sleep_until};

/// The delay after `failures` consecutive failures: `first`, then doubling, up to `cap`. Zero
/// failures wait nothing.
pub fn delay(failures: u32, first: Duration, cap: Duration) -> Duration {
    match failures {
        0 => Duration::ZERO,
        n => first.saturating_mul(1 << (n - 1).min(16)).min(cap),
    }
}

/// A backoff in progress: each wait is [`delay`] of one more failure.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    /// For API calls that failed: from 200ms up to 5s.
    pub fn api() -> Self {
        Self::new(Duration::from_millis(200), Duration::from_secs(5))
    }

    /// For waits on the cluster (a budget refilling, a pod going), where every second of
    /// oversleep is a second added to the rollout: from 100ms up to `max`.
    pub fn capped(max: Duration) -> Self {
        Self::new(Duration::from_millis(100), max)
    }

    pub fn new(first: Duration, max: Duration) -> Self {
        Self { first, max, failures: 0 }
    }

    /// How long the next wait will be.
    pub fn peek(&self) -> Duration {
        delay(self.failures + 1, self.first, self.max)
    }

    /// Wait the next delay.
    pub async fn wait(&mut self) {
        self.wait_until(Instant::now() + self.peek()).await;
    }

    /// Wait the next delay, but not past `deadline`.
    pub async fn wait_until(&mut self, deadline: Instant) {
        sleep_until((Instant::now() + self.peek()).min(deadline)).await;
        self.failures = self.failures.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap() {
        let secs: Vec<u64> =
            (1..=8).map(|n| delay(n, Duration::from_secs(1), Duration::from_secs(60)).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(delay(1000, Duration::from_secs(1), Duration::from_secs(60)), Duration::from_secs(60));
        assert_eq!(delay(5, Duration::from_secs(1), Duration::from_secs(3)), Duration::from_secs(3));
        assert_eq!(delay(0, Duration::from_secs(1), Duration::from_secs(3)), Duration::ZERO);
    }

    #[test]
    fn a_backoff_starts_at_its_first_delay() {
        assert_eq!(Backoff::api().peek(), Duration::from_millis(200));
        assert_eq!(Backoff::capped(Duration::from_secs(2)).peek(), Duration::from_millis(100));
    }
}
