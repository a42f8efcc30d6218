//! Bootstrap tokens in the PostgreSQL store's schema ([`PostgresBootstrapTokens`]): the same
//! table, times and semantics as `SqliteBootstrapTokens` (store/sqlite/tokens.rs), on a
//! connection of its own for the same reason (a redeemed token must not wait behind, or be
//! rolled back with, a write-behind batch).
//!
//! The table is created when missing, as on SQLite, rather than by a migration: the two backends
//! keep one list of schema versions, in which this table has never been a step (SQLite's
//! `user_version` belongs to the node store's migrations). Here the CREATE runs under the
//! migrations' schema lock, so two controllers starting together do not race on it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use fleetwire_types::NodeId;
use parking_lot::Mutex;
use postgres::Client;

use super::{connect_client, off_runtime, with_schema_lock, OwnThreadDrop};
use crate::bootstrap_token::SplitToken;
use crate::store::error::StoreError;
use crate::store::tokens::{
    judge_row, millis, time, BootstrapTokenInfo, BootstrapTokenStore, IssuedBootstrapToken, Minted,
    Redeemed, StoredToken, TokenRefusal, CREATE_ATTEMPTS, FORGET_PLAIN, KEEP_EXPIRED, RETIRE_PLAIN,
};

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS bootstrap_tokens (
    token_id      TEXT PRIMARY KEY NOT NULL,
    secret_sha256 BYTEA NOT NULL,
    node_id       TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    used_at       BIGINT
);
CREATE TABLE IF NOT EXISTS plain_minted_tokens (token_id TEXT PRIMARY KEY NOT NULL);";

/// Bootstrap tokens in the controller's PostgreSQL schema.
pub struct PostgresBootstrapTokens {
    client: Mutex<OwnThreadDrop>,
}

fn err(doing: &'static str) -> impl Fn(postgres::Error) -> StoreError {
    move |e| StoreError::postgres(doing, e)
}

impl PostgresBootstrapTokens {
    /// Connects to `url` on a connection of its own and creates the table if it is missing.
    pub fn connect(url: &str) -> Result<PostgresBootstrapTokens, StoreError> {
        let client = off_runtime(|| {
            let mut client = connect_client(url)?;
            with_schema_lock(&mut client, |tx| {
                tx.batch_execute(SCHEMA)
                    .map_err(err("create the bootstrap_tokens table"))
            })?;
            Ok::<_, StoreError>(client)
        })?;
        Ok(PostgresBootstrapTokens {
            client: Mutex::new(OwnThreadDrop::new(client)),
        })
    }

    fn with<T: Send>(&self, work: impl FnOnce(&mut Client) -> T + Send) -> T {
        off_runtime(|| work(&mut self.client.lock()))
    }
}

/// The row of `token_id`, if any.
fn read(
    client: &mut impl postgres::GenericClient,
    token_id: &str,
) -> Result<Option<StoredToken>, StoreError> {
    let row = client
        .query_opt(
            "SELECT secret_sha256, node_id, expires_at, used_at
             FROM bootstrap_tokens WHERE token_id = $1",
            &[&token_id],
        )
        .map_err(err("read a bootstrap token"))?;
    row.map(|r| {
        Ok(StoredToken {
            digest: r.try_get(0).map_err(err("read a bootstrap token"))?,
            node_id: r.try_get(1).map_err(err("read a bootstrap token"))?,
            expires_at: r.try_get(2).map_err(err("read a bootstrap token"))?,
            used_at: r.try_get(3).map_err(err("read a bootstrap token"))?,
        })
    })
    .transpose()
}

