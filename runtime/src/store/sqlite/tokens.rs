//! Bootstrap tokens in the controller's SQLite database ([`SqliteBootstrapTokens`]), on a
//! connection of their own: the node store's single writer thread batches heartbeats, and a
//! token redeemed by a registration must not wait behind (or be rolled back with) such a
//! batch.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use fleetwire_types::NodeId;
use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::open_connection;
use crate::bootstrap_token::SplitToken;
use crate::store::error::StoreError;
use crate::store::tokens::{
    judge_row, millis, time, BootstrapTokenInfo, BootstrapTokenStore, IssuedBootstrapToken, Minted,
    Redeemed, StoredToken, TokenRefusal, CREATE_ATTEMPTS, FORGET_PLAIN, KEEP_EXPIRED, RETIRE_PLAIN,
};

/// Created when missing, beside the node store's tables. Times are Unix milliseconds (UTC),
/// compared as integers. `plain_minted_tokens` lists the ids of tokens a `--plain-http`
/// controller minted, until a controller in mTLS mode retires them.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS bootstrap_tokens (
    token_id      TEXT PRIMARY KEY NOT NULL,
    secret_sha256 BLOB NOT NULL,
    node_id       TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    used_at       INTEGER
);
CREATE TABLE IF NOT EXISTS plain_minted_tokens (token_id TEXT PRIMARY KEY NOT NULL);";

/// Bootstrap tokens in the controller's SQLite database.
pub struct SqliteBootstrapTokens {
    conn: Mutex<Connection>,
}

fn err(doing: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| StoreError::sqlite(doing, e)
}

impl SqliteBootstrapTokens {
    /// Opens the database at `path` (the controller's, created if needed) on a connection of
    /// its own and creates the `bootstrap_tokens` table if it is missing.
    pub fn open(path: &Path) -> Result<SqliteBootstrapTokens, StoreError> {
        let conn = open_connection(path)?;
        // As the node store: waits up to 5 s for the other connection's transaction.
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(err("busy_timeout"))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(err("journal_mode"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::NoWal { mode });
        }
        // A minted or redeemed token must survive a power loss: an fsync per commit.
        conn.execute_batch("PRAGMA synchronous = FULL")
            .map_err(err("pragmas"))?;
        // Not a migration: `user_version` belongs to the node store's migrations
        // (store::sqlite), which refuse a database newer than they know. Bumping it here would
        // make an older controller refuse this database, and a node-store migration would not
        // know this table. CREATE TABLE IF NOT EXISTS is idempotent, and any later change to
        // this table must be one too.
        conn.execute_batch(SCHEMA)
            .map_err(err("create the bootstrap_tokens table"))?;
        Ok(SqliteBootstrapTokens {
            conn: Mutex::new(conn),
        })
    }
}

