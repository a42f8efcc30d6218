//! The fleet CA's pin (`store::fleet_ca`) in the SQLite database.

use std::path::Path;

use super::open_connection;
use crate::store::error::StoreError;

const SQLITE_TABLE: &str = "CREATE TABLE IF NOT EXISTS fleet_ca (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    sha256      TEXT NOT NULL,
    recorded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)";

const RECORD: &str = "INSERT INTO fleet_ca (id, sha256) VALUES (1, ?1) ON CONFLICT (id) DO NOTHING";
const RECORDED: &str = "SELECT sha256 FROM fleet_ca WHERE id = 1";

/// Records `sha256` when no CA is: whether it inserted, and the recorded CA.
pub fn record(path: &Path, sha256: &str) -> Result<(bool, String), StoreError> {
    let mut conn = open_connection(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(sqlite_err("busy_timeout"))?;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sqlite_err("begin pinning the fleet CA"))?;
    tx.execute_batch(SQLITE_TABLE)
        .map_err(sqlite_err("create the fleet_ca table"))?;
    let inserted = tx
        .execute(RECORD, [sha256])
        .map_err(sqlite_err("record the fleet CA"))?;
    let recorded: String = tx
        .query_row(RECORDED, [], |row| row.get(0))
        .map_err(sqlite_err("read the fleet CA"))?;
    tx.commit().map_err(sqlite_err("commit the fleet CA"))?;
    Ok((inserted == 1, recorded))
}

fn sqlite_err(doing: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| StoreError::sqlite(doing, e)
}
