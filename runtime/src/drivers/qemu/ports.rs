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
        let mut start = 41000;
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
    fn a_port_another_program_listens_on_is_skipped() {
        let range = free_range(2);
        let _busy = TcpListener::bind(("0.0.0.0", *range.start())).unwrap();
        let ports = HostPorts::new(range.clone());
        assert_eq!(ports.assign(&app("a"), 1).unwrap(), vec![*range.end()]);
        assert!(ports.assign(&app("b"), 1).is_err());
    }
}
