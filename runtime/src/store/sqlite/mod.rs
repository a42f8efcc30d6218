//! The embedded store: SQLite through rusqlite, in WAL mode, with versioned migrations.

pub mod fleet_ca;
pub mod tokens;

use std::path::Path;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Transaction};

use crate::store::backend::{Durability, Store};
use crate::store::batch_rules::{
    attach_latest_contacts, deletions, liveness_contact, log_error, logged, text,
    FOLD_AFTER_BATCHES,
};
use crate::store::contact_log::{self, Encoder};
use crate::store::error::{StoreError, Unusable};
use crate::store::node_rows::{NodeWrite, StoredNode};

/// One schema migration: SQL, or a step that needs code (re-encoding rows).
enum Migration {
    Sql(&'static str),
    Code(fn(&Transaction) -> Result<(), StoreError>),
}

/// Schema migrations, applied in order; migration `i` brings the store to version `i + 1`
/// (recorded in `PRAGMA user_version`). Never edit an applied migration: add one.
const MIGRATIONS: &[Migration] = &[
    // 1: one row per node. A rowid table: rows are around a kilobyte, too wide for a
    // WITHOUT ROWID b-tree.
    Migration::Sql(
        "CREATE TABLE nodes (
        node_id    TEXT PRIMARY KEY NOT NULL,
        record     TEXT NOT NULL,
        vms        TEXT NOT NULL,
        flags      TEXT NOT NULL,
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );",
    ),
    // 2: the last contact time of nodes whose heartbeats changed nothing else, so such a
    // heartbeat rewrites a few bytes instead of the node's whole row.
    Migration::Sql(
        "CREATE TABLE liveness (
        node_id        TEXT PRIMARY KEY NOT NULL,
        last_heartbeat TEXT NOT NULL
    );",
    ),
    // 3: liveness rows keyed by node id alone (WITHOUT ROWID): one b-tree to update per
    // heartbeat instead of a table and its primary-key index. At 100,000 nodes nearly every
    // heartbeat is such a row.
    Migration::Sql(
        "CREATE TABLE liveness_by_node (
        node_id        TEXT PRIMARY KEY NOT NULL,
        last_heartbeat TEXT NOT NULL
    ) WITHOUT ROWID;
    INSERT INTO liveness_by_node (node_id, last_heartbeat)
        SELECT node_id, last_heartbeat FROM liveness;
    DROP TABLE liveness;
    ALTER TABLE liveness_by_node RENAME TO liveness;",
    ),
    // 4: the contact times of each write-behind batch as one row (see `contact_log`), folded
    // into `liveness` now and then: at 100,000 nodes nearly every heartbeat is a contact of
    // its own, and one appended row per batch costs far less than a b-tree update per node.
    Migration::Sql(
        "CREATE TABLE contact_log (
        batch    INTEGER PRIMARY KEY,
        contacts BLOB NOT NULL
    );",
    ),
    // 5: `liveness` merged into the contact log, whose batches are now folded into one row of
    // the log instead of a b-tree update per node: a fold at 100,000 nodes had been 100,000
    // upserts of RFC 3339 text every ten seconds, the bulk of the store writer's extra time.
    Migration::Code(liveness_into_contact_log),
    // 6: the leader lease of controllers sharing a PostgreSQL database (store::postgres),
    // made here too so both backends keep one list of versions. It stays empty on SQLite: a
    // SQLite file serves one controller (docs/controller.md, "The database").
    Migration::Sql(
        "CREATE TABLE controller_lease (
        id         INTEGER PRIMARY KEY CHECK (id = 1),
        holder     TEXT NOT NULL,
        leader_url TEXT NOT NULL,
        epoch      INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    );",
    ),
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
const DELETE: &str = "DELETE FROM nodes WHERE node_id = ?1";
const LOG_CONTACTS: &str = "INSERT INTO contact_log (contacts) VALUES (?1)";

