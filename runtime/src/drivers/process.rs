//! The `process` driver: every machine is a supervised local process, so fleetwire runs on any
//! Linux host. Each tenant runs in its own process group, in its own volume directory, and is
//! restarted by the instance's restart policy; stopping sends SIGTERM to the group, then SIGKILL.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fleetwire_types::{
    AppId, BootId, DesiredInstance, InstanceState, ReportedRestart, StateMessage, TenantExit,
    Timestamp,
};
use rustix::process::Signal;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::driver::{Driver, DriverError, DriverSettings};
use super::observation::{InstanceStatus, Observation, RuntimeStatus, VolumeStatus};
use super::proc_stats::{self, RunSamples};
use super::restart_backoff::backoff_ms;
use super::supervision::{self, Control, Machines, Want};
use crate::runtimes::Runtime;

const MIB: u64 = 1024 * 1024;
/// How often a volume directory is walked for its size: walking is not free.
const VOLUME_MEASURE_EVERY: Duration = Duration::from_secs(10);

pub struct ProcessDriver {
    settings: DriverSettings,
    boot_id: BootId,
    machines: Machines<BootSpec, Watched>,
}

/// What a tenant process is started from; a change in any of it means a fresh boot.
#[derive(Debug, Clone, PartialEq)]
struct BootSpec {
    deployment_id: fleetwire_types::DeploymentId,
    command: Vec<String>,
    env: Vec<(String, String)>,
    resources: fleetwire_types::InstanceResources,
}

impl BootSpec {
    fn of(d: &DesiredInstance) -> BootSpec {
        let mut env: Vec<(String, String)> =
            d.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        env.sort();
        BootSpec {
            deployment_id: d.deployment_id.clone(),
            // None for an image-only instance: it cannot start here (see `spawn_tenant`).
            command: d
                .command
                .iter()
                .flat_map(|c| c.0.iter().map(|a| a.to_string()))
                .collect(),
            env,
            resources: d.resources.clone(),
        }
    }
}

type Machine = supervision::Machine<BootSpec, Watched>;

/// What `observe` reads of a machine; shared so that it reads it without holding the map lock.
struct Watched {
    app_id: AppId,
    spec: BootSpec,
    live: Arc<Mutex<Live>>,
    volume: PathBuf,
    /// The volume's used bytes, when they were measured (wall clock and monotonic).
    volume_used: Mutex<Option<(u64, Timestamp, Instant)>>,
}

/// The supervisor's account of its tenant, read by `observe`.
#[derive(Debug, Clone)]
struct Live {
    state: InstanceState,
    pid: Option<u32>,
    started_at: Option<Timestamp>,
    restart_count: u64,
    last_restart: Option<ReportedRestart>,
    last_exit_code: Option<i64>,
    message: Option<String>,
    /// CPU of the runs that have ended, in ms.
    cpu_ms_ended: u64,
    /// The running process's samples (for cpuShare).
    samples: RunSamples,
}

impl Live {
    fn new() -> Live {
        Live {
            state: InstanceState::Pending,
            pid: None,
            started_at: None,
            restart_count: 0,
            last_restart: None,
            last_exit_code: None,
            message: None,
            cpu_ms_ended: 0,
            samples: RunSamples::default(),
        }
    }

