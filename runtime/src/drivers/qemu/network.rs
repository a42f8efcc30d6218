//! A guest's network when the node puts its guests on a bridge (`VM_BRIDGE`, docs/agent.md,
//! "qemu"): each VM has its own tap device on the bridge, made by the agent (`ip tuntap`, so it
//! outlives QEMU's cold boots and keeps counting) and removed with the VM; its byte counters are
//! the VM's `rxBytes`/`txBytes`, and its address is what the host's neighbour table says the
//! VM's MAC address has. Without `VM_BRIDGE` guests are on QEMU's user networking instead.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use fleetwire_types::AppId;

use super::disk::run;

/// A VM's tap device and the MAC address of its virtio NIC, both from its app id, so that a
/// restarted agent finds the same ones and no two VMs share either (QEMU's default MAC is the
/// same for every guest, which a bridge cannot tell apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tap {
    /// `fw` and 12 hex digits: an interface name has room for 15 bytes.
    pub name: String,
    /// In QEMU's own range, 52:54:00.
    pub mac: String,
}

impl Tap {
    pub fn of(app: &AppId) -> Tap {
        let digest = ring::digest::digest(&ring::digest::SHA256, app.as_str().as_bytes());
        let digest = digest.as_ref();
        let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        Tap {
            name: format!("fw{hex}"),
            mac: format!(
                "52:54:00:{:02x}:{:02x}:{:02x}",
                digest[6], digest[7], digest[8]
            ),
        }
    }

    fn sysfs(&self) -> std::path::PathBuf {
        Path::new("/sys/class/net").join(&self.name)
    }

    /// Makes the tap device (kept when it exists: a cold boot keeps the VM's device and its
    /// counts) and puts it on `bridge`, up.
    pub fn ensure_on(&self, bridge: &str) -> Result<(), String> {
        if !self.sysfs().exists() {
            let mut add = Command::new("ip");
            add.args(["tuntap", "add", "dev", &self.name, "mode", "tap"]);
            run(add, &format!("the tap device {}", self.name))?;
        }
        let mut attach = Command::new("ip");
        attach.args(["link", "set", "dev", &self.name, "master", bridge, "up"]);
        run(attach, &format!("the tap device {} on {bridge}", self.name))
    }

    /// Removes the tap device (the VM is deleted); nothing to do when it is gone.
    pub fn remove(&self) -> Result<(), String> {
        if !self.sysfs().exists() {
            return Ok(());
        }
        let mut del = Command::new("ip");
        del.args(["link", "del", "dev", &self.name]);
        run(del, &format!("removing the tap device {}", self.name))
    }

    /// The device's byte counters from the guest's side: (delivered to the guest, sent by the
    /// guest). The host transmits into the tap what the guest receives, and receives from it
    /// what the guest sends.
    pub fn guest_bytes(&self) -> Option<(u64, u64)> {
        let read = |counter: &str| -> Option<u64> {
            std::fs::read_to_string(self.sysfs().join("statistics").join(counter))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        Some((read("tx_bytes")?, read("rx_bytes")?))
    }

    /// The guest's IPv4 address on `bridge`: the host's neighbour entry for the VM's MAC, which
    /// is there once the guest has talked to the host (DHCP, ARP for its gateway).
    pub fn guest_ipv4(&self, bridge: &str) -> Option<Ipv4Addr> {
        let table = std::fs::read_to_string("/proc/net/arp").ok()?;
        neighbour(&table, &self.mac, bridge)
    }
}

/// The complete entry of `/proc/net/arp` for `mac` on `device` (columns: IP address, HW type,
/// flags, HW address, mask, device; flag 0x2 is a complete entry).
fn neighbour(table: &str, mac: &str, device: &str) -> Option<Ipv4Addr> {
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let flags = u32::from_str_radix(cols.get(2)?.trim_start_matches("0x"), 16).ok()?;
        (cols.get(3)?.eq_ignore_ascii_case(mac) && cols.get(5) == Some(&device) && flags & 2 != 0)
            .then(|| cols[0].parse().ok())
            .flatten()
    })
}

/// Whether `name` is a bridge on this host (`VM_BRIDGE` is checked when the agent starts).
pub fn is_bridge(name: &str) -> bool {
    Path::new("/sys/class/net")
        .join(name)
        .join("bridge")
        .is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_vm_has_its_own_short_tap_name_and_mac() {
        let a = Tap::of(&"web-1".parse().unwrap());
        let b = Tap::of(&"web-2".parse().unwrap());
        assert_ne!(a.name, b.name);
        assert_ne!(a.mac, b.mac);
        assert_eq!(a, Tap::of(&"web-1".parse().unwrap()));
        let long = Tap::of(&"a".repeat(63).parse().unwrap());
        assert!(long.name.len() <= 15, "{}", long.name);
        assert!(
            a.mac.starts_with("52:54:00:") && a.mac.len() == 17,
            "{}",
            a.mac
        );
    }

    #[test]
    fn the_guest_address_is_its_macs_complete_entry_on_the_bridge() {
        let table =
            "IP address       HW type     Flags       HW address            Mask     Device\n\
                     10.9.0.7         0x1         0x0         52:54:00:aa:bb:cc     *        br0\n\
                     10.9.0.2         0x1         0x2         52:54:00:aa:bb:cc     *        br1\n\
                     10.9.0.3         0x1         0x2         52:54:00:aa:bb:cc     *        br0\n";
        assert_eq!(
            neighbour(table, "52:54:00:AA:BB:CC", "br0"),
            Some(Ipv4Addr::new(10, 9, 0, 3))
        );
        assert_eq!(neighbour(table, "52:54:00:aa:bb:cd", "br0"), None);
    }
}
