//! The host's own facts, read fresh each time: memory and load from /proc, the cores, the disk
//! holding the state directory (statvfs), /dev/kvm, the kernel's boot id, the host name, and
//! the agent's version. Registration, heartbeats and reported.json's capacity all read them.

use std::path::Path;

use fleetwire_types::{AgentVersion, BootId, Hostname};

/// What the host is, read fresh each time (a few small files and one statvfs).
#[derive(Debug, Clone)]
pub struct HostFacts {
    pub hostname: String,
    pub ram_total_mb: u64,
    pub ram_available_mb: u64,
    pub cpu_cores: u32,
    /// One-minute load average.
    pub load1: f64,
    pub disk_total_bytes: u64,
    pub disk_free_bytes: u64,
    pub kvm_available: bool,
    pub boot_id: String,
}

impl HostFacts {
    pub fn read(state_dir: &Path) -> HostFacts {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib = |key: &str| -> u64 {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let load1 = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let (disk_total_bytes, disk_free_bytes) = statvfs(state_dir).unwrap_or((0, 0));
        HostFacts {
            hostname: hostname(),
            ram_total_mb: kib("MemTotal") / 1024,
            ram_available_mb: kib("MemAvailable") / 1024,
            cpu_cores: cores,
            load1,
            disk_total_bytes,
            disk_free_bytes,
            kvm_available: Path::new("/dev/kvm").exists(),
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        }
    }

    /// Whole-host CPU load in percent: the one-minute load average over the cores.
    pub fn cpu_load_pct(&self) -> f32 {
        (self.load1 / self.cpu_cores.max(1) as f64 * 100.0) as f32
    }
}

/// Total and free (for unprivileged users) bytes of the filesystem holding `path`.
fn statvfs(path: &Path) -> Option<(u64, u64)> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some((st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize))
}

/// The host's name from /etc/hostname, as PPN agents read it (the kernel's when absent).
fn hostname() -> String {
    let from_file = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    if !from_file.is_empty() {
        return from_file;
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The name as the schema allows it: without control characters or line and paragraph
/// separators (which the schema refuses, so a name is safe in a log line), at most
/// `Hostname::MAX_LENGTH` characters.
pub fn hostname_of(facts: &HostFacts) -> Hostname {
    let allowed: String = facts
        .hostname
        .chars()
        .filter(|c| !c.is_control() && !matches!(c, '\u{2028}' | '\u{2029}'))
        .take(Hostname::MAX_LENGTH)
        .collect();
    allowed
        .parse()
        .expect("a name without control characters, cut to the schema's length, is a Hostname")
}

/// A boot id as the schema allows it (at most `BootId::MAX_LENGTH` characters).
pub fn boot_id_of(raw: &str) -> BootId {
    BootId::truncated(raw)
}

pub fn agent_version() -> AgentVersion {
    env!("CARGO_PKG_VERSION")
        .parse()
        .expect("the crate version")
}

#[cfg(test)]
mod hostname_tests {
    use super::*;

    #[test]
    fn a_host_name_loses_its_control_characters_and_is_cut_to_the_schema_length() {
        let facts = |hostname: String| HostFacts {
            hostname,
            ram_total_mb: 0,
            ram_available_mb: 0,
            cpu_cores: 0,
            load1: 0.0,
            disk_total_bytes: 0,
            disk_free_bytes: 0,
            kvm_available: false,
            boot_id: String::new(),
        };
        let name = hostname_of(&facts("web\u{1b}[31m\n-1\u{2028}".into()));
        assert_eq!(name.as_str(), "web[31m-1");
        let long = hostname_of(&facts("h".repeat(300)));
        assert_eq!(long.chars().count(), Hostname::MAX_LENGTH);
    }
}
