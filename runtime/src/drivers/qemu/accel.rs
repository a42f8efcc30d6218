//! Whether guests get KVM. `/dev/kvm` opening proves nothing (nested hosts hang at boot with
//! it), so `VM_QEMU_ACCEL=auto` boots a probe guest with KVM and uses KVM only when its kernel
//! really started: when "Kernel command line:", which Linux prints early in `start_kernel`,
//! reaches the probe's console. The heartbeat's `kvm_available` is what the probe found.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::drivers::qemu_settings::Accel;

/// How long the probe kernel has to start: under working KVM it takes well under a second.
const PROBE_DEADLINE: Duration = Duration::from_secs(20);
const STARTED: &str = "Kernel command line:";

const YES: u8 = 1;
const NO: u8 = 2;

/// What the probe found (0 until it has answered); guests start with TCG until it says yes.
#[derive(Default)]
pub struct KvmProbe(AtomicU8);

impl KvmProbe {
    /// `Some` once the probe has answered (or there is nothing to probe).
    pub fn result(&self) -> Option<bool> {
        match self.0.load(Ordering::Relaxed) {
            YES => Some(true),
            NO => Some(false),
            _ => None,
        }
    }

    fn set(&self, works: bool) {
        self.0
            .store(if works { YES } else { NO }, Ordering::Relaxed);
    }

    /// Whether the next guest starts with KVM.
    pub fn use_kvm(&self, accel: Accel) -> bool {
        match accel {
            Accel::Kvm => true,
            Accel::Tcg => false,
            Accel::Auto => self.result() == Some(true),
        }
    }
}

/// What the probe boots: a kernel of the image directory, or the base image (read-only).
pub enum ProbeMedia {
    Kernel(PathBuf),
    Disk(PathBuf),
}

/// Boots `media` with KVM and records whether its kernel started. Without `/dev/kvm`, or under
/// `tcg`, or with nothing to boot, the answer is no.
pub async fn probe(
    result: &KvmProbe,
    accel: Accel,
    binary: &Path,
    media: Option<ProbeMedia>,
    work: &Path,
) {
    let Some(media) = media.filter(|_| accel != Accel::Tcg && Path::new("/dev/kvm").exists())
    else {
        result.set(false);
        return;
    };
    let console = work.join("kvm-probe.log");
    let _ = std::fs::remove_file(&console);
    let mut cmd = tokio::process::Command::new(binary);
    cmd.args([
        "-accel",
        "kvm",
        "-m",
        "256",
        "-nodefaults",
        "-no-user-config",
    ])
    .args(["-display", "none", "-no-reboot", "-serial"])
    .arg(format!("file:{}", console.display()))
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .kill_on_drop(true);
    // SAFETY: the closure makes one system call, prctl, which is async-signal-safe; it only
    // asks the kernel to end the probe with the agent, so a killed agent leaves no probe guest
    // spinning.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
    match media {
        ProbeMedia::Kernel(kernel) => {
            cmd.arg("-kernel")
                .arg(kernel)
                .args(["-append", "console=ttyS0"]);
        }
        ProbeMedia::Disk(image) => {
            cmd.arg("-snapshot").arg("-drive").arg(format!(
                "file={},if=virtio",
                image.display().to_string().replace(',', ",,")
            ));
        }
    }
    let Ok(mut child) = cmd.spawn() else {
        result.set(false);
        return;
    };
    let deadline = Instant::now() + PROBE_DEADLINE;
    let mut works = false;
    while Instant::now() < deadline {
        if std::fs::read_to_string(&console).is_ok_and(|t| t.contains(STARTED)) {
            works = true;
            break;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill().await;
    tracing::info!(
        kvm = works,
        "KVM probe guest {}",
        if works {
            "booted"
        } else {
            "did not boot: guests run under TCG"
        }
    );
    result.set(works);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_uses_kvm_only_after_the_probe_said_yes() {
        let p = KvmProbe::default();
        assert_eq!(p.result(), None);
        assert!(!p.use_kvm(Accel::Auto));
        assert!(p.use_kvm(Accel::Kvm));
        p.set(false);
        assert!(!p.use_kvm(Accel::Auto));
        p.set(true);
        assert!(p.use_kvm(Accel::Auto));
        assert!(!p.use_kvm(Accel::Tcg));
    }

    #[tokio::test]
    async fn nothing_to_boot_means_no_kvm() {
        let p = KvmProbe::default();
        let dir = tempfile::tempdir().unwrap();
        probe(&p, Accel::Auto, Path::new("/bin/false"), None, dir.path()).await;
        assert_eq!(p.result(), Some(false));
    }
}
