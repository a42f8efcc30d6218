//! Starting the real `fleetwire agent` for a test: its own state directory and a free port,
//! helpers to call its local API and to read its reported.json through the generated reader.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use fleetwire_types::HostReportedState;
use serde::de::DeserializeOwned;

use crate::support::{fleetwire, free_port, wait_for, Running};

/// A running agent. Killed (SIGKILL) when dropped; its state directory goes with the test.
pub struct AgentProcess {
    pub running: Running,
    pub port: u16,
    pub state_dir: PathBuf,
    env: Vec<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

/// The command for an agent with the three required variables, a state directory, a port and
/// a short reconcile interval, in plain mode (`VM_PLAIN_HTTP=true`: the stand-in controllers
/// speak plain HTTP; `tests/e2e/agent/trust.rs` starts it in secure mode); `env` adds or
/// overrides variables.
pub fn agent_command(
    controller: &str,
    state_dir: &Path,
    port: u16,
    env: &[(String, String)],
) -> Command {
    let mut cmd = fleetwire();
    cmd.arg("agent")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("VM_FLEET_ENDPOINT", controller)
        .env("VM_NODE_ID", "node-1")
        .env("VM_WG_IP", "127.0.0.1")
        .env("VM_SPAWN_PORT", port.to_string())
        .env("VM_LISTEN_ADDRESS", "127.0.0.1")
        .env("VM_PLAIN_HTTP", "true")
        .env("VM_STATE_DIR", state_dir)
        .env("VM_HEARTBEAT_INTERVAL_S", "1")
        .env("VM_RECONCILE_INTERVAL_MS", "100")
        .env("VM_STOP_TIMEOUT_MS", "1000")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(if std::env::var_os("AGENT_LOG").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

impl AgentProcess {
    /// Starts an agent reporting to `controller`, and waits for its first reported.json.
    pub fn start(controller: &str, env: &[(&str, &str)]) -> AgentProcess {
        let dir = tempfile::tempdir().expect("temp dir");
        let state_dir = dir.path().join("state");
        let mut agent = AgentProcess::start_in(controller, &state_dir, env);
        agent._dir = Some(dir);
        agent
    }

    /// Same, in a state directory the caller keeps.
    pub fn start_in(controller: &str, state_dir: &Path, env: &[(&str, &str)]) -> AgentProcess {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let port = free_port();
        let running = Running::spawn(&mut agent_command(controller, state_dir, port, &env));
        let agent = AgentProcess {
            running,
            port,
            state_dir: state_dir.to_path_buf(),
            env,
            _dir: None,
        };
        agent.wait_until_serving();
        agent
    }

    fn wait_until_serving(&self) {
        wait_for(
            "the agent's first reported.json",
            Duration::from_secs(20),
            || {
                crate::support::install_crypto_provider();
                let served = reqwest::blocking::get(self.url("/v1/reported"))
                    .ok()
                    .filter(|r| r.status().is_success())?;
                drop(served);
                self.state_dir.join("reported.json").exists().then_some(())
            },
        );
    }

    /// SIGKILLs the agent and starts it again on the same state directory and port.
    pub fn restart(&mut self, controller: &str) {
        self.running.kill();
        self.restart_after_kill(controller);
    }

    /// Starts the agent again after it was killed.
    pub fn restart_after_kill(&mut self, controller: &str) {
        self.running = Running::spawn(&mut agent_command(
            controller,
            &self.state_dir,
            self.port,
            &self.env,
        ));
        self.wait_until_serving();
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> T {
        crate::support::install_crypto_provider();
        let resp = reqwest::blocking::get(self.url(path)).expect("GET");
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp.json().expect("JSON body")
    }

    pub fn get_text(&self, path: &str) -> String {
        crate::support::install_crypto_provider();
        reqwest::blocking::get(self.url(path))
            .expect("GET")
            .text()
            .expect("text body")
    }

    /// Sends `body` as JSON; returns the status and the body as JSON (null when empty).
    pub fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        crate::support::install_crypto_provider();
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client");
        let mut req = client.request(method, self.url(path));
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().unwrap_or_default();
        let json = if text.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
        };
        (status, json)
    }

    /// reported.json as it is on disk, read through the generated validated reader (a torn or
    /// invalid file fails the test).
    pub fn reported(&self) -> HostReportedState {
        read_reported(&self.state_dir.join("reported.json"))
    }

    /// Waits until reported.json satisfies `probe`, returning what `probe` returned.
    pub fn wait_reported<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut probe: impl FnMut(&HostReportedState) -> Option<T>,
    ) -> T {
        wait_for(what, timeout, || probe(&self.reported()))
    }

    pub fn pid(&self) -> u32 {
        self.running.pid()
    }
}

/// Reads a reported.json with the generated reader; panics naming every violation.
pub fn read_reported(path: &Path) -> HostReportedState {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    fleetwire_types::read_strict::<HostReportedState>(&bytes).unwrap_or_else(|r| {
        panic!(
            "{} is not a valid HostReportedState: {r}\n{}",
            path.display(),
            String::from_utf8_lossy(&bytes)
        )
    })
}

/// A spawn request body for the process driver.
pub fn spawn_body(vm_id: &str, command: &[&str]) -> serde_json::Value {
    serde_json::json!({
        "vm_type": "test",
        "ram_mb": 64,
        "vcpu_count": 1,
        "disk_gb": 1,
        "vm_id": vm_id,
        "command": command,
    })
}

impl Drop for AgentProcess {
    /// Stops the agent the clean way first (SIGTERM drains its tenants, process groups and all),
    /// so no test leaves a tenant behind; `Running` SIGKILLs it afterwards if it is still there.
    fn drop(&mut self) {
        if let Ok(None) = self.running.child.try_wait() {
            crate::support::send_signal(self.running.pid(), rustix::process::Signal::TERM);
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while std::time::Instant::now() < deadline {
                if !matches!(self.running.child.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
