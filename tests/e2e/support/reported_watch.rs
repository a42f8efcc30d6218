//! Watches a reported.json from another thread for as long as a test runs: every copy read
//! must be a complete, valid `HostReportedState`, `reportedAt` must never go back, and no meter
//! may ever decrease, whatever happens to the agent meanwhile.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use fleetwire_types::{HostReportedState, Timestamp, UsageMeters};

#[derive(Default, Debug, Clone)]
pub struct WatchReport {
    /// Copies read (including the same copy read twice).
    pub reads: u64,
    /// Distinct documents seen (by reportedAt).
    pub documents: u64,
    pub last: Option<Timestamp>,
    /// The highest meters seen per app.
    pub meters: HashMap<String, UsageMeters>,
    /// Everything that went wrong, in words.
    pub problems: Vec<String>,
}

pub struct ReportedWatch {
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<WatchReport>>,
    thread: Option<JoinHandle<()>>,
}

fn check_meters(app: &str, old: &UsageMeters, new: &UsageMeters) -> Option<String> {
    let pairs = [
        ("runningMs", old.running_ms, new.running_ms),
        ("idleMs", old.idle_ms, new.idle_ms),
        ("cpuMs", old.cpu_ms, new.cpu_ms),
        ("rxBytes", old.rx_bytes, new.rx_bytes),
        ("txBytes", old.tx_bytes, new.tx_bytes),
        (
            "diskProvisionedMibSeconds",
            old.disk_provisioned_mib_seconds,
            new.disk_provisioned_mib_seconds,
        ),
        (
            "diskUsedMibSeconds",
            old.disk_used_mib_seconds,
            new.disk_used_mib_seconds,
        ),
    ];
    pairs
        .iter()
        .find(|(_, o, n)| n < o)
        .map(|(name, o, n)| format!("{app}: meter {name} went down from {o} to {n}"))
}

impl ReportedWatch {
    pub fn start(path: PathBuf) -> ReportedWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(WatchReport::default()));
        let (stop2, state2) = (stop.clone(), state.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::SeqCst) {
                if let Ok(bytes) = std::fs::read(&path) {
                    let mut s = state2.lock().unwrap();
                    s.reads += 1;
                    match fleetwire_types::read_strict::<HostReportedState>(&bytes) {
                        Err(r) => s.problems.push(format!(
                            "read an invalid or torn reported.json: {r}: {:?}",
                            String::from_utf8_lossy(&bytes)
                        )),
                        Ok(doc) => {
                            if let Some(last) = s.last {
                                if doc.reported_at < last {
                                    s.problems.push(format!(
                                        "reportedAt went back from {last} to {}",
                                        doc.reported_at
                                    ));
                                }
                            }
                            if s.last != Some(doc.reported_at) {
                                s.documents += 1;
                                s.last = Some(doc.reported_at);
                            }
                            for i in &doc.instances {
                                if let Some(m) = &i.meters {
                                    let app = i.app_id.as_str().to_string();
                                    if let Some(old) = s.meters.get(&app) {
                                        if let Some(p) = check_meters(&app, old, m) {
                                            s.problems.push(p);
                                        }
                                    }
                                    s.meters.insert(app, m.clone());
                                }
                            }
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        ReportedWatch {
            stop,
            state,
            thread: Some(thread),
        }
    }

    pub fn snapshot(&self) -> WatchReport {
        self.state.lock().unwrap().clone()
    }

    /// Stops watching and returns what was seen.
    pub fn finish(mut self) -> WatchReport {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("the watch thread");
        }
        self.snapshot()
    }
}

impl Drop for ReportedWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
