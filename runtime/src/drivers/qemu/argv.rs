//! The `qemu-system-x86_64` command line of one guest: a pure function of what the guest is,
//! so it can be read in one place and tested without QEMU.

use std::ffi::OsString;
use std::path::PathBuf;

use super::network::Tap;

/// The kernel command line of a direct kernel boot that names none: the console on the first
/// serial port, which QEMU writes to the VM's log.
pub const DEFAULT_CMDLINE: &str = "console=ttyS0";

/// What the guest boots from, as paths QEMU opens.
#[derive(Debug, Clone, PartialEq)]
pub enum BootMedia {
    Kernel {
        kernel: PathBuf,
        initrd: Option<PathBuf>,
        cmdline: String,
    },
    /// The VM's own overlay on its base image, and its cloud-init NoCloud seed.
    Disk { overlay: PathBuf, seed: PathBuf },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub name: String,
    pub memory_mib: u64,
    pub vcpus: u64,
    pub kvm: bool,
    pub media: BootMedia,
    /// (host port, guest port), TCP, through QEMU's user networking.
    pub forwards: Vec<(u16, u16)>,
    /// The VM's tap device on the node's bridge instead of user networking (`VM_BRIDGE`).
    pub tap: Option<Tap>,
    pub qmp_socket: PathBuf,
    pub pid_file: PathBuf,
    pub console_log: PathBuf,
}

pub fn argv(l: &Launch) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));
    push(&["-name", &l.name]);
    // The default CPU with KVM: `-cpu host` aborts on nested hosts (docs/agent.md).
    push(&["-accel", if l.kvm { "kvm" } else { "tcg" }]);
    push(&["-m", &l.memory_mib.to_string()]);
    push(&["-smp", &l.vcpus.to_string()]);
    push(&["-nodefaults", "-no-user-config", "-display", "none"]);
    // The serial console, appended to the VM's log across QEMU runs.
    push(&[
        "-chardev",
        &format!("file,id=console,path={},append=on", escape(&l.console_log)),
        "-serial",
        "chardev:console",
    ]);
    push(&[
        "-qmp",
        &format!("unix:{},server=on,wait=off", escape(&l.qmp_socket)),
    ]);
    a.push("-pidfile".into());
    a.push(l.pid_file.clone().into_os_string());
    let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));
    match &l.tap {
        // The agent made the device and put it on the bridge; QEMU only opens it.
        Some(tap) => push(&[
            "-netdev",
            &format!("tap,id=net0,ifname={},script=no,downscript=no", tap.name),
            "-device",
            &format!("virtio-net-pci,netdev=net0,mac={}", tap.mac),
        ]),
        None => {
            let mut netdev = String::from("user,id=net0");
            for (host, guest) in &l.forwards {
                netdev.push_str(&format!(",hostfwd=tcp::{host}-:{guest}"));
            }
            push(&["-netdev", &netdev, "-device", "virtio-net-pci,netdev=net0"]);
        }
    }
    match &l.media {
        BootMedia::Kernel {
            kernel,
            initrd,
            cmdline,
        } => {
            a.push("-kernel".into());
            a.push(kernel.clone().into_os_string());
            if let Some(initrd) = initrd {
                a.push("-initrd".into());
                a.push(initrd.clone().into_os_string());
            }
            a.push("-append".into());
            a.push(cmdline.into());
        }
        BootMedia::Disk { overlay, seed } => {
            a.push("-drive".into());
            a.push(format!("file={},if=virtio,format=qcow2", escape(overlay)).into());
            a.push("-drive".into());
            a.push(format!("file={},media=cdrom,format=raw", escape(seed)).into());
        }
    }
    a
}

/// A path inside a QEMU option value: commas are doubled (QEMU's escape).
fn escape(path: &std::path::Path) -> String {
    path.display().to_string().replace(',', ",,")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(a: &[OsString]) -> String {
        a.iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn launch(media: BootMedia) -> Launch {
        Launch {
            name: "vm-1".into(),
            memory_mib: 256,
            vcpus: 1,
            kvm: false,
            media,
            forwards: vec![(20000, 80), (20001, 22)],
            tap: None,
            qmp_socket: "/s/vm-1/qmp.sock".into(),
            pid_file: "/s/vm-1/qemu.pid".into(),
            console_log: "/s/logs/vm,1.log".into(),
        }
    }

    #[test]
    fn a_kernel_boot_forwards_each_port_and_logs_the_console() {
        let a = text(&argv(&launch(BootMedia::Kernel {
            kernel: "/img/vmlinuz".into(),
            initrd: Some("/img/initrd.img".into()),
            cmdline: DEFAULT_CMDLINE.into(),
        })));
        for part in [
            "-accel tcg",
            "-m 256 -smp 1",
            "-netdev user,id=net0,hostfwd=tcp::20000-:80,hostfwd=tcp::20001-:22",
            "-device virtio-net-pci,netdev=net0",
            "-kernel /img/vmlinuz -initrd /img/initrd.img -append console=ttyS0",
            "-qmp unix:/s/vm-1/qmp.sock,server=on,wait=off",
            "-pidfile /s/vm-1/qemu.pid",
            "file,id=console,path=/s/logs/vm,,1.log,append=on",
        ] {
            assert!(a.contains(part), "{part} in {a}");
        }
        assert!(!a.contains("-drive"), "{a}");
    }

    #[test]
    fn a_disk_boot_has_its_overlay_and_seed_and_kvm_when_asked() {
        let mut l = launch(BootMedia::Disk {
            overlay: "/s/vm-1/disk.qcow2".into(),
            seed: "/s/vm-1/seed.iso".into(),
        });
        l.kvm = true;
        let a = text(&argv(&l));
        assert!(a.contains("-accel kvm"), "{a}");
        assert!(
            a.contains("-drive file=/s/vm-1/disk.qcow2,if=virtio,format=qcow2"),
            "{a}"
        );
        assert!(
            a.contains("-drive file=/s/vm-1/seed.iso,media=cdrom,format=raw"),
            "{a}"
        );
        assert!(!a.contains("-kernel"), "{a}");
    }

    #[test]
    fn on_a_bridge_the_guest_has_its_tap_device_and_mac_and_no_forwards() {
        let mut l = launch(BootMedia::Kernel {
            kernel: "/img/vmlinuz".into(),
            initrd: None,
            cmdline: DEFAULT_CMDLINE.into(),
        });
        l.forwards = Vec::new();
        l.tap = Some(Tap::of(&"vm-1".parse().unwrap()));
        let tap = l.tap.clone().unwrap();
        let a = text(&argv(&l));
        assert!(
            a.contains(&format!(
                "-netdev tap,id=net0,ifname={},script=no,downscript=no -device virtio-net-pci,netdev=net0,mac={}",
                tap.name, tap.mac
            )),
            "{a}"
        );
        assert!(!a.contains("user,") && !a.contains("hostfwd"), "{a}");
    }
}