pub struct SqliteStore {
    conn: Connection,
    /// The `synchronous` level currently set.
    durability: Durability,
    /// Rows in `contact_log`: the folded row, if any, and the batches logged since.
    log_rows: u32,
    contacts: Encoder,
    /// The folded row being built, kept from fold to fold.
    folded: Vec<u8>,
}

/// A failed statement as a store error, `doing` naming it.
fn err(doing: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| StoreError::sqlite(doing, e)
}

/// A read-write connection to the database file at `path`, created (and its directory) when
/// missing: the node store's, and the bootstrap tokens' own connection on the same file.
pub fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::atomic_file::create_private_dir(dir).map_err(|e| StoreError::CreateDirectory {
            dir: dir.to_path_buf(),
            cause: e.to_string(),
        })?;
    }
    // The owner's alone; SQLite gives its journal and WAL files the database's mode.
    crate::atomic_file::ensure_private_file(path).map_err(|e| StoreError::Open {
        path: path.to_path_buf(),
        cause: e.to_string(),
    })?;
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| StoreError::Open {
        path: path.to_path_buf(),
        cause: e.to_string(),
    })
}

/// The tables a fleetwire store has held at some schema version (`bootstrap_tokens` and
/// `plain_minted_tokens` are created outside the migrations, see `bootstrap_tokens`, and so
/// is `fleet_ca`).
const OWN_TABLES: &[&str] = &[
    "nodes",
    "liveness",
    "contact_log",
    "bootstrap_tokens",
    "plain_minted_tokens",
    "controller_lease",
    "fleet_ca",
];

/// How many of `PRAGMA quick_check`'s findings a refusal quotes.
const PROBLEMS_QUOTED: usize = 5;

