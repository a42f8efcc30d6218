//! The fleet's node CA, pinned in the store ([`pin`]): the first controller that serves with a
//! CA records the SHA-256 of its certificate in the one-row table `fleet_ca`, and a controller
//! whose CA is another refuses to start. Every node of the fleet holds a certificate of the
//! recorded CA, so a controller with a CA of its own — a standby whose `ca/` was never copied,
//! or a data directory restored without it — would refuse them all once it served
//! (docs/operations.md, "Several controllers").
//!
//! Not a migration, as the bootstrap tokens' table (`store::bootstrap_tokens`): made when
//! missing, so builds that do not know it go on opening the store.

use super::error::StoreError;
use super::open::Database;
use super::postgres::{connect_client, off_runtime, with_schema_lock};
use super::sqlite::open_connection;

const SQLITE_TABLE: &str = "CREATE TABLE IF NOT EXISTS fleet_ca (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    sha256      TEXT NOT NULL,
    recorded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)";
const POSTGRES_TABLE: &str = "CREATE TABLE IF NOT EXISTS fleet_ca (
    id          SMALLINT PRIMARY KEY CHECK (id = 1),
    sha256      TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
)";
const RECORD: &str = "INSERT INTO fleet_ca (id, sha256) VALUES (1, $1) ON CONFLICT (id) DO NOTHING";
const RECORDED: &str = "SELECT sha256 FROM fleet_ca WHERE id = 1";

/// What [`pin`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pinned {
    /// No CA was recorded: this one is now.
    Recorded,
    /// This CA is the one recorded.
    Same,
}

/// Records `sha256` (the CA certificate's, as `NodeCa::fingerprint_sha256` writes it) as the
/// fleet's CA when none is, else checks that it is the recorded one: `StoreError::OtherCa`
/// when not. Controllers starting together record one CA: the insert keeps the first.
pub fn pin(db: &Database, sha256: &str) -> Result<Pinned, StoreError> {
    let recorded = match db {
        Database::Sqlite(path) => {
            let mut conn = open_connection(path)?;
            conn.busy_timeout(std::time::Duration::from_secs(5))
                .map_err(sqlite_err("busy_timeout"))?;
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sqlite_err("begin pinning the fleet CA"))?;
            tx.execute_batch(SQLITE_TABLE)
                .map_err(sqlite_err("create the fleet_ca table"))?;
            let inserted = tx
                .execute(&RECORD.replace("$1", "?1"), [sha256])
                .map_err(sqlite_err("record the fleet CA"))?;
            let recorded: String = tx
                .query_row(RECORDED, [], |row| row.get(0))
                .map_err(sqlite_err("read the fleet CA"))?;
            tx.commit().map_err(sqlite_err("commit the fleet CA"))?;
            (inserted == 1, recorded)
        }
        Database::Postgres(url) => off_runtime(|| {
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
        })?,
    };
    match recorded {
        (true, _) => Ok(Pinned::Recorded),
        (false, recorded) if recorded == sha256 => Ok(Pinned::Same),
        (false, recorded) => Err(StoreError::OtherCa {
            recorded,
            ours: sha256.to_string(),
        }),
    }
}

fn sqlite_err(doing: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| StoreError::sqlite(doing, e)
}

fn postgres_err(doing: &'static str) -> impl Fn(postgres::Error) -> StoreError {
    move |e| StoreError::postgres(doing, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres_test_schema::test_schema;

    fn pins_the_first_ca_and_refuses_another(db: &Database) {
        let ours = "AA:BB:CC";
        assert_eq!(pin(db, ours).unwrap(), Pinned::Recorded);
        assert_eq!(pin(db, ours).unwrap(), Pinned::Same);
        let error = pin(db, "DD:EE:FF").unwrap_err();
        assert_eq!(
            error,
            StoreError::OtherCa {
                recorded: ours.into(),
                ours: "DD:EE:FF".into()
            }
        );
        let message = error.to_string();
        assert!(
            message.contains("AA:BB:CC") && message.contains("DD:EE:FF"),
            "{message}"
        );
        // The refusal changed nothing: the first CA is still the fleet's.
        assert_eq!(pin(db, ours).unwrap(), Pinned::Same);
    }

    #[test]
    fn sqlite_pins_the_first_ca_and_refuses_another() {
        let dir = tempfile::tempdir().unwrap();
        pins_the_first_ca_and_refuses_another(&Database::Sqlite(
            dir.path().join("controller.sqlite3"),
        ));
    }

    #[test]
    fn postgres_pins_the_first_ca_and_refuses_another() {
        let Some(schema) = test_schema() else { return };
        pins_the_first_ca_and_refuses_another(&Database::Postgres(schema.url.clone()));
    }
}
