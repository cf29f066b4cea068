//! A tiny local image for the kubelet tests, and a guard that removes a test's containers.
//!
//! No image can be pulled here, so the image is built FROM scratch around Debian's static
//! busybox. Containers are made with the docker CLI: the cleanup must also work from `Drop`
//! while a test panics, where no async runtime can be relied on.

use std::process::Command;

/// The one test image of the suite (see `support::docker`).
pub const TEST_IMAGE: &str = crate::support::docker::IMAGE;

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().expect("run the docker CLI")
}

/// Builds the suite's test images unless this process already did. Panics if that fails.
pub fn ensure_test_image() {
    crate::support::docker::images().expect("the test images build");
}

/// The containers of one test run; all of them are removed on drop, even after a panic.
pub struct TestContainers {
    /// `poolctl.dev/test-run=<id>`: the kubelet's `run_label`.
    pub run_label: String,
}

impl TestContainers {
    pub fn new(test_name: &str) -> Self {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let id = format!("{test_name}-{}-{nanos:x}", std::process::id());
        Self { run_label: format!("poolctl.dev/test-run={id}") }
    }

    /// Starts a pool container named `name` from the test image; returns its id.
    pub fn run(&self, pool: &str, name: &str) -> String {
        ensure_test_image();
        let pool_label = format!("{}={pool}", super::POOL_LABEL);
        let out = docker(&[
            "run",
            "-d",
            "--name",
            name,
            "--hostname",
            name,
            "--label",
            &pool_label,
            "--label",
            &self.run_label,
            TEST_IMAGE,
        ]);
        assert!(out.status.success(), "docker run failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Stops a container at once (busybox sleep as PID 1 ignores SIGTERM).
    // A method, though the name is all it needs, so that tests act on containers through the
    // guard that started them and removes them.
    #[allow(clippy::unused_self)]
    pub fn kill(&self, name: &str) {
        let out = docker(&["kill", name]);
        assert!(out.status.success(), "docker kill failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    #[allow(clippy::unused_self)] // as for `kill`
    pub fn remove(&self, name: &str) {
        let out = docker(&["rm", "-f", name]);
        assert!(out.status.success(), "docker rm failed: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for TestContainers {
    fn drop(&mut self) {
        let filter = format!("label={}", self.run_label);
        let out = docker(&["ps", "-aq", "--filter", &filter]);
        let ids = String::from_utf8_lossy(&out.stdout);
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f"];
            args.extend(ids);
            let _ = docker(&args);
        }
    }
}
