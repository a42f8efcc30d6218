//! One VM's supervisor: prepares its files, starts QEMU (or takes over the one a previous agent
//! left), waits for the guest to answer, cold-boots it again under the restart policy when QEMU
//! dies, and stops it when it is no longer wanted. The restart budget and backoff are the
//! process driver's (`restart_backoff`); the cold boots are the host's, not restarts by a
//! supervisor inside the guest, so they are told in the instance's message and not counted in
//! `restartCount` (seed 001).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetwire_types::{
    AppId, DeploymentId, DesiredInstance, InstanceResources, InstanceState, KernelBoot, TenantExit,
    Timestamp,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::argv::{BootMedia, Launch, DEFAULT_CMDLINE};
use super::console::with_console;
use super::network::Tap;
use super::qemu_process::QemuProcess;
use super::shared::Shared;
use super::{disk, health, qmp};
use crate::drivers::proc_stats::RunSamples;
use crate::drivers::process::describe_exit;
use crate::drivers::qemu_settings::QemuSettings;
use crate::drivers::restart_backoff::backoff_ms;
use crate::drivers::supervision::{self, Control, Want};

/// The guest port a disk-image boot always forwards: SSH, as PPN's host agent does.
const SSH: u16 = 22;
/// How often a running guest is looked at (QMP until it runs, its first port always).
const TICK: Duration = Duration::from_secs(1);

/// What a guest boots from; a change in any of it means a fresh boot.
#[derive(Debug, Clone, PartialEq)]
pub struct BootSpec {
    pub deployment_id: DeploymentId,
    pub source: Source,
    pub guest_ports: Vec<u16>,
    pub resources: InstanceResources,
    /// The guest's hostname in its cloud-init seed: its `vmType` (PPN's hostname), else its id.
    pub hostname: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Kernel(KernelBoot),
    Disk(String),
    /// Neither, and no VM_BASE_IMAGE to fall back on (or an image or command, which a qemu
    /// node does not run): the reason, for the instance's message.
    Nothing(String),
}

impl BootSpec {
    pub fn of(d: &DesiredInstance, q: &QemuSettings) -> BootSpec {
        let source = match (&d.boot, &d.disk_image, &q.base_image) {
            (Some(boot), _, _) => Source::Kernel(boot.clone()),
            (None, Some(image), _) => Source::Disk(image.to_string()),
            _ if d.image.is_some() || d.command.is_some() => Source::Nothing(
                "a qemu node boots a kernel or a disk image, not an OCI image or a command".into(),
            ),
            (None, None, Some(base)) => Source::Disk(base.clone()),
            (None, None, None) => Source::Nothing(
                "the instance names no kernel (boot) or disk image, and this node has no VM_BASE_IMAGE".into(),
            ),
        };
        let hostname = d
            .vm_type
            .as_ref()
            .map(|t| t.to_string())
            .filter(|t| {
                !t.is_empty()
                    && t.len() <= 63
                    && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            })
            .unwrap_or_else(|| d.app_id.to_string());
        BootSpec {
            deployment_id: d.deployment_id.clone(),
            source,
            guest_ports: d.guest_ports.iter().map(|p| p.get()).collect(),
            resources: d.resources.clone(),
            hostname,
        }
    }

    /// A VM a previous agent left and nobody wants: only stopped and removed.
    pub fn leftover(app: &AppId) -> BootSpec {
        BootSpec {
            deployment_id: app.as_str().parse().expect("an AppId is a DeploymentId"),
            source: Source::Nothing("no longer desired".into()),
            guest_ports: Vec::new(),
            resources: InstanceResources {
                vcpu_count: std::num::NonZeroU64::MIN,
                memory_mib: std::num::NonZeroU64::MIN,
                disk_mib: 0,
            },
            hostname: app.to_string(),
        }
    }

    /// The guest ports forwarded: those asked for, then SSH for a disk-image boot.
    pub fn forwarded_guest_ports(&self) -> Vec<u16> {
        let mut ports = self.guest_ports.clone();
        if matches!(self.source, Source::Disk(_)) && !ports.contains(&SSH) {
            ports.push(SSH);
        }
        ports
    }

