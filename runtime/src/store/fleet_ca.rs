//! The fleet's two CAs (docs/security.md, "Identities"), pinned in the store ([`pin`]): the
//! first controller that serves with them records the SHA-256 of each certificate in the
//! one-row table `fleet_ca` (`sha256` the fleet CA's, `ca.pem`; `node_sha256` the node CA's,
//! `node-ca.pem`), and a controller whose CA is another, either of them, refuses to start.
//! Every node holds a certificate of the node CA and pins the fleet CA, so a controller with a
//! CA of its own — a standby whose `ca/` was never copied, or copied in part, or a data
//! directory restored without it — would refuse them all, or be refused by them, once it
//! served (docs/operations.md, "Several controllers").
//!
//! With the node CA the row records `node_legacy_until`: until then, and never after, the
//! controller takes a node certificate from the fleet CA, as the releases of one CA issued
//! them (docs/security.md, "Upgrading a fleet of one CA"). It is the latest end of validity
//! among the certificates the enrolled nodes held when the node CA was pinned (the time of the
//! pin when none was later): every certificate of the fleet CA a node holds was issued before,
//! so none of them outlives it, and a node certificate the fleet CA's key signs afterwards is
//! never taken.
//!
//! Not a migration, as the bootstrap tokens' table (`store::tokens`): made when missing, and
//! its node columns added to a table from before them, so builds that do not know them go on
//! opening the store.

use chrono::{DateTime, Utc};

use super::error::StoreError;
use super::open::Database;
use super::{postgres, sqlite};

/// What [`pin`] found, for one CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pinned {
    /// No CA was recorded: this one is now.
    Recorded,
    /// This CA is the one recorded.
    Same,
    /// Not recorded: the node CA is the fleet CA, as a CA directory of a release of one CA
    /// holds them, and none is pinned yet. The node CA its controller creates is pinned then.
    OneCa,
}

/// What [`pin`] found for both CAs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pins {
    pub fleet: Pinned,
    pub node: Pinned,
    /// Until when node certificates of the fleet CA are taken (none when the node CA is not
    /// pinned: it is the fleet CA then).
    pub legacy_until: Option<DateTime<Utc>>,
}

