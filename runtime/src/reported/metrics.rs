//! `GET /metrics`: the OpenMetrics rendering of a built [`HostReportedState`], so the metrics
//! page and reported.json can never disagree. One series per meter, per instance state, per
//! host state and per capacity figure.

use fleetwire_types::{HostReportedState, HostState, InstanceState, UsageMeters};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(&'static str, String)>;

/// A meter as a counter in base units: its series name (`fleetwire_app_<name>_total`), its
/// help, and its value in that unit. Meters are kept in ms and MiB-seconds (seed 001's
/// `reported.json`); OpenMetrics names a unit once per family and wants the base one
/// (seconds, bytes), so the page converts.
type Meter = (&'static str, &'static str, fn(&UsageMeters) -> f64);

const MIB: f64 = 1024.0 * 1024.0;

/// The meters, by the name their series carry (`fleetwire_app_<name>_total`), with their help.
pub const METERS: [Meter; 7] = [
    ("running_seconds", "Time the app spent running", |m| {
        m.running_ms as f64 / 1000.0
    }),
    ("idle_seconds", "Time the app spent idle", |m| {
        m.idle_ms as f64 / 1000.0
    }),
    ("cpu_seconds", "CPU time over all vCPUs", |m| {
        m.cpu_ms as f64 / 1000.0
    }),
    ("received_bytes", "Bytes delivered to the guest", |m| {
        m.rx_bytes as f64
    }),
    ("transmitted_bytes", "Bytes the guest sent", |m| {
        m.tx_bytes as f64
    }),
    (
        "disk_provisioned_byte_seconds",
        "Disk set aside for the app, over time",
        |m| m.disk_provisioned_mib_seconds as f64 * MIB,
    ),
    (
        "disk_used_byte_seconds",
        "Disk the app filled, over time",
        |m| m.disk_used_mib_seconds as f64 * MIB,
    ),
];

fn wire_name<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn gauge_family(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Gauge> {
    let family = Family::<Labels, Gauge>::default();
    registry.register(name, help, family.clone());
    family
}

/// Renders `report` as an OpenMetrics text page.
pub fn render(report: &HostReportedState) -> String {
    render_with(report, |_| {})
}

/// Renders `report` with the process's own metrics that `extra` registers beside it (the
/// agent's `/metrics` adds the unknown-field counter).
pub fn render_with(report: &HostReportedState, extra: impl FnOnce(&mut Registry)) -> String {
    let mut registry = Registry::default();
    extra(&mut registry);
    let host = report.host_id.as_str().to_string();

    let host_state = gauge_family(
        &mut registry,
        "fleetwire_host_state",
        "1 for the lifecycle phase the host is in, 0 for the others",
    );
    for s in HostState::ALL {
        host_state
            .get_or_create(&vec![("host_id", host.clone()), ("state", wire_name(&s))])
            .set(i64::from(s == report.state));
    }

    // One family per unit: vCPUs, bytes of memory, bytes of cache; `kind` says whether it is
    // the host's capacity or what is still allocatable.
    let vcpus = gauge_family(
        &mut registry,
        "fleetwire_host_vcpus",
        "The host's vCPUs: its capacity, and what is still allocatable",
    );
    let memory = gauge_family(
        &mut registry,
        "fleetwire_host_memory_bytes",
        "The host's memory for guests: its capacity, and what is still allocatable",
    );
    let cache = gauge_family(
        &mut registry,
        "fleetwire_host_cache_bytes",
        "The host's image cache: its capacity, and what is still allocatable",
    );
    for (kind, c) in [
        ("capacity", &report.capacity),
        ("allocatable", &report.allocatable),
    ] {
        let labels = vec![("host_id", host.clone()), ("kind", kind.to_string())];
        vcpus.get_or_create(&labels).set(i64::from(c.vcpu_count));
        memory.get_or_create(&labels).set(
            c.memory_mib
                .saturating_mul(1024 * 1024)
                .min(i64::MAX as u64) as i64,
        );
        cache
            .get_or_create(&labels)
            .set(c.cache_bytes.min(i64::MAX as u64) as i64);
    }

    let refused = gauge_family(
        &mut registry,
        "fleetwire_desired_refused",
        "1 while the last desired document given to the host is refused (reported.json message)",
    );
    refused
        .get_or_create(&vec![("host_id", host.clone())])
        .set(i64::from(report.message.is_some()));

    let instance_state = gauge_family(
        &mut registry,
        "fleetwire_instance_state",
        "1 for the lifecycle phase each instance is in, 0 for the others",
    );
    // A gauge, not a counter: a cold boot resets it (seed 001's `restartCount`).
    let restarts = gauge_family(
        &mut registry,
        "fleetwire_instance_restarts",
        "Restarts since the instance was last booted from scratch (reset by a cold boot)",
    );
    let meters: Vec<Family<Labels, Counter<f64, AtomicU64>>> = METERS
        .iter()
        .map(|(name, help, _)| {
            let family = Family::<Labels, Counter<f64, AtomicU64>>::default();
            registry.register(format!("fleetwire_app_{name}"), *help, family.clone());
            family
        })
        .collect();

    for i in &report.instances {
        let app = i.app_id.as_str().to_string();
        for s in InstanceState::ALL {
            instance_state
                .get_or_create(&vec![
                    ("app_id", app.clone()),
                    ("deployment_id", i.deployment_id.as_str().to_string()),
                    ("state", wire_name(&s)),
                ])
                .set(i64::from(s == i.state));
        }
        restarts
            .get_or_create(&vec![("app_id", app.clone())])
            .set(i64::from(i.restart_count));
        if let Some(m) = &i.meters {
            for ((_, _, value), family) in METERS.iter().zip(&meters) {
                family
                    .get_or_create(&vec![("app_id", app.clone())])
                    .inc_by(value(m));
            }
        }
    }

    let mut out = String::new();
    encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}
