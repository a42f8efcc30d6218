//! The `qemu` driver: every machine is a QEMU virtual machine booting a Linux guest, as PPN's
//! host agent runs them. A guest boots a kernel of the node's image directory directly, or a
//! qcow2 overlay of a base image there with a cloud-init seed; its guest ports are forwarded from
//! host ports through QEMU's user networking. One supervisor task per VM starts QEMU, watches
//! it over QMP and its forwarded port, cold-boots it again under the restart policy when it
//! dies, and stops it (ACPI power-down, then quit) when it is no longer wanted.

pub mod accel;
pub mod argv;
pub mod console;
pub mod disk;
pub mod health;
pub mod ports;
pub mod qemu_process;
pub mod qmp;
mod shared;

mod supervise;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use fleetwire_types::{
    AppId, BootId, ComputeUsage, DesiredInstance, HostPortMapping, HostVersions, InstanceState,
    Timestamp,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::driver::{Driver, DriverError, DriverSettings};
use super::observation::{InstanceStatus, Observation, RuntimeStatus};
use super::proc_stats;
use super::process::{want_of, Control, Want};
use super::qemu_settings::QemuSettings;
use crate::runtimes::Runtime;
use accel::KvmProbe;
use ports::HostPorts;
use shared::Shared;
use supervise::{supervise, BootSpec, Live, Supervisor, VmFiles};

const MIB: u64 = 1024 * 1024;
/// The address QEMU's user networking gives the guest (its built-in DHCP server's first).
pub const USER_NET_GUEST_IPV4: &str = "10.0.2.15";

pub struct QemuDriver {
    shared: Arc<Shared>,
    boot_id: BootId,
    vmm: String,
    machines: Mutex<HashMap<AppId, Machine>>,
    /// Machines no longer desired, reported as `stopping` until QEMU is gone.
    retiring: Mutex<Vec<Machine>>,
    /// VMs a previous agent left (their folders), until the first converge says which stay.
    leftovers: Mutex<Option<Vec<AppId>>>,
}

struct Machine {
    watched: Arc<Watched>,
    spec: BootSpec,
    control: watch::Sender<Control>,
    task: JoinHandle<()>,
}

struct Watched {
    app_id: AppId,
    spec: BootSpec,
    live: Arc<Mutex<Live>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl QemuDriver {
    pub fn new(settings: &DriverSettings) -> Result<QemuDriver, DriverError> {
        let qemu = settings.qemu.clone();
        let binary =
            qemu_process::resolve_binary(qemu.binary.as_deref()).map_err(DriverError::Qemu)?;
        let vmm = qemu_process::version(&binary)
            .map_err(|e| DriverError::Qemu(format!("{}: {e}", binary.display())))?;
        let vm_root = settings.state_dir.join("qemu");
        let logs = settings.state_dir.join("logs");
        std::fs::create_dir_all(&vm_root)?;
        std::fs::create_dir_all(&logs)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let boot_id = format!("{}-{nanos}", std::process::id())
            .parse::<BootId>()
            .map_err(|e| DriverError::BootId(e.to_string()))?;
        let shared = Arc::new(Shared {
            binary,
            ports: HostPorts::new(qemu.host_ports.clone()),
            kvm: KvmProbe::default(),
            qemu,
            vm_root,
            logs,
            stop_timeout: settings.stop_timeout,
        });
        // The QEMUs a previous agent left running keep their host ports: no other VM may be
        // given them before their own VM is found again.
        let mut leftovers = Vec::new();
        for entry in std::fs::read_dir(&shared.vm_root)?.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Some(app) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<AppId>().ok())
            else {
                continue;
            };
            let files = VmFiles::of(&shared, &app);
            if qemu_process::QemuProcess::find(&files.pid, &files.qmp).is_some() {
                shared.ports.adopt(
                    &app,
                    &files
                        .read_forwards()
                        .into_iter()
                        .map(|(h, _)| h)
                        .collect::<Vec<_>>(),
                );
            }
            leftovers.push(app);
        }
        let probe = shared.clone();
        tokio::spawn(async move {
            let media = probe_media(&probe.qemu);
            accel::probe(
                &probe.kvm,
                probe.qemu.accel,
                &probe.binary,
                media,
                &probe.logs,
            )
            .await;
        });
        Ok(QemuDriver {
            shared,
            boot_id,
            vmm,
            machines: Mutex::new(HashMap::new()),
            retiring: Mutex::new(Vec::new()),
            leftovers: Mutex::new(Some(leftovers)),
        })
    }

