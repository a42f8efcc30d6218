//! The `qemu` driver: every machine is a QEMU virtual machine booting a Linux guest, as PPN's
//! host agent runs them. A guest boots a kernel of the node's image directory directly, or a
//! qcow2 overlay of a base image there with a cloud-init seed; its guest ports are forwarded from
//! host ports through QEMU's user networking, or it sits on the node's bridge through a tap device
//! of its own (`VM_BRIDGE`). One supervisor task per VM starts QEMU, watches
//! it over QMP and its forwarded port, cold-boots it again under the restart policy when it
//! dies, and stops it (ACPI power-down, then quit) when it is no longer wanted.

pub mod accel;
pub mod argv;
pub mod console;
pub mod disk;
pub mod health;
pub mod network;
pub mod ports;
pub mod qemu_process;
pub mod qmp;
mod shared;

mod supervise;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use fleetwire_types::{AppId, BootId, DesiredInstance, HostPortMapping, HostVersions};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::driver::{Driver, DriverError, DriverSettings};
use super::observation::{InstanceStatus, Observation, RuntimeStatus};
use super::proc_stats;
use super::qemu_settings::QemuSettings;
use super::supervision::{self, Control, Machines, Want};
use crate::runtimes::Runtime;
use accel::KvmProbe;
use network::Tap;
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
    machines: Machines<BootSpec, Watched>,
    /// VMs a previous agent left (their folders), until the first converge says which stay.
    leftovers: Mutex<Option<Vec<AppId>>>,
}

type Machine = supervision::Machine<BootSpec, Watched>;

struct Watched {
    app_id: AppId,
    spec: BootSpec,
    live: Arc<Mutex<Live>>,
    /// Its tap device, on a bridge.
    tap: Option<Tap>,
}