    /// The image directory's files it boots, for `versions.guestImage`.
    pub fn image_names(&self) -> String {
        match &self.source {
            Source::Kernel(k) => match &k.initrd {
                Some(initrd) => format!("{}+{}", k.kernel.as_str(), initrd.as_str()),
                None => k.kernel.to_string(),
            },
            Source::Disk(image) => image.clone(),
            Source::Nothing(_) => String::new(),
        }
    }
}

/// A VM's files: its folder (overlay, seed, QMP socket, pid file, forwards) and its log.
pub struct VmFiles {
    pub dir: PathBuf,
    pub overlay: PathBuf,
    pub seed: PathBuf,
    pub qmp: PathBuf,
    pub pid: PathBuf,
    pub forwards: PathBuf,
    pub log: PathBuf,
}

impl VmFiles {
    pub fn of(shared: &Shared, app: &AppId) -> VmFiles {
        let dir = shared.vm_root.join(app.as_str());
        VmFiles {
            overlay: dir.join("disk.qcow2"),
            seed: dir.join("seed.iso"),
            qmp: dir.join("qmp.sock"),
            pid: dir.join("qemu.pid"),
            forwards: dir.join("forwards"),
            log: shared.logs.join(format!("{}.log", app.as_str())),
            dir,
        }
    }

    /// The forwards a running QEMU was started with ("host guest" lines).
    pub fn read_forwards(&self) -> Vec<(u16, u16)> {
        std::fs::read_to_string(&self.forwards)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (h, g) = l.split_once(' ')?;
                Some((h.parse().ok()?, g.parse().ok()?))
            })
            .collect()
    }

    fn write_forwards(&self, forwards: &[(u16, u16)]) -> std::io::Result<()> {
        let text: String = forwards.iter().map(|(h, g)| format!("{h} {g}\n")).collect();
        crate::atomic_file::write(&self.forwards, text.as_bytes(), 0o644)
    }
}

/// The supervisor's account of its guest, read by `observe`.
#[derive(Debug, Clone)]
pub struct Live {
    pub state: InstanceState,
    pub pid: Option<u32>,
    pub started_at: Option<Timestamp>,
    pub message: Option<String>,
    pub forwards: Vec<(u16, u16)>,
    pub last_healthy_at: Option<Timestamp>,
    /// On a bridge: the guest's address, once the host's neighbour table has it.
    pub bridge_ipv4: Option<std::net::Ipv4Addr>,
    /// On a bridge: the tap device's counts (to the guest, from it) when this agent first read
    /// them, which a previous agent has metered already.
    pub bytes_base: Option<(u64, u64)>,
    /// CPU of QEMU, in ms, when this agent found it running (metered by the previous agent).
    pub cpu_ms_found: u64,
    pub cpu_ms_ended: u64,
    pub samples: RunSamples,
}

impl Live {
    pub fn new() -> Live {
        Live {
            state: InstanceState::Pending,
            pid: None,
            started_at: None,
            message: None,
            forwards: Vec::new(),
            last_healthy_at: None,
            bridge_ipv4: None,
            bytes_base: None,
            cpu_ms_found: 0,
            cpu_ms_ended: 0,
            samples: RunSamples::default(),
        }
    }
}

pub struct Supervisor {
    pub app_id: AppId,
    pub spec: BootSpec,
    pub files: VmFiles,
    pub shared: Arc<Shared>,
    /// The VM's (host, guest) forwards, or why it has none (no free host port).
    pub forwards: Result<Vec<(u16, u16)>, String>,
    pub control: watch::Receiver<Control>,
    pub live: Arc<Mutex<Live>>,
    pub predecessor: Option<JoinHandle<()>>,
    /// The VM's tap device, when the node puts guests on a bridge (`VM_BRIDGE`).
    pub tap: Option<Tap>,
}

/// How a run of QEMU ended.
enum RunEnd {
    /// QEMU ended on its own; its exit when it was this agent's child.
    Died(Option<TenantExit>),
    /// The guest never answered on its first port within VM_GUEST_BOOT_TIMEOUT_S.
    NeverUp,
    /// The desired document asks for something else; QEMU is still running.
    Asked,
}

impl Supervisor {
    fn current(&self) -> Control {
        self.control.borrow().clone()
    }

    fn update(&self, f: impl FnOnce(&mut Live)) {
        f(&mut self.live.lock().unwrap_or_else(|p| p.into_inner()));
    }

