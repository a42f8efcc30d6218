//! The embedded store: SQLite through rusqlite, in WAL mode, with versioned migrations.

use std::collections::BTreeMap;
use std::path::Path;

use fleetwire_types::Timestamp;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Transaction};

use super::contact_log::{self, Encoder, MergeError};
use super::{Durability, NodeWrite, Store, StoreError, StoredNode};

/// Schema migrations, applied in order; migration `i` brings the store to version `i + 1`
/// (recorded in `PRAGMA user_version`). Never edit an applied migration: add one.
const MIGRATIONS: &[&str] = &[
    // 1: one row per node. A rowid table: rows are around a kilobyte, too wide for a
    // WITHOUT ROWID b-tree.
    "CREATE TABLE nodes (
        node_id    TEXT PRIMARY KEY NOT NULL,
        record     TEXT NOT NULL,
        vms        TEXT NOT NULL,
        flags      TEXT NOT NULL,
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );",
    // 2: the last contact time of nodes whose heartbeats changed nothing else, so such a
    // heartbeat rewrites a few bytes instead of the node's whole row.
    "CREATE TABLE liveness (
        node_id        TEXT PRIMARY KEY NOT NULL,
        last_heartbeat TEXT NOT NULL
    );",
    // 3: liveness rows keyed by node id alone (WITHOUT ROWID): one b-tree to update per
    // heartbeat instead of a table and its primary-key index. At 100,000 nodes nearly every
    // heartbeat is such a row.
    "CREATE TABLE liveness_by_node (
        node_id        TEXT PRIMARY KEY NOT NULL,
        last_heartbeat TEXT NOT NULL
    ) WITHOUT ROWID;
    INSERT INTO liveness_by_node (node_id, last_heartbeat)
        SELECT node_id, last_heartbeat FROM liveness;
    DROP TABLE liveness;
    ALTER TABLE liveness_by_node RENAME TO liveness;",
    // 4: the contact times of each write-behind batch as one row (see `contact_log`), folded
    // into `liveness` now and then: at 100,000 nodes nearly every heartbeat is a contact of
    // its own, and one appended row per batch costs far less than a b-tree update per node.
    "CREATE TABLE contact_log (
        batch    INTEGER PRIMARY KEY,
        contacts BLOB NOT NULL
    );",
];

/// The latest schema version this build knows.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

const UPSERT: &str = "INSERT INTO nodes (node_id, record, vms, flags, updated_at)
     VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
     ON CONFLICT (node_id) DO UPDATE SET
       record = excluded.record, vms = excluded.vms, flags = excluded.flags,
       updated_at = excluded.updated_at";
/// The same without the VM list, for a row whose list the store already has.
const UPSERT_KEEPING_VMS: &str = "INSERT INTO nodes (node_id, record, vms, flags, updated_at)
     VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
     ON CONFLICT (node_id) DO UPDATE SET
       record = excluded.record, flags = excluded.flags, updated_at = excluded.updated_at";
const SEEN: &str = "INSERT INTO liveness (node_id, last_heartbeat) VALUES (?1, ?2)
     ON CONFLICT (node_id) DO UPDATE SET last_heartbeat = excluded.last_heartbeat";
const DELETE: &str = "DELETE FROM nodes WHERE node_id = ?1";
const DELETE_SEEN: &str = "DELETE FROM liveness WHERE node_id = ?1";
const LOG_CONTACTS: &str = "INSERT INTO contact_log (contacts) VALUES (?1)";

/// How many contact-log rows (write-behind batches) accumulate before they are folded into
/// `liveness`: with the default 500 ms flush interval, about every ten seconds under steady
/// heartbeats. A fold writes each node once however often it was seen, and a restart reads
/// at most this many rows on top of the tables.
pub const FOLD_AFTER_BATCHES: u32 = 20;

pub struct SqliteStore {
    conn: Connection,
    /// The `synchronous` level currently set.
    durability: Durability,
    /// Rows in `contact_log` (batches not yet folded into `liveness`).
    logged_batches: u32,
    contacts: Encoder,
}