/// Checks, reading only, that the existing file at `path` (if any) is a store this build can
/// open: a SQLite database, not damaged (`PRAGMA quick_check`: every page and b-tree, all
/// but the indexes' agreement with their tables), holding a fleetwire schema no newer than
/// [`SCHEMA_VERSION`]. Opening read-write would change such a file before any of this could
/// be found out: WAL mode rewrites the header, a migration creates tables in it.
fn check_existing(path: &Path) -> Result<(), StoreError> {
    // A missing file is a new store; so is an empty one, as SQLite itself takes it.
    match std::fs::metadata(path) {
        Ok(meta) if meta.len() > 0 => {}
        _ => return Ok(()),
    }
    let unusable = |problem| StoreError::Unusable {
        path: path.to_path_buf(),
        problem,
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| StoreError::Open {
        path: path.to_path_buf(),
        cause: e.to_string(),
    })?;
    let damaged = |doing: &str| {
        let doing = doing.to_string();
        move |e: rusqlite::Error| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase) => unusable(Unusable::NotADatabase {
                cause: e.to_string(),
            }),
            Some(rusqlite::ErrorCode::DatabaseCorrupt) => unusable(Unusable::Damaged {
                problems: format!("{doing}: {e}"),
            }),
            _ => StoreError::Open {
                path: path.to_path_buf(),
                cause: format!("{doing}: {e}"),
            },
        }
    };
    // The first statement reads the header and the schema: a file that is no database, or
    // whose first page is damaged, fails here.
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()
        })
        .map_err(damaged("reading its schema"))?;
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(damaged("reading its schema version"))?;
    if version > SCHEMA_VERSION {
        return Err(unusable(Unusable::Newer {
            found: version,
            known: SCHEMA_VERSION,
        }));
    }
    let own = |t: &String| OWN_TABLES.contains(&t.as_str()) || t.starts_with("sqlite_");
    let ours = if version == 0 {
        tables.iter().all(own)
    } else {
        tables.iter().any(|t| t == "nodes")
    };
    if !ours {
        return Err(unusable(Unusable::Foreign {
            tables: tables.join(", "),
            version,
        }));
    }
    let mut problems: Vec<String> = conn
        .prepare("PRAGMA quick_check")
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()
        })
        .map_err(damaged("checking every page (quick_check)"))?;
    if problems != ["ok"] {
        let found = problems.len();
        problems.truncate(PROBLEMS_QUOTED);
        let mut problems = problems.join("; ");
        if found > PROBLEMS_QUOTED {
            problems.push_str(&format!(" (and {} more)", found - PROBLEMS_QUOTED));
        }
        return Err(unusable(Unusable::Damaged {
            problems: format!("checking every page (quick_check): {problems}"),
        }));
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and migrates it to [`SCHEMA_VERSION`].
    /// An existing file that is not a store this build can use is refused unchanged
    /// ([`Unusable`]).
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        check_existing(path)?;
        Self::with_connection(open_connection(path)?)
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
            return Err(StoreError::NoWal { mode });
        }
        conn.execute_batch(
            "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA wal_autocheckpoint = 4096;",
        )
            .map_err(err("pragmas"))?;
        let mut store = SqliteStore {
            conn,
            durability: Durability::Commit,
            log_rows: 0,
            contacts: Encoder::default(),
            folded: Vec::new(),
        };
        store.migrate()?;
        store.log_rows = store
            .conn
            .query_row("SELECT count(*) FROM contact_log", [], |r| r.get(0))
            .map_err(err("count the contact log"))?;
        Ok(store)
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let current = self.schema_version()?;
        if current > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                found: current,
                known: SCHEMA_VERSION,
            });
        }
        for (index, migration) in MIGRATIONS.iter().enumerate().skip(current as usize) {
            let version = index as u32 + 1;
            let tx = self.conn.transaction().map_err(err("begin migration"))?;
            match migration {
                Migration::Sql(sql) => tx.execute_batch(sql).map_err(|e| e.to_string()),
                Migration::Code(step) => step(&tx).map_err(|e| e.to_string()),
            }
            .map_err(|cause| StoreError::Migration { version, cause })?;
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
            .prepare("SELECT node_id, record, vms, flags FROM nodes ORDER BY node_id")
            .map_err(err("prepare load"))?;
        let rows = stmt
            .query_map([], |row| {
                Ok(StoredNode {
                    node_id: row.get(0)?,
                    record: row.get::<_, String>(1)?.into_bytes(),
                    vms: row.get::<_, String>(2)?.into_bytes(),
                    vms_changed: false,
                    vms_generation: 0,
                    record_generation: 0,
                    seen: None,
                    flags: row.get::<_, String>(3)?.into_bytes(),
                })
            })
            .map_err(err("load nodes"))?;
        let mut nodes = rows
            .collect::<Result<Vec<_>, _>>()
            .map_err(err("read node row"))?;
        // Both in node-id order (SQLite compares text bytewise, as `str` does): a merge join.
        attach_latest_contacts(&mut nodes, &read_contact_log(&self.conn)?)?;
        Ok(nodes)
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
        let deleted = deletions(batch);
        let tx = self.conn.transaction().map_err(err("begin"))?;
        let mut log_rows = self.log_rows;
        {
            if !deleted.is_empty() && log_rows > 0 {
                log_rows = fold(&tx, &mut self.folded, |id| !deleted.contains_key(id))?;
            }
            let mut upsert = tx.prepare_cached(UPSERT).map_err(err("prepare upsert"))?;
            let mut upsert_keeping_vms = tx
                .prepare_cached(UPSERT_KEEPING_VMS)
                .map_err(err("prepare upsert"))?;
            let mut delete = tx.prepare_cached(DELETE).map_err(err("prepare delete"))?;
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
                        delete
                            .execute(params![node_id])
                            .map_err(err("delete node"))?;
                    }
                }
            }
            if let Some(blob) = self
                .contacts
                .encode_where(batch, |i| logged(batch, &deleted, i))?
            {
                tx.prepare_cached(LOG_CONTACTS)
                    .map_err(err("prepare contact log"))?
                    .execute(params![blob])
                    .map_err(err("log contacts"))?;
                log_rows += 1;
            }
            // Folding is for write-behind batches: a request waiting on a commit never waits
            // for it.
            if durability == Durability::Behind && log_rows > FOLD_AFTER_BATCHES {
                log_rows = fold(&tx, &mut self.folded, |_| true)?;
            }
        }
        tx.commit().map_err(err("commit"))?;
        self.log_rows = log_rows;
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

