//! The fleet CA's pin (`store::fleet_ca`) in the PostgreSQL database.

use super::{connect_client, off_runtime, with_schema_lock};
use crate::store::error::StoreError;

const POSTGRES_TABLE: &str = "CREATE TABLE IF NOT EXISTS fleet_ca (
    id          SMALLINT PRIMARY KEY CHECK (id = 1),
    sha256      TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
)";

const RECORD: &str = "INSERT INTO fleet_ca (id, sha256) VALUES (1, $1) ON CONFLICT (id) DO NOTHING";
const RECORDED: &str = "SELECT sha256 FROM fleet_ca WHERE id = 1";

/// Records `sha256` when no CA is: whether it inserted, and the recorded CA.
pub fn record(url: &str, sha256: &str) -> Result<(bool, String), StoreError> {
    off_runtime(|| {
        let mut client = connect_client(url)?;
        with_schema_lock(&mut client, |tx| {
            tx.batch_execute(POSTGRES_TABLE)
                .map_err(postgres_err("create the fleet_ca table"))?;
            let inserted = tx
                .execute(RECORD, &[&sha256])
                .map_err(postgres_err("record the fleet CA"))?;
            let recorded: String = tx
                .query_one(RECORDED, &[])
                .map_err(postgres_err("read the fleet CA"))?
                .get(0);
            Ok((inserted == 1, recorded))
        })
    })
}

fn postgres_err(doing: &'static str) -> impl Fn(postgres::Error) -> StoreError {
    move |e| StoreError::postgres(doing, e)
}