fn err(context: &str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |e| StoreError(format!("{context}: {e}"))
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and migrates it to [`SCHEMA_VERSION`].
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError(format!(
                    "cannot create the directory {}: {e}",
                    dir.display()
                ))
            })?;
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| StoreError(format!("cannot open {}: {e}", path.display())))?;
        Self::with_connection(conn)
    }

    /// An in-memory store, for tests.
    pub fn in_memory() -> Result<SqliteStore, StoreError> {
        Self::with_connection(Connection::open_in_memory().map_err(err("open in memory"))?)
    }

    fn with_connection(conn: Connection) -> Result<SqliteStore, StoreError> {
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err("busy_timeout"))?;
        // WAL: readers never block the writer. FULL (an fsync per commit) for what a request
        // waits for; NORMAL for write-behind batches (see `write`).
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(err("journal_mode"))?;
        if !mode.eq_ignore_ascii_case("wal") && !mode.eq_ignore_ascii_case("memory") {
            return Err(StoreError(format!(
                "the database refused WAL mode ({mode})"
            )));
        }
        conn.execute_batch(
            "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA wal_autocheckpoint = 4096;",
        )
            .map_err(err("pragmas"))?;
        let mut store = SqliteStore {
            conn,
            durability: Durability::Commit,
            logged_batches: 0,
            contacts: Encoder::default(),
        };
        store.migrate()?;
        store.logged_batches = store
            .conn
            .query_row("SELECT count(*) FROM contact_log", [], |r| r.get(0))
            .map_err(err("count the contact log"))?;
        Ok(store)
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let current = self.schema_version()?;
        if current > SCHEMA_VERSION {
            return Err(StoreError(format!(
                "the database is at schema version {current}, newer than this controller's \
                 {SCHEMA_VERSION}: refusing to touch it"
            )));
        }
        for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
            let version = index as u32 + 1;
            let tx = self.conn.transaction().map_err(err("begin migration"))?;
            tx.execute_batch(sql)
                .map_err(|e| StoreError(format!("migration {version} failed: {e}")))?;
            tx.pragma_update(None, "user_version", version)
                .map_err(err("user_version"))?;
            tx.commit().map_err(err("commit migration"))?;
            tracing::info!(version, "store migrated");
        }
        Ok(())
    }
}

