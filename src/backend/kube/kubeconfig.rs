//! Reading kubeconfigs the way kubectl does, where kube-rs differs: files missing from a
//! `KUBECONFIG` list are skipped, `~` and `$HOME` are expanded, a bearer token file's trailing
//! newline is trimmed, and an exec credential plugin runs once per connection, its failure told
//! in a few lines (its name, exit status, the end of its stderr and its `installHint`) rather
//! than as a dump of its whole environment.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kube::config::{AuthInfo, ExecInteractiveMode, Kubeconfig, KubeconfigError};

use crate::backend::BackendError;
use crate::home::{expand_home, home_dir};

/// How many lines of a failed plugin's stderr an error keeps.
const STDERR_LINES: usize = 5;

/// The kubeconfig a pool names, else `$KUBECONFIG` (a list, whose missing files are skipped),
/// else `~/.kube/config`. A pool's relative path was made absolute, relative to its pool file,
/// when the source was read; one from `$KUBECONFIG` is relative to the current directory.
pub(super) fn load(path: Option<&str>) -> Result<Kubeconfig, BackendError> {
    let failed = |what: String| BackendError::Failed(what);
    if let Some(path) = path {
        // The caller names the pool's kubeconfig already: said once, the cause alone follows.
        return read(&expand_home(path))
            .map_err(|why| failed(format!("the kubeconfig cannot be read: {why}")));
    }
    let Some(listed) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) else {
        let home = home_dir().unwrap_or_default();
        let path = home.join(".kube").join("config");
        return read(&path)
            .map_err(|why| failed(format!("cannot read the kubeconfig {}: {why}", path.display())));
    };
    let paths: Vec<PathBuf> = std::env::split_paths(&listed).filter(|p| !p.as_os_str().is_empty()).collect();
    let mut merged: Option<Kubeconfig> = None;
    for path in paths.iter().filter(|p| p.exists()) {
        let next = read(path)
            .map_err(|why| failed(format!("cannot read the kubeconfig {}: {why}", path.display())))?;
        merged = Some(match merged {
            None => next,
            Some(kc) => kc
                .merge(next)
                .map_err(|e| failed(format!("cannot merge kubeconfig {}: {e}", path.display())))?,
        });
    }
    merged.ok_or_else(|| {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        failed(format!("KUBECONFIG names no file that exists ({})", names.join(", ")))
    })
}

/// Read one kubeconfig file; the error is why, without the path (kube-rs's own repeats it,
/// quoted twice), for the caller to name it once.
fn read(path: &Path) -> Result<Kubeconfig, String> {
    Kubeconfig::read_from(path).map_err(|e| match e {
        KubeconfigError::ReadConfig(io, _) if io.kind() == std::io::ErrorKind::NotFound => {
            "no such file".to_owned()
        }
        KubeconfigError::ReadConfig(io, _) => io.to_string(),
        other => other.to_string(),
    })
}

/// Settle the credentials of `context`'s user before kube-rs sees them: a token file is read
/// and trimmed into a token, and an exec plugin is run once, its token kept.
pub(super) fn resolve_credentials(kc: &mut Kubeconfig, context: &str) -> Result<(), BackendError> {
    let context = kc.contexts.iter().find(|c| c.name == context).and_then(|c| c.context.as_ref());
    let user = context.and_then(|c| c.user.clone());
    let cluster_name = context.map(|c| c.cluster.clone());
    let cluster = cluster_name
        .and_then(|name| kc.clusters.iter().find(|c| c.name == name))
        .and_then(|c| c.cluster.as_ref())
        .map(exec_cluster_info);
    let Some(user) = user else { return Ok(()) };
    let Some(auth) = kc.auth_infos.iter_mut().find(|a| a.name == user).and_then(|a| a.auth_info.as_mut())
    else {
        return Ok(());
    };
    if auth.token.is_none()
        && let Some(file) = auth.token_file.take()
    {
        let file = expand_home(&file);
        let token = std::fs::read_to_string(&file).map_err(|e| {
            BackendError::Failed(format!("cannot read the token file {}: {e}", file.display()))
        })?;
        auth.token = Some(token.trim().to_owned().into());
    }
    run_exec_once(auth, cluster)
}