/// Says so when outgoing connections may hold ports of `VM_HOST_PORT_RANGE`: each such moment
/// is a VM placement refused for want of a free host port, seldom enough to look like chance.
fn warn_of_ephemeral_host_ports(range: &std::ops::RangeInclusive<u16>) {
    let Some((ephemeral, reserved)) = ports::host_ephemeral_ports() else {
        return;
    };
    if let Some(overlap) = ports::ephemeral_overlap(range, &ephemeral, &reserved) {
        tracing::warn!(
            "VM_HOST_PORT_RANGE {}-{} overlaps this host's ephemeral ports {}-{} \
             (net.ipv4.ip_local_port_range) at {}-{}: an outgoing connection may hold such a port, \
             and a VM placed then finds no free host port (the controller answers no_capacity); \
             take a range outside it (the default 20000-20999 is) or reserve it in \
             net.ipv4.ip_local_reserved_ports",
            range.start(),
            range.end(),
            ephemeral.start(),
            ephemeral.end(),
            overlap.start(),
            overlap.end(),
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl QemuDriver {
    pub fn new(settings: &DriverSettings) -> Result<QemuDriver, DriverError> {
        let qemu = settings.qemu.clone();
        // Forwards are what host ports are for; guests on a bridge have none.
        if qemu.bridge.is_none() {
            warn_of_ephemeral_host_ports(&qemu.host_ports);
        }
        let binary =
            qemu_process::resolve_binary(qemu.binary.as_deref()).map_err(DriverError::Qemu)?;
        let vmm = qemu_process::version(&binary)
            .map_err(|e| DriverError::Qemu(format!("{}: {e}", binary.display())))?;
        if let Some(bridge) = &qemu.bridge {
            if !network::is_bridge(bridge) {
                return Err(DriverError::Qemu(format!(
                    "VM_BRIDGE: {bridge} is not a bridge on this host (make it first, e.g. ip link add {bridge} type bridge)"
                )));
            }
        }
        let vm_root = settings.state_dir.join("qemu");
        let logs = settings.state_dir.join("logs");
        std::fs::create_dir_all(&vm_root)?;
        std::fs::create_dir_all(&logs)?;
        let boot_id = super::driver::new_boot_id()?;
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
            machines: Machines::new(),
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
        let tap = self.shared.qemu.bridge.as_ref().map(|_| Tap::of(app_id));
        let task = tokio::spawn(supervise(Supervisor {
            app_id: app_id.clone(),
            spec: spec.clone(),
            files: VmFiles::of(&self.shared, app_id),
            shared: self.shared.clone(),
            forwards,
            control: rx,
            live: live.clone(),
            predecessor,
            tap: tap.clone(),
        }));
        Machine {
            watched: Arc::new(Watched {
                app_id: app_id.clone(),
                spec: spec.clone(),
                live,
                tap,
            }),
            spec,
            control: tx,
            task,
        }
    }

    /// The host ports of a VM's forwards, paired with its guest ports in their order; none on
    /// a bridge, where the guest's ports are reached at its own address.
    fn forwards(&self, app_id: &AppId, spec: &BootSpec) -> Result<Vec<(u16, u16)>, String> {
        if self.shared.qemu.bridge.is_some() {
            return Ok(Vec::new());
        }
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
        let counted = m.tap.as_ref().and_then(Tap::guest_bytes);
        let mut live = lock(&m.live);
        // Counted from this agent's first look (a device made again counts from 0).
        let (rx_bytes, tx_bytes) = match counted {
            Some((rx, tx)) => {
                let base = live.bytes_base.get_or_insert((rx, tx));
                if rx < base.0 || tx < base.1 {
                    *base = (0, 0);
                }
                (rx - base.0, tx - base.1)
            }
            None => (0, 0),
        };
        if let (Some(sample), true) = (sample, live.pid == pid) {
            live.samples.record(sample, now);
        }
        let compute = live.pid.and(
            live.samples
                .compute(m.spec.resources.memory_mib.get() * MIB),
        );
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
            cpu_ms: live.cpu_ms_ended + live.samples.cpu_ms().saturating_sub(live.cpu_ms_found),
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
            guest_ipv4: match &m.tap {
                None => running.then(|| {
                    USER_NET_GUEST_IPV4
                        .parse()
                        .expect("QEMU's user-network guest address is an Ipv4Address")
                }),
                Some(_) => live
                    .bridge_ipv4
                    .filter(|_| running)
                    .map(fleetwire_types::Ipv4Address::from),
            },
            last_healthy_at: live.last_healthy_at,
            rx_bytes,
            tx_bytes,
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
        // VMs a previous agent left that are no longer desired: found, stopped and removed.
        if let Some(leftovers) = lock(&self.leftovers).take() {
            let wanted: HashSet<&AppId> = desired.iter().map(|d| &d.app_id).collect();
            for app in leftovers.iter().filter(|a| !wanted.contains(a)) {
                let control = Control {
                    want: Want::Gone,
                    policy: Default::default(),
                };
                let spec = BootSpec::leftover(app);
                self.machines
                    .retire(self.start_machine(app, spec, control, Ok(Vec::new()), None));
            }
        }
        // A new deployment is a fresh boot: the old QEMU stops (the VM's overlay and ports
        // stay, the VM is the same), then the new supervisor starts.
        self.machines.converge(
            desired,
            |d| BootSpec::of(d, &self.shared.qemu),
            |d, spec, control, predecessor| {
                let forwards = self.forwards(&d.app_id, &spec);
                self.start_machine(&d.app_id, spec, control, forwards, predecessor)
            },
        );
    }

    async fn observe(&self) -> Observation {
        let now = Instant::now();
        let (current, instances) = self.machines.observe(|m, _| Self::status_of(m, now));
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
        let versions = HostVersions {
            guest_image: guest_image.unwrap_or(agent.guest_image.clone()),
            vmm: self.vmm.parse().ok(),
            ..agent
        };
        // Disk: the overlays are not measured (disk_usage_gb 0).
        let runtime = RuntimeStatus::of_agent(
            self.boot_id.clone(),
            &instances,
            0,
            versions,
            self.shared.kvm.result(),
        );
        Observation { instances, runtime }
    }

    async fn shutdown(&self) {
        // Like every driver: the agent going away stops its machines (Stopped, not Gone: the
        // VMs' overlays and ports stay for the next agent). An agent that crashes leaves its
        // guests running, and the next one finds them again.
        // ACPI power-down, then quit after the stop timeout, then SIGKILL.
        let within = self.shared.stop_timeout * 2 + std::time::Duration::from_secs(5);
        self.machines
            .stop_all(within, |m| lock(&m.live).pid.is_some())
            .await;
    }
}
