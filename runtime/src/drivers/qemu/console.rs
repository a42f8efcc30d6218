//! The last lines of a guest's serial console (its log file), for the message of a guest that
//! died or never came up.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The last `count` non-empty lines of `log`, read from its last 8 KiB.
pub fn last_lines(log: &Path, count: usize) -> Vec<String> {
    const TAIL: u64 = 8192;
    let Ok(mut file) = std::fs::File::open(log) else {
        return Vec::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    if file
        .seek(SeekFrom::Start(len.saturating_sub(TAIL)))
        .is_err()
    {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<String> = text
        .lines()
        .map(|l| l.trim_end_matches('\r').trim_end().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(count)..].to_vec()
}

/// `what`, then the console's last lines, for an instance's message.
pub fn with_console(what: &str, log: &Path) -> String {
    let lines = last_lines(log, 5);
    if lines.is_empty() {
        format!("{what}; the console printed nothing")
    } else {
        format!("{what}; last console lines: {}", lines.join(" | "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_are_read_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("vm.log");
        let text: String = (1..=500).map(|i| format!("line {i}\r\n\n")).collect();
        std::fs::write(&log, text).unwrap();
        assert_eq!(last_lines(&log, 2), vec!["line 499", "line 500"]);
        let m = with_console("QEMU exited with code 1", &log);
        assert!(
            m.starts_with("QEMU exited with code 1; last console lines: line 496 |"),
            "{m}"
        );
        assert!(with_console("x", &dir.path().join("none")).ends_with("printed nothing"));
    }
}