impl BootstrapTokenStore for SqliteBootstrapTokens {
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
        let mut conn = self.conn.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("begin minting a bootstrap token"))?;
        tx.execute(
            "DELETE FROM bootstrap_tokens WHERE expires_at < ?1",
            params![millis(now - keep)],
        )
        .map_err(err("delete long-expired bootstrap tokens"))?;
        let mut attempt = 0;
        let token = loop {
            attempt += 1;
            let token = SplitToken::generate();
            let inserted = tx.execute(
                "INSERT INTO bootstrap_tokens
                     (token_id, secret_sha256, node_id, created_at, expires_at, used_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, NULL)",
                params![
                    token.id,
                    token.secret.digest().as_slice(),
                    node_id.as_str(),
                    millis(now),
                    millis(expires_at)
                ],
            );
            match inserted {
                Ok(_) => break token,
                // The id is taken: another one.
                Err(e)
                    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation)
                        && attempt < CREATE_ATTEMPTS => {}
                Err(e) => return Err(StoreError::sqlite("store a bootstrap token", e)),
            }
        };
        if minted == Minted::PlainHttp {
            tx.execute(
                "INSERT INTO plain_minted_tokens (token_id) VALUES (?1)",
                params![token.id],
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
    }

    fn retire_plain_minted(&self) -> Result<usize, StoreError> {
        let mut conn = self.conn.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("begin retiring tokens minted in plain mode"))?;
        let retired = tx
            .execute(RETIRE_PLAIN, [])
            .map_err(err("retire tokens minted in plain mode"))?;
        tx.execute(FORGET_PLAIN, [])
            .map_err(err("retire tokens minted in plain mode"))?;
        tx.commit()
            .map_err(err("commit retiring tokens minted in plain mode"))?;
        Ok(retired)
    }

    fn check(
        &self,
        presented: &str,
        node_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Redeemed, TokenRefusal> {
        let token = SplitToken::parse(presented)?;
        let conn = self.conn.lock();
        let token_id = judge(&conn, token, node_id, now)?;
        Ok(Redeemed { token_id })
    }

    fn redeem(
        &self,
        presented: &str,
        node_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Redeemed, TokenRefusal> {
        let token = SplitToken::parse(presented)?;
        let mut conn = self.conn.lock();
        // IMMEDIATE: the write lock is taken before the row is read, so a second redeemer
        // (on any connection) reads the row only after the first one committed its use.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("begin redeeming a bootstrap token"))?;
        let token_id = judge(&tx, token, node_id, now)?;
        // Conditional as well, so that the single use holds even should the lock above ever
        // be weakened: only an unused, unexpired row changes.
        let changed = tx
            .execute(
                "UPDATE bootstrap_tokens SET used_at = ?2
                 WHERE token_id = ?1 AND used_at IS NULL AND expires_at > ?2",
                params![token_id, millis(now)],
            )
            .map_err(err("mark a bootstrap token used"))?;
        if changed != 1 {
            return Err(TokenRefusal::Store(StoreError::Query {
                doing: "mark a bootstrap token used",
                cause: format!("token {token_id} changed while it was being redeemed"),
            }));
        }
        tx.commit().map_err(err("commit a bootstrap token's use"))?;
        Ok(Redeemed { token_id })
    }

    fn list(&self) -> Result<Vec<BootstrapTokenInfo>, StoreError> {
        let conn = self.conn.lock();
        let mut stmt = conn
            .prepare(
                "SELECT token_id, node_id, created_at, expires_at, used_at
                 FROM bootstrap_tokens ORDER BY token_id",
            )
            .map_err(err("list bootstrap tokens"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                ))
            })
            .map_err(err("list bootstrap tokens"))?;
        let doing = "read a bootstrap token row";
        let mut tokens = Vec::new();
        for row in rows {
            let (token_id, node_id, created_at, expires_at, used_at) = row.map_err(err(doing))?;
            tokens.push(BootstrapTokenInfo {
                token_id,
                node_id,
                created_at: time(doing, created_at)?,
                expires_at: time(doing, expires_at)?,
                used_at: used_at.map(|t| time(doing, t)).transpose()?,
            });
        }
        Ok(tokens)
    }

    fn delete(&self, token_id: &str) -> Result<bool, StoreError> {
        let conn = self.conn.lock();
        let deleted = conn
            .execute(
                "DELETE FROM bootstrap_tokens WHERE token_id = ?1",
                params![token_id],
            )
            .map_err(err("delete a bootstrap token"))?;
        Ok(deleted > 0)
    }
}

