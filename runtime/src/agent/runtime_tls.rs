//! Fleet mode's hand-over to the runtime (docs/agent.md, "smolvm's fleet mode (mTLS)"): the
//! node certificate, its key and the CAs of its clients (the fleet CA, for the controller, and
//! the node CA, for the agent) copied to where smolvm reads them, readable by
//! the runtime's group and nobody else. Done at every registration and start.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::config::RuntimeTlsExport;
use crate::drivers::driver::ClientTlsFiles;
use crate::drivers::smolvm::transport::issuers_after_leaf;
use crate::file_error::FileError;

/// The file smolvm's `SMOLVM_SERVE_TLS_CERT` names in [`RuntimeTlsExport::dir`].
pub const RUNTIME_CERT_FILE: &str = "cert.pem";
/// The file `SMOLVM_SERVE_TLS_KEY` names (mode 0640, group [`RuntimeTlsExport::gid`]).
pub const RUNTIME_KEY_FILE: &str = "key.pem";
/// The file `SMOLVM_SERVE_TLS_CLIENT_CA` names: the fleet CA.
pub const RUNTIME_CA_FILE: &str = "ca.pem";

/// Fleet mode: copies the node certificate, its key and the fleet CA (`identity`, in the state
/// directory) to where smolvm reads them (docs/agent.md). The directory is 0750 and the key
/// 0640, both with the runtime's group when one is configured, so smolvm (running as its own
/// user) can read the key and nobody else can; each file is replaced atomically, never seen
/// half written. Nothing to do before the first certificate arrives.
pub fn export_runtime_tls(
    identity: &ClientTlsFiles,
    tls: &RuntimeTlsExport,
) -> Result<(), FileError> {
    let read = |path: &Path| match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FileError::doing("reading", path)(e)),
    };
    let (Some(cert), Some(key), Some(ca)) = (
        read(&identity.cert)?,
        read(&identity.key)?,
        read(&identity.ca)?,
    ) else {
        return Ok(());
    };
    let dir = &tls.dir;
    std::fs::create_dir_all(dir).map_err(FileError::doing("creating", dir))?;
    set_owner_and_mode(dir, tls.gid, 0o750)?;
    // smolvm takes client certificates of the fleet CA (the controller's) and of the node CA
    // (the agent's own, whose issuer the controller sends after it in the chain).
    let mut ca = ca;
    ca.extend_from_slice(issuers_after_leaf(&String::from_utf8_lossy(&cert)).as_bytes());
    for (name, bytes, mode) in [
        (RUNTIME_KEY_FILE, &key, 0o640),
        (RUNTIME_CERT_FILE, &cert, 0o644),
        (RUNTIME_CA_FILE, &ca, 0o644),
    ] {
        let path = dir.join(name);
        crate::atomic_file::write_for_group(&path, bytes, mode, tls.gid)
            .map_err(FileError::doing("writing", &path))?;
    }
    tracing::info!(dir = %dir.display(), gid = ?tls.gid, "node certificate, key and CA kept for the runtime");
    if let Some(blocked) = untraversable_ancestor(dir, tls.gid) {
        tracing::warn!(
            dir = %dir.display(),
            blocked = %blocked.display(),
            "the runtime's group cannot reach VM_RUNTIME_TLS_DIR through this directory: smolvm will not read its certificate (place VM_RUNTIME_TLS_DIR elsewhere, docs/agent.md)"
        );
    }
    Ok(())
}

/// The first directory above `dir` that neither everyone nor group `gid` may traverse, if
/// any: a 0700 state directory (the packaged unit's) keeps smolvm away from the files.
fn untraversable_ancestor(dir: &Path, gid: Option<u32>) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dir = std::fs::canonicalize(dir).ok()?;
    dir.ancestors().skip(1).find_map(|ancestor| {
        let meta = std::fs::metadata(ancestor).ok()?;
        let others = meta.mode() & 0o001 != 0;
        let group = gid.is_some_and(|g| g == meta.gid()) && meta.mode() & 0o010 != 0;
        (!others && !group).then(|| ancestor.to_path_buf())
    })
}

fn set_owner_and_mode(path: &Path, gid: Option<u32>, mode: u32) -> Result<(), FileError> {
    if let Some(gid) = gid {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(|error| FileError {
            action: "giving to the runtime's group",
            path: path.to_path_buf(),
            error,
        })?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(FileError::doing("setting the mode of", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_gets_the_certificate_key_and_ca_with_the_key_0640_for_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        let tls = RuntimeTlsExport {
            dir: dir.path().join("runtime-tls"),
            // The test's own group: chown to it needs no privilege.
            gid: Some(rustix::process::getegid().as_raw()),
        };
        let identity = ClientTlsFiles {
            cert: state.join("node.crt"),
            key: state.join("node.key"),
            ca: state.join("ca.crt"),
        };
        // Before the first certificate there is nothing to hand over.
        std::fs::write(&identity.key, "KEY").unwrap();
        export_runtime_tls(&identity, &tls).unwrap();
        assert!(!tls.dir.exists());

        std::fs::write(&identity.cert, "CERT").unwrap();
        std::fs::write(&identity.ca, "CA").unwrap();
        export_runtime_tls(&identity, &tls).unwrap();
        let mode = |name: &str| {
            std::fs::metadata(tls.dir.join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(RUNTIME_KEY_FILE), 0o640);
        assert_eq!(mode(RUNTIME_CERT_FILE), 0o644);
        assert_eq!(mode(RUNTIME_CA_FILE), 0o644);
        assert_eq!(
            std::fs::metadata(&tls.dir).unwrap().permissions().mode() & 0o777,
            0o750
        );
        assert_eq!(
            std::fs::read(tls.dir.join(RUNTIME_KEY_FILE)).unwrap(),
            std::fs::read(&identity.key).unwrap()
        );
        assert_eq!(
            std::fs::read_to_string(tls.dir.join(RUNTIME_CERT_FILE)).unwrap(),
            "CERT"
        );
        // A 0700 directory on the way (the packaged unit's state directory) is found.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(
            untraversable_ancestor(&tls.dir, Some(u32::MAX)).as_deref(),
            Some(std::fs::canonicalize(dir.path()).unwrap().as_path())
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(untraversable_ancestor(&tls.dir, Some(u32::MAX)), None);
        // A renewal replaces the files in place; no temporary file is left behind.
        std::fs::write(&identity.cert, "CERT2").unwrap();
        export_runtime_tls(&identity, &tls).unwrap();
        assert_eq!(
            std::fs::read_to_string(tls.dir.join(RUNTIME_CERT_FILE)).unwrap(),
            "CERT2"
        );
        let names: Vec<_> = std::fs::read_dir(&tls.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
    }
}