    fn start_machine(
        &self,
        app_id: &AppId,
        spec: BootSpec,
        control: Control,
        forwards: Result<Vec<(u16, u16)>, String>,
        predecessor: Option<JoinHandle<()>>,
    ) -> Machine {
        let (tx, rx) = watch::channel(control);
        let live = Arc::new(Mutex::new(Live::new()));
        let task = tokio::spawn(supervise(Supervisor {
            app_id: app_id.clone(),
            spec: spec.clone(),
            files: VmFiles::of(&self.shared, app_id),
            shared: self.shared.clone(),
            forwards,
            control: rx,
            live: live.clone(),
            predecessor,
        }));
        Machine {
            watched: Arc::new(Watched {
                app_id: app_id.clone(),
                spec: spec.clone(),
                live,
            }),
            spec,
            control: tx,
            task,
        }
    }

    /// The host ports of a VM's forwards, paired with its guest ports in their order.
    fn forwards(&self, app_id: &AppId, spec: &BootSpec) -> Result<Vec<(u16, u16)>, String> {
        let guest = spec.forwarded_guest_ports();
        let host = self
            .shared
            .ports
            .assign(app_id, guest.len())
            .map_err(|e| e.to_string())?;
        Ok(host.into_iter().zip(guest).collect())
    }

    fn status_of(m: &Watched, now: Instant) -> InstanceStatus {
        let pid = lock(&m.live).pid;
        let sample = pid.and_then(proc_stats::sample);
        let mut live = lock(&m.live);
        if let (Some(sample), true) = (sample, live.pid == pid) {
            if let Some((prev, at)) = live.last_sample {
                let wall = now.duration_since(at).as_millis() as f64;
                if wall >= 1.0 {
                    live.cpu_share = Some(sample.cpu_ms.saturating_sub(prev.cpu_ms) as f64 / wall);
                }
            }
            live.last_sample = Some((sample, now));
        }
        let compute = match (live.pid, live.last_sample) {
            (Some(_), Some((sample, _))) => Some(ComputeUsage {
                cpu_share: live.cpu_share,
                measured_at: Timestamp::now(),
                memory_total_bytes: m.spec.resources.memory_mib.get() * MIB,
                memory_used_bytes: sample.rss_bytes,
            }),
            _ => None,
        };
        let running = live.pid.is_some();
        InstanceStatus {
            app_id: m.app_id.clone(),
            deployment_id: m.spec.deployment_id.clone(),
            state: live.state,
            resources: m.spec.resources.clone(),
            // Counted by a supervisor inside the guest, which these guests do not have; a
            // cold boot by the host starts the count over (seed 001), so it stays 0.
            restart_count: 0,
            last_restart: None,
            last_exit_code: None,
            started_at: live.started_at,
            compute,
            cpu_ms: live.cpu_ms_ended + live.last_sample.map_or(0, |(s, _)| s.cpu_ms),
            message: live.message.clone(),
            volume: None,
            disk_used_bytes: None,
            pid: live.pid,
            host_ports: live
                .forwards
                .iter()
                .filter_map(|(host, guest)| {
                    Some(HostPortMapping {
                        host_port: fleetwire_types::HostPort(std::num::NonZeroU16::new(*host)?),
                        guest_port: std::num::NonZeroU16::new(*guest)?,
                        protocol: fleetwire_types::PortProtocol::Tcp,
                    })
                })
                .collect(),
            guest_ipv4: running.then(|| {
                USER_NET_GUEST_IPV4
                    .parse()
                    .expect("QEMU's user-network guest address is an Ipv4Address")
            }),
            last_healthy_at: live.last_healthy_at,
        }
    }
}

/// What the KVM probe boots: `VM_QEMU_PROBE_KERNEL`, else the base image.
fn probe_media(q: &QemuSettings) -> Option<accel::ProbeMedia> {
    if let Some(kernel) = &q.probe_kernel {
        return disk::image_file(&q.image_dir, "probe kernel", kernel)
            .ok()
            .map(accel::ProbeMedia::Kernel);
    }
    let base = q.base_image.as_ref()?;
    disk::image_file(&q.image_dir, "base image", base)
        .ok()
        .map(accel::ProbeMedia::Disk)
}

#[async_trait]
impl Driver for QemuDriver {
    fn runtime(&self) -> Runtime {
        Runtime::Qemu
    }

    fn output_file(&self, app_id: &AppId) -> Option<std::path::PathBuf> {
        // The guest's serial console.
        Some(VmFiles::of(&self.shared, app_id).log)
    }

    fn admit(&self, d: &DesiredInstance) -> Result<(), String> {
        let spec = BootSpec::of(d, &self.shared.qemu);
        self.forwards(&d.app_id, &spec).map(|_| ())
    }

