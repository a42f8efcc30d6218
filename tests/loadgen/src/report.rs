//! What one run measured, and how it is told.

use std::time::Duration;

use hdrhistogram::Histogram;

use super::args::{LoadgenArgs, Plan};

/// A latency histogram in microseconds, up to ten minutes.
pub fn micros_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// `elapsed` as microseconds for [`micros_histogram`] (at least 1, at most its bound).
pub fn micros(elapsed: Duration) -> u64 {
    (elapsed.as_micros() as u64).clamp(1, 600_000_000)
}

fn ms(us: u64) -> String {
    format!("{:.3} ms", us as f64 / 1000.0)
}

/// The reconnect storm: every node's connection closed at once, then all reconnected at once.
#[derive(Debug, Clone)]
pub struct StormReport {
    pub nodes: usize,
    /// Nodes whose first heartbeat after reconnecting was answered `200`.
    pub reconnected: usize,
    /// From the common start until the last node's heartbeat was answered `200`.
    pub last_answered: Duration,
    /// Each reconnected node's own connect, handshake and first heartbeat.
    pub per_node: Histogram<u64>,
    /// The first failure, for the operator (a refusal's body, or the connection's error).
    pub first_failure: Option<String>,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub plan: Plan,
    /// Enrolling every simulated node before the heartbeats.
    pub enrollment: Duration,
    /// Opening the per-node connections (a TLS handshake each with mTLS), when there are.
    pub connecting: Option<Duration>,
    pub heartbeats_ok: u64,
    /// Refused or failed heartbeats, warm-up included.
    pub heartbeats_failed: u64,
    /// `200` answers during the warm-up (not in `heartbeats_ok` or the latencies).
    pub heartbeats_warmup: u64,
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
    pub fleet_idle: Histogram<u64>,
    pub fleet_under_load: Histogram<u64>,
    /// Size of the last fleet document read.
    pub fleet_bytes: usize,
    /// Nodes in the fleet document, when one was read whole and validated.
    pub fleet_nodes: Option<usize>,
    pub storm: Option<StormReport>,
}

impl Report {
    pub fn per_second(&self) -> f64 {
        self.heartbeats_ok as f64 / self.elapsed.as_secs_f64()
    }

    pub fn render(&self, args: &LoadgenArgs) -> String {
        let l = &self.latency;
        let connections = if self.plan.per_node {
            format!("{} connections (one per node)", self.plan.connections)
        } else {
            format!("{} connections", self.plan.connections)
        };
        let mut out = format!(
            "fleetwire-loadgen: {} nodes, {connections}, {:?} against {}\n\
             transport: {}\n\
             enrollment: {} nodes in {:.1?}\n",
            args.nodes,
            args.duration,
            args.url,
            self.plan.transport.label(),
            args.nodes,
            self.enrollment,
        );
        if let Some(connecting) = self.connecting {
            out.push_str(&format!(
                "connections: {} opened in {connecting:.1?}\n",
                self.plan.connections
            ));
        }
        out.push_str(&format!(
            "heartbeats: {} ok, {} failed, {:.0}/s (after {} in a {:?} warm-up)\n\
             heartbeat latency: p50 {}, p99 {}, p99.9 {}, max {}\n",
            self.heartbeats_ok,
            self.heartbeats_failed,
            self.per_second(),
            self.heartbeats_warmup,
            args.warmup,
            ms(l.value_at_quantile(0.5)),
            ms(l.value_at_quantile(0.99)),
            ms(l.value_at_quantile(0.999)),
            ms(l.max()),
        ));
        for (label, h) in [
            ("idle", &self.fleet_idle),
            ("under load", &self.fleet_under_load),
        ] {
            if h.is_empty() {
                continue;
            }
            let nodes = match self.fleet_nodes {
                Some(nodes) => format!("{nodes} nodes, "),
                None => String::new(),
            };
            out.push_str(&format!(
                "GET /v1/fleet ({nodes}{} bytes), {label}: p50 {}, max {} ({} samples)\n",
                self.fleet_bytes,
                ms(h.value_at_quantile(0.5)),
                ms(h.max()),
                h.len(),
            ));
        }
        if let Some(storm) = &self.storm {
            let p = &storm.per_node;
            out.push_str(&format!(
                "reconnect storm: {} of {} nodes reconnected, {} failed, the last answered after {}; \
                 per node p50 {}, p99 {}, max {}\n",
                storm.reconnected,
                storm.nodes,
                storm.nodes - storm.reconnected,
                ms(micros(storm.last_answered)),
                ms(p.value_at_quantile(0.5)),
                ms(p.value_at_quantile(0.99)),
                ms(p.max()),
            ));
            if let Some(failure) = &storm.first_failure {
                out.push_str(&format!("reconnect storm, first failure: {failure}\n"));
            }
        }
        out
    }
}
