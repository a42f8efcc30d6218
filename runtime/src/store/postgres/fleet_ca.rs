//! The fleet CAs' pin (`store::fleet_ca`) in the PostgreSQL database.

use super::{connect_client, off_runtime, with_schema_lock};
use crate::store::error::StoreError;
use crate::store::fleet_ca_row::{legacy_until, Recorded};

/// The table, and the node CA's columns added to one made before them.
const POSTGRES_TABLE: &str = "CREATE TABLE IF NOT EXISTS fleet_ca (
    id          SMALLINT PRIMARY KEY CHECK (id = 1),
    sha256      TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
ALTER TABLE fleet_ca ADD COLUMN IF NOT EXISTS node_sha256 TEXT;
ALTER TABLE fleet_ca ADD COLUMN IF NOT EXISTS node_legacy_until TEXT";

const RECORD: &str = "INSERT INTO fleet_ca (id, sha256) VALUES (1, $1) ON CONFLICT (id) DO NOTHING";
const NODE_RECORDED: &str = "SELECT node_sha256 FROM fleet_ca WHERE id = 1";
const NOT_AFTERS: &str = "SELECT record::jsonb ->> 'cert_not_after' FROM nodes
    WHERE record::jsonb ->> 'cert_not_after' IS NOT NULL";
const RECORD_NODE: &str = "UPDATE fleet_ca SET node_sha256 = $1, node_legacy_until = $2
    WHERE id = 1 AND node_sha256 IS NULL";
const RECORDED: &str = "SELECT sha256, node_sha256, node_legacy_until FROM fleet_ca WHERE id = 1";

/// Records `fleet` when no fleet CA is, and `node` (when given) when no node CA is, with the
/// window of the fleet CA's node certificates; reads back what is recorded.
pub fn record(url: &str, fleet: &str, node: Option<&str>) -> Result<Recorded, StoreError> {
    off_runtime(|| {
        let mut client = connect_client(url)?;
        with_schema_lock(&mut client, |tx| {
            tx.batch_execute(POSTGRES_TABLE)
                .map_err(postgres_err("create the fleet_ca table"))?;
            let inserted_fleet = tx
                .execute(RECORD, &[&fleet])
                .map_err(postgres_err("record the fleet CA"))?
                == 1;
            let mut inserted_node = false;
            if let Some(node) = node {
                let pinned: Option<String> = tx
                    .query_one(NODE_RECORDED, &[])
                    .map_err(postgres_err("read the node CA"))?
                    .get(0);
                if pinned.is_none() {
                    let ends: Vec<String> = tx
                        .query(NOT_AFTERS, &[])
                        .map_err(postgres_err("read the nodes' certificate ends"))?
                        .iter()
                        .map(|row| row.get(0))
                        .collect();
                    let until = legacy_until(ends.iter().map(String::as_str), chrono::Utc::now())?;
                    inserted_node = tx
                        .execute(RECORD_NODE, &[&node, &until])
                        .map_err(postgres_err("record the node CA"))?
                        == 1;
                }
            }
            let row = tx
                .query_one(RECORDED, &[])
                .map_err(postgres_err("read the fleet CAs"))?;
            Ok(Recorded {
                inserted_fleet,
                inserted_node,
                fleet: row.get(0),
                node: row.get(1),
                legacy_until: row.get(2),
            })
        })
    })
}

fn postgres_err(doing: &'static str) -> impl Fn(postgres::Error) -> StoreError {
    move |e| StoreError::postgres(doing, e)
}
