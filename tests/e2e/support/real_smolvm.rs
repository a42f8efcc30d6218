//! The real `smolvm serve` (1.9.2, built by `../shared/peers/build.sh`), run for a test the way
//! `docs/interop.md` says: as uid 65534 (as root it would create cgroups of the host), with its
//! own data directory, and its fixed-port guest-rollout listener moved to a free port so several
//! can run. Plain mode: one listener serves the whole API. Fleet mode: `--listen` serves it over
//! mTLS only, and `/health`, `/capacity` are on the plain loopback door at the next port. Only
//! `--ignored` tests use it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{free_port, real_peers, wait_for, Running};

/// The unprivileged user smolvm runs as.
const NOBODY: u32 = 65534;

pub struct RealSmolvm {
    pub running: Running,
    pub port: u16,
    /// Where `/health` and `/capacity` answer over plain HTTP: `port`, or the loopback door.
    door: u16,
    pub data_dir: PathBuf,
    rollout_port: u16,
    extra_env: Vec<(String, String)>,
    _temp: tempfile::TempDir,
}

impl RealSmolvm {
    /// Starts `smolvm serve start --listen 127.0.0.1:<free port>` and waits for `/health`.
    pub fn start() -> RealSmolvm {
        RealSmolvm::start_on(free_port())
    }

    /// Plain mode on `port`, for a test that had to name the address first.
    pub fn start_on(port: u16) -> RealSmolvm {
        RealSmolvm::launch(port, port, &[])
    }

    /// Fleet mode on `port` (take it from [`free_port_pair`]): `tls` is the server certificate,
    /// its key and the client CA, as `SMOLVM_SERVE_TLS_CERT`, `_KEY` and `_CLIENT_CA`.
    pub fn start_fleet_mode(port: u16, [cert, key, ca]: [&Path; 3]) -> RealSmolvm {
        let path = |p: &Path| p.display().to_string();
        RealSmolvm::launch(
            port,
            port + 1,
            &[
                ("SMOLVM_SERVE_TLS_CERT", &path(cert)),
                ("SMOLVM_SERVE_TLS_KEY", &path(key)),
                ("SMOLVM_SERVE_TLS_CLIENT_CA", &path(ca)),
            ],
        )
    }

    fn launch(port: u16, door: u16, env: &[(&str, &str)]) -> RealSmolvm {
        crate::support::install_crypto_provider();
        let temp = tempfile::tempdir().expect("temp dir");
        let data_dir = temp.path().to_path_buf();
        std::os::unix::fs::chown(&data_dir, Some(NOBODY), Some(NOBODY))
            .expect("giving the data directory to uid 65534");
        let rollout_port = free_port();
        let extra_env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let running = spawn(port, rollout_port, &data_dir, &extra_env);
        let mut smolvm = RealSmolvm {
            running,
            port,
            door,
            data_dir,
            rollout_port,
            extra_env,
            _temp: temp,
        };
        smolvm.wait_healthy();
        smolvm
    }

    /// The base URL of its plain listener (in fleet mode, the loopback door).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.door)
    }

    /// The port of its loopback door (fleet mode), or of its one listener (plain mode).
    pub fn door(&self) -> u16 {
        self.door
    }

    /// A new serve process on the same data directory and port (its boot id changes; the
    /// machines stay in its database). SIGTERM first, so it closes its database cleanly.
    pub fn restart(&mut self) {
        self.stop();
        self.running = spawn(
            self.port,
            self.rollout_port,
            &self.data_dir,
            &self.extra_env,
        );
        self.wait_healthy();
    }

    fn stop(&mut self) {
        crate::support::send_signal(self.running.pid(), rustix::process::Signal::TERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if !matches!(self.running.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.running.kill();
    }

    fn wait_healthy(&mut self) {
        let url = format!("{}/health", self.url());
        wait_for("smolvm serve's /health", Duration::from_secs(30), || {
            if let Ok(Some(status)) = self.running.child.try_wait() {
                let said = std::fs::read_to_string(stderr_file(&self.data_dir)).unwrap_or_default();
                let tail: Vec<&str> = said.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!(
                    "smolvm exited at start-up: {status}; its last words:\n{}",
                    tail.join("\n")
                );
            }
            reqwest::blocking::get(&url)
                .ok()
                .filter(|r| r.status().is_success())
                .map(|_| ())
        });
    }

    /// `GET path` on its listener, as JSON.
    pub fn get(&self, path: &str) -> serde_json::Value {
        let response = reqwest::blocking::get(format!("{}{path}", self.url()))
            .unwrap_or_else(|e| panic!("GET {path} on smolvm: {e}"));
        assert!(
            response.status().is_success(),
            "GET {path}: {}",
            response.status()
        );
        response.json().expect("a JSON answer")
    }

    /// `GET /metrics`, as text.
    pub fn metrics(&self) -> String {
        reqwest::blocking::get(format!("{}/metrics", self.url()))
            .and_then(|r| r.text())
            .expect("GET /metrics on smolvm")
    }

    /// smolvm's own listing, by machine name.
    pub fn machines(&self) -> std::collections::BTreeMap<String, serde_json::Value> {
        self.get("/api/v1/machines")["machines"]
            .as_array()
            .expect("{\"machines\": [...]}")
            .iter()
            .map(|m| (m["name"].as_str().unwrap().to_string(), m.clone()))
            .collect()
    }
}

/// A free port whose next port is free too (fleet mode's loopback door is `--listen` + 1).
pub fn free_port_pair() -> u16 {
    loop {
        let port = free_port();
        if port < u16::MAX && TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

impl Drop for RealSmolvm {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where smolvm's standard error goes (unless `SMOLVM_LOG` shows it).
fn stderr_file(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("smolvm.stderr")
}

fn spawn(port: u16, rollout_port: u16, data_dir: &Path, extra_env: &[(String, String)]) -> Running {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "env",
        "-i",
        "PATH=/usr/bin:/bin",
    ])
    .arg(format!("HOME={}", data_dir.display()))
    .arg(format!("SMOLVM_DATA_DIR={}", data_dir.display()))
    .arg(format!("SMOLVM_GUEST_ROLLOUT_HOST_PORT={rollout_port}"));
    for (k, v) in extra_env {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.arg(real_peers::binary("smolvm"))
        .args(["serve", "start", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(if std::env::var_os("SMOLVM_LOG").is_some() {
            Stdio::inherit()
        } else {
            // Kept, so that a start-up failure can say why (`RealSmolvm::wait_healthy`).
            std::fs::File::create(stderr_file(data_dir))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null())
        });
    Running::spawn(&mut cmd)
}