/// Every row of the contact log, `(batch, blob)`, in the order written.
fn read_contact_log(conn: &Connection) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT batch, contacts FROM contact_log ORDER BY batch")
        .map_err(err("prepare contact log read"))?;
    let mut rows = stmt.query([]).map_err(err("read the contact log"))?;
    let mut batches = Vec::new();
    while let Some(row) = rows.next().map_err(err("read the contact log"))? {
        let batch: i64 = row.get(0).map_err(err("read the contact log"))?;
        let blob = row
            .get_ref(1)
            .and_then(|v| Ok(v.as_blob()?.to_vec()))
            .map_err(|e| StoreError::ContactLogRow {
                batch,
                cause: e.to_string(),
            })?;
        batches.push((batch, blob));
    }
    Ok(batches)
}

/// Folds the contact log into one row holding each node's latest time (leaving out the nodes
/// `keep` refuses), built in `folded`, inside the caller's transaction; the log's row count
/// after it.
fn fold(
    tx: &Transaction,
    folded: &mut Vec<u8>,
    keep: impl Fn(&str) -> bool,
) -> Result<u32, StoreError> {
    let batches = read_contact_log(tx)?;
    replace_contact_log(tx, &batches, keep, folded)
}

/// Replaces the contact log with one row, built in `folded`: the merge of `batches` (rows in
/// write order, the log's own or, in migration 5, with an older one in front). Returns the
/// log's row count after it (0 when no node is left).
fn replace_contact_log(
    tx: &Transaction,
    batches: &[(i64, Vec<u8>)],
    keep: impl Fn(&str) -> bool,
    folded: &mut Vec<u8>,
) -> Result<u32, StoreError> {
    let blobs: Vec<&[u8]> = batches.iter().map(|(_, blob)| blob.as_slice()).collect();
    let nodes = contact_log::merge(&blobs, keep, folded).map_err(|e| log_error(batches, e))?;
    tx.execute("DELETE FROM contact_log", [])
        .map_err(err("empty the contact log"))?;
    tracing::debug!(batches = batches.len(), nodes, "contact log folded");
    if nodes == 0 {
        return Ok(0);
    }
    tx.prepare_cached(LOG_CONTACTS)
        .map_err(err("prepare contact log"))?
        .execute(params![folded.as_slice()])
        .map_err(err("write the folded contact log"))?;
    Ok(1)
}

/// Migration 5: the contact times of `liveness` (the folds of earlier builds) become the
/// contact log's oldest row, the log is folded, and `liveness` is dropped.
fn liveness_into_contact_log(tx: &Transaction) -> Result<(), StoreError> {
    let mut times = Vec::new();
    {
        let mut stmt = tx
            .prepare("SELECT node_id, last_heartbeat FROM liveness")
            .map_err(err("read liveness"))?;
        let mut rows = stmt.query([]).map_err(err("read liveness"))?;
        while let Some(row) = rows.next().map_err(err("read liveness"))? {
            let node_id: String = row.get(0).map_err(err("read liveness"))?;
            let text: String = row.get(1).map_err(err("read liveness"))?;
            times.push(liveness_contact(node_id, &text)?);
        }
    }
    let mut encoder = Encoder::default();
    if let Some(blob) = encoder.encode(&times)? {
        // Older than every logged batch: it goes first.
        let mut log = read_contact_log(tx)?;
        log.insert(0, (0, blob.to_vec()));
        replace_contact_log(tx, &log, |_| true, &mut Vec::new())?;
    }
    tx.execute_batch("DROP TABLE liveness")
        .map_err(err("drop liveness"))
}

#[cfg(test)]
mod tests {
    //! The tests of what SQLite alone does (its files, its migrations from earlier builds);
    //! the store's behaviour is tested on both backends by `store::suite`.
    use super::*;