    fn cpu_ms(&self) -> u64 {
        self.cpu_ms_ended + self.samples.cpu_ms()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ProcessDriver {
    pub fn new(settings: &DriverSettings) -> Result<ProcessDriver, DriverError> {
        crate::atomic_file::create_private_dir(&settings.state_dir.join("volumes"))?;
        crate::atomic_file::create_private_dir(&settings.state_dir.join("logs"))?;
        reap_leftover_groups(&settings.state_dir.join("run"));
        crate::atomic_file::create_private_dir(&settings.state_dir.join("run"))?;
        let boot_id = super::driver::new_boot_id()?;
        Ok(ProcessDriver {
            settings: settings.clone(),
            boot_id,
            machines: Machines::new(),
        })
    }

    /// Where a tenant's stdout and stderr go: `<state dir>/logs/<app id>.log`.
    fn log_file(&self, app_id: &AppId) -> PathBuf {
        self.settings
            .state_dir
            .join("logs")
            .join(format!("{}.log", app_id.as_str()))
    }

    fn start_machine(
        &self,
        d: &DesiredInstance,
        spec: BootSpec,
        control: Control,
        predecessor: Option<JoinHandle<()>>,
    ) -> Machine {
        let volume = self
            .settings
            .state_dir
            .join("volumes")
            .join(d.app_id.as_str());
        let log = self.log_file(&d.app_id);
        let (tx, rx) = watch::channel(control);
        let live = Arc::new(Mutex::new(Live::new()));
        let task = tokio::spawn(supervise(Supervisor {
            spec: spec.clone(),
            volume: volume.clone(),
            log,
            group_file: self
                .settings
                .state_dir
                .join("run")
                .join(format!("{}.pgid", d.app_id.as_str())),
            control: rx,
            live: live.clone(),
            stop_timeout: self.settings.stop_timeout,
            predecessor,
        }));
        Machine {
            watched: Arc::new(Watched {
                app_id: d.app_id.clone(),
                spec: spec.clone(),
                live,
                volume,
                volume_used: Mutex::new(None),
            }),
            spec,
            control: tx,
            task,
        }
    }

    /// Reads /proc and the volume with no lock held, then records what it read.
    fn status_of(m: &Watched, now: Instant) -> InstanceStatus {
        let pid = lock(&m.live).pid;
        let sample = pid.and_then(proc_stats::sample);
        let volume = Self::volume_of(m, now);
        let mut live = lock(&m.live);
        // Recorded only if the run sampled is still the current one.
        if let (Some(sample), true) = (sample, live.pid == pid) {
            live.samples.record(sample, now);
        }
        let compute = live.pid.and(
            live.samples
                .compute(m.spec.resources.memory_mib.get() * MIB),
        );
        let status = InstanceStatus {
            app_id: m.app_id.clone(),
            deployment_id: m.spec.deployment_id.clone(),
            state: live.state,
            resources: m.spec.resources.clone(),
            restart_count: live.restart_count,
            last_restart: live.last_restart.clone(),
            last_exit_code: live.last_exit_code,
            started_at: live.started_at,
            compute,
            cpu_ms: live.cpu_ms(),
            message: live.message.clone(),
            volume: None,
            disk_used_bytes: None,
            pid: live.pid,
            host_ports: Vec::new(),
            guest_ipv4: None,
            last_healthy_at: None,
            rx_bytes: 0,
            tx_bytes: 0,
        };
        drop(live);
        InstanceStatus {
            volume: Some(volume),
            ..status
        }
    }

    fn volume_of(m: &Watched, now: Instant) -> VolumeStatus {
        let stale = lock(&m.volume_used)
            .as_ref()
            .is_none_or(|(_, _, at)| now.duration_since(*at) >= VOLUME_MEASURE_EVERY);
        if stale && m.volume.is_dir() {
            let bytes = proc_stats::tree_size(&m.volume);
            *lock(&m.volume_used) = Some((bytes, Timestamp::now(), now));
        }
        VolumeStatus {
            path: m.volume.clone(),
            size_bytes: m.spec.resources.disk_mib * MIB,
            used: lock(&m.volume_used)
                .as_ref()
                .map(|(bytes, at, _)| (*bytes, *at)),
        }
    }
}

#[async_trait]
impl Driver for ProcessDriver {
    fn runtime(&self) -> Runtime {
        Runtime::Process
    }

    fn output_file(&self, app_id: &AppId) -> Option<PathBuf> {
        Some(self.log_file(app_id))
    }

    async fn converge(&self, desired: &[DesiredInstance]) {
        // A new deployment is a fresh boot: the old process stops (its volume stays, the app
        // is the same), then the new supervisor starts.
        self.machines
            .converge(desired, BootSpec::of, |d, spec, control, predecessor| {
                self.start_machine(d, spec, control, predecessor)
            });
    }

    async fn observe(&self) -> Observation {
        let now = Instant::now();
        let (_, instances) = self.machines.observe(|m, retiring| {
            let status = Self::status_of(m, now);
            // A removed machine's volume is being deleted: not reported.
            if retiring {
                InstanceStatus {
                    volume: None,
                    ..status
                }
            } else {
                status
            }
        });
        let disk_bytes: u64 = instances
            .iter()
            .filter_map(|i| i.volume.as_ref()?.used.map(|(b, _)| b))
            .sum();
        let runtime = RuntimeStatus::of_agent(
            self.boot_id.clone(),
            &instances,
            disk_bytes,
            super::observation::agent_only_versions(),
            None,
        );
        Observation { instances, runtime }
    }

    async fn shutdown(&self) {
        // SIGTERM, then SIGKILL after the stop timeout.
        let within = self.settings.stop_timeout + Duration::from_secs(2);
        self.machines
            .stop_all(within, |m| lock(&m.live).pid.is_some())
            .await;
    }
}

struct Supervisor {
    spec: BootSpec,
    volume: PathBuf,
    log: PathBuf,
    /// Names the running tenant's process group, so that an agent that crashed can end it.
    group_file: PathBuf,
    control: watch::Receiver<Control>,
    live: Arc<Mutex<Live>>,
    stop_timeout: Duration,
    predecessor: Option<JoinHandle<()>>,
}

/// How a tenant run ended, with its CPU time read from the zombie before it was reaped.
struct Ended {
    exit: TenantExit,
    cpu_ms: u64,
}

impl Supervisor {
    fn current(&self) -> Control {
        self.control.borrow().clone()
    }

    fn update(&self, f: impl FnOnce(&mut Live)) {
        f(&mut lock(&self.live));
    }

    async fn wait_for_want(&mut self, ok: impl FnMut(Want) -> bool) -> Option<Want> {
        supervision::wait_for_want(&mut self.control, ok).await
    }
}

async fn supervise(mut sv: Supervisor) {
    if let Some(previous) = sv.predecessor.take() {
        let _ = previous.await;
    }
    // Restarts made in the current run; a run ends when the tenant stays up resetAfterMs.
    let mut attempt: u64 = 0;
    loop {
        if sv.current().want == Want::Stopped {
            sv.update(|l| l.state = InstanceState::Stopped);
        }
        let want = sv.wait_for_want(|w| w != Want::Stopped).await;
        let Some(Want::Running) = want else {
            break;
        };

        // The run's uptime counts from the spawn, not from after its bookkeeping (the group
        // file's fsync can take longer than a short resetAfterMs on a busy disk).
        let started = Instant::now();
        let (pid, exited) = match spawn_tenant(&sv.spec, &sv.volume, &sv.log, &sv.group_file) {
            Ok(started) => started,
            Err(err) => {
                tracing::warn!(error = %err, "tenant did not start");
                sv.update(|l| {
                    l.state = InstanceState::Failed;
                    l.message = Some(match sv.spec.command.first() {
                        Some(program) => format!("could not start {program:?}: {err}"),
                        None => format!("could not start: {err}"),
                    });
                });
                // Try again when the desired document changes.
                if sv.control.changed().await.is_err() {
                    break;
                }
                continue;
            }
        };
        sv.update(|l| {
            l.state = InstanceState::Running;
            l.pid = Some(pid);
            l.started_at = Some(Timestamp::now());
            l.message = None;
            l.samples = RunSamples::default();
        });

        let mut exited = exited;
        let ended = loop {
            tokio::select! {
                ended = &mut exited => break ended.ok(),
                changed = sv.control.changed() => {
                    let want = if changed.is_ok() { sv.current().want } else { Want::Gone };
                    if want != Want::Running {
                        sv.update(|l| l.state = InstanceState::Stopping);
                        let ended = stop_group(pid, sv.stop_timeout, &mut exited).await;
                        record_end(&sv, ended.as_ref());
                        sv.update(|l| l.state = InstanceState::Stopped);
                        attempt = 0;
                        break None;
                    }
                }
            }
        };
        let Some(ended) = ended else {
            if sv.current().want == Want::Gone || sv.control.has_changed().is_err() {
                break;
            }
            continue;
        };

        // The tenant exited on its own: restart it within its budget.
        record_end(&sv, Some(&ended));
        let policy = sv.current().policy;
        if started.elapsed() >= Duration::from_millis(policy.reset_after_ms) {
            attempt = 0;
        }
        let how = describe_exit(&ended.exit);
        if attempt >= policy.max_restarts {
            sv.update(|l| {
                l.state = InstanceState::Failed;
                l.message = Some(format!(
                    "{how}; gave up after {} restart{} (budget {})",
                    attempt,
                    if attempt == 1 { "" } else { "s" },
                    policy.max_restarts
                ));
            });
            // Stay failed until the desired document asks again (stopped, then running).
            if sv.wait_for_want(|w| w != Want::Running).await != Some(Want::Stopped) {
                break;
            }
            sv.update(|l| l.state = InstanceState::Stopped);
            attempt = 0;
            continue;
        }
        attempt += 1;
        let backoff = backoff_ms(&policy, attempt);
        sv.update(|l| {
            l.restart_count += 1;
            l.state = InstanceState::Starting;
            l.last_restart = Some(ReportedRestart {
                at: Timestamp::now(),
                // 32-bit on the wire, as nibrunner has them (docs/interop.md); a budget past
                // that is reported as the largest it can say.
                attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
                budget: u32::try_from(policy.max_restarts).unwrap_or(u32::MAX),
                backoff_ms: backoff,
                exit: ended.exit.clone(),
                reason: message(&format!("{how}; restarting in {backoff} ms")),
            });
        });
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(backoff)) => {}
            _ = sv.wait_for_want(|w| w != Want::Running) => {
                sv.update(|l| l.state = InstanceState::Stopped);
                attempt = 0;
            }
        }
    }
    // Removed from the desired document: the machine's volume goes with it.
    if sv.current().want == Want::Gone {
        let _ = std::fs::remove_dir_all(&sv.volume);
    }
}