impl Store for SqliteStore {
    fn load_nodes(&mut self) -> Result<Vec<StoredNode>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT n.node_id, n.record, n.vms, n.flags, l.last_heartbeat
                 FROM nodes n LEFT JOIN liveness l ON l.node_id = n.node_id
                 ORDER BY n.node_id",
            )
            .map_err(err("prepare load"))?;
        let rows = stmt
            .query_map([], |row| {
                let node = StoredNode {
                    node_id: row.get(0)?,
                    record: row.get::<_, String>(1)?.into_bytes(),
                    vms: row.get::<_, String>(2)?.into_bytes(),
                    vms_changed: false,
                    vms_generation: 0,
                    record_generation: 0,
                    seen: None,
                    flags: row.get::<_, String>(3)?.into_bytes(),
                };
                Ok((node, row.get::<_, Option<String>>(4)?))
            })
            .map_err(err("load nodes"))?;
        let rows = rows
            .collect::<Result<Vec<_>, _>>()
            .map_err(err("read node row"))?;
        // Contacts not yet folded are newer than `liveness`.
        let mut latest = BTreeMap::new();
        for_each_latest_contact(&self.conn, |id, time| {
            latest.insert(id.to_string(), time);
            Ok(())
        })?;
        rows.into_iter()
            .map(|(mut node, folded)| {
                node.seen = match latest.remove(node.node_id.as_str()) {
                    Some(logged) => Some(logged),
                    None => folded
                        .map(|text| folded_time(&node.node_id, &text))
                        .transpose()?,
                };
                Ok(node)
            })
            .collect()
    }

    fn write(&mut self, batch: &[NodeWrite], durability: Durability) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        if durability != self.durability {
            // In WAL mode NORMAL still survives a process crash; only a power loss can take
            // the latest write-behind batches.
            let level = match durability {
                Durability::Commit => "FULL",
                Durability::Behind => "NORMAL",
            };
            self.conn
                .pragma_update(None, "synchronous", level)
                .map_err(err("synchronous"))?;
            self.durability = durability;
        }
        let tx = self.conn.transaction().map_err(err("begin"))?;
        let mut logged_batches = self.logged_batches;
        {
            let mut upsert = tx.prepare_cached(UPSERT).map_err(err("prepare upsert"))?;
            let mut upsert_keeping_vms = tx
                .prepare_cached(UPSERT_KEEPING_VMS)
                .map_err(err("prepare upsert"))?;
            let mut delete = tx.prepare_cached(DELETE).map_err(err("prepare delete"))?;
            let mut seen = tx.prepare_cached(SEEN).map_err(err("prepare seen"))?;
            let mut delete_seen = tx
                .prepare_cached(DELETE_SEEN)
                .map_err(err("prepare delete"))?;
            for write in batch {
                match write {
                    NodeWrite::Upsert(node) => {
                        let statement = if node.vms_changed {
                            &mut upsert
                        } else {
                            &mut upsert_keeping_vms
                        };
                        statement
                            .execute(params![
                                node.node_id,
                                text(&node.record)?,
                                text(&node.vms)?,
                                text(&node.flags)?
                            ])
                            .map_err(err("upsert node"))?;
                    }
                    // Logged below: all of the batch's contacts in one row.
                    NodeWrite::Seen { .. } => {}
                    NodeWrite::Delete(node_id) => {
                        // The node's logged contacts must not outlive it (a node re-created
                        // under the same id would inherit them): fold them first.
                        if logged_batches > 0 {
                            fold(&tx, &mut seen)?;
                            logged_batches = 0;
                        }
                        delete
                            .execute(params![node_id])
                            .map_err(err("delete node"))?;
                        delete_seen
                            .execute(params![node_id])
                            .map_err(err("delete node"))?;
                    }
                }
            }
            if let Some(blob) = self.contacts.encode(batch).map_err(StoreError)? {
                tx.prepare_cached(LOG_CONTACTS)
                    .map_err(err("prepare contact log"))?
                    .execute(params![blob])
                    .map_err(err("log contacts"))?;
                logged_batches += 1;
            }
            // Folding is for write-behind batches: a request waiting on a commit never waits
            // for it.
            if durability == Durability::Behind && logged_batches >= FOLD_AFTER_BATCHES {
                fold(&tx, &mut seen)?;
                logged_batches = 0;
            }
        }
        tx.commit().map_err(err("commit"))?;
        self.logged_batches = logged_batches;
        Ok(())
    }

    fn check(&mut self) -> Result<(), StoreError> {
        self.conn
            .query_row("SELECT count(*) FROM nodes LIMIT 1", [], |r| {
                r.get::<_, i64>(0)
            })
            .optional()
            .map(|_| ())
            .map_err(err("check"))
    }

    fn schema_version(&mut self) -> Result<u32, StoreError> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(err("user_version"))
    }
}

/// Calls `each` once per node in the contact log with its latest logged time, in node-id
/// order; the number of batches read.
fn for_each_latest_contact(
    conn: &Connection,
    each: impl FnMut(&str, Timestamp) -> Result<(), StoreError>,
) -> Result<usize, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT batch, contacts FROM contact_log ORDER BY batch")
        .map_err(err("prepare contact log read"))?;
    let mut rows = stmt.query([]).map_err(err("read the contact log"))?;
    let mut batches: Vec<(i64, Vec<u8>)> = Vec::new();
    while let Some(row) = rows.next().map_err(err("read the contact log"))? {
        let batch: i64 = row.get(0).map_err(err("read the contact log"))?;
        let blob = row
            .get_ref(1)
            .and_then(|v| Ok(v.as_blob()?.to_vec()))
            .map_err(|e| StoreError(format!("contact log batch {batch}: {e}")))?;
        batches.push((batch, blob));
    }
    let blobs: Vec<&[u8]> = batches.iter().map(|(_, blob)| blob.as_slice()).collect();
    contact_log::for_each_latest(&blobs, each).map_err(|e| match e {
        MergeError::Damaged { blob, error } => {
            StoreError(format!("contact log batch {}: {error}", batches[blob].0))
        }
        MergeError::Stopped(error) => error,
    })?;
    Ok(batches.len())
}

