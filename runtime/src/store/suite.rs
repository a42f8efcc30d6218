//! The store's behavioural tests, run against both backends: each test is written once over a
//! [`Backend`] and instantiated for SQLite and PostgreSQL at the end (docs/controller.md, "The
//! database": the two keep the same behaviour).

use super::backend::{Durability, Store};
use super::batch_rules::FOLD_AFTER_BATCHES;
use super::node_rows::{NodeWrite, StoredNode};

/// One database, opened as often as a test needs.
pub(super) trait Backend {
    /// A store on the database (created and migrated on first use).
    fn open(&self) -> Box<dyn Store>;
    /// The rows of `table`, counted by another connection.
    fn count(&self, table: &str) -> i64;
    /// Overwrites the contact log's rows with a truncated blob (bytes 01 07).
    fn damage_contact_log(&self);
    /// Records `version` as applied, as a newer build would.
    fn mark_version(&self, version: u32);
}

fn node(id: &str, record: &str) -> StoredNode {
    StoredNode::for_test(id, record)
}

fn loaded(mut row: StoredNode) -> StoredNode {
    row.vms_changed = false;
    row
}

fn seen(row: &StoredNode) -> Option<String> {
    row.seen.map(|t| t.to_string())
}

fn seen_at(id: &str, second: u32) -> NodeWrite {
    NodeWrite::Seen {
        node_id: id.into(),
        last_heartbeat: format!("2026-11-30T10:00:{second:02}Z").parse().unwrap(),
    }
}

fn upsert(row: StoredNode) -> NodeWrite {
    NodeWrite::Upsert(Box::new(row))
}

fn store_a_and_b(store: &mut dyn Store) {
    let rows = [node("a", "1"), node("b", "1")].map(upsert);
    store.write(&rows, Durability::Commit).unwrap();
}

pub(super) fn migrates_a_new_database_to_the_latest_version(db: &dyn Backend) {
    let mut store = db.open();
    assert_eq!(
        store.schema_version().unwrap(),
        super::sqlite::SCHEMA_VERSION
    );
    store.check().unwrap();
    drop(store);
    // Re-opening applies nothing twice.
    assert_eq!(
        db.open().schema_version().unwrap(),
        super::sqlite::SCHEMA_VERSION
    );
    assert_eq!(db.count("controller_lease"), 0);
}

pub(super) fn refuses_a_database_from_a_newer_controller(db: &dyn Backend) {
    drop(db.open());
    db.mark_version(super::sqlite::SCHEMA_VERSION + 1);
    let Err(error) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| db.open())) else {
        panic!("a database of a newer schema was opened");
    };
    let message = error.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("newer"), "{message}");
}

pub(super) fn upserts_replace_and_deletes_forget_in_one_transaction(db: &dyn Backend) {
    let mut store = db.open();
    let first = [node("b", "{\"v\":1}"), node("a", "{\"v\":1}")].map(upsert);
    store.write(&first, Durability::Behind).unwrap();
    store
        .write(
            &[
                upsert(node("b", "{\"v\":2}")),
                NodeWrite::Delete("a".into()),
            ],
            Durability::Behind,
        )
        .unwrap();
    assert_eq!(
        store.load_nodes().unwrap(),
        vec![loaded(node("b", "{\"v\":2}"))]
    );
}

pub(super) fn a_batch_applies_its_writes_in_order(db: &dyn Backend) {
    let mut store = db.open();
    store_a_and_b(&mut *store);
    // a: written then forgotten; b: forgotten then enrolled again; c: written twice.
    store
        .write(
            &[
                upsert(node("a", "2")),
                NodeWrite::Delete("a".into()),
                NodeWrite::Delete("b".into()),
                upsert(node("b", "3")),
                upsert(node("c", "1")),
                upsert(node("c", "2")),
            ],
            Durability::Commit,
        )
        .unwrap();
    assert_eq!(
        store.load_nodes().unwrap(),
        vec![loaded(node("b", "3")), loaded(node("c", "2"))]
    );
}

pub(super) fn an_unchanged_vm_list_is_left_as_stored(db: &dyn Backend) {
    let mut store = db.open();
    let mut row = node("a", "1");
    row.vms = b"[1]".to_vec();
    store.write(&[upsert(row)], Durability::Behind).unwrap();
    let mut update = node("a", "2");
    update.vms = b"[]".to_vec();
    update.vms_changed = false;
    store.write(&[upsert(update)], Durability::Behind).unwrap();
    let stored = store.load_nodes().unwrap();
    assert_eq!(
        (stored[0].record.as_slice(), stored[0].vms.as_slice()),
        (&b"2"[..], &b"[1]"[..])
    );
}

pub(super) fn ids_load_in_bytewise_order_with_their_contact_times(db: &dyn Backend) {
    // Upper case before lower, '-' before digits: `str` order, whatever the collation.
    let ids = ["Zeta", "a-1", "a1", "b", "\u{e9}t\u{e9}"];
    let mut store = db.open();
    let rows: Vec<NodeWrite> = ids.iter().rev().map(|id| upsert(node(id, "1"))).collect();
    store.write(&rows, Durability::Commit).unwrap();
    let times: Vec<NodeWrite> = ids.iter().map(|id| seen_at(id, 7)).collect();
    store.write(&times, Durability::Behind).unwrap();
    let loaded = store.load_nodes().unwrap();
    let got: Vec<&str> = loaded.iter().map(|n| n.node_id.as_str()).collect();
    assert_eq!(got, ids);
    assert!(loaded.iter().all(|n| n.seen.is_some()), "{loaded:?}");
}

