//! The `smolvm` driver: machines run by the node's smolvm runtime (1.9.2), through its HTTP
//! API (`docs/interop.md`). Creating a machine does not boot it: `start` is its own call, and a
//! start that fails (smolvm answers 500, e.g. without libkrun) is retried per the instance's
//! restart policy with backoff, its message on the instance meanwhile. A 503 from `/capacity`
//! means the runtime is stalled: the node self-cordons (heartbeat `runtime_stalled`) until it
//! answers again. All HTTP goes through [`client::SmolvmClient`].

pub mod client;
pub mod transport;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fleetwire_types::{
    AppId, BootId, ComputeUsage, CreateMachineRequest, DeploymentId, DesiredInstance,
    DesiredInstanceState, InstanceState, MachineName, Rejection, RestartPolicy, RuntimeMachine,
    Timestamp,
};

use super::driver::{Driver, DriverError, DriverSettings};
use super::observation::{agent_only_versions, InstanceStatus, Observation, RuntimeStatus};
use super::restart_backoff::backoff_ms;
use crate::runtimes::Runtime;
use client::{CallError, Capacity, SmolvmClient};

const MIB: u64 = 1024 * 1024;
/// smolvm's overlay disk (the guest's writable root layer) when fleetwire asks for none: its
/// own default (`docs/interop.md`).
const OVERLAY_GB: u32 = 10;

pub struct SmolvmDriver {
    client: SmolvmClient,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The desired instances of the last converge, in order.
    desired: Vec<DesiredInstance>,
    /// The deployment each machine was created for (or adopted as, by this agent process).
    created_for: HashMap<AppId, DeploymentId>,
    /// The last failed runtime call per instance other than create and start (those are
    /// [`Attempts`]), shown as the instance's message.
    errors: HashMap<AppId, String>,
    /// Create and start attempts per instance, for the restart policy's backoff.
    attempts: HashMap<AppId, Attempts>,
    /// CPU time per machine, kept monotonic across VM restarts.
    cpu: HashMap<AppId, CpuSeen>,
}

/// Failed attempts to bring an instance up (create or start), in one run.
#[derive(Debug, Clone)]
struct Attempts {
    deployment: DeploymentId,
    /// Failures in a row since the last successful start.
    failures: u64,
    /// No attempt before this.
    next_at: Instant,
    /// The last failure, when the last attempt failed.
    error: Option<String>,
    /// The restart policy's budget is spent: no more attempts for this deployment.
    gave_up: bool,
    /// Successful starts, and when the first happened.
    starts: u64,
    started_at: Option<Timestamp>,
}

impl Attempts {
    /// A deployment not tried yet: its first attempt is due `now`.
    fn new(deployment: DeploymentId, now: Instant) -> Attempts {
        Attempts {
            deployment,
            failures: 0,
            next_at: now,
            error: None,
            gave_up: false,
            starts: 0,
            started_at: None,
        }
    }
}

/// What the driver saw of a machine's `cpuMillis`, which smolvm counts per VM process (it
/// starts again from 0 when the machine restarts).
#[derive(Debug, Clone, Copy)]
struct CpuSeen {
    /// The first count seen by this agent process: CPU used before it is not counted again
    /// (the meters carry it over, `agent/meters.rs`).
    offset: u64,
    /// CPU of the VM processes that ended since.
    ended: u64,
    /// The current VM process's last count.
    last: u64,
    /// The total and when, at the previous observation: the CPU share is their slope.
    previous: Option<(u64, Instant)>,
}

