//! `poolctl watch`: serve the probes, metrics and receivers when asked to, then run the
//! [`crate::watch`] loop until a signal.

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::mpsc;
use tracing::info;

use super::common::{NOTIFY_FLUSH, notifier};
use super::exit::Exit;
use crate::config::WatchConfig;
use crate::report::{Probes, Receivers, Secret, serve};

/// The variable that may hold the receivers' secret instead of `--hook-secret FILE` (a
/// Kubernetes Secret given to the container as a variable).
const HOOK_SECRET_ENV: &str = "POOLCTL_HOOK_SECRET";

/// Run `poolctl watch` until a signal.
pub(super) async fn watch_command(config: WatchConfig) -> Result<Exit> {
    let probes = Arc::new(Probes::new(config.resync));
    // One waiting push is the same news as many: the loop looks once for all of them.
    let (pushes_tx, pushes) = mpsc::channel(1);
    if let Some(addr) = config.listen {
        crate::metrics::install();
        let secret = hook_secret(&config)?;
        let listener =
            tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
        let addr = listener.local_addr().unwrap_or(addr);
        let hooks = if secret.is_some() { " and the receivers under /hooks/" } else { "" };
        info!("serving /metrics, /healthz and /readyz{hooks} on http://{addr}");
        tokio::spawn(serve(listener, Arc::clone(&probes), Receivers::new(secret, pushes_tx)));
    }
    let notifier = notifier(config.notify.as_ref())?;
    let watched = crate::watch::run(config, probes, notifier.clone(), pushes).await;
    if let Some(notifier) = notifier {
        notifier.close(NOTIFY_FLUSH).await;
    }
    watched?;
    Ok(Exit::Success)
}

/// The receivers' secret: `--hook-secret FILE`, else [`HOOK_SECRET_ENV`], else none.
fn hook_secret(config: &WatchConfig) -> Result<Option<Secret>> {
    if let Some(file) = &config.hook_secret {
        return Ok(Some(Secret::read(file).context("--hook-secret")?));
    }
    let Some(value) = std::env::var_os(HOOK_SECRET_ENV) else { return Ok(None) };
    let what = format!("the variable {HOOK_SECRET_ENV}");
    Ok(Some(Secret::new(value.into_encoded_bytes(), &what)?))
}
