//! What the store writer spends on heartbeats that only renew a node's contact time: the
//! write-behind batches of such contacts, and the folds that keep the contact log short, at
//! the two fleet sizes of the load tests. At 75,000 heartbeats a second and a 500 ms flush
//! interval a batch holds 37,500 contacts; at 10,000 nodes each node is in every batch once,
//! at 100,000 nodes nearly every heartbeat is an entry of its own. One measured round is
//! [`FOLD_AFTER_BATCHES`] batches, so it includes one fold. Also a batch of full rows (a mass
//! heartbeat of changed nodes). Each on SQLite and on PostgreSQL side by side, in one run (the
//! PostgreSQL of `FLEETWIRE_TEST_POSTGRES`, a schema of its own; left out with a message when
//! none is reachable).
//! `cargo bench -p fleetwire --bench contact_log`.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use fleetwire::store::batch_rules::FOLD_AFTER_BATCHES;
use fleetwire::store::postgres::test_schema::test_schema;
use fleetwire::store::postgres::PostgresStore;
use fleetwire::store::sqlite::SqliteStore;
use fleetwire::store::{Durability, NodeWrite, Store, StoredNode};
use fleetwire_types::Timestamp;

/// Contacts per write-behind batch at 75,000 heartbeats a second.
const BATCH: usize = 37_500;

fn node_id(index: usize) -> String {
    format!("load-{index:07}")
}

/// Full rows per batch in the rows benchmark.
const ROWS: usize = 5_000;

/// Where a benchmark's store lives (a temporary directory, a schema): kept as long as the
/// store, removed when dropped.
type Place = Box<dyn std::any::Any>;

/// The backends of this run: SQLite, and PostgreSQL when one is reachable.
fn backends() -> Vec<&'static str> {
    let mut names = vec!["sqlite"];
    if test_schema().is_some() {
        names.push("postgres");
    }
    names
}

fn open(backend: &str) -> (Place, Box<dyn Store>) {
    if backend == "sqlite" {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("bench.sqlite3")).unwrap();
        (Box::new(dir), Box::new(store))
    } else {
        let schema = test_schema().expect("reachable a moment ago");
        let store = PostgresStore::connect(&schema.url).unwrap();
        (Box::new(schema), Box::new(store))
    }
}

fn rows(nodes: usize, record: &str) -> Vec<NodeWrite> {
    (0..nodes)
        .map(|i| NodeWrite::Upsert(Box::new(StoredNode::for_test(&node_id(i), record))))
        .collect()
}

/// A store holding `nodes` node rows, as after their enrolment.
fn enrolled(backend: &str, nodes: usize) -> (Place, Box<dyn Store>) {
    let (place, mut store) = open(backend);
    store
        .write(&rows(nodes, r#"{"status":"ready"}"#), Durability::Commit)
        .unwrap();
    (place, store)
}

/// The batches of one fold period: the loadgen's nodes heartbeat in turn, each batch taking
/// the next `BATCH` of them (a node at most once per batch), with times a few microseconds
/// apart.
fn fold_period(nodes: usize) -> Vec<Vec<NodeWrite>> {
    let start: Timestamp = "2026-12-01T06:00:00.000001Z".parse().unwrap();
    let per_batch = BATCH.min(nodes);
    let mut period = Vec::new();
    for batch in 0..FOLD_AFTER_BATCHES as usize {
        let first = batch * per_batch;
        // The queue is in heartbeat order, not id order: a prime stride through the batch's
        // nodes (a permutation, as the stride shares no factor with the batch size).
        let writes = (0..per_batch)
            .map(|i| (i * 7_919) % per_batch)
            .map(|i| NodeWrite::Seen {
                node_id: node_id((first + i) % nodes).as_str().into(),
                last_heartbeat: (*start.as_datetime()
                    + chrono::Duration::microseconds((first + i) as i64 * 13))
                .into(),
            })
            .collect();
        period.push(writes);
    }
    period
}

fn contact_log(c: &mut Criterion) {
    for nodes in [10_000, 100_000] {
        for backend in backends() {
            let (_place, mut store) = enrolled(backend, nodes);
            let period = fold_period(nodes);
            let contacts: usize = period.iter().map(Vec::len).sum();
            // Settle the log into its steady state (a fold behind it) before measuring.
            for batch in &period {
                store.write(batch, Durability::Behind).unwrap();
            }
            c.bench_function(
                &format!(
                    "{backend} {nodes} nodes: {contacts} contacts in {FOLD_AFTER_BATCHES} batches (one fold)"
                ),
                |b| {
                    b.iter_custom(|rounds| {
                        let mut took = Duration::ZERO;
                        for _ in 0..rounds {
                            let started = Instant::now();
                            for batch in &period {
                                store.write(batch, Durability::Behind).unwrap();
                            }
                            took += started.elapsed();
                        }
                        took
                    })
                },
            );
            // A batch of full rows changing (the record differs every round).
            let mut round = 0u64;
            c.bench_function(
                &format!("{backend} {nodes} nodes: a batch of {ROWS} full rows"),
                |b| {
                    b.iter_custom(|rounds| {
                        let mut took = Duration::ZERO;
                        for _ in 0..rounds {
                            round += 1;
                            let batch = rows(ROWS, &format!(r#"{{"status":"ready","r":{round}}}"#));
                            let started = Instant::now();
                            store.write(&batch, Durability::Behind).unwrap();
                            took += started.elapsed();
                        }
                        took
                    })
                },
            );
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(10));
    targets = contact_log
}
criterion_main!(benches);
