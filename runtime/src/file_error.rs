//! An I/O failure on a named file, told as `<what was being done> <path>: <why>` (e.g. `writing
//! /var/lib/fleetwire-agent/node.key: Permission denied`), for the domain errors that wrap it.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("{action} {}: {error}", path.display())]
pub struct FileError {
    pub action: &'static str,
    pub path: PathBuf,
    pub error: std::io::Error,
}

impl FileError {
    /// For `map_err`: `.map_err(FileError::doing("reading", &path))`.
    pub fn doing(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> FileError {
        let path = path.to_path_buf();
        move |error| FileError {
            action,
            path,
            error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_says_what_was_done_to_which_file_and_why() {
        let e = FileError::doing("reading", Path::new("/x/node.key"))(std::io::Error::from(
            std::io::ErrorKind::NotFound,
        ));
        assert_eq!(e.to_string(), "reading /x/node.key: entity not found");
    }
}
