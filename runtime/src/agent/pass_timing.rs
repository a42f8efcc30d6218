//! How long the reconcile pass's converge takes (docs/performance.md, "A converge pass"): its
//! wall time as a histogram and its CPU time as a counter, on the agent's `/metrics`
//! (`fleetwire_agent_converge_seconds`, `fleetwire_agent_converge_cpu_seconds_total`), so the
//! figure can be read from a running agent with its real guests.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub struct PassTiming {
    converge_seconds: Histogram,
    converge_cpu_seconds: Counter<f64, AtomicU64>,
}

impl Default for PassTiming {
    fn default() -> PassTiming {
        PassTiming {
            // 10 µs to about 5 s.
            converge_seconds: Histogram::new(exponential_buckets(1e-5, 4.0, 10)),
            converge_cpu_seconds: Counter::default(),
        }
    }
}

/// CPU time of the calling thread. The pass runs on one thread while it does not wait; the
/// process and qemu drivers' converge never waits, so this is its CPU alone.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

impl PassTiming {
    /// Runs `converge` and records its wall and CPU time.
    pub async fn converge<F: std::future::Future<Output = ()>>(&self, converge: F) {
        let (wall, cpu) = (Instant::now(), thread_cpu());
        converge.await;
        self.converge_cpu_seconds
            .inc_by(thread_cpu().saturating_sub(cpu).as_secs_f64());
        self.converge_seconds.observe(wall.elapsed().as_secs_f64());
    }

    /// Registers both under `registry`'s prefix.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "converge_seconds",
            "Wall time of the reconcile pass's converge of the driver on the desired document",
            self.converge_seconds.clone(),
        );
        registry.register(
            "converge_cpu_seconds",
            "CPU time of the reconcile pass's converge, on the thread that ran it",
            self.converge_cpu_seconds.clone(),
        );
    }
}