/// Whether `token` may enroll `node_id` at `now`: its id (public) when it may. The secret is
/// compared first and in constant time; only then are used, expired and other-node told apart.
fn judge(
    conn: &rusqlite::Connection,
    token: SplitToken,
    node_id: &str,
    now: DateTime<Utc>,
) -> Result<String, TokenRefusal> {
    let row: Option<StoredToken> = conn
        .query_row(
            "SELECT secret_sha256, node_id, expires_at, used_at
             FROM bootstrap_tokens WHERE token_id = ?1",
            params![token.id],
            |r| {
                Ok(StoredToken {
                    digest: r.get(0)?,
                    node_id: r.get(1)?,
                    expires_at: r.get(2)?,
                    used_at: r.get(3)?,
                })
            },
        )
        .optional()
        .map_err(err("read a bootstrap token"))?;
    judge_row(token, node_id, now, row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backend::Store;
    use crate::store::sqlite::SqliteStore;
    use chrono::TimeZone;
    use std::sync::{Arc, Barrier};

    fn at(seconds: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + seconds, 0).unwrap()
    }

    fn node(id: &str) -> NodeId {
        id.parse().unwrap()
    }

    const HOUR: Duration = Duration::from_secs(3600);

    fn open() -> (tempfile::TempDir, std::path::PathBuf, SqliteBootstrapTokens) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/controller.sqlite3");
        let tokens = SqliteBootstrapTokens::open(&path).unwrap();
        (dir, path, tokens)
    }

    #[test]
    fn a_token_redeems_once_for_its_node_and_then_is_used() {
        let (_dir, _path, tokens) = open();
        let issued = tokens.create(&node("gpu-01"), HOUR, at(0)).unwrap();
        assert_eq!(issued.expires_at, at(3600));
        let wire = issued.to_wire();
        assert_eq!(wire.token_id.as_str(), issued.token.id);
        let text = issued.token.expose();
        // A check changes nothing, however often it is asked; it judges as redeeming would.
        for _ in 0..2 {
            assert!(tokens.check(&text, "gpu-01", at(5)).is_ok());
        }
        assert!(matches!(
            tokens.check(&text, "gpu-02", at(5)),
            Err(TokenRefusal::OtherNode { .. })
        ));
        assert_eq!(
            tokens.redeem(&text, "gpu-01", at(10)).unwrap(),
            Redeemed {
                token_id: issued.token.id.clone()
            }
        );
        assert_eq!(
            tokens.redeem(&text, "gpu-01", at(20)),
            Err(TokenRefusal::Used {
                token_id: issued.token.id.clone(),
                used_at: at(10)
            })
        );
        assert!(matches!(
            tokens.check(&text, "gpu-01", at(20)),
            Err(TokenRefusal::Used { .. })
        ));
        let listed = tokens.list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].used_at, Some(at(10)));
        assert_eq!(listed[0].node_id, "gpu-01");
        assert_eq!(listed[0].created_at, at(0));
    }

    #[test]
    fn an_expired_token_is_refused_and_stays_unused() {
        let (_dir, _path, tokens) = open();
        let issued = tokens.create(&node("n1"), HOUR, at(0)).unwrap();
        let refusal = tokens
            .redeem(&issued.token.expose(), "n1", at(3600))
            .unwrap_err();
        assert_eq!(
            refusal,
            TokenRefusal::Expired {
                token_id: issued.token.id.clone(),
                expired_at: at(3600)
            }
        );
        assert!(refusal.to_string().contains(&issued.token.id));
        assert_eq!(tokens.list().unwrap()[0].used_at, None);
    }

    #[test]
    fn a_token_for_another_node_is_refused_without_naming_it() {
        let (_dir, _path, tokens) = open();
        let issued = tokens.create(&node("n1"), HOUR, at(0)).unwrap();
        let text = issued.token.expose();
        let refusal = tokens.redeem(&text, "n2", at(1)).unwrap_err();
        assert_eq!(
            refusal,
            TokenRefusal::OtherNode {
                token_id: issued.token.id.clone()
            }
        );
        assert!(!refusal.to_string().contains("n1"), "{refusal}");
        // Nothing changed: the right node still redeems it.
        tokens.redeem(&text, "n1", at(2)).unwrap();
    }

    #[test]
    fn a_wrong_secret_is_unknown_and_the_right_one_still_works() {
        let (_dir, _path, tokens) = open();
        let issued = tokens.create(&node("n1"), HOUR, at(0)).unwrap();
        let wrong = format!("{}.0000000000000000", issued.token.id);
        assert_eq!(
            tokens.redeem(&wrong, "n1", at(1)),
            Err(TokenRefusal::Unknown)
        );
        // Whatever else is wrong, a wrong secret says only "unknown".
        assert_eq!(
            tokens.redeem(&wrong, "n2", at(99_999)),
            Err(TokenRefusal::Unknown)
        );
        assert_eq!(
            tokens.redeem("zzzzzz.0000000000000000", "n1", at(1)),
            Err(TokenRefusal::Unknown)
        );
        assert!(matches!(
            tokens.redeem("not-a-token", "n1", at(1)),
            Err(TokenRefusal::Malformed(_))
        ));
        tokens.redeem(&issued.token.expose(), "n1", at(2)).unwrap();
    }

    #[test]
    fn two_concurrent_redeemers_on_two_connections_one_wins() {
        let (_dir, path, tokens) = open();
        for round in 0..20 {
            let issued = tokens.create(&node("n1"), HOUR, at(round)).unwrap();
            let text = Arc::new(issued.token.expose());
            let barrier = Arc::new(Barrier::new(2));
            let racers: Vec<_> = (0..2)
                .map(|_| {
                    let store = SqliteBootstrapTokens::open(&path).unwrap();
                    let (text, barrier) = (text.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        store.redeem(&text, "n1", at(round + 1))
                    })
                })
                .collect();
            let results: Vec<_> = racers.into_iter().map(|t| t.join().unwrap()).collect();
            let wins = results.iter().filter(|r| r.is_ok()).count();
            assert_eq!(wins, 1, "round {round}: {results:?}");
            assert!(
                results
                    .iter()
                    .any(|r| matches!(r, Err(TokenRefusal::Used { .. }))),
                "{results:?}"
            );
        }
    }

    #[test]
    fn the_stored_row_holds_the_digest_never_the_secret() {
        let (_dir, path, tokens) = open();
        let issued = tokens.create(&node("n1"), HOUR, at(0)).unwrap();
        drop(tokens);
        let conn = Connection::open(&path).unwrap();
        let (id, digest, node_id): (String, Vec<u8>, String) = conn
            .query_row(
                "SELECT token_id, secret_sha256, node_id FROM bootstrap_tokens",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(
            (id.as_str(), node_id.as_str()),
            (issued.token.id.as_str(), "n1")
        );
        assert_eq!(digest, issued.token.secret.digest());
        // No column of any row, as text, holds the secret.
        let secret = issued.token.secret.expose();
        let mut stmt = conn
            .prepare("SELECT quote(token_id) || quote(secret_sha256) || quote(node_id) FROM bootstrap_tokens")
            .unwrap();
        let rows: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(rows.iter().all(|row| !row.contains(secret)), "{rows:?}");
        let raw = std::fs::read(&path).unwrap();
        let wal = std::fs::read(path.with_extension("sqlite3-wal")).unwrap_or_default();
        for bytes in [raw, wal] {
            assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()));
        }
    }

    #[test]
    fn create_deletes_tokens_a_day_past_their_expiry() {
        let (_dir, _path, tokens) = open();
        let old = tokens.create(&node("n1"), HOUR, at(0)).unwrap();
        let recent = tokens.create(&node("n2"), HOUR, at(7200)).unwrap();
        // `old` expired at 3600: kept until 3600 + a day.
        tokens.create(&node("n3"), HOUR, at(3600 + 86_400)).unwrap();
        assert_eq!(tokens.list().unwrap().len(), 3);
        tokens.create(&node("n4"), HOUR, at(3601 + 86_400)).unwrap();
        let ids: Vec<String> = tokens
            .list()
            .unwrap()
            .into_iter()
            .map(|t| t.token_id)
            .collect();
        assert!(!ids.contains(&old.token.id), "{ids:?}");
        assert!(ids.contains(&recent.token.id), "{ids:?}");
        assert_eq!(ids.len(), 3);
    }

    #[test]
    fn only_unused_tokens_minted_in_plain_mode_are_retired() {
        let (_dir, path, tokens) = open();
        let plain = tokens
            .create_as(&node("n1"), HOUR, at(0), Minted::PlainHttp)
            .unwrap();
        let used = tokens
            .create_as(&node("n2"), HOUR, at(0), Minted::PlainHttp)
            .unwrap();
        tokens.redeem(&used.token.expose(), "n2", at(1)).unwrap();
        let host = tokens.create(&node("n3"), HOUR, at(0)).unwrap();
        // Reopened, as a controller restarting in mTLS mode does.
        drop(tokens);
        let tokens = SqliteBootstrapTokens::open(&path).unwrap();
        assert_eq!(tokens.retire_plain_minted().unwrap(), 1);
        assert_eq!(
            tokens.redeem(&plain.token.expose(), "n1", at(2)),
            Err(TokenRefusal::Unknown)
        );
        assert!(tokens.redeem(&host.token.expose(), "n3", at(2)).is_ok());
        // Retired once: the next start finds nothing.
        assert_eq!(tokens.retire_plain_minted().unwrap(), 0);
    }

    #[test]
    fn delete_says_whether_there_was_a_token() {
        let (_dir, _path, tokens) = open();
        let issued = tokens.create(&node("n1"), HOUR, at(0)).unwrap();
        assert!(tokens.delete(&issued.token.id).unwrap());
        assert!(!tokens.delete(&issued.token.id).unwrap());
        assert_eq!(
            tokens.redeem(&issued.token.expose(), "n1", at(1)),
            Err(TokenRefusal::Unknown)
        );
    }

    #[test]
    fn the_node_store_opens_and_works_alongside_on_the_same_file() {
        let (_dir, path, tokens) = open();
        let mut nodes = SqliteStore::open(&path).unwrap();
        assert_eq!(
            nodes.schema_version().unwrap(),
            crate::store::sqlite::SCHEMA_VERSION
        );
        nodes.check().unwrap();
        let issued = tokens.create(&node("n1"), HOUR, at(0)).unwrap();
        nodes.check().unwrap();
        drop(nodes);
        // Tokens on a database the node store made first, and both reopened.
        let again = SqliteBootstrapTokens::open(&path).unwrap();
        let mut nodes = SqliteStore::open(&path).unwrap();
        assert_eq!(
            nodes.schema_version().unwrap(),
            crate::store::sqlite::SCHEMA_VERSION
        );
        assert_eq!(nodes.load_nodes().unwrap().len(), 0);
        again.redeem(&issued.token.expose(), "n1", at(1)).unwrap();

        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("c.sqlite3");
        drop(SqliteStore::open(&fresh).unwrap());
        let tokens = SqliteBootstrapTokens::open(&fresh).unwrap();
        tokens.create(&node("n1"), HOUR, at(0)).unwrap();
        let mut nodes = SqliteStore::open(&fresh).unwrap();
        nodes.check().unwrap();
    }
}