fn record_end(sv: &Supervisor, ended: Option<&Ended>) {
    let _ = std::fs::remove_file(&sv.group_file);
    sv.update(|l| {
        l.pid = None;
        l.samples = RunSamples::default();
        if let Some(e) = ended {
            l.cpu_ms_ended += e.cpu_ms;
            l.last_exit_code = Some(exit_code(&e.exit));
        }
    });
}

/// The exit code a shell would show: the code, or 128 plus the signal number.
fn exit_code(exit: &TenantExit) -> i64 {
    match exit {
        TenantExit::Code(c) => i64::from(*c),
        TenantExit::Signal(s) => 128 + i64::from(*s),
    }
}

/// How a waited-for child ended: its exit code or the signal that killed it (-1 when the wait
/// failed).
pub(super) fn exit_of(waited: std::io::Result<std::process::ExitStatus>) -> TenantExit {
    match waited {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => TenantExit::Code(code),
            (None, Some(sig)) => TenantExit::Signal(sig),
            (None, None) => TenantExit::Code(-1),
        },
        Err(_) => TenantExit::Code(-1),
    }
}

pub(super) fn describe_exit(exit: &TenantExit) -> String {
    match exit {
        TenantExit::Code(c) => format!("exited with code {c}"),
        TenantExit::Signal(s) => format!("killed by signal {s}"),
    }
}

