//! What every supervisor of the qemu driver shares: a module of its own, so the driver and its
//! supervisors both import it and neither imports the other's parent (docs/architecture.md,
//! "How the layers are checked").

use std::path::PathBuf;

use super::accel::KvmProbe;
use super::ports::HostPorts;
use crate::drivers::qemu_settings::QemuSettings;

/// What every supervisor of this driver shares.
pub(crate) struct Shared {
    pub binary: PathBuf,
    pub qemu: QemuSettings,
    pub kvm: KvmProbe,
    pub ports: HostPorts,
    pub vm_root: PathBuf,
    pub logs: PathBuf,
    pub stop_timeout: std::time::Duration,
}
