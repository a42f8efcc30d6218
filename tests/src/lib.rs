//! Shared pieces of the end-to-end tests: building and locating the real `fleetwire` binary,
//! free ports, and processes that are killed when a test ends.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Installs ring as the test process's rustls provider (once). reqwest is built with
/// `rustls-no-provider` (the workspace's `Cargo.toml`), so every client, plain or not, needs
/// it before it is built: call this before `reqwest::Client::builder()` or
/// `reqwest::blocking::get`.
pub fn install_crypto_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `fleetwire` binary, built once per test process with the same profile as the tests
/// (a no-op when `cargo test` already built it).
pub fn fleetwire_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // target/<profile>/deps/<test> → target/<profile>/fleetwire
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("target/<profile>");
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let mut cargo = Command::new(env!("CARGO"));
        cargo.current_dir(workspace()).args([
            "build",
            "--quiet",
            "-p",
            "fleetwire",
            "--bin",
            "fleetwire",
        ]);
        if release {
            cargo.arg("--release");
        }
        // Cargo sets the test's own package variables (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ...)
        // in this process. Build scripts that watch them (ring's does) would then see a change
        // and rebuild, and the next `cargo test` would rebuild them back: hide them.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            let package_var = name.starts_with("CARGO_PKG_")
                || name.starts_with("CARGO_BIN_EXE_")
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_MANIFEST_LINKS",
                    "CARGO_CRATE_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "CARGO_RUSTC_CURRENT_DIR",
                ]
                .contains(&name.as_ref());
            if package_var {
                cargo.env_remove(name.as_ref());
            }
        }
        let status = cargo.status().expect("running cargo build");
        assert!(status.success(), "cargo build -p fleetwire failed");
        let bin = profile_dir.join("fleetwire");
        assert!(bin.exists(), "{} was not built", bin.display());
        bin
    })
    .clone()
}

/// A `Command` for the `fleetwire` binary.
pub fn fleetwire() -> Command {
    Command::new(fleetwire_bin())
}

/// `id` as one URL path segment: every byte but RFC 3986's unreserved ones percent-encoded.
pub fn url_segment(id: &str) -> String {
    let mut out = String::new();
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A TCP port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local addr")
        .port()
}

/// A child process that is killed (SIGKILL) and reaped when dropped, so a failing test never
/// leaves a server behind.
pub struct Running {
    pub child: Child,
}

impl Running {
    pub fn spawn(command: &mut Command) -> Running {
        Running {
            child: command.spawn().expect("spawning a test process"),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGKILL and waits for the process to go.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `probe` every 50 ms until it returns `Some`, or panics after `timeout` naming `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub mod agent_harness;
pub mod background;
pub mod cuttable_link;
pub mod real_peers;
pub mod real_smolvm;
pub mod reported_watch;
pub mod standin_ppn_controller;
pub mod standin_smolvm;
