//! The fleet CAs' pin (`store::fleet_ca`) in the SQLite database.

use std::path::Path;

use rusqlite::OptionalExtension;

use super::open_connection;
use crate::store::error::StoreError;
use crate::store::fleet_ca_row::{legacy_until, Recorded};

const SQLITE_TABLE: &str = "CREATE TABLE IF NOT EXISTS fleet_ca (
    id                INTEGER PRIMARY KEY CHECK (id = 1),
    sha256            TEXT NOT NULL,
    recorded_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    node_sha256       TEXT,
    node_legacy_until TEXT
)";

/// The node CA's columns, added to a table made before them (SQLite has no `ADD COLUMN IF
/// NOT EXISTS`: each is added when `pragma_table_info` lacks it).
const NODE_COLUMNS: &[(&str, &str)] = &[
    (
        "node_sha256",
        "ALTER TABLE fleet_ca ADD COLUMN node_sha256 TEXT",
    ),
    (
        "node_legacy_until",
        "ALTER TABLE fleet_ca ADD COLUMN node_legacy_until TEXT",
    ),
];
const HAS_COLUMN: &str = "SELECT 1 FROM pragma_table_info('fleet_ca') WHERE name = ?1";

const RECORD: &str = "INSERT INTO fleet_ca (id, sha256) VALUES (1, ?1) ON CONFLICT (id) DO NOTHING";
const NODE_RECORDED: &str = "SELECT node_sha256 FROM fleet_ca WHERE id = 1";
const NOT_AFTERS: &str = "SELECT json_extract(record, '$.cert_not_after') FROM nodes
    WHERE json_extract(record, '$.cert_not_after') IS NOT NULL";
const RECORD_NODE: &str = "UPDATE fleet_ca SET node_sha256 = ?1, node_legacy_until = ?2
    WHERE id = 1 AND node_sha256 IS NULL";
const RECORDED: &str = "SELECT sha256, node_sha256, node_legacy_until FROM fleet_ca WHERE id = 1";

/// Records `fleet` when no fleet CA is, and `node` (when given) when no node CA is, with the
/// window of the fleet CA's node certificates; reads back what is recorded.
pub fn record(path: &Path, fleet: &str, node: Option<&str>) -> Result<Recorded, StoreError> {
    let mut conn = open_connection(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(sqlite_err("busy_timeout"))?;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sqlite_err("begin pinning the fleet CAs"))?;
    tx.execute_batch(SQLITE_TABLE)
        .map_err(sqlite_err("create the fleet_ca table"))?;
    for (column, add) in NODE_COLUMNS {
        let present = tx
            .query_row(HAS_COLUMN, [column], |_| Ok(()))
            .optional()
            .map_err(sqlite_err("read the fleet_ca table's columns"))?
            .is_some();
        if !present {
            tx.execute_batch(add)
                .map_err(sqlite_err("add the node CA's columns to fleet_ca"))?;
        }
    }
    let inserted_fleet = tx
        .execute(RECORD, [fleet])
        .map_err(sqlite_err("record the fleet CA"))?
        == 1;
    let mut inserted_node = false;
    if let Some(node) = node {
        let pinned: Option<String> = tx
            .query_row(NODE_RECORDED, [], |row| row.get(0))
            .map_err(sqlite_err("read the node CA"))?;
        if pinned.is_none() {
            let ends: Vec<String> = {
                let mut statement = tx
                    .prepare(NOT_AFTERS)
                    .map_err(sqlite_err("read the nodes' certificate ends"))?;
                let rows = statement
                    .query_map([], |row| row.get(0))
                    .map_err(sqlite_err("read the nodes' certificate ends"))?;
                rows.collect::<Result<_, _>>()
                    .map_err(sqlite_err("read the nodes' certificate ends"))?
            };
            let until = legacy_until(ends.iter().map(String::as_str), chrono::Utc::now())?;
            inserted_node = tx
                .execute(RECORD_NODE, [node, until.as_str()])
                .map_err(sqlite_err("record the node CA"))?
                == 1;
        }
    }
    let (fleet, node, legacy_until) = tx
        .query_row(RECORDED, [], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .map_err(sqlite_err("read the fleet CAs"))?;
    tx.commit().map_err(sqlite_err("commit the fleet CAs"))?;
    Ok(Recorded {
        inserted_fleet,
        inserted_node,
        fleet,
        node,
        legacy_until,
    })
}

fn sqlite_err(doing: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| StoreError::sqlite(doing, e)
}
