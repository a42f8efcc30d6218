//! One owner per state directory: `fleetwire up`, `controller` and `agent` each hold an
//! exclusive lock on their directory for as long as they run, so a second one started on the
//! same directory stops at once, naming the first, instead of killing the first one's tenants,
//! rewriting its files and taking over its node's identity (docs/operations.md, "One owner per
//! directory").
//!
//! The lock is the kernel's (`flock(2)` through `File::try_lock`) on `<dir>/owner.lock`, so it
//! goes with its process however that ends; the file also says who holds it (pid and command
//! line), for the refusal and for the next owner, which says when it takes over from a process
//! that ended without letting go.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The lock file inside an owned directory.
pub const LOCK_FILE: &str = "owner.lock";

/// A directory this process owns until the value is dropped (or the process ends).
#[derive(Debug)]
pub struct DirOwner {
    file: File,
    path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum DirOwnerError {
    #[error("{dir} is used by {owner}: stop it first, or give this one another directory")]
    Taken { dir: String, owner: String },
    #[error("cannot lock {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Takes `dir` (created if missing, 0700) for this process. Refused while another process
/// holds it. `taken_over` is called with the previous owner's description when the file
/// names a process that ended without letting go (a crash, a `kill -9`).
pub fn take(dir: &Path, taken_over: impl FnOnce(&str)) -> Result<DirOwner, DirOwnerError> {
    let path = dir.join(LOCK_FILE);
    let io = |source| DirOwnerError::Io {
        path: path.display().to_string(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io)?;
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io)?;
    let mut previous = String::new();
    let _ = file.read_to_string(&mut previous);
    let previous = describe(&previous);
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            return Err(DirOwnerError::Taken {
                dir: dir.display().to_string(),
                owner: previous.unwrap_or_else(|| "another process".to_string()),
            })
        }
        Err(TryLockError::Error(error)) => return Err(io(error)),
    }
    if let Some(previous) = previous {
        taken_over(&previous);
    }
    let me = format!(
        "pid {}\n{}\n",
        std::process::id(),
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    file.write_all(me.as_bytes()).map_err(io)?;
    Ok(DirOwner { file, path })
}

/// "pid N (command)" from the lock file's text, if it names one.
fn describe(text: &str) -> Option<String> {
    let mut lines = text.lines();
    let pid = lines.next()?.strip_prefix("pid ")?.trim().to_string();
    let command = lines.next().unwrap_or("").trim();
    Some(if command.is_empty() {
        format!("pid {pid}")
    } else {
        format!("pid {pid} ({command})")
    })
}

impl Drop for DirOwner {
    /// A clean stop empties the file, so the next owner has nobody to say it took over from.
    fn drop(&mut self) {
        if let Err(error) = self.file.set_len(0) {
            tracing::debug!(path = %self.path.display(), %error, "emptying the lock file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_owner_is_refused_naming_the_first_and_a_clean_stop_leaves_no_trace() {
        let dir = tempfile::tempdir().unwrap();
        let first = take(dir.path(), |_| panic!("nobody to take over from")).unwrap();
        let refused = take(dir.path(), |_| {}).unwrap_err().to_string();
        assert!(
            refused.contains(&format!("is used by pid {}", std::process::id())),
            "{refused}"
        );
        drop(first);
        let again = take(dir.path(), |previous| panic!("took over from {previous}"));
        assert!(again.is_ok());
    }

    #[test]
    fn a_lock_left_by_a_process_that_ended_is_taken_over_saying_so() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), "pid 4242\nfleetwire up\n").unwrap();
        let mut said = None;
        let _owner = take(dir.path(), |previous| said = Some(previous.to_string())).unwrap();
        assert_eq!(said.as_deref(), Some("pid 4242 (fleetwire up)"));
    }
}
