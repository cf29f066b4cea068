//! `poolctl watch`: serve the probes and metrics when asked to, then run the
//! [`crate::watch`] loop until a signal.

use std::sync::Arc;

use anyhow::{Context, Result};
use tracing::info;

use super::exit::Exit;
use crate::config::WatchConfig;
use crate::report::{Notifier, Probes, serve};

/// Run `poolctl watch` until a signal.
pub(super) async fn watch_command(config: WatchConfig) -> Result<Exit> {
    let probes = Arc::new(Probes::new(config.resync));
    if let Some(addr) = config.listen {
        crate::metrics::install();
        let listener =
            tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
        let addr = listener.local_addr().unwrap_or(addr);
        info!("serving /metrics, /healthz and /readyz on http://{addr}");
        tokio::spawn(serve(listener, Arc::clone(&probes)));
    }
    let notifier = config.notify.clone().map(Notifier::start);
    crate::watch::run(config, probes, notifier).await?;
    Ok(Exit::Success)
}
