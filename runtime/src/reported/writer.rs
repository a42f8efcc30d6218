//! Writing a state file so that a crash at any moment leaves either the previous or the next
//! complete document: temp file in the same directory, fsync, rename, fsync the directory.
//! Every document is checked by the generated validator first; a failing one is not written.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use fleetwire_types::{describe, Violation, WireDocument};

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{path}: refusing to write an invalid {document}: {summary}")]
    Invalid {
        path: PathBuf,
        document: &'static str,
        summary: String,
        violations: Vec<Violation>,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Validates `doc` against its schema and writes it to `path` atomically (pretty JSON with a
/// final newline). The bytes written are returned. On failure the old file is untouched.
pub fn write_document<T: WireDocument>(path: &Path, doc: &T) -> Result<Vec<u8>, WriteError> {
    let value = serde_json::to_value(doc).expect("a generated value serializes");
    let violations = fleetwire_types::validate_value::<T>(&value);
    if let Some(first) = violations.first() {
        let summary = if violations.len() == 1 {
            describe(first)
        } else {
            format!("{} (and {} more)", describe(first), violations.len() - 1)
        };
        return Err(WriteError::Invalid {
            path: path.to_path_buf(),
            document: T::INFO.name,
            summary,
            violations,
        });
    }
    let mut bytes = serde_json::to_vec_pretty(&value).expect("a JSON value serializes");
    bytes.push(b'\n');
    atomic_write(path, &bytes, 0o644).map_err(|source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(bytes)
}

/// Replaces `path` with `bytes` atomically and durably, the new file having `mode`.
pub fn atomic_write(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    // The pid keeps two processes (an old and a new agent) from sharing a temp file.
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetwire_types::HostDesiredState;

    #[test]
    fn an_invalid_document_is_not_written_and_the_old_file_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("desired.json");
        let good: HostDesiredState =
            serde_json::from_str(r#"{"hostId":"n1","instances":[]}"#).unwrap();
        write_document(&path, &good).unwrap();
        let before = std::fs::read(&path).unwrap();
        // A generation past i64 is fine for the type, but make the document invalid through a
        // value the type cannot catch: a backoff factor below 1.
        let bad: HostDesiredState = serde_json::from_str(
            r#"{"hostId":"n1","instances":[{"appId":"a","deploymentId":"d","desiredState":"running",
            "command":["x"],"resources":{"vcpuCount":1,"memoryMib":1,"diskMib":0},
            "restartPolicy":{"backoffFactor":0.5}}]}"#,
        )
        .unwrap();
        let err = write_document(&path, &bad).unwrap_err();
        assert!(
            err.to_string()
                .contains("/instances/0/restartPolicy/backoffFactor"),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), before);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temp file is left behind");
    }
}