pub(super) fn a_later_contact_time_reads_back_with_the_row_and_goes_with_it(db: &dyn Backend) {
    let mut store = db.open();
    store_a_and_b(&mut *store);
    store.write(&[seen_at("a", 0)], Durability::Behind).unwrap();
    let rows = store.load_nodes().unwrap();
    assert_eq!(seen(&rows[0]).as_deref(), Some("2026-11-30T10:00:00Z"));
    assert_eq!(rows[1].seen, None);
    store
        .write(&[NodeWrite::Delete("a".into())], Durability::Commit)
        .unwrap();
    store
        .write(&[upsert(node("a", "2"))], Durability::Commit)
        .unwrap();
    assert_eq!(
        store.load_nodes().unwrap()[0].seen,
        None,
        "a forgotten node's contact time goes with it"
    );
}

pub(super) fn contact_times_are_logged_per_batch_and_folded_into_one_row(db: &dyn Backend) {
    let mut store = db.open();
    store_a_and_b(&mut *store);
    for second in 0..FOLD_AFTER_BATCHES {
        store
            .write(
                &[seen_at("a", second), seen_at("b", second)],
                Durability::Behind,
            )
            .unwrap();
    }
    assert_eq!(db.count("contact_log"), FOLD_AFTER_BATCHES as i64);
    // A restart reads the log: the latest entry of each node wins.
    drop(store);
    let mut store = db.open();
    let latest = format!("2026-11-30T10:00:{:02}Z", FOLD_AFTER_BATCHES - 1);
    assert_eq!(seen(&store.load_nodes().unwrap()[0]), Some(latest));
    // A commit never folds; the next write-behind batch does (the restart counted the log).
    store
        .write(&[seen_at("a", 58)], Durability::Commit)
        .unwrap();
    assert_eq!(db.count("contact_log"), FOLD_AFTER_BATCHES as i64 + 1);
    store
        .write(&[seen_at("b", 59)], Durability::Behind)
        .unwrap();
    assert_eq!(db.count("contact_log"), 1);
    let expected = ["2026-11-30T10:00:58Z", "2026-11-30T10:00:59Z"].map(|t| Some(t.to_string()));
    let rows = store.load_nodes().unwrap();
    assert_eq!(rows.iter().map(seen).collect::<Vec<_>>(), expected);
    for _ in 1..FOLD_AFTER_BATCHES {
        store.write(&[seen_at("a", 1)], Durability::Behind).unwrap();
    }
    assert_eq!(db.count("contact_log"), FOLD_AFTER_BATCHES as i64);
    store.write(&[seen_at("b", 1)], Durability::Behind).unwrap();
    assert_eq!(db.count("contact_log"), 1);
    drop(store);
    let rows = db.open().load_nodes().unwrap();
    assert_eq!(
        rows.iter().map(seen).collect::<Vec<_>>(),
        ["2026-11-30T10:00:01Z"; 2].map(|t| Some(t.to_string()))
    );
}

pub(super) fn a_deleted_node_takes_its_logged_and_folded_contacts_with_it(db: &dyn Backend) {
    let mut store = db.open();
    store_a_and_b(&mut *store);
    for _ in 0..=FOLD_AFTER_BATCHES {
        store
            .write(&[seen_at("a", 1), seen_at("b", 1)], Durability::Behind)
            .unwrap();
    }
    assert_eq!(db.count("contact_log"), 1, "folded");
    store.write(&[seen_at("a", 2)], Durability::Behind).unwrap();
    // a is forgotten and enrolled again in one batch: the old node's contacts go, those
    // queued for it before its deletion too, the new node's stay.
    store
        .write(
            &[
                seen_at("a", 3),
                NodeWrite::Delete("a".into()),
                upsert(node("a", "2")),
                seen_at("a", 4),
            ],
            Durability::Behind,
        )
        .unwrap();
    let rows = store.load_nodes().unwrap();
    assert_eq!(
        rows.iter().map(seen).collect::<Vec<_>>(),
        ["2026-11-30T10:00:04Z", "2026-11-30T10:00:01Z"].map(|t| Some(t.to_string()))
    );
    store
        .write(
            &[seen_at("b", 5), NodeWrite::Delete("b".into())],
            Durability::Commit,
        )
        .unwrap();
    store
        .write(&[upsert(node("b", "2"))], Durability::Commit)
        .unwrap();
    assert_eq!(store.load_nodes().unwrap()[1].seen, None);
}

pub(super) fn a_damaged_contact_log_row_fails_the_load_and_says_which(db: &dyn Backend) {
    let mut store = db.open();
    store_a_and_b(&mut *store);
    store.write(&[seen_at("a", 1)], Durability::Behind).unwrap();
    db.damage_contact_log();
    let error = store.load_nodes().unwrap_err();
    assert_eq!(
        error.to_string(),
        "contact log batch 1: truncated at byte 2"
    );
}

