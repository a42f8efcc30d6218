//! Figures of a process from `/proc/<pid>/stat` (and the samples of one run, for its CPU
//! share), and the size of a directory tree.

use std::path::Path;
use std::time::{Duration, Instant};

use fleetwire_types::{ComputeUsage, Timestamp};

/// CPU time and resident memory of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcSample {
    /// User plus system time of the process and of its waited-for children, in ms.
    pub cpu_ms: u64,
    pub rss_bytes: u64,
}

fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}

fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// The samples of one run of a process: the last one, and its CPU share between the last two.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunSamples {
    /// The last sample and when it was taken.
    pub last: Option<(ProcSample, Instant)>,
    /// CPU used between the last two samples, in CPUs.
    pub cpu_share: Option<f64>,
}

impl RunSamples {
    pub fn record(&mut self, sample: ProcSample, now: Instant) {
        if let Some((prev, at)) = self.last {
            let wall = now.duration_since(at).as_millis() as f64;
            if wall >= 1.0 {
                self.cpu_share = Some(sample.cpu_ms.saturating_sub(prev.cpu_ms) as f64 / wall);
            }
        }
        self.last = Some((sample, now));
    }

    /// CPU time of the run at the last sample, in ms.
    pub fn cpu_ms(&self) -> u64 {
        self.last.map_or(0, |(s, _)| s.cpu_ms)
    }

    /// The run's figures for `compute`, once it has been sampled.
    pub fn compute(&self, memory_total_bytes: u64) -> Option<ComputeUsage> {
        let (sample, _) = self.last?;
        Some(ComputeUsage {
            cpu_share: self.cpu_share,
            measured_at: Timestamp::now(),
            memory_total_bytes,
            memory_used_bytes: sample.rss_bytes,
        })
    }
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone. Works on a zombie too, which is
/// how the final CPU time of a process that just exited is read before it is reaped.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text, clock_ticks_per_second(), page_size())
}

/// Fields after the command name (which may hold spaces and parentheses, hence the last `)`):
/// state is field 3, utime..cstime 14..17, rss 24 (1-based, as in proc(5)).
fn parse_stat(text: &str, ticks: u64, page: u64) -> Option<ProcSample> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    let ticks_total = field(14)? + field(15)? + field(16)? + field(17)?;
    let rss_pages = fields.get(24 - 3)?.parse::<i64>().ok()?.max(0) as u64;
    Some(ProcSample {
        cpu_ms: ticks_total * 1000 / ticks,
        rss_bytes: rss_pages * page,
    })
}

/// The fields of `/proc/<pid>/stat` after the command name, field 3 first.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// When the process started, in clock ticks since boot (field 22): with the pid, it names a
/// process for good, since a pid can be reused but not at the same instant.
pub fn start_time(pid: u32) -> Option<u64> {
    start_time_in(&std::fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// Field 22 of a `stat` file's bytes. Allocates nothing: a forked child reads its own start
/// with it before exec (`drivers::process`, the group record).
pub fn start_time_in(stat: &[u8]) -> Option<u64> {
    let after_name = stat.iter().rposition(|&b| b == b')')? + 1;
    let field = stat[after_name..]
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .nth(22 - 3)?;
    field.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))?
    })
}

/// When the process started, on the wall clock: its start in clock ticks after boot, placed
/// on the clock through `CLOCK_BOOTTIME`, which counts from the same boot. Good to a clock
/// tick, and the same for the same process whoever asks (a QEMU found again after an agent
/// restart keeps the `startedAt` of its start, docs/agent.md, "Restarts and crashes").
pub fn started_at(pid: u32) -> Option<std::time::SystemTime> {
    let ticks = start_time(pid)?;
    let since_boot = Duration::from_nanos(ticks * 1_000_000_000 / clock_ticks_per_second());
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let boot_now = Duration::new(now.tv_sec as u64, now.tv_nsec as u32);
    std::time::SystemTime::now().checked_sub(boot_now.checked_sub(since_boot)?)
}

/// Whether any process is in process group `pgid` (field 5).
pub fn group_alive(pgid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        e.file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
            .and_then(stat_fields)
            .and_then(|f| f.get(5 - 3)?.parse::<u32>().ok())
            == Some(pgid)
    })
}

/// Bytes taken by the regular files under `dir` (symlinks are not followed).
pub fn tree_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_command_name_with_spaces_and_parentheses() {
        let stat = "42 (my (odd) cmd) S 1 42 42 0 -1 4194304 100 0 0 0 250 50 10 5 20 0 1 0 100 10000000 300 18446744073709551615";
        let s = parse_stat(stat, 100, 4096).unwrap();
        assert_eq!(s.cpu_ms, (250 + 50 + 10 + 5) * 10);
        assert_eq!(s.rss_bytes, 300 * 4096);
    }

    #[test]
    fn the_start_time_is_field_22_counted_after_the_command_name() {
        let stat = b"42 (my (odd) 1 2 cmd) S 1 42 42 0 -1 4194304 100 0 0 0 250 50 10 5 20 0 1 0 987654321 10000000 300 18446744073709551615\n";
        assert_eq!(start_time_in(stat), Some(987_654_321));
        assert_eq!(start_time_in(b"42 (cmd) S 1 42"), None);
        assert_eq!(start_time_in(b"no name at all"), None);
        let mine = std::fs::read("/proc/self/stat").unwrap();
        let text = String::from_utf8_lossy(&mine);
        let fields: Vec<&str> = text[text.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .collect();
        assert_eq!(start_time_in(&mine), fields[22 - 3].parse().ok());
    }

    #[test]
    fn this_process_started_before_now_and_after_its_parent_did() {
        let started = started_at(std::process::id()).unwrap();
        let now = std::time::SystemTime::now();
        assert!(started <= now);
        let parent = rustix::process::getppid()
            .expect("a parent")
            .as_raw_nonzero()
            .get() as u32;
        assert!(started_at(parent).unwrap() <= started + Duration::from_millis(20));
        // Asked twice, the same instant (to the clock tick).
        let again = started_at(std::process::id()).unwrap();
        let apart = again
            .duration_since(started)
            .unwrap_or_else(|e| e.duration());
        assert!(apart < Duration::from_millis(20), "{apart:?}");
    }

    #[test]
    fn samples_this_process() {
        let s = sample(std::process::id()).unwrap();
        assert!(s.rss_bytes > 0);
    }
}