/// The cluster as `KUBERNETES_EXEC_INFO` gives it to a plugin that asks for it
/// (`provideClusterInfo`), as client-go does.
fn exec_cluster_info(cluster: &kube::config::Cluster) -> serde_json::Value {
    let mut info = serde_json::json!({ "server": cluster.server });
    if let Some(ca) = &cluster.certificate_authority_data {
        info["certificate-authority-data"] = ca.clone().into();
    }
    if let Some(insecure) = cluster.insecure_skip_tls_verify {
        info["insecure-skip-tls-verify"] = insecure.into();
    }
    if let Some(config) =
        cluster.extensions.iter().flatten().find(|e| e.name == "client.authentication.k8s.io/exec")
    {
        info["config"] = config.extension.clone();
    }
    info
}

/// Run the user's exec credential plugin and keep the token it gives, so that kube-rs does not
/// run it again for every part of the client it builds, and so that its failure is told here, in
/// a few lines (kube-rs quotes the whole `KUBERNETES_EXEC_INFO`, the cluster's CA included). A
/// plugin that answers with a client certificate is left to kube-rs after this first run proved
/// it works.
fn run_exec_once(auth: &mut AuthInfo, cluster: Option<serde_json::Value>) -> Result<(), BackendError> {
    let Some(exec) = &auth.exec else { return Ok(()) };
    let Some(command) = exec.command.clone() else { return Ok(()) };
    let mut cmd = Command::new(&command);
    cmd.args(exec.args.iter().flatten());
    for var in exec.env.iter().flatten() {
        if let (Some(name), Some(value)) = (var.get("name"), var.get("value")) {
            cmd.env(name, value);
        }
    }
    let api_version = exec.api_version.clone().unwrap_or_else(|| "client.authentication.k8s.io/v1".into());
    let interactive = exec.interactive_mode != Some(ExecInteractiveMode::Never);
    let mut info = serde_json::json!({
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": { "interactive": interactive },
    });
    if exec.provide_cluster_info
        && let Some(cluster) = cluster
    {
        info["spec"]["cluster"] = cluster;
    }
    cmd.env("KUBERNETES_EXEC_INFO", info.to_string());
    cmd.stdin(if interactive { Stdio::inherit() } else { Stdio::null() });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let hint = exec.install_hint.as_deref().map(|h| format!("\n  {}", h.trim())).unwrap_or_default();
    let out = cmd.output().map_err(|e| {
        // As kubectl says it: the one thing to do is to install it.
        BackendError::Failed(if e.kind() == std::io::ErrorKind::NotFound {
            format!("the kubeconfig's credential plugin {command} is not installed (not found in PATH){hint}")
        } else {
            format!("the kubeconfig's credential plugin {command} cannot be started: {e}{hint}")
        })
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(STDERR_LINES)..].join("\n    ");
        let status =
            out.status.code().map_or_else(|| "killed by a signal".to_owned(), |c| format!("exit status {c}"));
        let said = if tail.is_empty() { String::new() } else { format!(":\n    {tail}") };
        return Err(BackendError::Failed(format!(
            "the kubeconfig's credential plugin {command} failed ({status}){said}{hint}"
        )));
    }
    let credential: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        BackendError::Failed(format!(
            "the kubeconfig's credential plugin {command} printed no ExecCredential: {e}"
        ))
    })?;
    let status = &credential["status"];
    if let Some(token) = status["token"].as_str().filter(|_| status["clientCertificateData"].is_null()) {
        auth.token = Some(token.trim().to_owned().into());
        auth.exec = None;
    }
    Ok(())
}
