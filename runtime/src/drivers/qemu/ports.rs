//! The host ports guests' ports are forwarded from (`VM_HOST_PORT_RANGE`): each is given to one
//! VM at most, kept while the VM exists (across QEMU restarts and agent restarts), and freed
//! when it is deleted.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::ops::RangeInclusive;
use std::sync::Mutex;

use fleetwire_types::AppId;

/// No port of the range is free for a VM.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no free host port: {wanted} wanted, {free} of VM_HOST_PORT_RANGE {first}-{last} free")]
pub struct NoFreePort {
    pub wanted: usize,
    pub free: usize,
    pub first: u16,
    pub last: u16,
}

pub struct HostPorts {
    range: RangeInclusive<u16>,
    taken: Mutex<BTreeMap<u16, AppId>>,
}

impl HostPorts {
    pub fn new(range: RangeInclusive<u16>) -> HostPorts {
        HostPorts {
            range,
            taken: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u16, AppId>> {
        self.taken.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The ports `app` holds, lowest first (paired with its guest ports in their order).
    pub fn of(&self, app: &AppId) -> Vec<u16> {
        let taken = self.lock();
        let mut held: Vec<u16> = taken
            .iter()
            .filter(|(_, a)| *a == app)
            .map(|(p, _)| *p)
            .collect();
        held.sort_unstable();
        held
    }

    /// Gives `app` `count` ports (none if it already holds that many). A port another program
    /// on the host listens on is skipped: QEMU could not forward it.
    pub fn assign(&self, app: &AppId, count: usize) -> Result<Vec<u16>, NoFreePort> {
        let mut taken = self.lock();
        let mut held: Vec<u16> = taken
            .iter()
            .filter(|(_, a)| *a == app)
            .map(|(p, _)| *p)
            .collect();
        let mut fresh = Vec::new();
        for port in self.range.clone() {
            if held.len() + fresh.len() >= count {
                break;
            }
            if !taken.contains_key(&port) && bindable(port) {
                fresh.push(port);
            }
        }
        if held.len() + fresh.len() < count {
            return Err(NoFreePort {
                wanted: count - held.len(),
                free: fresh.len(),
                first: *self.range.start(),
                last: *self.range.end(),
            });
        }
        for port in &fresh {
            taken.insert(*port, app.clone());
        }
        held.extend(fresh);
        held.sort_unstable();
        Ok(held)
    }

    /// Records ports a running QEMU already forwards (found again after an agent restart).
    pub fn adopt(&self, app: &AppId, ports: &[u16]) {
        let mut taken = self.lock();
        for port in ports {
            taken.insert(*port, app.clone());
        }
    }

    pub fn free(&self, app: &AppId) {
        self.lock().retain(|_, a| a != app);
    }

    /// Frees the ports of every VM `keep` says no to.
    pub fn retain(&self, mut keep: impl FnMut(&AppId) -> bool) {
        self.lock().retain(|_, a| keep(a));
    }
}

/// The ports of `range` the kernel may also hand out as the local port of an outgoing
/// connection: those in its ephemeral range (`net.ipv4.ip_local_port_range`) and not reserved
/// (`net.ipv4.ip_local_reserved_ports`), as a span from the first to the last such port. While
/// a connection holds one, no guest port can be forwarded from it, so a VM placed then finds no
/// free host port (docs/agent.md, `VM_HOST_PORT_RANGE`).
pub fn ephemeral_overlap(
    range: &RangeInclusive<u16>,
    ephemeral: &RangeInclusive<u16>,
    reserved: &[RangeInclusive<u16>],
) -> Option<RangeInclusive<u16>> {
    let first = *range.start().max(ephemeral.start());
    let last = *range.end().min(ephemeral.end());
    let open = |port: &u16| !reserved.iter().any(|r| r.contains(port));
    let low = (first..=last).find(open)?;
    let high = (first..=last).rev().find(open)?;
    Some(low..=high)
}

/// This host's ephemeral port range and its reserved ports, from `/proc/sys/net/ipv4`; `None`
/// where they cannot be read (no such files: not Linux, or a restricted `/proc`).
pub fn host_ephemeral_ports() -> Option<(RangeInclusive<u16>, Vec<RangeInclusive<u16>>)> {
    let read = |name: &str| std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).ok();
    let range = read("ip_local_port_range")?;
    let mut bounds = range.split_whitespace().map(|n| n.parse::<u16>().ok());
    let (first, last) = (bounds.next()??, bounds.next()??);
    let reserved = read("ip_local_reserved_ports")
        .unwrap_or_default()
        .trim()
        .split(',')
        .filter_map(|part| {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            Some(a.trim().parse().ok()?..=b.trim().parse().ok()?)
        })
        .collect();
    Some((first..=last, reserved))
}

fn bindable(port: u16) -> bool {
    TcpListener::bind(("0.0.0.0", port)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(name: &str) -> AppId {
        name.parse().unwrap()
    }

    fn free_range(len: u16) -> RangeInclusive<u16> {
        // A run of ports nothing listens on, found by trying.
        // Below the kernel's ephemeral ports, which outgoing connections take from.
        let mut start = 22000;
        loop {
            if (start..start + len).all(bindable) {
                return start..=start + len - 1;
            }
            start += len;
        }
    }

    #[test]
    fn a_port_goes_to_one_vm_and_comes_back_on_delete() {
        let range = free_range(3);
        let ports = HostPorts::new(range.clone());
        let a = ports.assign(&app("a"), 2).unwrap();
        assert_eq!(a.len(), 2);
        // Asking again gives the same ports, not more.
        assert_eq!(ports.assign(&app("a"), 2).unwrap(), a);
        let b = ports.assign(&app("b"), 1).unwrap();
        assert!(!a.contains(&b[0]));
        let full = ports.assign(&app("c"), 1).unwrap_err();
        assert_eq!((full.wanted, full.free), (1, 0));
        assert!(full.to_string().contains("VM_HOST_PORT_RANGE"), "{full}");
        ports.free(&app("a"));
        assert_eq!(ports.assign(&app("c"), 2).unwrap(), a);
        assert_eq!(ports.of(&app("b")), b);
    }

    #[test]
    fn the_part_of_the_range_the_kernel_may_give_outgoing_connections() {
        let ephemeral = 32768..=60999;
        // The default range lies below the ephemeral ports.
        assert_eq!(ephemeral_overlap(&(20000..=20999), &ephemeral, &[]), None);
        assert_eq!(
            ephemeral_overlap(&(42000..=42002), &ephemeral, &[]),
            Some(42000..=42002)
        );
        assert_eq!(
            ephemeral_overlap(&(32000..=33000), &ephemeral, &[]),
            Some(32768..=33000)
        );
        // Reserved ports are never handed out: a range reserved whole is left alone.
        assert_eq!(
            ephemeral_overlap(
                &(42000..=42009),
                &ephemeral,
                &[41000..=41999, 42000..=42009]
            ),
            None
        );
        assert_eq!(
            ephemeral_overlap(
                &(42000..=42009),
                &ephemeral,
                &[42000..=42004, 42009..=42009]
            ),
            Some(42005..=42008)
        );
    }

    #[test]
    fn a_port_another_program_listens_on_is_skipped() {
        let range = free_range(2);
        let _busy = TcpListener::bind(("0.0.0.0", *range.start())).unwrap();
        let ports = HostPorts::new(range.clone());
        assert_eq!(ports.assign(&app("a"), 1).unwrap(), vec![*range.end()]);
        assert!(ports.assign(&app("b"), 1).is_err());
    }
}
