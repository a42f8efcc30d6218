//! What one reconcile pass costs beyond the driver: building reported.json from the live
//! state, validating it, writing it atomically (two fsyncs), and rendering /metrics from it.
//! `cargo bench -p fleetwire --bench agent_pass`; figures in docs/agent.md.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fleetwire::document_file::write_document;
use fleetwire::drivers::{InstanceStatus, VolumeStatus};
use fleetwire::reported::{build, render, LiveState};
use fleetwire_types::{
    AppId, ComputeUsage, HostCapacity, HostId, HostReportedState, HostVersions, InstanceResources,
    InstanceState, Timestamp, UsageMeters,
};

fn instances(n: usize) -> (Vec<InstanceStatus>, BTreeMap<AppId, UsageMeters>) {
    let mut list = Vec::new();
    let mut meters = BTreeMap::new();
    for k in 0..n {
        let app: AppId = format!("app-{k}").parse().unwrap();
        list.push(InstanceStatus {
            app_id: app.clone(),
            deployment_id: format!("d-{k}").parse().unwrap(),
            state: InstanceState::Running,
            resources: InstanceResources {
                vcpu_count: std::num::NonZeroU64::new(1).unwrap(),
                memory_mib: std::num::NonZeroU64::new(256).unwrap(),
                disk_mib: 1024,
            },
            restart_count: 2,
            last_restart: None,
            last_exit_code: Some(3),
            started_at: Some(Timestamp::now()),
            compute: Some(ComputeUsage {
                cpu_share: Some(0.25),
                measured_at: Timestamp::now(),
                memory_total_bytes: 256 << 20,
                memory_used_bytes: 40 << 20,
            }),
            cpu_ms: 1234,
            rx_bytes: 0,
            tx_bytes: 0,
            message: None,
            volume: Some(VolumeStatus {
                path: PathBuf::from(format!("/var/lib/fleetwire-agent/volumes/app-{k}")),
                size_bytes: 1 << 30,
                used: Some((1 << 20, Timestamp::now())),
            }),
            disk_used_bytes: None,
            pid: Some(1000 + k as u32),
            host_ports: Vec::new(),
            guest_ipv4: None,
            last_healthy_at: None,
        });
        meters.insert(
            app,
            UsageMeters {
                running_ms: 100_000,
                idle_ms: 0,
                cpu_ms: 1234,
                rx_bytes: 0,
                tx_bytes: 0,
                disk_provisioned_mib_seconds: 102_400,
                disk_used_mib_seconds: 100,
            },
        );
    }
    (list, meters)
}

fn pass(c: &mut Criterion) {
    let host: HostId = "bench-host".parse().unwrap();
    let versions = HostVersions {
        agent: "0.1.0".into(),
        guest_image: "none".into(),
        zerofs: "none".into(),
        firecracker: "none".into(),
        vmm: None,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reported.json");
    let mut group = c.benchmark_group("agent_pass");
    for n in [1usize, 10, 100] {
        let (list, meters) = instances(n);
        let converged = HashMap::new();
        let live = || LiveState {
            host_id: &host,
            state: fleetwire_types::HostState::Ready,
            capacity: HostCapacity {
                vcpu_count: 64,
                memory_mib: 256 * 1024,
                cache_bytes: 1 << 40,
            },
            versions: &versions,
            instances: &list,
            meters: &meters,
            converged_at: &converged,
            message: None,
        };
        group.bench_with_input(BenchmarkId::new("build", n), &n, |b, _| {
            b.iter(|| build(&live()))
        });
        let report: HostReportedState = build(&live());
        group.bench_with_input(BenchmarkId::new("validate_and_write", n), &n, |b, _| {
            b.iter(|| write_document(&path, &report).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("render_metrics", n), &n, |b, _| {
            b.iter(|| render(&report))
        });
    }
    group.finish();
}

criterion_group!(benches, pass);
criterion_main!(benches);