    async fn converge(&self, desired: &[DesiredInstance]) {
        let mut machines = lock(&self.machines);
        let mut retiring = lock(&self.retiring);
        retiring.retain(|m| !m.task.is_finished());
        let wanted: HashMap<&AppId, &DesiredInstance> =
            desired.iter().map(|d| (&d.app_id, d)).collect();

        // VMs a previous agent left that are no longer desired: found, stopped and removed.
        if let Some(leftovers) = lock(&self.leftovers).take() {
            for app in leftovers.iter().filter(|a| !wanted.contains_key(a)) {
                let spec = BootSpec::leftover(app);
                let control = Control {
                    want: Want::Gone,
                    policy: Default::default(),
                };
                retiring.push(self.start_machine(app, spec, control, Ok(Vec::new()), None));
            }
        }

        let gone: Vec<AppId> = machines
            .keys()
            .filter(|id| !wanted.contains_key(id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(m) = machines.remove(&id) {
                m.control.send_modify(|c| c.want = Want::Gone);
                retiring.push(m);
            }
        }

        for d in desired {
            let control = Control {
                want: want_of(d),
                policy: d.restart_policy.clone().unwrap_or_default(),
            };
            let spec = BootSpec::of(d, &self.shared.qemu);
            let replace = match machines.get(&d.app_id) {
                Some(m) if m.spec == spec => {
                    m.control.send_if_modified(|c| {
                        let changed = *c != control;
                        *c = control.clone();
                        changed
                    });
                    false
                }
                _ => true,
            };
            if replace {
                // A new deployment is a fresh boot: the old QEMU stops (the VM's overlay and
                // ports stay, the VM is the same), then the new supervisor starts.
                let predecessor = machines.remove(&d.app_id).map(|old| {
                    old.control.send_modify(|c| c.want = Want::Stopped);
                    drop(old.control);
                    old.task
                });
                let forwards = self.forwards(&d.app_id, &spec);
                let m = self.start_machine(&d.app_id, spec, control, forwards, predecessor);
                machines.insert(d.app_id.clone(), m);
            }
        }
    }

    async fn observe(&self) -> Observation {
        let now = Instant::now();
        let current: Vec<Arc<Watched>> = lock(&self.machines)
            .values()
            .map(|m| m.watched.clone())
            .collect();
        let stopping: Vec<Arc<Watched>> = lock(&self.retiring)
            .iter()
            .filter(|m| !m.task.is_finished())
            .map(|m| m.watched.clone())
            .collect();
        let mut instances: Vec<InstanceStatus> =
            current.iter().map(|m| Self::status_of(m, now)).collect();
        for m in &stopping {
            let mut s = Self::status_of(m, now);
            s.state = InstanceState::Stopping;
            instances.push(s);
        }
        instances.sort_by(|a, b| a.app_id.cmp(&b.app_id));

        let running = instances.iter().filter(|i| i.pid.is_some());
        let cpu_usage: f64 = running
            .clone()
            .filter_map(|i| i.compute.as_ref()?.cpu_share)
            .sum();
        let memory_bytes: u64 = running
            .filter_map(|i| i.compute.as_ref().map(|c| c.memory_used_bytes))
            .sum();
        // The image files the running guests boot, else the base image a spawn would boot.
        let mut images: Vec<String> = current
            .iter()
            .filter(|m| lock(&m.live).pid.is_some())
            .map(|m| m.spec.image_names())
            .collect();
        images.sort();
        images.dedup();
        let guest_image = if images.is_empty() {
            self.shared.qemu.base_image.clone()
        } else {
            Some(images.join(", "))
        };
        let agent = super::observation::agent_only_versions();
        Observation {
            instances,
            runtime: RuntimeStatus {
                boot_id: Some(self.boot_id.clone()),
                capacity: None,
                stalled: false,
                problem: None,
                cpu_usage,
                memory_usage_mb: memory_bytes / MIB,
                disk_usage_gb: 0,
                versions: HostVersions {
                    guest_image: guest_image.unwrap_or(agent.guest_image.clone()),
                    vmm: self.vmm.parse().ok(),
                    ..agent
                },
                kvm_available: self.shared.kvm.result(),
            },
        }
    }

    async fn shutdown(&self) {
        // Like every driver: the agent going away stops its machines (Stopped, not Gone: the
        // VMs' overlays and ports stay for the next agent). An agent that crashes leaves its
        // guests running, and the next one finds them again.
        let lives: Vec<Arc<Mutex<Live>>> = lock(&self.machines)
            .values()
            .map(|m| {
                m.control.send_modify(|c| c.want = Want::Stopped);
                m.watched.live.clone()
            })
            .chain(lock(&self.retiring).iter().map(|m| m.watched.live.clone()))
            .collect();
        let deadline =
            Instant::now() + self.shared.stop_timeout * 2 + std::time::Duration::from_secs(5);
        while Instant::now() < deadline && lives.iter().any(|l| lock(l).pid.is_some()) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}
