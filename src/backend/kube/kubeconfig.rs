//! Reading kubeconfigs the way kubectl does, where kube-rs differs: files missing from a
//! `KUBECONFIG` list are skipped, `~` and `$HOME` are expanded, a bearer token file's trailing
//! newline is trimmed, and an exec credential plugin runs once per connection, its failure told
//! in a few lines (its name, exit status, the end of its stderr and its `installHint`) rather
//! than as a dump of its whole environment.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use kube::config::{AuthInfo, ExecInteractiveMode, Kubeconfig};

use crate::backend::BackendError;
use crate::home::{expand_home, home_dir};

/// How many lines of a failed plugin's stderr an error keeps.
const STDERR_LINES: usize = 5;

/// The kubeconfig a pool names, else `$KUBECONFIG` (a list, whose missing files are skipped),
/// else `~/.kube/config`. A relative path is relative to the current directory, as kubectl's
/// `--kubeconfig` is.
pub(super) fn load(path: Option<&str>) -> Result<Kubeconfig, BackendError> {
    let failed = |what: String| BackendError::Failed(what);
    if let Some(path) = path {
        let path = expand_home(path);
        return Kubeconfig::read_from(&path)
            .map_err(|e| failed(format!("cannot read kubeconfig {}: {e}", path.display())));
    }
    let listed = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty());
    let Some(listed) = listed else {
        let home = home_dir().unwrap_or_default();
        let path = home.join(".kube").join("config");
        return Kubeconfig::read_from(&path)
            .map_err(|e| failed(format!("cannot read kubeconfig {}: {e}", path.display())));
    };
    let paths: Vec<PathBuf> = std::env::split_paths(&listed).filter(|p| !p.as_os_str().is_empty()).collect();
    let mut merged: Option<Kubeconfig> = None;
    for path in paths.iter().filter(|p| p.exists()) {
        let next = Kubeconfig::read_from(path)
            .map_err(|e| failed(format!("cannot read kubeconfig {}: {e}", path.display())))?;
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

/// Settle the credentials of `context`'s user before kube-rs sees them: a token file is read
/// and trimmed into a token, and an exec plugin is run once, its token kept.
pub(super) fn resolve_credentials(kc: &mut Kubeconfig, context: &str) -> Result<(), BackendError> {
    let user = kc
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone());
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
    run_exec_once(auth)
}

/// Run the user's exec credential plugin and keep the token it gives, so that kube-rs does not
/// run it again for every part of the client it builds. A plugin that needs the cluster's
/// details, or answers with a client certificate, is left to kube-rs after this first run
/// proved it works.
fn run_exec_once(auth: &mut AuthInfo) -> Result<(), BackendError> {
    let Some(exec) = &auth.exec else { return Ok(()) };
    let Some(command) = exec.command.clone() else { return Ok(()) };
    if exec.provide_cluster_info {
        return Ok(());
    }
    let mut cmd = Command::new(&command);
    cmd.args(exec.args.iter().flatten());
    for var in exec.env.iter().flatten() {
        if let (Some(name), Some(value)) = (var.get("name"), var.get("value")) {
            cmd.env(name, value);
        }
    }
    let api_version = exec.api_version.clone().unwrap_or_else(|| "client.authentication.k8s.io/v1".into());
    let interactive = exec.interactive_mode != Some(ExecInteractiveMode::Never);
    let info = serde_json::json!({
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": { "interactive": interactive },
    });
    cmd.env("KUBERNETES_EXEC_INFO", info.to_string());
    cmd.stdin(if interactive { Stdio::inherit() } else { Stdio::null() });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let hint = exec.install_hint.as_deref().map(|h| format!("\n  {}", h.trim())).unwrap_or_default();
    let out = cmd.output().map_err(|e| {
        BackendError::Failed(format!(
            "the kubeconfig's credential plugin {command} cannot be started: {e}{hint}"
        ))
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
