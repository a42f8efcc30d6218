//! The `smolvm` driver: machines run by the node's smolvm runtime, through its HTTP API
//! (`/health`, `/capacity`, `/api/v1/machines`). A 503 from `/capacity` means the runtime is
//! stalled: the node self-cordons (heartbeat `runtime_stalled`) until it answers again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fleetwire_types::{
    AppId, Argv, BootId, ComputeUsage, CreateMachineRequest, DesiredInstance, DesiredInstanceState,
    InstanceState, MachineName, RuntimeCapacity, RuntimeError, RuntimeHealth, RuntimeMachine,
    Timestamp, WireDocument,
};
use reqwest::StatusCode;
use serde_json::Value;

use super::proc_stats::{self, ProcSample};
use super::{Driver, DriverSettings, InstanceStatus, Observation, RuntimeStatus};

const MIB: u64 = 1024 * 1024;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

pub struct SmolvmDriver {
    base: String,
    http: reqwest::Client,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The desired instances of the last converge, in order.
    desired: Vec<DesiredInstance>,
    /// The deployment each machine was created for (by this agent process).
    created_for: HashMap<AppId, fleetwire_types::DeploymentId>,
    /// The last runtime failure per machine, shown as the instance's message.
    errors: HashMap<AppId, String>,
    /// CPU seen per machine: runs that ended, and the last sample of the current VM process.
    cpu: HashMap<AppId, CpuSeen>,
}

/// CPU of a machine's VM processes: the ms of runs that ended, and the last sample of the
/// current one (pid, sample, when).
type CpuSeen = (u64, Option<(u32, ProcSample, Instant)>);

/// A runtime answer that was not what the API promises.
#[derive(Debug)]
struct CallError(String);

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SmolvmDriver {
    pub fn new(settings: &DriverSettings) -> anyhow::Result<SmolvmDriver> {
        Ok(SmolvmDriver {
            base: settings.runtime_address.clone(),
            http: reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .build()?,
            state: Mutex::new(State::default()),
        })
    }

    async fn get(&self, path: &str) -> Result<(StatusCode, Vec<u8>), CallError> {
        let url = format!("{}{path}", self.base);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| CallError(format!("GET {url}: {e}")))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| CallError(format!("GET {url}: {e}")))?;
        Ok((status, body.to_vec()))
    }

    async fn read<T: WireDocument>(&self, path: &str) -> Result<T, CallError> {
        let (status, body) = self.get(path).await?;
        if !status.is_success() {
            return Err(error_of("GET", path, status, &body));
        }
        fleetwire_types::read::<T>(&body)
            .map(fleetwire_types::Accepted::into_inner)
            .map_err(|r| CallError(format!("GET {path}: not a valid {}: {r}", T::INFO.name)))
    }

    async fn machines(&self) -> Result<Vec<RuntimeMachine>, CallError> {
        let path = "/api/v1/machines";
        let (status, body) = self.get(path).await?;
        if !status.is_success() {
            return Err(error_of("GET", path, status, &body));
        }
        let items: Vec<Value> = serde_json::from_slice(&body)
            .map_err(|e| CallError(format!("GET {path}: not a JSON array: {e}")))?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                fleetwire_types::read_value::<RuntimeMachine>(item)
                    .map(fleetwire_types::Accepted::into_inner)
                    .map_err(|r| CallError(format!("GET {path}: item {i}: {r}")))
            })
            .collect()
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(), CallError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method.clone(), &url);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| CallError(format!("{method} {url}: {e}")))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let body = resp.bytes().await.unwrap_or_default();
        Err(error_of(method.as_str(), path, status, &body))
    }

    async fn create(&self, d: &DesiredInstance) -> Result<(), CallError> {
        let name: MachineName =
            d.app_id.as_str().parse().map_err(|e| {
                CallError(format!("{}: not a machine name: {e}", d.app_id.as_str()))
            })?;
        let cmd: Argv =
            serde_json::from_value(serde_json::to_value(&d.command).unwrap_or_default())
                .map_err(|e| CallError(format!("command: {e}")))?;
        let request = CreateMachineRequest {
            name,
            cpus: std::num::NonZeroU32::new(
                d.resources.vcpu_count.get().min(u32::MAX as u64) as u32
            )
            .unwrap_or(std::num::NonZeroU32::MIN),
            mem: d.resources.memory_mib,
            cmd: Some(cmd),
            entrypoint: None,
            ports: Vec::new(),
            // The runtime sizes disks in whole GB: round the request up.
            storage_gb: d.resources.disk_mib.div_ceil(1024),
            overlay_gb: 10,
        };
        let body = serde_json::to_value(&request).expect("a generated value serializes");
        let problems = fleetwire_types::validate_value::<CreateMachineRequest>(&body);
        if let Some(v) = problems.first() {
            return Err(CallError(format!(
                "create request: {}",
                fleetwire_types::describe(v)
            )));
        }
        self.call(reqwest::Method::POST, "/api/v1/machines", Some(body))
            .await
    }

    async fn converge_one(
        &self,
        d: &DesiredInstance,
        found: Option<&RuntimeMachine>,
    ) -> Result<(), CallError> {
        let name = d.app_id.as_str();
        let created_for = lock(&self.state).created_for.get(&d.app_id).cloned();
        let mut exists = found.is_some();
        // A machine created for an older deployment is replaced: a new deployment boots afresh.
        if let (Some(_), Some(dep)) = (found, &created_for) {
            if *dep != d.deployment_id {
                self.call(
                    reqwest::Method::DELETE,
                    &format!("/api/v1/machines/{name}"),
                    None,
                )
                .await?;
                exists = false;
            }
        }
        if !exists {
            self.create(d).await?;
            lock(&self.state)
                .created_for
                .insert(d.app_id.clone(), d.deployment_id.clone());
        } else if created_for.is_none() {
            // Found at start: adopted as the deployment the document names.
            lock(&self.state)
                .created_for
                .insert(d.app_id.clone(), d.deployment_id.clone());
        }
        let running = exists && found.is_some_and(|m| m.state == "running");
        match d.desired_state {
            DesiredInstanceState::Running if !running => {
                self.call(
                    reqwest::Method::POST,
                    &format!("/api/v1/machines/{name}/start"),
                    None,
                )
                .await
            }
            DesiredInstanceState::Stopped if running => {
                self.call(
                    reqwest::Method::POST,
                    &format!("/api/v1/machines/{name}/stop"),
                    None,
                )
                .await
            }
            _ => Ok(()),
        }
    }
}