impl BootstrapTokenStore for PostgresBootstrapTokens {
    fn create_as(
        &self,
        node_id: &NodeId,
        ttl: Duration,
        now: DateTime<Utc>,
        minted: Minted,
    ) -> Result<IssuedBootstrapToken, StoreError> {
        let ttl = chrono::Duration::from_std(ttl).map_err(|e| StoreError::Query {
            doing: "mint a bootstrap token",
            cause: format!("the time to live is out of range: {e}"),
        })?;
        let expires_at = now + ttl;
        let keep = chrono::Duration::from_std(KEEP_EXPIRED).expect("a day is in range");
        self.with(|client| {
            let mut tx = client
                .transaction()
                .map_err(err("begin minting a bootstrap token"))?;
            tx.execute(
                "DELETE FROM bootstrap_tokens WHERE expires_at < $1",
                &[&millis(now - keep)],
            )
            .map_err(err("delete long-expired bootstrap tokens"))?;
            let mut attempt = 0;
            let token = loop {
                attempt += 1;
                let token = SplitToken::generate();
                // ON CONFLICT: a taken id is another try, not an aborted transaction.
                let inserted = tx
                    .execute(
                        "INSERT INTO bootstrap_tokens
                             (token_id, secret_sha256, node_id, created_at, expires_at, used_at)
                         VALUES ($1, $2, $3, $4, $5, NULL) ON CONFLICT (token_id) DO NOTHING",
                        &[
                            &token.id,
                            &token.secret.digest().as_slice(),
                            &node_id.as_str(),
                            &millis(now),
                            &millis(expires_at),
                        ],
                    )
                    .map_err(err("store a bootstrap token"))?;
                if inserted == 1 {
                    break token;
                }
                if attempt >= CREATE_ATTEMPTS {
                    return Err(StoreError::Query {
                        doing: "store a bootstrap token",
                        cause: format!("{attempt} fresh token ids in a row were taken"),
                    });
                }
            };
            if minted == Minted::PlainHttp {
                tx.execute(
                    "INSERT INTO plain_minted_tokens (token_id) VALUES ($1)",
                    &[&token.id],
                )
                .map_err(err("note a token minted in plain mode"))?;
            }
            tx.commit().map_err(err("commit a bootstrap token"))?;
            Ok(IssuedBootstrapToken {
                token,
                node_id: node_id.clone(),
                created_at: now,
                expires_at,
            })
        })
    }

    fn retire_plain_minted(&self) -> Result<usize, StoreError> {
        self.with(|client| {
            let mut tx = client
                .transaction()
                .map_err(err("begin retiring tokens minted in plain mode"))?;
            let retired = tx
                .execute(RETIRE_PLAIN, &[])
                .map_err(err("retire tokens minted in plain mode"))?;
            tx.execute(FORGET_PLAIN, &[])
                .map_err(err("retire tokens minted in plain mode"))?;
            tx.commit()
                .map_err(err("commit retiring tokens minted in plain mode"))?;
            Ok(usize::try_from(retired).unwrap_or(usize::MAX))
        })
    }

