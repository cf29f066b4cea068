//! Waiting for what only a running container can bring about (its kubelet turning the Node
//! Ready), without waiting out the timeout once the container is gone.

use std::future::Future;

use crate::backend::{BackendError, Cluster, Containers};

use super::{Executor, StepError};

impl<C: Containers, K: Cluster> Executor<'_, C, K> {
    /// Run `wait` on behalf of container `name`, and fail at once, saying how it ended, if the
    /// container stops running first. Should the container itself become impossible to watch
    /// (the daemon is gone), `wait` runs on alone under its own deadline.
    pub(super) async fn while_running<T>(
        &self,
        name: &str,
        wait: impl Future<Output = Result<T, BackendError>>,
    ) -> Result<T, StepError> {
        let stopped = async {
            match self.containers.wait_stopped(name).await {
                Ok(how) => how,
                Err(e) => {
                    tracing::warn!("cannot watch container {name} ({e}); waiting without it");
                    std::future::pending().await
                }
            }
        };
        tokio::select! {
            // A container that stopped is what matters even if the wait ended at the same
            // moment: its Node cannot serve.
            biased;
            how = stopped => Err(StepError::ContainerStopped { name: name.to_owned(), how }),
            result = wait => Ok(result?),
        }
    }
}
