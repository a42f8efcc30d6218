//! What the qemu driver is configured with (docs/agent.md, "The qemu runtime"): the agent's
//! `VM_QEMU_*`, `VM_IMAGE_DIR`, `VM_BASE_IMAGE`, `VM_SSH_PUBKEY`, `VM_HOST_PORT_RANGE` and
//! `VM_BRIDGE`.

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

/// `VM_QEMU_ACCEL`: which accelerator guests run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// KVM only once a probe guest has really booted with it; TCG until then, and for good
    /// when it did not (a `/dev/kvm` that opens is no proof: nested hosts hang at boot).
    Auto,
    Kvm,
    Tcg,
}

impl std::str::FromStr for Accel {
    type Err = ();

    fn from_str(text: &str) -> Result<Accel, ()> {
        match text {
            "auto" => Ok(Accel::Auto),
            "kvm" => Ok(Accel::Kvm),
            "tcg" => Ok(Accel::Tcg),
            _ => Err(()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct QemuSettings {
    /// `VM_QEMU_BINARY`; `None`: `qemu-system-x86_64` on `PATH`.
    pub binary: Option<PathBuf>,
    /// `VM_IMAGE_DIR`: kernels, initrds and base images are file names in it.
    pub image_dir: PathBuf,
    /// `VM_BASE_IMAGE`: the base image a request naming no boot source boots (PPN's spawn).
    pub base_image: Option<String>,
    /// `VM_SSH_PUBKEY`: the key the cloud-init seed authorizes.
    pub ssh_pubkey: Option<String>,
    /// `VM_HOST_PORT_RANGE`: the host ports guest ports are forwarded from.
    pub host_ports: RangeInclusive<u16>,
    /// `VM_BRIDGE`: the bridge guests are put on, each through a tap device of its own;
    /// `None`: QEMU's user networking, guest ports forwarded from host ports.
    pub bridge: Option<String>,
    pub accel: Accel,
    /// `VM_QEMU_PROBE_KERNEL`: the kernel the KVM probe boots; `None`: the base image.
    pub probe_kernel: Option<String>,
    /// `VM_GUEST_BOOT_TIMEOUT_S`: how long a guest has to answer on its first guest port.
    pub boot_timeout: Duration,
}

impl Default for QemuSettings {
    fn default() -> QemuSettings {
        QemuSettings {
            binary: None,
            image_dir: PathBuf::from("/var/lib/vm-fleet"),
            base_image: None,
            ssh_pubkey: None,
            host_ports: 20000..=20999,
            bridge: None,
            accel: Accel::Auto,
            probe_kernel: None,
            boot_timeout: Duration::from_secs(120),
        }
    }
}