    fn node(id: &str, record: &str) -> StoredNode {
        StoredNode::for_test(id, record)
    }

    /// A loaded row's contact time, as text.
    fn seen(row: &StoredNode) -> Option<String> {
        row.seen.map(|t| t.to_string())
    }

    /// A database at schema version `version`, as a build of that version left it.
    fn database_at_version(path: &Path, version: usize) -> Connection {
        let conn = Connection::open(path).unwrap();
        for migration in &MIGRATIONS[..version] {
            let Migration::Sql(sql) = migration else {
                panic!("migrations up to {version} are SQL");
            };
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", version as u32)
            .unwrap();
        conn.execute(
            "INSERT INTO nodes (node_id, record, vms, flags) VALUES ('a', '{}', '[]', '{}'),
                 ('b', '{}', '[]', '{}'), ('c', '{}', '[]', '{}')",
            [],
        )
        .unwrap();
        conn
    }

    fn tables(store: &SqliteStore) -> Vec<String> {
        let mut stmt = store
            .conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap();
        let names = stmt.query_map([], |r| r.get(0)).unwrap();
        names.collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn a_version_2_database_keeps_its_contact_times_through_the_migrations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v2.sqlite3");
        database_at_version(&path, 2)
            .execute(
                "INSERT INTO liveness (node_id, last_heartbeat) VALUES ('a', '2026-01-01T00:00:09Z')",
                [],
            )
            .unwrap();
        let mut store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        let rows = store.load_nodes().unwrap();
        assert_eq!(
            rows.iter().map(seen).collect::<Vec<_>>(),
            [Some("2026-01-01T00:00:09Z".into()), None, None]
        );
        assert_eq!(tables(&store), ["contact_log", "controller_lease", "nodes"]);
        assert_eq!((count(&store, "contact_log"), store.log_rows), (1, 1));
    }

    #[test]
    fn a_version_4_database_has_its_liveness_table_and_log_folded_into_one_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v4.sqlite3");
        let conn = database_at_version(&path, 4);
        conn.execute(
            "INSERT INTO liveness (node_id, last_heartbeat)
             VALUES ('a', '2026-01-01T00:00:01Z'), ('b', '2026-01-01T00:00:01+01:00')",
            [],
        )
        .unwrap();
        // Logged batches of earlier builds, newer than `liveness`: a format-1 one for b and c,
        // then a format-2 one for c.
        let mut text_times = vec![1, 0, 1, 0, b'b', 0, 20];
        text_times.extend_from_slice(b"2026-01-01T00:00:05Z");
        text_times.extend_from_slice(&[0, 1, 0, b'c', 18, 2, b'5', b'Z']);
        let numeric = Encoder::default()
            .encode(&[seen_at("c", 7)])
            .unwrap()
            .unwrap()
            .to_vec();
        for blob in [text_times, numeric] {
            conn.execute("INSERT INTO contact_log (contacts) VALUES (?1)", [blob])
                .unwrap();
        }
        drop(conn);
        let mut store = SqliteStore::open(&path).unwrap();
        assert_eq!(tables(&store), ["contact_log", "controller_lease", "nodes"]);
        assert_eq!(count(&store, "contact_log"), 1);
        let rows = store.load_nodes().unwrap();
        assert_eq!(
            rows.iter().map(seen).collect::<Vec<_>>(),
            [
                "2026-01-01T00:00:01Z",
                "2026-01-01T00:00:05Z",
                "2026-11-30T10:00:07Z"
            ]
            .map(|t| Some(t.to_string()))
        );
    }