/// Records `fleet` (the fleet CA certificate's SHA-256, as `FleetCa::fingerprint_sha256`
/// writes it) and `node` (the node CA's) when none is, else checks that each is the recorded
/// one: `StoreError::OtherCa` or `StoreError::OtherNodeCa` when not, and nothing recorded.
/// Controllers starting together record one pair: the first keeps it. A node CA equal to the
/// fleet CA is the layout of a release of one CA: it is not recorded ([`Pinned::OneCa`]).
pub fn pin(db: &Database, fleet: &str, node: &str) -> Result<Pins, StoreError> {
    let node_to_record = (node != fleet).then_some(node);
    // Each backend's own file records it (`sqlite::fleet_ca`, `postgres::fleet_ca`).
    let recorded = match db {
        Database::Sqlite(path) => sqlite::fleet_ca::record(path, fleet, node_to_record)?,
        Database::Postgres(url) => postgres::fleet_ca::record(url, fleet, node_to_record)?,
    };
    if recorded.fleet != fleet {
        return Err(StoreError::OtherCa {
            recorded: recorded.fleet,
            ours: fleet.to_string(),
        });
    }
    let node_pinned = match &recorded.node {
        None => Pinned::OneCa,
        Some(pinned) if pinned != node => {
            return Err(StoreError::OtherNodeCa {
                recorded: pinned.clone(),
                ours: node.to_string(),
            })
        }
        Some(_) if recorded.inserted_node => Pinned::Recorded,
        Some(_) => Pinned::Same,
    };
    let legacy_until = match (&node_pinned, &recorded.legacy_until) {
        (Pinned::OneCa, _) => None,
        (_, Some(text)) => Some(
            DateTime::parse_from_rfc3339(text)
                .map_err(|e| StoreError::Query {
                    doing: "read fleet_ca.node_legacy_until",
                    cause: format!("{text:?}: {e}"),
                })?
                .with_timezone(&Utc),
        ),
        // Pinned by hand without a date: nothing of the fleet CA is taken as a node.
        (_, None) => Some(DateTime::<Utc>::UNIX_EPOCH),
    };
    Ok(Pins {
        fleet: if recorded.inserted_fleet {
            Pinned::Recorded
        } else {
            Pinned::Same
        },
        node: node_pinned,
        legacy_until,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::open::open;
    use crate::store::postgres::test_schema::test_schema;

    /// Runs `sql` on the store (a node row to pin over, an old table).
    fn execute(db: &Database, sql: &str) {
        match db {
            Database::Sqlite(path) => rusqlite::Connection::open(path)
                .unwrap()
                .execute_batch(sql)
                .unwrap(),
            Database::Postgres(url) => crate::store::postgres::connect_client(url)
                .unwrap()
                .batch_execute(sql)
                .unwrap(),
        }
    }

    fn pins_both_cas_and_refuses_either_other(db: &Database) {
        drop(open(db).unwrap());
        let before = Utc::now() - chrono::Duration::seconds(2);
        let first = pin(db, "AA:01", "BB:01").unwrap();
        assert_eq!(
            (first.fleet.clone(), first.node.clone()),
            (Pinned::Recorded, Pinned::Recorded)
        );
        // No node held a certificate: nothing of the fleet CA is taken as a node from now on.
        let until = first.legacy_until.unwrap();
        assert!(until >= before && until <= Utc::now(), "{until}");
        let again = pin(db, "AA:01", "BB:01").unwrap();
        assert_eq!((again.fleet, again.node), (Pinned::Same, Pinned::Same));
        assert_eq!(again.legacy_until, first.legacy_until, "recorded once");

        let error = pin(db, "CC:02", "BB:01").unwrap_err();
        assert_eq!(
            error,
            StoreError::OtherCa {
                recorded: "AA:01".into(),
                ours: "CC:02".into()
            }
        );
        let error = pin(db, "AA:01", "DD:02").unwrap_err();
        assert_eq!(
            error,
            StoreError::OtherNodeCa {
                recorded: "BB:01".into(),
                ours: "DD:02".into()
            }
        );
        let message = error.to_string();
        assert!(
            message.contains("node-ca.pem")
                && message.contains("BB:01")
                && message.contains("DD:02"),
            "{message}"
        );
        // A CA directory of one CA (node-ca.pem a copy of ca.pem) is another node CA too.
        assert!(matches!(
            pin(db, "AA:01", "AA:01"),
            Err(StoreError::OtherNodeCa { .. })
        ));
        // The refusals changed nothing.
        assert_eq!(pin(db, "AA:01", "BB:01").unwrap(), again_pins(&first));
    }

    fn again_pins(first: &Pins) -> Pins {
        Pins {
            fleet: Pinned::Same,
            node: Pinned::Same,
            legacy_until: first.legacy_until,
        }
    }

    /// A store of a release of one CA (`fleet_ca` without the node columns, a node holding a
    /// certificate of the fleet CA) takes the node CA when its controller makes one, and takes
    /// the fleet CA's node certificates until the last of them ends.
    fn an_old_store_pins_the_node_ca_when_there_is_one(db: &Database) {
        drop(open(db).unwrap());
        let pinned_at = if matches!(db, Database::Sqlite(_)) {
            "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"
        } else {
            "now()"
        };
        let kind = if matches!(db, Database::Sqlite(_)) {
            "TEXT"
        } else {
            "TIMESTAMPTZ"
        };
        execute(
            db,
            &format!(
                "CREATE TABLE fleet_ca (id SMALLINT PRIMARY KEY CHECK (id = 1), sha256 TEXT NOT NULL,
                     recorded_at {kind} NOT NULL DEFAULT {pinned_at});
                 INSERT INTO fleet_ca (id, sha256) VALUES (1, 'AA:01');
                 INSERT INTO nodes (node_id, record, vms, flags) VALUES
                     ('n1', '{{\"cert_not_after\":\"2099-03-04T05:06:07Z\"}}', '[]', '{{}}'),
                     ('n2', '{{\"cert_not_after\":\"2098-03-04T05:06:07.5Z\"}}', '[]', '{{}}'),
                     ('n3', '{{}}', '[]', '{{}}');"
            ),
        );
        // Still one CA: nothing to pin for the nodes.
        let one = pin(db, "AA:01", "AA:01").unwrap();
        assert_eq!(
            one,
            Pins {
                fleet: Pinned::Same,
                node: Pinned::OneCa,
                legacy_until: None
            }
        );
        let upgraded = pin(db, "AA:01", "BB:01").unwrap();
        assert_eq!(upgraded.node, Pinned::Recorded);
        assert_eq!(
            upgraded.legacy_until.unwrap().to_rfc3339(),
            "2099-03-04T05:06:07+00:00"
        );
        assert_eq!(pin(db, "AA:01", "BB:01").unwrap().node, Pinned::Same);
    }

    #[test]
    fn sqlite_pins_both_cas_and_refuses_either_other() {
        let dir = tempfile::tempdir().unwrap();
        pins_both_cas_and_refuses_either_other(&Database::Sqlite(
            dir.path().join("controller.sqlite3"),
        ));
    }

    #[test]
    fn postgres_pins_both_cas_and_refuses_either_other() {
        let Some(schema) = test_schema() else { return };
        pins_both_cas_and_refuses_either_other(&Database::Postgres(schema.url.clone()));
    }

    #[test]
    fn sqlite_an_old_store_pins_the_node_ca_when_there_is_one() {
        let dir = tempfile::tempdir().unwrap();
        an_old_store_pins_the_node_ca_when_there_is_one(&Database::Sqlite(
            dir.path().join("controller.sqlite3"),
        ));
    }

    #[test]
    fn postgres_an_old_store_pins_the_node_ca_when_there_is_one() {
        let Some(schema) = test_schema() else { return };
        an_old_store_pins_the_node_ca_when_there_is_one(&Database::Postgres(schema.url.clone()));
    }
}
