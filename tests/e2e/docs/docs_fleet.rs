//! The fleet the docs' sessions run against: `fleetwire up` in a temporary directory, as a
//! reader runs it (its default `--dir .fleetwire`, so the docs' relative paths hold), mTLS or
//! `--plain-http`. The docs speak of `up`'s default addresses; the test gives it free ports, and
//! maps `127.0.0.1:9203` and `127.0.0.1:9204` to them in each command and back in its output.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::blocks::Mode;
use crate::support::up_process::{up_command, UpProcess};
use crate::support::{fleetwire_bin, free_port};

/// `up`'s default controller and agent addresses, as the docs name them.
pub const DOC_API: &str = "127.0.0.1:9203";
pub const DOC_SPAWN: &str = "127.0.0.1:9204";

/// How long one command of a doc may take.
const COMMAND_TIMEOUT: &str = "60";

pub struct DocsFleet {
    pub mode: Mode,
    pub root: tempfile::TempDir,
    /// An empty home, so that no config of the machine's user is read.
    home: tempfile::TempDir,
    pub api: String,
    pub spawn: String,
    _up: UpProcess,
}

impl DocsFleet {
    pub fn up(mode: Mode) -> DocsFleet {
        let root = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let api_port = free_port();
        let api = format!("127.0.0.1:{api_port}");
        let spawn_port = free_port();
        // `up` as the other tests start it (support::up_process), in a folder of its own.
        let mut command = up_command(root.path(), home.path(), api_port, spawn_port);
        if mode == Mode::Plain {
            command.arg("--plain-http");
        }
        let mut up = UpProcess::start(&mut command);
        up.wait_for_line("fleetwire is up");
        DocsFleet {
            mode,
            root,
            home,
            api,
            spawn: format!("127.0.0.1:{spawn_port}"),
            _up: up,
        }
    }

    /// The directory `up` ran in (where `.fleetwire/` is).
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Runs `command` with bash in `up`'s directory, `fleetwire` first on the PATH, as a reader
    /// pasting it would: its output (standard output and error as they interleave), with this
    /// fleet's addresses written back as the docs' ones, and its exit status.
    pub fn run(&self, command: &str) -> (String, i32) {
        self.shell(self.root(), command, true)
    }

    /// `command` in `dir`; with `docs_addresses`, `up`'s default addresses in it are this fleet's
    /// and this fleet's are written back as them in the output.
    pub fn shell(&self, dir: &Path, command: &str, docs_addresses: bool) -> (String, i32) {
        let command = if docs_addresses {
            command
                .replace(DOC_API, &self.api)
                .replace(DOC_SPAWN, &self.spawn)
        } else {
            command.to_string()
        };
        let output = Command::new("timeout")
            .args(["--kill-after=5", COMMAND_TIMEOUT, "bash", "-c"])
            .arg(format!("exec 2>&1\n{command}"))
            .current_dir(dir)
            .env("PATH", path_with_fleetwire())
            .env("HOME", self.home.path())
            .env_remove("XDG_CONFIG_HOME")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        if docs_addresses {
            text = text
                .replace(&self.api, DOC_API)
                .replace(&self.spawn, DOC_SPAWN);
            // A doc cannot show a last line without its newline (curl prints none).
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
        }
        (text, output.status.code().unwrap_or(-1))
    }
}

/// `PATH` with the directory of the `fleetwire` binary under test first.
fn path_with_fleetwire() -> std::ffi::OsString {
    let bin: PathBuf = fleetwire_bin().parent().unwrap().to_path_buf();
    let mut paths = vec![bin];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(paths).unwrap()
}