    #[test]
    fn an_unreadable_liveness_time_fails_the_migration_names_the_node_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v4.sqlite3");
        database_at_version(&path, 4)
            .execute(
                "INSERT INTO liveness (node_id, last_heartbeat)
                 VALUES ('a', '2026-01-01T00:00:01Z'), ('b', 'soon')",
                [],
            )
            .unwrap();
        let error = SqliteStore::open(&path).err().unwrap();
        let error = error.to_string();
        assert!(
            error.starts_with(
                "migration 5 failed: the last contact time of node \"b\" is unreadable: "
            ),
            "{error}"
        );
        let conn = Connection::open(&path).unwrap();
        let version: u32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        let liveness: i64 = conn
            .query_row("SELECT count(*) FROM liveness", [], |r| r.get(0))
            .unwrap();
        assert_eq!((version, liveness), (4, 2));
    }

    /// A store with one node, closed (its WAL checkpointed into the file).
    fn closed_store(path: &Path) -> Vec<u8> {
        let mut store = SqliteStore::open(path).unwrap();
        store_a_and_b(&mut store);
        drop(store);
        std::fs::read(path).unwrap()
    }

    /// Opening `path` is refused with `problem`, and the file is as it was.
    fn refused(path: &Path, before: &[u8]) -> Unusable {
        let Err(StoreError::Unusable {
            path: named,
            problem,
        }) = SqliteStore::open(path)
        else {
            panic!("{} was opened", path.display());
        };
        assert_eq!(named, path);
        assert!(
            std::fs::read(path).unwrap() == before,
            "the file was changed"
        );
        problem
    }

    #[test]
    fn refuses_files_that_are_no_store_of_this_build_and_leaves_them_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite3");
        let good = closed_store(&path);
        // Not a database at all.
        let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7919 % 251) as u8).collect();
        std::fs::write(&path, &garbage).unwrap();
        assert!(matches!(
            refused(&path, &garbage),
            Unusable::NotADatabase { .. }
        ));
        // Another program's database, in rollback-journal mode (WAL would rewrite its header).
        std::fs::remove_file(&path).unwrap();
        let other = Connection::open(&path).unwrap();
        other
            .execute_batch("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
            .unwrap();
        drop(other);
        let foreign = std::fs::read(&path).unwrap();
        assert_eq!(
            refused(&path, &foreign),
            Unusable::Foreign {
                tables: "photos".into(),
                version: 0
            }
        );
        // A newer build's store.
        std::fs::write(&path, &good).unwrap();
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        drop(conn);
        let newer = std::fs::read(&path).unwrap();
        assert_eq!(
            refused(&path, &newer),
            Unusable::Newer {
                found: SCHEMA_VERSION + 1,
                known: SCHEMA_VERSION
            }
        );
        // Its own store opens.
        std::fs::write(&path, &good).unwrap();
        assert_eq!(
            SqliteStore::open(&path)
                .unwrap()
                .load_nodes()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn a_damaged_b_tree_page_is_found_before_the_store_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite3");
        let mut store = SqliteStore::open(&path).unwrap();
        let rows: Vec<NodeWrite> = (0..400)
            .map(|i| NodeWrite::Upsert(Box::new(node(&format!("n{i:04}"), &"x".repeat(600)))))
            .collect();
        store.write(&rows, Durability::Commit).unwrap();
        drop(store);
        let mut bytes = std::fs::read(&path).unwrap();
        let page = 4096;
        let pages = bytes.len() / page;
        assert!(pages > 8, "{pages} pages");
        // The header of a page in the middle: its b-tree page type and cell count.
        let middle = pages / 2 * page;
        bytes[middle..middle + 8].copy_from_slice(&[0x0d, 0xff, 0xff, 0xff, 0xff, 0, 0, 0]);
        std::fs::write(&path, &bytes).unwrap();
        let problem = refused(&path, &bytes);
        assert!(matches!(problem, Unusable::Damaged { .. }), "{problem}");
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
        // Folded into one row of this build's format, both read back the same.
        for _ in 0..FOLD_AFTER_BATCHES {
            store.write(&[seen_at("b", 9)], Durability::Behind).unwrap();
        }
        assert_eq!(count(&store, "contact_log"), 1);
        let rows = store.load_nodes().unwrap();
        assert_eq!(rows.iter().map(seen).collect::<Vec<_>>(), expected);
    }
}