/// A `StateMessage` (at most `StateMessage::MAX_LENGTH` characters).
pub fn message(text: &str) -> StateMessage {
    StateMessage::truncated(text)
}

/// Starts the tenant in a new process group, its volume as working directory, output appended
/// to its log. Returns its pid and the end of the run.
fn spawn_tenant(
    spec: &BootSpec,
    volume: &Path,
    log: &Path,
    group_file: &Path,
) -> std::io::Result<(u32, oneshot::Receiver<Ended>)> {
    crate::atomic_file::create_private_dir(volume)?;
    let out = crate::atomic_file::open_private_append(log)?;
    let Some(program) = spec.command.first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the instance names no command; this host runs commands, not images (an image needs a smolvm host)",
        ));
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(&spec.command[1..])
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(volume)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0);
    let agent = std::process::id();
    let mut record = GroupRecord::new(group_file)?;
    // SAFETY: the closure makes only system calls (prctl, getppid, and in `write_own` getpid,
    // open, read, write, close and rename), all async-signal-safe, on memory allocated before
    // the fork; it allocates nothing, which a child forked from a threaded process must not.
    // prctl asks the kernel to SIGKILL the tenant if the agent dies, so a crashed agent leaves
    // no unsupervised tenant behind. An agent killed between the fork and the prctl would not
    // be noticed (the child would already belong to init), so the child checks that its parent
    // is still the agent after asking, and does not run the tenant if not. The group is
    // recorded before the exec, so nothing the tenant starts can exist unrecorded (docs/agent.md,
    // "Restarts and crashes").
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            use rustix::process::{getppid, set_parent_process_death_signal};
            set_parent_process_death_signal(Some(Signal::KILL))?;
            if getppid().map(|p| p.as_raw_nonzero().get() as u32) != Some(agent) {
                // No one reads this: the agent that would is gone.
                return Err(rustix::io::Errno::SRCH.into());
            }
            record.write_own()
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id();
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name(format!("wait-{pid}"))
        .spawn(move || {
            // Wait without reaping, read the zombie's final CPU time, then reap.
            use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};
            if let Some(child_pid) = Pid::from_raw(pid as i32) {
                let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
                while let Err(rustix::io::Errno::INTR) = waitid(WaitId::Pid(child_pid), options) {}
            }
            let cpu_ms = proc_stats::sample(pid).map_or(0, |s| s.cpu_ms);
            let exit = exit_of(child.wait());
            let _ = tx.send(Ended { exit, cpu_ms });
        })?;
    Ok((pid, rx))
}