    async fn wait_for_want(&mut self, ok: impl FnMut(Want) -> bool) -> Option<Want> {
        supervision::wait_for_want(&mut self.control, ok).await
    }

    /// Failed, `what` and the console's last lines its message, until the desired document
    /// asks again (stopped, then running): true then, false when the VM is gone.
    async fn failed_until_asked_again(&mut self, what: &str) -> bool {
        self.update(|l| {
            l.state = InstanceState::Failed;
            l.message = Some(with_console(what, &self.files.log));
        });
        self.wait_for_want(|w| w != Want::Running).await == Some(Want::Stopped)
    }

    /// The files QEMU is started with, checked and made; the reason when they cannot be.
    fn prepare(&self) -> Result<Launch, String> {
        let forwards = self.forwards.clone()?;
        let q = &self.shared.qemu;
        let media = match &self.spec.source {
            Source::Nothing(why) => return Err(why.clone()),
            Source::Kernel(k) => BootMedia::Kernel {
                kernel: disk::image_file(&q.image_dir, "kernel", k.kernel.as_str())?,
                initrd: k
                    .initrd
                    .as_ref()
                    .map(|i| disk::image_file(&q.image_dir, "initrd", i.as_str()))
                    .transpose()?,
                cmdline: k
                    .cmdline
                    .as_ref()
                    .map_or_else(|| DEFAULT_CMDLINE.to_string(), |c| c.to_string()),
            },
            Source::Disk(image) => {
                let base = disk::image_file(&q.image_dir, "base image", image)?;
                std::fs::create_dir_all(&self.files.dir)
                    .map_err(|e| format!("{}: {e}", self.files.dir.display()))?;
                disk::ensure_overlay(&base, &self.files.overlay)?;
                if !self.files.seed.exists() {
                    disk::write_seed(
                        &self.files.seed,
                        self.app_id.as_str(),
                        &self.spec.hostname,
                        q.ssh_pubkey.as_deref(),
                    )?;
                }
                BootMedia::Disk {
                    overlay: self.files.overlay.clone(),
                    seed: self.files.seed.clone(),
                }
            }
        };
        std::fs::create_dir_all(&self.files.dir)
            .map_err(|e| format!("{}: {e}", self.files.dir.display()))?;
        // A unix socket's path has room for 107 bytes.
        if self.files.qmp.as_os_str().len() > 107 {
            return Err(format!(
                "the QMP socket path {} is longer than a unix socket allows: use a shorter VM_STATE_DIR",
                self.files.qmp.display()
            ));
        }
        self.files
            .write_forwards(&forwards)
            .map_err(|e| format!("{}: {e}", self.files.forwards.display()))?;
        if let (Some(tap), Some(bridge)) = (&self.tap, &q.bridge) {
            tap.ensure_on(bridge)?;
        }
        Ok(Launch {
            name: self.app_id.to_string(),
            memory_mib: self.spec.resources.memory_mib.get(),
            vcpus: self.spec.resources.vcpu_count.get(),
            kvm: self.shared.kvm.use_kvm(q.accel),
            media,
            forwards,
            tap: self.tap.clone(),
            qmp_socket: self.files.qmp.clone(),
            pid_file: self.files.pid.clone(),
            console_log: self.files.log.clone(),
        })
    }

    /// Watches a running QEMU until it ends, the guest never comes up, or the control changes.
    async fn watch(&mut self, qemu: &mut QemuProcess, adopted: bool) -> RunEnd {
        let started = Instant::now();
        // Checked through its forward (user networking), or at the guest's own address on the
        // bridge once the host knows it.
        let first_port = match &self.tap {
            None => self.forwards.as_ref().ok().and_then(|f| f.first().copied()),
            Some(_) => self.spec.forwarded_guest_ports().first().map(|g| (0, *g)),
        };
        let mut up = adopted || first_port.is_none();
        let mut ticker = tokio::time::interval(TICK);
        loop {
            tokio::select! {
                exit = qemu.ended() => return RunEnd::Died(exit),
                changed = self.control.changed() => {
                    if changed.is_err() || self.current().want != Want::Running {
                        return RunEnd::Asked;
                    }
                }
                _ = ticker.tick() => {
                    let state = self.live.lock().unwrap_or_else(|p| p.into_inner()).state;
                    if state == InstanceState::Starting
                        && qmp::status(&self.files.qmp).await.is_ok_and(|(running, _)| running)
                    {
                        self.update(|l| l.state = InstanceState::Running);
                    }
                    let target = match (&self.tap, &self.shared.qemu.bridge, first_port) {
                        (None, _, Some((host, _))) => {
                            Some(std::net::SocketAddr::from(([127, 0, 0, 1], host)))
                        }
                        (Some(tap), Some(bridge), Some((_, guest))) => {
                            let ip = tap.guest_ipv4(bridge);
                            self.update(|l| l.bridge_ipv4 = ip);
                            ip.map(|ip| std::net::SocketAddr::from((ip, guest)))
                        }
                        _ => None,
                    };
                    if let Some(target) = target {
                        if health::answers(target, TICK).await {
                            up = true;
                            self.update(|l| l.last_healthy_at = Some(Timestamp::now()));
                        }
                    }
                    if !up && started.elapsed() >= self.shared.qemu.boot_timeout {
                        return RunEnd::NeverUp;
                    }
                }
            }
        }
    }

