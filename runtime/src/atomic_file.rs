//! Replacing a file so that a crash at any moment leaves either the previous or the next whole
//! content, never a mix: a temporary file in the same directory, created with the final mode
//! (and group) so the data is never readable by more than that allows, written, fsynced,
//! renamed over the target, and the directory fsynced (docs/agent.md, "Files in the state directory").
//! Every file that must survive a crash goes through here: the agent's key and certificates,
//! desired.json, meters.json, reported.json, the process driver's group files, and the
//! controller's CA.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of state files: tenants' command lines, logs and the fleet's records are the owner's
/// alone (issue 28).
pub const PRIVATE_FILE: u32 = 0o600;

/// Creates `dir` and any missing parents with mode 0700 (less the umask); existing ones are
/// left as they are.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Opens `path` for appending, created with mode 0600 when missing, and narrowed to 0600 when
/// an older release left it readable by others.
pub fn open_private_append(path: &Path) -> std::io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(PRIVATE_FILE)
        .open(path)?;
    narrow(&file)?;
    Ok(file)
}

/// Creates `path` empty with mode 0600 when missing (for a file another library then opens,
/// such as SQLite's database, whose journals take its mode), or narrows an existing one to
/// 0600.
pub fn ensure_private_file(path: &Path) -> std::io::Result<()> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(PRIVATE_FILE)
        .open(path)?;
    narrow(&file)
}

/// Takes group and other permissions away, if there are any.
fn narrow(file: &File) -> std::io::Result<()> {
    let mode = file.metadata()?.permissions().mode();
    if mode & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o700))?;
    }
    Ok(())
}

/// Replaces `path` with `bytes`, the new file created with `mode` (less the process umask).
pub fn write(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    replace(path, bytes, mode, |_| Ok(()))
}

/// Replaces `path` with `bytes`, the new file having exactly `mode` (whatever the umask) and,
/// when given, group `gid`: both set before any data is written, so a file shared with another
/// program's group (the runtime's TLS key, mode 0640) is never readable by more than that.
pub fn write_for_group(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    gid: Option<u32>,
) -> std::io::Result<()> {
    replace(path, bytes, mode, |file| {
        if let Some(gid) = gid {
            std::os::unix::fs::fchown(file, None, Some(gid)).map_err(|e| {
                std::io::Error::new(e.kind(), format!("giving the file to group {gid}: {e}"))
            })?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(mode))
    })
}

/// Whether `name` is one of the temporary files [`write`] uses: a leading dot, then `.tmp`.
fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// The temporary file for `path`. The pid keeps two processes (an old and a new agent) from
/// sharing one.
fn temp_path(path: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    Ok((dir.to_path_buf(), tmp))
}

fn replace(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    prepare: impl FnOnce(&File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let (dir, tmp) = temp_path(path)?;
    let result = (|| {
        let create = || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&tmp)
        };
        let mut file = match create() {
            // A temp file a crash of this same pid left behind would keep its old mode: the
            // file is made anew (one syscall more only then, not on every write).
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let _ = std::fs::remove_file(&tmp);
                create()?
            }
            other => other?,
        };
        prepare(&file)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        File::open(&dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Renames `from` over `to` (same directory) and fsyncs the directory, so the rename survives a
/// crash: the last step of replacing a pair of files one after the other (the agent's key
/// renewal, `agent::identity`).
pub fn rename(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::rename(from, to)?;
    let dir = to
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

/// Removes the temporary files of writes a crash interrupted in `dir` (the targets themselves
/// are always whole).
pub fn remove_stale_temp_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if is_temp_name(&entry.file_name().to_string_lossy()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_content_is_replaced_whole_and_no_temp_file_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write(&path, b"first", 0o644).unwrap();
        write(&path, b"second", 0o644).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        assert_eq!(names(dir.path()), ["state.json"]);
    }

    #[test]
    fn the_mode_is_the_new_files_whatever_the_old_one_had() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write(&path, b"secret", 0o600).unwrap();
        assert_eq!(mode(&path), 0o600);
        // A stale temp file with a looser mode is not reused.
        let (_, tmp) = temp_path(&path).unwrap();
        std::fs::write(&tmp, "stale").unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o666)).unwrap();
        write(&path, b"secret2", 0o600).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"secret2");
    }

    #[test]
    fn a_group_file_gets_its_exact_mode_and_group() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key.pem");
        let gid = rustix::process::getegid().as_raw();
        write_for_group(&path, b"key", 0o640, Some(gid)).unwrap();
        assert_eq!(mode(&path), 0o640);
        assert_eq!(
            std::os::unix::fs::MetadataExt::gid(&std::fs::metadata(&path).unwrap()),
            gid
        );
    }

    #[test]
    fn a_failed_write_leaves_the_previous_file_and_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("desired.json");
        write(&path, b"before", 0o644).unwrap();
        // Make the rename fail: the target's name is taken by a non-empty directory.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir_all(blocked.join("inside")).unwrap();
        assert!(write(&blocked, b"never", 0o644).is_err());
        assert_eq!(names(dir.path()), ["blocked", "desired.json"]);
        assert_eq!(std::fs::read(&path).unwrap(), b"before");
        // A preparation that fails (as giving the file to a group can) fails before any data is
        // written, and its temp file is cleaned up, whatever this process may chown.
        let err = replace(&path, b"next", 0o640, |_| {
            Err(std::io::Error::other("giving the file to group 1: refused"))
        });
        assert!(err.is_err());
        assert_eq!(names(dir.path()), ["blocked", "desired.json"]);
        assert_eq!(std::fs::read(&path).unwrap(), b"before");
    }

    #[test]
    fn stale_temp_files_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".reported.json.42.tmp"), "half").unwrap();
        std::fs::write(dir.path().join("reported.json"), "whole").unwrap();
        std::fs::write(dir.path().join("notes.tmp"), "kept").unwrap();
        remove_stale_temp_files(dir.path());
        assert_eq!(names(dir.path()), ["notes.tmp", "reported.json"]);
    }
}