/// `run/<appId>.pgid`: the tenant's process group, named by its leader's pid and start time
/// ("pid start\n"), written by the forked child itself before it execs the tenant. Recorded
/// after the spawn instead, an agent killed in between would leave what the tenant had already
/// started in its group to init, unrecorded: `agent::kill_reconcile` caught that. No fsync:
/// the record must outlive the agent's process, not the machine, whose reboot ends the tenants
/// too.
struct GroupRecord {
    path: std::ffi::CString,
    temp: std::ffi::CString,
    stat: [u8; 1024],
    line: [u8; 48],
}

impl GroupRecord {
    /// Everything the child needs, allocated before the fork.
    fn new(path: &Path) -> std::io::Result<GroupRecord> {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| {
            std::ffi::CString::new(p.as_os_str().as_bytes())
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
        };
        let mut temp = path.as_os_str().to_owned();
        temp.push(".tmp");
        Ok(GroupRecord {
            path: c(path)?,
            temp: c(Path::new(&temp))?,
            stat: [0; 1024],
            line: [0; 48],
        })
    }

    /// In the forked child: records the child's own group (it leads it: `process_group(0)`),
    /// replacing the file whole. Allocates nothing.
    fn write_own(&mut self) -> std::io::Result<()> {
        use rustix::fs::{open, rename, Mode, OFlags};
        let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
        let stat = open(
            c"/proc/self/stat",
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut read = 0;
        while read < self.stat.len() {
            match rustix::io::read(&stat, &mut self.stat[read..])? {
                0 => break,
                n => read += n,
            }
        }
        drop(stat);
        let started = proc_stats::start_time_in(&self.stat[..read])
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
        let mut len = 0;
        for part in [
            itoa::Buffer::new().format(pid).as_bytes(),
            b" ".as_slice(),
            itoa::Buffer::new().format(started).as_bytes(),
            b"\n".as_slice(),
        ] {
            self.line[len..len + part.len()].copy_from_slice(part);
            len += part.len();
        }
        let file = open(
            self.temp.as_c_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )?;
        let mut written = 0;
        while written < len {
            match rustix::io::write(&file, &self.line[written..len])? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => written += n,
            }
        }
        drop(file);
        rename(self.temp.as_c_str(), self.path.as_c_str())?;
        Ok(())
    }
}

