//! The controller's hot path in pieces: reading a heartbeat through the validated reader,
//! applying it to a node, serializing a node for the fleet and the store, and assembling
//! `GET /v1/fleet` at 10,000 nodes. `cargo bench -p fleetwire --bench controller_hot_path`.

use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use fleetwire::controller::rules::nodes;
use fleetwire::controller::table::node_state::{NodeState, WhenStored};
use fleetwire::controller::{Controller, ControllerArgs, Settings};
use fleetwire::store::sqlite::SqliteStore;
use fleetwire::store::writer::Change;
use fleetwire_types::{NodeHeartbeat, Timestamp};

fn body(index: usize) -> Vec<u8> {
    fleetwire::loadgen::heartbeat_body(index, 1).to_vec()
}

fn hot_path(c: &mut Criterion) {
    // The rules of the hot path, without a TLS connection to name the sender: the identity
    // check is two string comparisons, and the TLS cost is measured whole by the load
    // generator (docs/performance.md).
    let settings = Settings {
        plain_http: true,
        ..Settings::from_args(&ControllerArgs::defaults()).unwrap()
    };
    let bytes = body(1);
    c.bench_function("read::<NodeHeartbeat> (validated)", |b| {
        b.iter(|| fleetwire_types::read::<NodeHeartbeat>(&bytes).unwrap())
    });
    c.bench_function(
        "serde_json::from_slice::<NodeHeartbeat> (parse only)",
        |b| b.iter(|| serde_json::from_slice::<NodeHeartbeat>(&bytes).unwrap()),
    );
    let heartbeat: NodeHeartbeat = fleetwire_types::read_strict(&bytes).unwrap();
    let mut state: NodeState = nodes::enroll_by_heartbeat(&heartbeat, Timestamp::now());
    c.bench_function("apply_heartbeat", |b| {
        b.iter_batched(
            || heartbeat.clone(),
            |hb| {
                nodes::apply_heartbeat(
                    &mut state,
                    hb,
                    Instant::now(),
                    Timestamp::now(),
                    &settings,
                    &mut |_, _| true,
                )
            },
            criterion::BatchSize::SmallInput,
        )
    });
    c.bench_function("node row for the store", |b| {
        b.iter(|| {
            let _ = state.mark_changed(WhenStored::WriteBehind(Change::Row));
            state.stored()
        })
    });

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let started = runtime.block_on(async {
        Controller::start(
            settings.clone(),
            Box::new(SqliteStore::in_memory().unwrap()),
            None,
            fleetwire::controller::shared::Credentials::none(),
        )
        .unwrap()
    });
    let controller = started.controller.clone();
    for i in 0..10_000 {
        let hb: NodeHeartbeat = fleetwire_types::read_strict(&body(i)).unwrap();
        let id = hb.node_id.to_string();
        let (slot, _) = controller
            .table
            .get_or_insert(&id, || nodes::enroll_by_heartbeat(&hb, Timestamp::now()));
        nodes::apply_heartbeat(
            &mut slot.lock(),
            hb,
            Instant::now(),
            Timestamp::now(),
            &settings,
            &mut |_, _| true,
        );
    }
    c.bench_function("GET /v1/fleet body, 10k nodes, cached records", |b| {
        b.iter(|| controller.fleet_document().into_bytes())
    });
    c.bench_function("GET /v1/fleet body, 10k nodes, all records changed", |b| {
        b.iter(|| {
            controller.table.for_each(|_, node| {
                let _ = node.mark_changed(WhenStored::WriteBehind(Change::Row));
            });
            controller.fleet_document().into_bytes()
        })
    });
    // The store: one write-behind batch of every node, as the writer sends it.
    let rows: Vec<fleetwire::store::NodeWrite> = controller
        .table
        .ordered_slots()
        .iter()
        .map(|slot| fleetwire::store::NodeWrite::Upsert(Box::new(slot.lock().stored())))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let mut store = SqliteStore::open(&dir.path().join("bench.sqlite3")).unwrap();
    use fleetwire::store::{Durability, Store};
    store.write(&rows, Durability::Behind).unwrap();
    c.bench_function("store batch of 10k node rows (write-behind)", |b| {
        b.iter(|| store.write(&rows, Durability::Behind).unwrap())
    });
    runtime.block_on(started.writer.shutdown());
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = hot_path
}
criterion_main!(benches);