    fn check(
        &self,
        presented: &str,
        node_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Redeemed, TokenRefusal> {
        let token = SplitToken::parse(presented)?;
        let row = self.with(|client| read(client, &token.id))?;
        let token_id = judge_row(token, node_id, now, row)?;
        Ok(Redeemed { token_id })
    }

    fn redeem(
        &self,
        presented: &str,
        node_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Redeemed, TokenRefusal> {
        let token = SplitToken::parse(presented)?;
        let token_id = token.id.clone();
        let row = self.with(|client| read(client, &token_id))?;
        let token_id = judge_row(token.clone(), node_id, now, row)?;
        // The single use: one conditional UPDATE. Of two redeemers, the second's waits for the
        // first's row lock, then finds the row used and changes nothing.
        let changed = self.with(|client| {
            client
                .execute(
                    "UPDATE bootstrap_tokens SET used_at = $2
                     WHERE token_id = $1 AND used_at IS NULL AND expires_at > $2
                       AND node_id = $3",
                    &[&token_id, &millis(now), &node_id],
                )
                .map_err(err("mark a bootstrap token used"))
        })?;
        if changed == 1 {
            return Ok(Redeemed { token_id });
        }
        // Someone else redeemed (or deleted) it in between: say so as a later try would.
        let row = self.with(|client| read(client, &token_id))?;
        judge_row(token, node_id, now, row)?;
        Err(TokenRefusal::Store(StoreError::Query {
            doing: "mark a bootstrap token used",
            cause: format!("token {token_id} changed while it was being redeemed"),
        }))
    }

    fn list(&self) -> Result<Vec<BootstrapTokenInfo>, StoreError> {
        let doing = "read a bootstrap token row";
        let rows = self.with(|client| {
            client
                .query(
                    "SELECT token_id, node_id, created_at, expires_at, used_at
                     FROM bootstrap_tokens ORDER BY token_id COLLATE \"C\"",
                    &[],
                )
                .map_err(err("list bootstrap tokens"))
        })?;
        rows.into_iter()
            .map(|r| {
                let used_at: Option<i64> = r.try_get(4).map_err(err(doing))?;
                Ok(BootstrapTokenInfo {
                    token_id: r.try_get(0).map_err(err(doing))?,
                    node_id: r.try_get(1).map_err(err(doing))?,
                    created_at: time(doing, r.try_get(2).map_err(err(doing))?)?,
                    expires_at: time(doing, r.try_get(3).map_err(err(doing))?)?,
                    used_at: used_at.map(|t| time(doing, t)).transpose()?,
                })
            })
            .collect()
    }

    fn delete(&self, token_id: &str) -> Result<bool, StoreError> {
        let deleted = self.with(|client| {
            client
                .execute(
                    "DELETE FROM bootstrap_tokens WHERE token_id = $1",
                    &[&token_id],
                )
                .map_err(err("delete a bootstrap token"))
        })?;
        Ok(deleted > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::test_schema::test_schema;
    use chrono::TimeZone;
    use std::sync::{Arc, Barrier};

    fn at(seconds: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + seconds, 0).unwrap()
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn only_unused_tokens_minted_in_plain_mode_are_retired() {
        let Some(schema) = test_schema() else { return };
        let tokens = PostgresBootstrapTokens::connect(&schema.url).unwrap();
        let node = |id: &str| -> NodeId { id.parse().unwrap() };
        let plain = tokens
            .create_as(&node("n1"), HOUR, at(0), Minted::PlainHttp)
            .unwrap();
        let used = tokens
            .create_as(&node("n2"), HOUR, at(0), Minted::PlainHttp)
            .unwrap();
        tokens.redeem(&used.token.expose(), "n2", at(1)).unwrap();
        let host = tokens.create(&node("n3"), HOUR, at(0)).unwrap();
        // A second connection, as a controller restarting in mTLS mode has.
        let again = PostgresBootstrapTokens::connect(&schema.url).unwrap();
        assert_eq!(again.retire_plain_minted().unwrap(), 1);
        assert_eq!(
            again.redeem(&plain.token.expose(), "n1", at(2)),
            Err(TokenRefusal::Unknown)
        );
        assert!(again.redeem(&host.token.expose(), "n3", at(2)).is_ok());
        assert_eq!(again.retire_plain_minted().unwrap(), 0);
    }

    #[test]
    fn a_token_redeems_once_for_its_node_then_is_used_and_lists_and_deletes() {
        let Some(schema) = test_schema() else { return };
        let tokens = PostgresBootstrapTokens::connect(&schema.url).unwrap();
        let node: NodeId = "gpu-01".parse().unwrap();
        let issued = tokens.create(&node, HOUR, at(0)).unwrap();
        let text = issued.token.expose();
        assert!(tokens.check(&text, "gpu-01", at(5)).is_ok());
        assert!(matches!(
            tokens.redeem(&text, "gpu-02", at(5)),
            Err(TokenRefusal::OtherNode { .. })
        ));
        tokens.redeem(&text, "gpu-01", at(10)).unwrap();
        assert_eq!(
            tokens.redeem(&text, "gpu-01", at(20)),
            Err(TokenRefusal::Used {
                token_id: issued.token.id.clone(),
                used_at: at(10)
            })
        );
        let expired = tokens.create(&node, HOUR, at(0)).unwrap();
        assert!(matches!(
            tokens.redeem(&expired.token.expose(), "gpu-01", at(3600)),
            Err(TokenRefusal::Expired { .. })
        ));
        let listed = tokens.list().unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().any(|t| t.used_at == Some(at(10))));
        assert!(tokens.delete(&issued.token.id).unwrap());
        assert!(!tokens.delete(&issued.token.id).unwrap());
        // A day past its expiry, a token goes with the next one minted.
        tokens.create(&node, HOUR, at(3601 + 86_400)).unwrap();
        assert_eq!(tokens.list().unwrap().len(), 1);
    }

    #[test]
    fn two_concurrent_redeemers_on_two_connections_one_wins() {
        let Some(schema) = test_schema() else { return };
        let tokens = PostgresBootstrapTokens::connect(&schema.url).unwrap();
        let node: NodeId = "n1".parse().unwrap();
        for round in 0..10 {
            let issued = tokens.create(&node, HOUR, at(round)).unwrap();
            let text = Arc::new(issued.token.expose());
            let barrier = Arc::new(Barrier::new(2));
            let racers: Vec<_> = (0..2)
                .map(|_| {
                    let store = PostgresBootstrapTokens::connect(&schema.url).unwrap();
                    let (text, barrier) = (text.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        store.redeem(&text, "n1", at(round + 1))
                    })
                })
                .collect();
            let results: Vec<_> = racers.into_iter().map(|t| t.join().unwrap()).collect();
            assert_eq!(
                results.iter().filter(|r| r.is_ok()).count(),
                1,
                "round {round}: {results:?}"
            );
            assert!(
                results
                    .iter()
                    .any(|r| matches!(r, Err(TokenRefusal::Used { .. }))),
                "{results:?}"
            );
        }
    }
}