impl CpuSeen {
    fn total(&self) -> u64 {
        (self.ended + self.last).saturating_sub(self.offset)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// smolvm's machine state in fleetwire's words (`docs/interop.md`).
fn state_of(runtime_state: &str) -> InstanceState {
    match runtime_state {
        "running" => InstanceState::Running,
        "stopped" => InstanceState::Stopped,
        // Created and never booted: waiting for its start.
        "created" => InstanceState::Starting,
        "failed" | "unreachable" => InstanceState::Failed,
        // A fork base after its first fork: it keeps its memory and runs no guest.
        "frozen" => InstanceState::Idle,
        _ => InstanceState::Pending,
    }
}

/// Why an instance could not be converged on its machine: shown as the instance's message.
#[derive(Debug, thiserror::Error)]
pub enum ConvergeError {
    #[error("app id {app_id:?} is not a smolvm machine name: {reason}")]
    NotAMachineName { app_id: String, reason: String },
    #[error("cannot ask smolvm for this instance: {0}")]
    NotACreateRequest(Rejection),
    #[error(transparent)]
    Call(#[from] CallError),
}

/// The machine an instance runs in is named after its app id.
fn machine_name(d: &DesiredInstance) -> Result<MachineName, ConvergeError> {
    d.app_id
        .as_str()
        .parse()
        .map_err(|e| ConvergeError::NotAMachineName {
            app_id: d.app_id.as_str().to_string(),
            reason: format!("{e}"),
        })
}

/// The create request for an instance: sizes rounded the way smolvm counts them.
fn create_request(d: &DesiredInstance) -> Result<CreateMachineRequest, ConvergeError> {
    let name = machine_name(d)?;
    let r = &d.resources;
    let body = serde_json::json!({
        "name": name,
        "cpus": r.vcpu_count.get(),
        "memoryMb": r.memory_mib.get(),
        // smolvm sizes its storage disk in whole GiB: round the request up, at least 1.
        "storageGb": r.disk_mib.div_ceil(1024).max(1),
        "overlayGb": OVERLAY_GB,
        "image": d.image,
        "network": d.network,
        "cmd": d.command,
        "env": d.env.iter().map(|(name, value)| serde_json::json!({"name": name, "value": value})).collect::<Vec<_>>(),
    });
    let body = strip_nulls(body);
    fleetwire_types::read_value_strict::<CreateMachineRequest>(&body)
        .map_err(ConvergeError::NotACreateRequest)
}

fn strip_nulls(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(map) = v.as_object_mut() {
        map.retain(|_, x| !x.is_null() && x.as_array().is_none_or(|a| !a.is_empty()));
    }
    v
}

impl SmolvmDriver {
    pub fn new(settings: &DriverSettings) -> Result<SmolvmDriver, DriverError> {
        Ok(SmolvmDriver {
            client: SmolvmClient::new(settings)?,
            state: Mutex::new(State::default()),
        })
    }

    /// The attempts record of `d`, new for a new deployment. Returns whether an attempt may be
    /// made now.
    fn may_attempt(&self, d: &DesiredInstance, now: Instant) -> bool {
        let mut state = lock(&self.state);
        let a = state
            .attempts
            .entry(d.app_id.clone())
            .or_insert_with(|| Attempts::new(d.deployment_id.clone(), now));
        if a.deployment != d.deployment_id {
            *a = Attempts::new(d.deployment_id.clone(), now);
        }
        !a.gave_up && now >= a.next_at
    }

    /// A failed create or start: the next attempt after the policy's backoff, or none once
    /// its budget (`maxRestarts` retries) is spent.
    fn failed(&self, d: &DesiredInstance, what: &str, err: &str, now: Instant) {
        let policy: RestartPolicy = d.restart_policy.clone().unwrap_or_default();
        let mut state = lock(&self.state);
        let Some(a) = state.attempts.get_mut(&d.app_id) else {
            return;
        };
        a.failures += 1;
        let budget = policy.max_restarts;
        if a.failures > budget {
            a.gave_up = true;
            a.error = Some(format!(
                "{what} failed {} times, no more attempts (restartPolicy.maxRestarts is {budget}): {err}",
                a.failures
            ));
        } else {
            let delay = backoff_ms(&policy, a.failures);
            a.next_at = now + Duration::from_millis(delay);
            a.error = Some(format!(
                "{what} failed (attempt {} of {}), next attempt in {:.1} s: {err}",
                a.failures,
                budget + 1,
                delay as f64 / 1000.0
            ));
        }
        tracing::warn!(
            app = d.app_id.as_str(),
            error = err,
            "runtime: {what} failed"
        );
    }

    fn started(&self, d: &DesiredInstance) {
        let mut state = lock(&self.state);
        if let Some(a) = state.attempts.get_mut(&d.app_id) {
            a.failures = 0;
            a.error = None;
            a.starts += 1;
            a.started_at = Some(Timestamp::now());
        }
    }

    async fn converge_one(
        &self,
        d: &DesiredInstance,
        found: Option<&RuntimeMachine>,
    ) -> Result<(), ConvergeError> {
        let name = machine_name(d)?;
        let name = name.as_str();
        let now = Instant::now();
        let created_for = lock(&self.state).created_for.get(&d.app_id).cloned();
        let mut machine = found.cloned();
        // A machine created for an older deployment is replaced: a new deployment boots afresh.
        if let (Some(_), Some(dep)) = (&machine, &created_for) {
            if *dep != d.deployment_id {
                self.client.delete(name).await?;
                lock(&self.state).created_for.remove(&d.app_id);
                machine = None;
            }
        }
        let mut created_now = false;
        let machine = match machine {
            Some(m) => {
                // Found at start: adopted as the deployment the document names.
                lock(&self.state)
                    .created_for
                    .entry(d.app_id.clone())
                    .or_insert_with(|| d.deployment_id.clone());
                m
            }
            None => {
                if !self.may_attempt(d, now) {
                    return Ok(());
                }
                let request = create_request(d)?;
                match self.client.create(&request).await {
                    Ok(m) => {
                        lock(&self.state)
                            .created_for
                            .insert(d.app_id.clone(), d.deployment_id.clone());
                        created_now = true;
                        m
                    }
                    Err(e) => {
                        self.failed(d, "create", &e.message, now);
                        return Ok(());
                    }
                }
            }
        };
        let running = machine.state == "running";
        match d.desired_state {
            DesiredInstanceState::Running if !running => {
                if !created_now && !self.may_attempt(d, now) {
                    return Ok(());
                }
                match self.client.start(name).await {
                    Ok(_) => self.started(d),
                    Err(e) => self.failed(d, "start", &e.message, now),
                }
                Ok(())
            }
            DesiredInstanceState::Stopped if running => {
                self.client.stop(name).await?;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Driver for SmolvmDriver {
    fn runtime(&self) -> Runtime {
        Runtime::Smolvm
    }

    async fn converge(&self, desired: &[DesiredInstance]) {
        {
            let mut state = lock(&self.state);
            state.desired = desired.to_vec();
            state
                .attempts
                .retain(|app, _| desired.iter().any(|d| d.app_id == *app));
        }
        let machines = match self.client.machines().await {
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
                errors.insert(d.app_id.clone(), err.to_string());
            }
        }
        // The agent owns its node's runtime: machines no document asks for are removed.
        for m in &machines {
            if !desired.iter().any(|d| d.app_id.as_str() == m.name.as_str()) {
                if let Err(err) = self.client.delete(&m.name).await {
                    tracing::warn!(machine = m.name.as_str(), error = %err, "runtime: cannot remove machine");
                }
                if let Ok(id) = m.name.parse::<AppId>() {
                    let mut state = lock(&self.state);
                    state.created_for.remove(&id);
                    state.cpu.remove(&id);
                }
            }
        }
        lock(&self.state).errors = errors;
    }

    async fn observe(&self) -> Observation {
        let health = self.client.health().await;
        let (capacity, stalled, capacity_problem) = match self.client.capacity().await {
            Ok(Capacity::Figures(c)) => (Some(c), false, None),
            Ok(Capacity::Stalled) => (
                None,
                true,
                Some("runtime stalled: GET /capacity answered 503".to_string()),
            ),
            Err(e) => (None, false, Some(e.message)),
        };
        let machines = self.client.machines().await;
        let problem = capacity_problem
            .or_else(|| health.as_ref().err().map(|e| e.message.clone()))
            .or_else(|| machines.as_ref().err().map(|e| e.message.clone()));
        let listed_ok = machines.is_ok();
        let listed: HashMap<String, RuntimeMachine> = machines
            .unwrap_or_default()
            .into_iter()
            .map(|m| (m.name.clone(), m))
            .collect();

        let now = Instant::now();
        let measured_at = Timestamp::now();
        let mut state = lock(&self.state);
        let mut instances = Vec::new();
        for d in state.desired.clone() {
            let machine = listed.get(d.app_id.as_str());
            let live = machine.filter(|m| m.state == "running");
            let cpu_share = match live.and_then(|m| m.cpu_millis) {
                Some(count) => {
                    let seen = state.cpu.entry(d.app_id.clone()).or_insert(CpuSeen {
                        offset: count,
                        ended: 0,
                        last: count,
                        previous: None,
                    });
                    if count < seen.last {
                        // A new VM process: the old one's CPU is kept.
                        seen.ended += seen.last;
                    }
                    seen.last = count;
                    let total = seen.total();
                    let share = seen.previous.and_then(|(before, at)| {
                        let wall = now.duration_since(at).as_millis() as f64;
                        (wall >= 1.0).then(|| total.saturating_sub(before) as f64 / wall)
                    });
                    seen.previous = Some((total, now));
                    share
                }
                None => {
                    if let Some(seen) = state.cpu.get_mut(&d.app_id) {
                        // No live process: its last count is final.
                        seen.ended += seen.last;
                        seen.last = 0;
                        seen.previous = None;
                    }
                    None
                }
            };
            let cpu_ms = state.cpu.get(&d.app_id).map_or(0, CpuSeen::total);
            let compute = live.and_then(|m| m.rss_mb).map(|rss| ComputeUsage {
                cpu_share,
                measured_at,
                memory_total_bytes: d.resources.memory_mib.get() * MIB,
                memory_used_bytes: rss.saturating_mul(MIB),
            });
            let attempts = state.attempts.get(&d.app_id);
            let attempt_error = attempts
                .and_then(|a| a.error.clone())
                .filter(|_| live.is_none());
            let mut instance_state = match machine {
                // Created and meant to stay down: it is where it should be.
                Some(m)
                    if m.state == "created" && d.desired_state == DesiredInstanceState::Stopped =>
                {
                    InstanceState::Stopped
                }
                Some(m) => state_of(&m.state),
                None => InstanceState::Pending,
            };
            if attempt_error.is_some() {
                instance_state = InstanceState::Failed;
            }
            let message = attempt_error
                .or_else(|| state.errors.get(&d.app_id).cloned())
                .or_else(|| match machine {
                    None if !listed_ok => problem.clone(),
                    Some(m) if state_of(&m.state) == InstanceState::Pending => {
                        Some(format!("runtime reports state {:?}", m.state))
                    }
                    _ => None,
                });
            instances.push(InstanceStatus {
                app_id: d.app_id.clone(),
                deployment_id: d.deployment_id.clone(),
                state: instance_state,
                resources: d.resources.clone(),
                // Starts after the first: smolvm reports no restarts inside the guest.
                restart_count: attempts.map_or(0, |a| a.starts.saturating_sub(1)),
                last_restart: None,
                last_exit_code: None,
                started_at: attempts
                    .and_then(|a| a.started_at)
                    .filter(|_| live.is_some()),
                compute,
                cpu_ms,
                message,
                volume: None,
                disk_used_bytes: machine
                    .and_then(|m| m.disk_used_mb)
                    .map(|mb| mb.saturating_mul(MIB)),
                pid: live.and_then(|m| m.pid),
                host_ports: Vec::new(),
                guest_ipv4: None,
                last_healthy_at: None,
                rx_bytes: 0,
                tx_bytes: 0,
            });
        }
        drop(state);
        instances.sort_by(|a, b| a.app_id.cmp(&b.app_id));

        let boot_id = capacity
            .as_ref()
            .map(|c| c.boot_id.clone())
            .filter(|b: &BootId| !b.is_empty());
        // Real disk: the machines' own figures (allocated blocks, stopped machines included)
        // when the list answered; /capacity's apparent sizes of running machines otherwise.
        let disk_used_mb: u64 = listed.values().filter_map(|m| m.disk_used_mb).sum();
        Observation {
            instances,
            runtime: RuntimeStatus {
                boot_id,
                cpu_usage: capacity.as_ref().map_or(0.0, |c| c.used_cpus.get()),
                memory_usage_mb: capacity.as_ref().map_or(0, |c| c.used_memory_mb),
                disk_usage_gb: if listed_ok {
                    disk_used_mb.div_ceil(1024)
                } else {
                    capacity.as_ref().map_or(0, |c| c.used_disk_gb)
                },
                capacity,
                stalled,
                problem,
                versions: agent_only_versions(),
                kvm_available: None,
            },
        }
    }

    async fn shutdown(&self) {
        // Machines belong to the runtime and outlive the agent: nothing to stop here.
    }
}
