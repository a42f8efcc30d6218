//! A wire document kept as a state file (desired.json, meters.json, reported.json): checked by
//! the generated validator first (a failing one is not written), then replaced atomically
//! through [`crate::atomic_file`], so a crash at any moment leaves the previous or the next
//! complete document.

use std::path::{Path, PathBuf};

use fleetwire_types::{summarize, Violation, WireDocument};

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
    if !violations.is_empty() {
        return Err(WriteError::Invalid {
            path: path.to_path_buf(),
            document: T::INFO.name,
            summary: summarize(&violations),
            violations,
        });
    }
    let mut bytes = serde_json::to_vec_pretty(&value).expect("a JSON value serializes");
    bytes.push(b'\n');
    crate::atomic_file::write(path, &bytes, crate::atomic_file::PRIVATE_FILE).map_err(
        |source| WriteError::Io {
            path: path.to_path_buf(),
            source,
        },
    )?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetwire_types::HostDesiredState;

    /// A generated value always serializes to a valid document (the types carry the schema),
    /// so the refusal above is a guard that a value cannot reach; what a writer does meet is a
    /// write that fails, and then the previous file must stay as it was.
    #[test]
    fn a_failed_write_leaves_the_previous_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("desired.json");
        let good: HostDesiredState =
            serde_json::from_str(r#"{"hostId":"n1","instances":[]}"#).unwrap();
        write_document(&path, &good).unwrap();
        let before = std::fs::read(&path).unwrap();
        // Occupy the temp file's name with a directory, so the write cannot start.
        let tmp = dir
            .path()
            .join(format!(".desired.json.{}.tmp", std::process::id()));
        std::fs::create_dir(&tmp).unwrap();
        let next: HostDesiredState =
            serde_json::from_str(r#"{"hostId":"n2","instances":[]}"#).unwrap();
        let err = write_document(&path, &next).unwrap_err();
        assert!(matches!(err, WriteError::Io { .. }), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), before);
        std::fs::remove_dir(&tmp).unwrap();
        write_document(&path, &next).unwrap();
        assert_ne!(std::fs::read(&path).unwrap(), before);
    }
}