pub(super) fn a_failing_batch_leaves_nothing_behind(db: &dyn Backend) {
    let mut store = db.open();
    store
        .write(&[upsert(node("a", "1"))], Durability::Commit)
        .unwrap();
    store.write(&[seen_at("a", 1)], Durability::Behind).unwrap();
    let bad = StoredNode {
        record: vec![0xff, 0xfe],
        ..node("c", "")
    };
    let result = store.write(
        &[
            NodeWrite::Delete("a".into()),
            upsert(node("b", "2")),
            seen_at("a", 3),
            upsert(bad),
        ],
        Durability::Commit,
    );
    assert!(result.is_err());
    // Nor is the contact log folded by the deletion.
    let mut a = loaded(node("a", "1"));
    a.seen = Some("2026-11-30T10:00:01Z".parse().unwrap());
    assert_eq!(store.load_nodes().unwrap(), vec![a.clone()]);
    assert_eq!(db.count("contact_log"), 1);
    // The store goes on after it, and a restart reads the same.
    store.write(&[seen_at("a", 1)], Durability::Behind).unwrap();
    drop(store);
    assert_eq!(db.open().load_nodes().unwrap(), vec![a]);
}

/// Instantiates every test of the suite for a backend made by `$make` (an expression giving
/// `Option<impl Backend>`: `None` skips).
macro_rules! suite {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;
            suite!(@tests $make;
                migrates_a_new_database_to_the_latest_version,
                refuses_a_database_from_a_newer_controller,
                upserts_replace_and_deletes_forget_in_one_transaction,
                a_batch_applies_its_writes_in_order,
                an_unchanged_vm_list_is_left_as_stored,
                ids_load_in_bytewise_order_with_their_contact_times,
                a_later_contact_time_reads_back_with_the_row_and_goes_with_it,
                contact_times_are_logged_per_batch_and_folded_into_one_row,
                a_deleted_node_takes_its_logged_and_folded_contacts_with_it,
                a_damaged_contact_log_row_fails_the_load_and_says_which,
                a_failing_batch_leaves_nothing_behind,
            );
        }
    };
    (@tests $make:expr; $($test:ident,)*) => {
        $(
            #[test]
            fn $test() {
                if let Some(db) = $make {
                    super::$test(&db);
                }
            }
        )*
    };
}

mod sqlite_backend {
    use super::Backend;
    use crate::store::backend::Store;
    use crate::store::sqlite::SqliteStore;
    use rusqlite::Connection;

    pub struct Sqlite {
        _dir: tempfile::TempDir,
        path: std::path::PathBuf,
    }

    pub fn make() -> Option<Sqlite> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store/controller.sqlite3");
        Some(Sqlite { _dir: dir, path })
    }

    impl Backend for Sqlite {
        fn open(&self) -> Box<dyn Store> {
            Box::new(SqliteStore::open(&self.path).unwrap_or_else(|e| panic!("{e}")))
        }
        fn count(&self, table: &str) -> i64 {
            Connection::open(&self.path)
                .unwrap()
                .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
                .unwrap()
        }
        fn damage_contact_log(&self) {
            Connection::open(&self.path)
                .unwrap()
                .execute("UPDATE contact_log SET contacts = x'0107'", [])
                .unwrap();
        }
        fn mark_version(&self, version: u32) {
            Connection::open(&self.path)
                .unwrap()
                .pragma_update(None, "user_version", version)
                .unwrap();
        }
    }
}

mod postgres_backend {
    use super::Backend;
    use crate::store::backend::Store;
    use crate::store::postgres::test_schema::{test_schema, TestSchema};
    use crate::store::postgres::{connect_client, PostgresStore};

    pub struct Postgres(pub TestSchema);

    pub fn make() -> Option<Postgres> {
        test_schema().map(Postgres)
    }

    impl Postgres {
        fn run(&self, sql: &str) -> i64 {
            let mut client = connect_client(&self.0.url).unwrap();
            let rows = client.simple_query(sql).unwrap();
            rows.iter()
                .find_map(|m| match m {
                    postgres::SimpleQueryMessage::Row(row) => row.get(0)?.parse().ok(),
                    _ => None,
                })
                .unwrap_or(0)
        }
    }

    impl Backend for Postgres {
        fn open(&self) -> Box<dyn Store> {
            Box::new(PostgresStore::connect(&self.0.url).unwrap_or_else(|e| panic!("{e}")))
        }
        fn count(&self, table: &str) -> i64 {
            self.run(&format!("SELECT count(*) FROM {table}"))
        }
        fn damage_contact_log(&self) {
            self.run("UPDATE contact_log SET contacts = '\\x0107'::bytea");
        }
        fn mark_version(&self, version: u32) {
            self.run(&format!(
                "INSERT INTO fleetwire_schema (version) VALUES ({version})"
            ));
        }
    }
}

suite!(on_sqlite, sqlite_backend::make());
suite!(on_postgres, postgres_backend::make());