/// The tenant dies with the agent (PR_SET_PDEATHSIG), but what it started may not: at start,
/// SIGKILL the process groups a previous agent left running. A group is named by its leader's
/// pid and start time, so a pid reused since is never touched.
fn reap_leftover_groups(run_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let mut parts = text.split_whitespace();
        let (Some(Ok(pgid)), Some(Ok(started))) = (
            parts.next().map(str::parse::<u32>),
            parts.next().map(str::parse::<u64>),
        ) else {
            let _ = std::fs::remove_file(entry.path());
            continue;
        };
        // A live process with the leader's pid is the leader only if it started when it did; with
        // the leader gone, its members keep the group id from being reused.
        let ours = match proc_stats::start_time(pgid) {
            Some(t) => t == started,
            None => proc_stats::group_alive(pgid),
        };
        if ours {
            tracing::warn!(
                pgid,
                "ending a tenant process group left by a previous agent"
            );
            signal_group(pgid, Signal::KILL);
        }
        let _ = std::fs::remove_file(entry.path());
    }
}

/// SIGTERM to the tenant's process group; SIGKILL after `timeout` if it is still there.
async fn stop_group(
    pid: u32,
    timeout: Duration,
    exited: &mut oneshot::Receiver<Ended>,
) -> Option<Ended> {
    signal_group(pid, Signal::TERM);
    match tokio::time::timeout(timeout, &mut *exited).await {
        Ok(ended) => ended.ok(),
        Err(_) => {
            signal_group(pid, Signal::KILL);
            exited.await.ok()
        }
    }
}

/// `signal` to the process group the tenant leads (Err: the group is gone).
fn signal_group(pid: u32, signal: Signal) {
    if let Some(group) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process_group(group, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The group is recorded before the tenant runs: a tenant that reads the record first
    /// thing finds its own pid there, every time. Written after the start returned, as it
    /// was, the record was not there yet for a tenant this quick.
    #[tokio::test]
    async fn a_tenant_finds_its_group_recorded_when_it_starts() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("app.pgid");
        let log = dir.path().join("app.log");
        let spec = BootSpec {
            deployment_id: "d1".parse().unwrap(),
            command: vec![
                "sh".into(),
                "-c".into(),
                format!("echo \"$$ $(cat {})\"", record.display()),
            ],
            env: Vec::new(),
            resources: serde_json::from_value(
                serde_json::json!({"vcpuCount": 1, "memoryMib": 64, "diskMib": 0}),
            )
            .unwrap(),
        };
        for _ in 0..20 {
            let _ = std::fs::remove_file(&record);
            let (pid, ended) = spawn_tenant(&spec, &dir.path().join("volume"), &log, &record)
                .expect("the tenant starts");
            ended.await.unwrap();
            let line = std::fs::read_to_string(&log).unwrap();
            let line = line.lines().last().unwrap().to_string();
            let fields: Vec<&str> = line.split_whitespace().collect();
            // "$$ pid start": the shell's pid, then the record it found.
            assert_eq!(fields.len(), 3, "{line:?}");
            assert_eq!(fields[0], pid.to_string(), "{line:?}");
            assert_eq!(fields[1], pid.to_string(), "{line:?}");
            // The leader's start, which came after this test's own.
            let started: u64 = fields[2].parse().unwrap();
            assert!(started >= proc_stats::start_time(std::process::id()).unwrap());
        }
    }
}
