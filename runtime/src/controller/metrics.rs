//! The controller's metrics, served as OpenMetrics text on `GET /metrics`.

use std::time::Duration;

use fleetwire_types::NodeCounts;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    route: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

/// Where a heartbeat's time inside the controller goes, one histogram per phase
/// (docs/reliability/latency.md): told apart from the answer's latency as a node sees it, they
/// show whether a slow answer was slow in the controller's work or waiting outside it.
#[derive(Clone)]
pub struct HeartbeatPhases {
    /// The validated read of the body.
    pub read: Histogram,
    /// The node's lookup in the table and the wait for its lock.
    pub lock: Histogram,
    /// The node rules under the lock.
    pub apply: Histogram,
    /// Queueing the change for the store (and, while the store is behind, waiting for it).
    pub store: Histogram,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

fn latency_histogram() -> Histogram {
    // 25 µs .. ~0.8 s
    Histogram::new(exponential_buckets(0.000_025, 2.0, 16))
}

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    nodes: Family<StatusLabels, Gauge>,
    heartbeats: Counter,
    rejected_vm_entries: Counter,
    foreign_vm_entries: Counter,
    flush_seconds: Histogram,
    flushed_rows: Counter,
    write_behind_lag: Histogram,
    sweeps: Counter,
    pub heartbeat_phases: HeartbeatPhases,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Adds `fleetwire_controller_transport_info{transport="mtls"|"plain_http"} 1`: how the
    /// controller's port is served, so a scrape shows a controller left in `--plain-http`.
    pub fn with_transport(mut self, transport: fleetwire_types::TransportSecurity) -> Metrics {
        self.registry.register(
            "transport",
            "How the controller's port is served: mtls, or plain_http (no authentication)",
            prometheus_client::metrics::info::Info::new(vec![("transport", transport.as_str())]),
        );
        self
    }

    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("fleetwire_controller");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by route and status",
            requests.clone(),
        );
        let latency = Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        registry.register_with_unit(
            "http_request_duration",
            "Time to answer an HTTP request, by route",
            Unit::Seconds,
            latency.clone(),
        );
        let nodes = Family::<StatusLabels, Gauge>::default();
        registry.register("nodes", "Nodes by status", nodes.clone());
        let heartbeats = Counter::default();
        registry.register(
            "heartbeats_received",
            "Valid heartbeats taken",
            heartbeats.clone(),
        );
        let rejected_vm_entries = Counter::default();
        registry.register(
            "heartbeat_vm_entries_rejected",
            "Entries of heartbeats' vms set aside as invalid while the rest of the heartbeat was taken",
            rejected_vm_entries.clone(),
        );
        let foreign_vm_entries = Counter::default();
        registry.register(
            "heartbeat_vm_entries_foreign",
            "Entries of heartbeats' vms set aside because the controller records the VM on another node",
            foreign_vm_entries.clone(),
        );
        let flush_seconds = Histogram::new(exponential_buckets(0.000_1, 2.0, 16));
        registry.register_with_unit(
            "store_flush_duration",
            "Time to write one batch to the store",
            Unit::Seconds,
            flush_seconds.clone(),
        );
        let flushed_rows = Counter::default();
        registry.register(
            "store_rows_written",
            "Node rows written to the store",
            flushed_rows.clone(),
        );
        // Fine around the one-second bound, coarse elsewhere.
        let write_behind_lag = Histogram::new([
            0.01, 0.05, 0.1, 0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0, 5.0,
        ]);
        registry.register_with_unit(
            "store_write_behind_lag",
            "Age of a write-behind batch's oldest change when the batch is in the store",
            Unit::Seconds,
            write_behind_lag.clone(),
        );
        // 1 µs .. about 0.5 s: a heartbeat's phases take microseconds.
        let phases =
            Family::<PhaseLabels, Histogram, fn() -> Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_001, 2.0, 20))
            });
        registry.register_with_unit(
            "heartbeat_phase_duration",
            "Time a taken heartbeat spent in each phase of the controller's work: read (the validated read), lock (the node's lookup and lock), apply (the node rules), store (queueing its change, or waiting for the store while it is behind)",
            Unit::Seconds,
            phases.clone(),
        );
        let phase = |phase| phases.get_or_create_owned(&PhaseLabels { phase });
        let heartbeat_phases = HeartbeatPhases {
            read: phase("read"),
            lock: phase("lock"),
            apply: phase("apply"),
            store: phase("store"),
        };
        // Only the leader runs the periodic jobs: a standby's count stays at zero
        // (docs/controller.md, "Several controllers").
        let sweeps = Counter::default();
        registry.register(
            "staleness_sweeps",
            "Passes of the staleness sweep this process ran (only a leading controller sweeps)",
            sweeps.clone(),
        );
        crate::unknown_fields::register(&mut registry);
        Metrics {
            sweeps,
            registry,
            requests,
            latency,
            nodes,
            heartbeats,
            rejected_vm_entries,
            foreign_vm_entries,
            flush_seconds,
            flushed_rows,
            write_behind_lag,
            heartbeat_phases,
        }
    }

    pub fn observe_request(
        &self,
        method: &'static str,
        route: &'static str,
        status: u16,
        elapsed: Duration,
    ) {
        self.requests
            .get_or_create(&RequestLabels {
                method,
                route,
                status,
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabels { method, route })
            .observe(elapsed.as_secs_f64());
    }

    /// One pass of the staleness sweep ran.
    pub fn swept(&self) {
        self.sweeps.inc();
    }

    pub fn heartbeat(&self) {
        self.heartbeats.inc();
    }

    /// `entries` entries of a heartbeat's `vms` were set aside.
    pub fn rejected_vm_entries(&self, entries: usize) {
        self.rejected_vm_entries.inc_by(entries as u64);
    }

    /// `entries` entries of a heartbeat's `vms` named VMs recorded on other nodes.
    pub fn foreign_vm_entries(&self, entries: usize) {
        self.foreign_vm_entries.inc_by(entries as u64);
    }

    pub fn set_node_counts(&self, counts: &NodeCounts) {
        for (status, value) in [
            ("registering", counts.registering),
            ("ready", counts.ready),
            ("draining", counts.draining),
            ("unreachable", counts.unreachable),
        ] {
            self.nodes
                .get_or_create(&StatusLabels { status })
                .set(i64::from(value));
        }
    }

    /// The store writer's observer.
    pub fn flush_observer(&self) -> crate::store::writer::FlushObserver {
        let seconds = self.flush_seconds.clone();
        let rows = self.flushed_rows.clone();
        let lag = self.write_behind_lag.clone();
        Box::new(move |flushed| {
            seconds.observe(flushed.took.as_secs_f64());
            rows.inc_by(flushed.rows as u64);
            if let Some(age) = flushed.oldest_change {
                lag.observe(age.as_secs_f64());
            }
        })
    }

    /// The OpenMetrics text.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8192);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_as_openmetrics() {
        let metrics = Metrics::new();
        metrics.observe_request(
            "POST",
            "/v1/nodes/heartbeat",
            200,
            Duration::from_micros(80),
        );
        metrics.heartbeat();
        metrics
            .heartbeat_phases
            .read
            .observe(Duration::from_micros(3).as_secs_f64());
        metrics.rejected_vm_entries(2);
        metrics.set_node_counts(&NodeCounts {
            registering: 1,
            ready: 2,
            draining: 0,
            unreachable: 3,
        });
        let observe = metrics.flush_observer();
        observe(crate::store::writer::Flushed {
            took: Duration::from_millis(2),
            rows: 10,
            oldest_change: Some(Duration::from_millis(700)),
        });
        observe(crate::store::writer::Flushed {
            took: Duration::from_millis(1),
            rows: 1,
            oldest_change: None,
        });
        let text = metrics.render();
        for expected in [
            "fleetwire_controller_http_requests_total{method=\"POST\",route=\"/v1/nodes/heartbeat\",status=\"200\"} 1",
            "fleetwire_controller_http_request_duration_seconds_bucket{",
            "fleetwire_controller_nodes{status=\"unreachable\"} 3",
            "fleetwire_controller_heartbeats_received_total 1",
            "fleetwire_controller_heartbeat_vm_entries_rejected_total 2",
            "fleetwire_controller_store_flush_duration_seconds_count 2",
            "fleetwire_controller_store_rows_written_total 11",
            "fleetwire_controller_store_write_behind_lag_seconds_bucket{le=\"0.6\"} 0",
            "fleetwire_controller_store_write_behind_lag_seconds_bucket{le=\"0.7\"} 1",
            "fleetwire_controller_store_write_behind_lag_seconds_count 1",
            "fleetwire_controller_heartbeat_phase_duration_seconds_count{phase=\"read\"} 1",
            "fleetwire_controller_heartbeat_phase_duration_seconds_count{phase=\"store\"} 0",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
