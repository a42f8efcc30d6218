//! The cost of reading a wire document: plain serde into the generated type, the validated read
//! (`fleetwire_types::read`), and schema validation alone (on an already-parsed value).
//! Inputs: a heartbeat (the superset fixture) and a reported.json with 1,000 instances.

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fleetwire_types::{read, HostReportedState, NodeHeartbeat, WireDocument};
use serde_json::Value;

fn fixture(path: &str) -> Value {
    let full = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../schemas/examples")
        .join(path);
    serde_json::from_slice(&std::fs::read(full).expect("fixture")).expect("fixture is JSON")
}

/// reported.json with `n` instances, each a copy of the full fixture's first, renamed.
fn reported_with_instances(n: usize) -> Vec<u8> {
    let mut doc = fixture("HostReportedState/valid/full.json");
    let template = doc["instances"][0].clone();
    let instances: Vec<Value> = (0..n)
        .map(|i| {
            let mut inst = template.clone();
            inst["appId"] = Value::String(format!("app-{i}"));
            inst["deploymentId"] = Value::String(format!("dep-{i}"));
            inst
        })
        .collect();
    doc["instances"] = Value::Array(instances);
    serde_json::to_vec(&doc).unwrap()
}

fn bench_document<T: WireDocument>(c: &mut Criterion, label: &str, bytes: &[u8]) {
    assert!(read::<T>(bytes).is_ok(), "{label} must be valid");
    let value: Value = serde_json::from_slice(bytes).unwrap();
    let mut group = c.benchmark_group(label);
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("plain serde into the generated type", |b| {
        b.iter(|| serde_json::from_slice::<T>(black_box(bytes)).unwrap())
    });
    group.bench_function("validated read", |b| {
        b.iter(|| read::<T>(black_box(bytes)).unwrap())
    });
    group.bench_function("schema validation alone (parsed value)", |b| {
        b.iter(|| assert!(T::validator().is_valid(black_box(&value))))
    });
    group.bench_function("parse to Value + schema validation", |b| {
        b.iter(|| {
            let v: Value = serde_json::from_slice(black_box(bytes)).unwrap();
            assert!(T::validator().is_valid(&v))
        })
    });
    group.finish();
}

fn heartbeat(c: &mut Criterion) {
    let bytes = serde_json::to_vec(&fixture("NodeHeartbeat/valid/full.json")).unwrap();
    bench_document::<NodeHeartbeat>(c, "heartbeat", &bytes);
    let ppn = serde_json::to_vec(&fixture("NodeHeartbeat/valid/ppn-heartbeat.json")).unwrap();
    bench_document::<NodeHeartbeat>(c, "heartbeat (PPN fields only)", &ppn);
}

fn reported(c: &mut Criterion) {
    bench_document::<HostReportedState>(
        c,
        "reported.json, 1000 instances",
        &reported_with_instances(1000),
    );
}

criterion_group!(benches, heartbeat, reported);
criterion_main!(benches);