/// Moves every logged contact into `liveness` (each node once, its latest time, in key order
/// so the b-tree is walked once) and empties the log, inside the caller's transaction.
fn fold(tx: &Transaction, upsert_seen: &mut rusqlite::CachedStatement) -> Result<(), StoreError> {
    let mut nodes = 0;
    let batches = for_each_latest_contact(tx, |node_id, time| {
        nodes += 1;
        upsert_seen
            .execute(params![node_id, time.to_string()])
            .map(|_| ())
            .map_err(err("fold the contact log"))
    })?;
    tx.execute("DELETE FROM contact_log", [])
        .map_err(err("empty the contact log"))?;
    tracing::debug!(batches, nodes, "contact log folded");
    Ok(())
}

/// A `liveness` contact time (RFC 3339, as `fold` writes it) of node `node_id`.
fn folded_time(node_id: &str, text: &str) -> Result<Timestamp, StoreError> {
    text.parse().map_err(|e| {
        StoreError(format!(
            "the last contact time of node {node_id:?} is unreadable: {e}"
        ))
    })
}

fn text(bytes: &[u8]) -> Result<&str, StoreError> {
    std::str::from_utf8(bytes).map_err(|e| StoreError(format!("a document is not UTF-8: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, record: &str) -> StoredNode {
        StoredNode::for_test(id, record)
    }

    /// A loaded row's contact time, as text.
    fn seen(row: &StoredNode) -> Option<String> {
        row.seen.map(|t| t.to_string())
    }

    /// How a written row reads back.
    fn loaded(mut row: StoredNode) -> StoredNode {
        row.vms_changed = false;
        row
    }

    #[test]
    fn migrates_a_new_database_to_the_latest_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/controller.sqlite3");
        let mut store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        store.check().unwrap();
        drop(store);
        // Re-opening applies nothing twice.
        let mut store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn a_version_2_database_keeps_its_contact_times_through_the_migrations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v2.sqlite3");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.execute_batch(MIGRATIONS[1]).unwrap();
            conn.pragma_update(None, "user_version", 2).unwrap();
            conn.execute(
                "INSERT INTO nodes (node_id, record, vms, flags) VALUES ('a', '{}', '[]', '{}')",
                [],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO liveness (node_id, last_heartbeat) VALUES ('a', '2026-01-01T00:00:09Z')",
                [],
            )
            .unwrap();
        }
        let mut store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        let rows = store.load_nodes().unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(seen(&rows[0]).as_deref(), Some("2026-01-01T00:00:09Z"));
        let without_rowid: String = store
            .conn
            .query_row(
                "SELECT sql FROM sqlite_master WHERE name = 'liveness'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(without_rowid.contains("WITHOUT ROWID"), "{without_rowid}");
    }

    #[test]
    fn refuses_a_database_from_a_newer_controller() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite3");
        drop(SqliteStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        drop(conn);
        let error = SqliteStore::open(&path).err().unwrap();
        assert!(error.0.contains("newer"), "{error}");
    }

    #[test]
    fn upserts_replace_and_deletes_forget_in_one_transaction() {
        let mut store = SqliteStore::in_memory().unwrap();
        store
            .write(
                &[
                    NodeWrite::Upsert(Box::new(node("b", "{\"v\":1}"))),
                    NodeWrite::Upsert(Box::new(node("a", "{\"v\":1}"))),
                ],
                Durability::Behind,
            )
            .unwrap();
        store
            .write(
                &[
                    NodeWrite::Upsert(Box::new(node("b", "{\"v\":2}"))),
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

    #[test]
    fn an_unchanged_vm_list_is_left_as_stored() {
        let mut store = SqliteStore::in_memory().unwrap();
        let mut row = node("a", "1");
        row.vms = b"[1]".to_vec();
        store
            .write(
                &[NodeWrite::Upsert(Box::new(row.clone()))],
                Durability::Behind,
            )
            .unwrap();
        let mut update = node("a", "2");
        update.vms = b"[]".to_vec();
        update.vms_changed = false;
        store
            .write(&[NodeWrite::Upsert(Box::new(update))], Durability::Behind)
            .unwrap();
        let stored = store.load_nodes().unwrap();
        assert_eq!(
            (stored[0].record.as_slice(), stored[0].vms.as_slice()),
            (&b"2"[..], &b"[1]"[..])
        );
    }

    #[test]
    fn a_later_contact_time_reads_back_with_the_row_and_goes_with_it() {
        let mut store = SqliteStore::in_memory().unwrap();
        store_a_and_b(&mut store);
        let seen = |id: &str| NodeWrite::Seen {
            node_id: id.into(),
            last_heartbeat: "2026-11-30T10:00:00Z".parse().unwrap(),
        };
        store.write(&[seen("a")], Durability::Behind).unwrap();
        let rows = store.load_nodes().unwrap();
        assert_eq!(
            super::tests::seen(&rows[0]).as_deref(),
            Some("2026-11-30T10:00:00Z")
        );
        assert_eq!(rows[1].seen, None);
        store
            .write(&[NodeWrite::Delete("a".into())], Durability::Commit)
            .unwrap();
        store
            .write(
                &[NodeWrite::Upsert(Box::new(node("a", "2")))],
                Durability::Commit,
            )
            .unwrap();
        assert_eq!(
            store.load_nodes().unwrap()[0].seen,
            None,
            "a forgotten node's contact time goes with it"
        );
    }

    /// Stores nodes `a` and `b`, both with record `1`.
    fn store_a_and_b(store: &mut SqliteStore) {
        let rows = [node("a", "1"), node("b", "1")].map(|row| NodeWrite::Upsert(Box::new(row)));
        store.write(&rows, Durability::Commit).unwrap();
    }

    fn seen_at(id: &str, second: u32) -> NodeWrite {
        NodeWrite::Seen {
            node_id: id.into(),
            last_heartbeat: format!("2026-11-30T10:00:{second:02}Z").parse().unwrap(),
        }
    }

    fn count(store: &SqliteStore, table: &str) -> i64 {
        store
            .conn
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn contact_times_are_logged_per_batch_and_folded_into_liveness() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.sqlite3");
        let mut store = SqliteStore::open(&path).unwrap();
        store_a_and_b(&mut store);
        // One row per batch, whatever the batch holds; nothing in `liveness` yet.
        let unfolded = FOLD_AFTER_BATCHES - 1;
        for second in 0..unfolded {
            store
                .write(
                    &[seen_at("a", second), seen_at("b", second)],
                    Durability::Behind,
                )
                .unwrap();
        }
        assert_eq!(count(&store, "contact_log"), unfolded as i64);
        assert_eq!(count(&store, "liveness"), 0);
        // A restart reads the log: the latest entry of each node wins.
        drop(store);
        let mut store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.logged_batches, unfolded);
        let latest = format!("2026-11-30T10:00:{:02}Z", unfolded - 1);
        let rows = store.load_nodes().unwrap();
        assert_eq!(seen(&rows[0]), Some(latest));
        // A commit never folds; the next write-behind batch does.
        store
            .write(&[seen_at("a", 58)], Durability::Commit)
            .unwrap();
        assert_eq!(count(&store, "contact_log"), FOLD_AFTER_BATCHES as i64);
        store
            .write(&[seen_at("b", 59)], Durability::Behind)
            .unwrap();
        assert_eq!(count(&store, "contact_log"), 0);
        assert_eq!(count(&store, "liveness"), 2);
        let rows = store.load_nodes().unwrap();
        let seen: Vec<_> = rows.iter().map(seen).collect();
        assert_eq!(
            seen,
            [Some("2026-11-30T10:00:58Z"), Some("2026-11-30T10:00:59Z")]
                .map(|t| t.map(String::from))
        );
    }

    #[test]
    fn a_damaged_contact_log_row_fails_the_load_and_says_which() {
        let mut store = SqliteStore::in_memory().unwrap();
        store_a_and_b(&mut store);
        store.write(&[seen_at("a", 1)], Durability::Behind).unwrap();
        store
            .conn
            .execute("UPDATE contact_log SET contacts = x'0107'", [])
            .unwrap();
        let error = store.load_nodes().unwrap_err();
        assert_eq!(error.0, "contact log batch 1: truncated at byte 2");
    }

    #[test]
    fn a_contact_log_of_an_earlier_build_with_text_times_loads_and_folds() {
        let mut store = SqliteStore::in_memory().unwrap();
        store_a_and_b(&mut store);
        // Format 1: a at 10:00:05Z, then b front-coded against it (shares "2026-11-30T10:00:0").
        let mut old = vec![1, 0, 1, 0, b'a', 0, 20];
        old.extend_from_slice(b"2026-11-30T10:00:05Z");
        old.extend_from_slice(&[0, 1, 0, b'b', 18, 2, b'7', b'Z']);
        store
            .conn
            .execute("INSERT INTO contact_log (contacts) VALUES (?1)", [&old])
            .unwrap();
        // A later batch of this build: b again, later.
        store.write(&[seen_at("b", 9)], Durability::Behind).unwrap();
        let expected = ["2026-11-30T10:00:05Z", "2026-11-30T10:00:09Z"].map(|t| Some(t.into()));
        let rows = store.load_nodes().unwrap();
        assert_eq!(rows.iter().map(seen).collect::<Vec<_>>(), expected);
        // Folded (by the batch that fills the log), both land in `liveness` as text and read
        // back the same.
        for _ in 1..FOLD_AFTER_BATCHES {
            store.write(&[seen_at("b", 9)], Durability::Behind).unwrap();
        }
        assert_eq!(count(&store, "contact_log"), 0);
        assert_eq!(count(&store, "liveness"), 2);
        let rows = store.load_nodes().unwrap();
        assert_eq!(rows.iter().map(seen).collect::<Vec<_>>(), expected);
    }

    #[test]
    fn an_unreadable_liveness_time_fails_the_load_and_names_the_node() {
        let mut store = SqliteStore::in_memory().unwrap();
        store_a_and_b(&mut store);
        store
            .conn
            .execute(
                "INSERT INTO liveness (node_id, last_heartbeat) VALUES ('b', 'soon')",
                [],
            )
            .unwrap();
        let error = store.load_nodes().unwrap_err();
        assert!(
            error
                .0
                .starts_with("the last contact time of node \"b\" is unreadable: "),
            "{}",
            error.0
        );
    }

    #[test]
    fn a_failing_batch_leaves_nothing_behind() {
        let mut store = SqliteStore::in_memory().unwrap();
        store
            .write(
                &[NodeWrite::Upsert(Box::new(node("a", "1")))],
                Durability::Commit,
            )
            .unwrap();
        let bad = StoredNode {
            record: vec![0xff, 0xfe],
            ..node("c", "")
        };
        let result = store.write(
            &[
                NodeWrite::Delete("a".into()),
                NodeWrite::Upsert(Box::new(node("b", "2"))),
                seen_at("a", 3),
                NodeWrite::Upsert(Box::new(bad)),
            ],
            Durability::Commit,
        );
        assert!(result.is_err());
        assert_eq!(store.load_nodes().unwrap(), vec![loaded(node("a", "1"))]);
        assert_eq!(count(&store, "contact_log"), 0);
        assert_eq!(store.logged_batches, 0);
    }
}