    /// ACPI power-down, then quit at 80 % of the stop timeout, then SIGKILL at 90 %: QEMU is
    /// gone within `VM_STOP_TIMEOUT_MS`, as a process is, also when the guest ignores the
    /// power button (docs/agent.md, "qemu").
    async fn stop(&self, qemu: &mut QemuProcess) {
        let timeout = self.shared.stop_timeout;
        if qmp::powerdown(&self.files.qmp).await.is_ok()
            && tokio::time::timeout(timeout * 8 / 10, qemu.ended())
                .await
                .is_ok()
        {
            return;
        }
        if qmp::quit(&self.files.qmp).await.is_ok()
            && tokio::time::timeout(timeout / 10, qemu.ended())
                .await
                .is_ok()
        {
            return;
        }
        qemu.kill();
        let _ = qemu.ended().await;
    }

    fn ended(&self) {
        let _ = std::fs::remove_file(&self.files.pid);
        self.update(|l| {
            l.cpu_ms_ended += l.samples.cpu_ms().saturating_sub(l.cpu_ms_found);
            l.samples = RunSamples::default();
            l.cpu_ms_found = 0;
            l.bridge_ipv4 = None;
            l.pid = None;
        });
    }
}

pub async fn supervise(mut sv: Supervisor) {
    if let Some(previous) = sv.predecessor.take() {
        let _ = previous.await;
    }
    // A QEMU a previous agent started for this VM is taken over, never started twice.
    let mut found = QemuProcess::find(&sv.files.pid, &sv.files.qmp);
    if let (Some(_), Ok(forwards)) = (&found, &sv.forwards) {
        let running = sv.files.read_forwards();
        if &running != forwards {
            // Ports this agent assigned otherwise than the running QEMU forwards: the running
            // QEMU is what the guest's users reach.
            sv.forwards = Ok(running);
        }
    }
    let mut attempt: u64 = 0;
    // Why the guest was last cold-booted by the host, kept in the message while it runs.
    let mut cold_boot_note: Option<String> = None;
    loop {
        let want = if found.is_some() {
            Some(sv.current().want)
        } else {
            if sv.current().want == Want::Stopped {
                sv.update(|l| l.state = InstanceState::Stopped);
            }
            sv.wait_for_want(|w| w != Want::Stopped).await
        };
        if want != Some(Want::Running) {
            if let Some(mut qemu) = found.take() {
                sv.update(|l| l.state = InstanceState::Stopping);
                sv.stop(&mut qemu).await;
                sv.ended();
                sv.update(|l| l.state = InstanceState::Stopped);
            }
            if want == Some(Want::Stopped) {
                continue;
            }
            break;
        }

        let adopted = found.is_some();
        let mut qemu = match found.take() {
            Some(qemu) => qemu,
            None => {
                let started = sv.prepare().and_then(|launch| {
                    QemuProcess::spawn(&sv.shared.binary, &launch)
                        .map_err(|e| format!("could not start {}: {e}", sv.shared.binary.display()))
                });
                match started {
                    Ok(qemu) => qemu,
                    Err(why) => {
                        tracing::warn!(vm = sv.app_id.as_str(), error = %why, "guest did not start");
                        sv.update(|l| {
                            l.state = InstanceState::Failed;
                            l.message = Some(why);
                        });
                        // Try again when the desired document changes.
                        if sv.control.changed().await.is_err() {
                            break;
                        }
                        continue;
                    }
                }
            }
        };
        let forwards = sv.forwards.clone().unwrap_or_default();
        // When QEMU started, not when this agent first saw it: one found again after an agent
        // restart keeps its start.
        let started_at = crate::drivers::proc_stats::started_at(qemu.pid)
            .map_or_else(Timestamp::now, |t| {
                chrono::DateTime::<chrono::Utc>::from(t).into()
            });
        // The CPU a found QEMU used before this agent, metered by the previous one.
        let cpu_ms_found = if adopted {
            crate::drivers::proc_stats::sample(qemu.pid).map_or(0, |s| s.cpu_ms)
        } else {
            0
        };
        sv.update(|l| {
            l.state = InstanceState::Starting;
            l.pid = Some(qemu.pid);
            l.started_at = Some(started_at);
            l.cpu_ms_found = cpu_ms_found;
            l.forwards = forwards;
            l.message = cold_boot_note.clone();
            l.samples = RunSamples::default();
        });
        let run_started = Instant::now();

        match sv.watch(&mut qemu, adopted).await {
            RunEnd::Asked => {
                sv.update(|l| l.state = InstanceState::Stopping);
                sv.stop(&mut qemu).await;
                sv.ended();
                sv.update(|l| l.state = InstanceState::Stopped);
                attempt = 0;
                cold_boot_note = None;
                if sv.current().want == Want::Gone || sv.control.has_changed().is_err() {
                    break;
                }
            }
            RunEnd::NeverUp => {
                qemu.kill();
                let _ = qemu.ended().await;
                sv.ended();
                let what = format!(
                    "the guest did not answer on guest port {} within {} s (VM_GUEST_BOOT_TIMEOUT_S)",
                    sv.spec.forwarded_guest_ports().first().copied().unwrap_or_default(),
                    sv.shared.qemu.boot_timeout.as_secs()
                );
                if !sv.failed_until_asked_again(&what).await {
                    break;
                }
                attempt = 0;
                cold_boot_note = None;
            }
            RunEnd::Died(exit) => {
                sv.ended();
                let how = match &exit {
                    Some(exit) => format!("QEMU {}", describe_exit(exit)),
                    None => "QEMU (started by a previous agent) ended".to_string(),
                };
                let policy = sv.current().policy;
                if run_started.elapsed() >= Duration::from_millis(policy.reset_after_ms) {
                    attempt = 0;
                }
                if attempt >= policy.max_restarts {
                    let what = format!(
                        "{how}; gave up after {attempt} cold boot{} (budget {})",
                        if attempt == 1 { "" } else { "s" },
                        policy.max_restarts
                    );
                    if !sv.failed_until_asked_again(&what).await {
                        break;
                    }
                    attempt = 0;
                    cold_boot_note = None;
                    continue;
                }
                attempt += 1;
                let backoff = backoff_ms(&policy, attempt);
                let note = with_console(
                    &format!(
                        "{how}; cold boot {attempt} of {} by the host after {backoff} ms",
                        policy.max_restarts
                    ),
                    &sv.files.log,
                );
                tracing::warn!(vm = sv.app_id.as_str(), "{note}");
                sv.update(|l| {
                    l.state = InstanceState::Starting;
                    l.message = Some(note.clone());
                });
                cold_boot_note = Some(note);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(backoff)) => {}
                    _ = sv.wait_for_want(|w| w != Want::Running) => {
                        sv.update(|l| l.state = InstanceState::Stopped);
                        attempt = 0;
                        cold_boot_note = None;
                    }
                }
            }
        }
    }
    // Removed from the desired document: its overlay, seed and host ports go with it. (A
    // supervisor replaced by a new deployment's leaves them to its successor.)
    if sv.current().want == Want::Gone {
        let _ = std::fs::remove_dir_all(&sv.files.dir);
        // Its tap device too, made for it on a bridge (by this agent or a previous one).
        if let Err(why) = Tap::of(&sv.app_id).remove() {
            tracing::warn!(vm = sv.app_id.as_str(), "{why}");
        }
        sv.shared.ports.free(&sv.app_id);
        sv.update(|l| l.forwards.clear());
    }
}
