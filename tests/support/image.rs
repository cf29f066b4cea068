//! poolctl's own image, built offline from the binary cargo built for these tests (the test
//! profile's, `CARGO_BIN_EXE_poolctl`) with deploy/Dockerfile.binary: the binary and the shared
//! libraries `ldd` lists, at their paths, in an image FROM scratch. Built at most once per test
//! process, and tagged by the binary's content, so that concurrent test processes of other
//! builds never run each other's. No test removes one (another process may be about to run
//! it); they carry a label to prune them by:
//! `docker image prune -a --filter label=poolctl-test.image`.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

/// The image repository; the tag is a digest of the binary.
pub const REPOSITORY: &str = "poolctl-test-poolctl";

/// The label every such image carries.
pub const LABEL: &str = "poolctl-test.image=poolctl";

/// The image's tag (`poolctl-test-poolctl:<digest>`), built on first use.
pub fn poolctl_image() -> Result<String, String> {
    static BUILT: OnceLock<Result<String, String>> = OnceLock::new();
    BUILT.get_or_init(build).clone()
}

fn build() -> Result<String, String> {
    let binary = Path::new(env!("CARGO_BIN_EXE_poolctl"));
    let bytes = std::fs::read(binary).map_err(|e| format!("read {}: {e}", binary.display()))?;
    let digest = Sha256::digest(&bytes);
    let tag = format!("{REPOSITORY}:{}", &format!("{digest:x}")[..16]);
    let ctx = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let rootfs = ctx.path().join("rootfs");
    place(binary, &rootfs.join("usr/local/bin/poolctl"))?;
    for library in libraries(binary)? {
        place(Path::new(&library), &rootfs.join(library.trim_start_matches('/')))?;
    }
    // What a distribution's image has and the binary may write to: /tmp and the Git cache.
    for dir in ["tmp", "var/cache/poolctl"] {
        let dir = rootfs.join(dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let sticky = std::os::unix::fs::PermissionsExt::from_mode(0o1777);
        std::fs::set_permissions(&dir, sticky).map_err(|e| format!("chmod {}: {e}", dir.display()))?;
    }
    let dockerfile = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/Dockerfile.binary");
    let out = Command::new("docker")
        .args(["build", "-q", "--label", LABEL, "-t", &tag, "-f"])
        .arg(&dockerfile)
        .arg(ctx.path())
        .output()
        .map_err(|e| format!("cannot run the docker CLI: {e}"))?;
    if !out.status.success() {
        return Err(format!("docker build {tag} failed:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(tag)
}

/// The absolute paths of the shared libraries `ldd` lists for `binary`, the loader included
/// (`linux-vdso.so.1` has none: the kernel provides it).
fn libraries(binary: &Path) -> Result<Vec<String>, String> {
    let out = Command::new("ldd").arg(binary).output().map_err(|e| format!("cannot run ldd: {e}"))?;
    if !out.status.success() {
        return Err(format!("ldd {}: {}", binary.display(), String::from_utf8_lossy(&out.stderr)));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // `libssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x...)`, `/lib64/ld-linux-x86-64.so.2 (0x...)`
    Ok(text
        .lines()
        .filter_map(|line| line.split_whitespace().find(|word| word.starts_with('/')))
        .map(str::to_owned)
        .collect())
}

/// Copies `from` (following symbolic links) to `to`, creating its parents.
fn place(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to.parent().expect("a parent"))
        .map_err(|e| format!("create {}: {e}", to.display()))?;
    std::fs::copy(from, to).map(drop).map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))
}
