//! The fleet's node CA, pinned in the store ([`pin`]): the first controller that serves with a
//! CA records the SHA-256 of its certificate in the one-row table `fleet_ca`, and a controller
//! whose CA is another refuses to start. Every node of the fleet holds a certificate of the
//! recorded CA, so a controller with a CA of its own — a standby whose `ca/` was never copied,
//! or a data directory restored without it — would refuse them all once it served
//! (docs/operations.md, "Several controllers").
//!
//! Not a migration, as the bootstrap tokens' table (`store::tokens`): made when
//! missing, so builds that do not know it go on opening the store.

use super::error::StoreError;
use super::open::Database;
use super::{postgres, sqlite};

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
    // Each backend's own file records it (`sqlite::fleet_ca`, `postgres::fleet_ca`).
    let recorded = match db {
        Database::Sqlite(path) => sqlite::fleet_ca::record(path, sha256)?,
        Database::Postgres(url) => postgres::fleet_ca::record(url, sha256)?,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::test_schema::test_schema;

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