fn error_of(method: &str, path: &str, status: StatusCode, body: &[u8]) -> CallError {
    match fleetwire_types::read::<RuntimeError>(body).map(fleetwire_types::Accepted::into_inner) {
        Ok(e) => CallError(format!(
            "{method} {path}: {status}: {} ({})",
            e.error, e.code
        )),
        Err(_) => CallError(format!("{method} {path}: {status}")),
    }
}

fn state_of(runtime_state: &str) -> InstanceState {
    match runtime_state.to_ascii_lowercase().as_str() {
        "running" => InstanceState::Running,
        "stopped" | "exited" => InstanceState::Stopped,
        "created" | "starting" | "booting" => InstanceState::Starting,
        "stopping" => InstanceState::Stopping,
        "failed" | "error" => InstanceState::Failed,
        _ => InstanceState::Pending,
    }
}

#[async_trait]
impl Driver for SmolvmDriver {
    fn name(&self) -> &'static str {
        "smolvm"
    }

    async fn converge(&self, desired: &[DesiredInstance]) {
        lock(&self.state).desired = desired.to_vec();
        let machines = match self.machines().await {
            Ok(m) => m,
            Err(err) => {
                tracing::warn!(error = %err, "runtime: cannot list machines");
                return;
            }
        };
        let by_name: HashMap<&str, &RuntimeMachine> =
            machines.iter().map(|m| (m.name.as_str(), m)).collect();
        let mut errors = HashMap::new();
        for d in desired {
            if let Err(err) = self
                .converge_one(d, by_name.get(d.app_id.as_str()).copied())
                .await
            {
                tracing::warn!(app = d.app_id.as_str(), error = %err, "runtime call failed");
                errors.insert(d.app_id.clone(), err.0);
            }
        }
        // The agent owns its node's runtime: machines no document asks for are removed.
        for m in &machines {
            if !desired.iter().any(|d| d.app_id.as_str() == m.name.as_str()) {
                let path = format!("/api/v1/machines/{}", m.name.as_str());
                if let Err(err) = self.call(reqwest::Method::DELETE, &path, None).await {
                    tracing::warn!(machine = m.name.as_str(), error = %err, "runtime: cannot remove machine");
                }
                if let Ok(id) = m.name.as_str().parse::<AppId>() {
                    lock(&self.state).created_for.remove(&id);
                }
            }
        }
        lock(&self.state).errors = errors;
    }

    async fn observe(&self) -> Observation {
        let health = self.read::<RuntimeHealth>("/health").await;
        let (capacity, stalled, capacity_problem) = match self.get("/capacity").await {
            Ok((StatusCode::SERVICE_UNAVAILABLE, _)) => (
                None,
                true,
                Some("runtime stalled: GET /capacity answered 503".to_string()),
            ),
            Ok((status, body)) if status.is_success() => {
                match fleetwire_types::read::<RuntimeCapacity>(&body)
                    .map(fleetwire_types::Accepted::into_inner)
                {
                    Ok(c) => (Some(c), false, None),
                    Err(r) => (
                        None,
                        false,
                        Some(format!("GET /capacity: not a valid RuntimeCapacity: {r}")),
                    ),
                }
            }
            Ok((status, body)) => (
                None,
                false,
                Some(error_of("GET", "/capacity", status, &body).0),
            ),
            Err(e) => (None, false, Some(e.0)),
        };
        let machines = self.machines().await;
        let problem = capacity_problem
            .or_else(|| health.as_ref().err().map(|e| e.0.clone()))
            .or_else(|| machines.as_ref().err().map(|e| e.0.clone()));

        let now = Instant::now();
        let listed: HashMap<String, RuntimeMachine> = machines
            .unwrap_or_default()
            .into_iter()
            .map(|m| (m.name.as_str().to_string(), m))
            .collect();
        // The VM processes run on this host: their figures come from /proc, read before locking.
        let samples: HashMap<u32, ProcSample> = listed
            .values()
            .filter(|m| m.state == "running")
            .filter_map(|m| Some((m.pid?, proc_stats::sample(m.pid?)?)))
            .collect();
        let mut state = lock(&self.state);
        let mut instances = Vec::new();
        for d in state.desired.clone() {
            let machine = listed.get(d.app_id.as_str());
            let pid = machine
                .and_then(|m| m.pid)
                .filter(|_| machine.is_some_and(|m| m.state == "running"));
            let sample = pid.and_then(|p| samples.get(&p).copied());
            let cpu = state.cpu.entry(d.app_id.clone()).or_insert((0, None));
            let mut cpu_share = None;
            match (pid, sample) {
                (Some(pid), Some(s)) => {
                    if let Some((prev_pid, prev, at)) = cpu.1 {
                        if prev_pid == pid {
                            let wall = now.duration_since(at).as_millis() as f64;
                            if wall >= 1.0 {
                                cpu_share =
                                    Some(s.cpu_ms.saturating_sub(prev.cpu_ms) as f64 / wall);
                            }
                        } else {
                            cpu.0 += prev.cpu_ms;
                        }
                    }
                    cpu.1 = Some((pid, s, now));
                }
                _ => {
                    if let Some((_, prev, _)) = cpu.1.take() {
                        cpu.0 += prev.cpu_ms;
                    }
                }
            }
            let cpu_ms = cpu.0 + cpu.1.map_or(0, |(_, s, _)| s.cpu_ms);
            let compute = sample.map(|s| ComputeUsage {
                cpu_share,
                measured_at: Timestamp::now(),
                memory_total_bytes: d.resources.memory_mib.get() * MIB,
                memory_used_bytes: s.rss_bytes,
            });
            let message = state
                .errors
                .get(&d.app_id)
                .cloned()
                .or_else(|| match machine {
                    None => problem.clone(),
                    Some(m) if state_of(&m.state) == InstanceState::Pending => {
                        Some(format!("runtime reports state {:?}", m.state))
                    }
                    Some(_) => None,
                });
            instances.push(InstanceStatus {
                app_id: d.app_id.clone(),
                deployment_id: d.deployment_id.clone(),
                state: machine.map_or(InstanceState::Pending, |m| state_of(&m.state)),
                resources: d.resources.clone(),
                // smolvm's API does not expose restarts inside the guest.
                restart_count: 0,
                last_restart: None,
                last_exit_code: None,
                started_at: None,
                compute,
                cpu_ms,
                message,
                volume: None,
                pid,
            });
        }
        drop(state);
        instances.sort_by(|a, b| a.app_id.cmp(&b.app_id));

        let boot_id = capacity
            .as_ref()
            .map(|c| c.boot_id.clone())
            .filter(|b: &BootId| !b.is_empty());
        Observation {
            instances,
            runtime: RuntimeStatus {
                boot_id,
                cpu_usage: capacity.as_ref().map_or(0.0, |c| c.used_cpus.get()),
                memory_usage_mb: capacity.as_ref().map_or(0, |c| c.used_memory_mb),
                disk_usage_gb: capacity.as_ref().map_or(0, |c| c.used_disk_gb),
                capacity,
                stalled,
                problem,
                versions: super::agent_only_versions(),
            },
        }
    }

    async fn shutdown(&self) {
        // Machines belong to the runtime and outlive the agent: nothing to stop here.
    }
}
