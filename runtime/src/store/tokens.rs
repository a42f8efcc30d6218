//! Bootstrap tokens at rest, whichever backend keeps them ([`BootstrapTokenStore`]): minted
//! for one node id, redeemed once by that node's first registration, then kept as used until
//! they are a day past their expiry. Only the SHA-256 digest of each secret is stored
//! (docs/security.md), so a copy of the database enrolls nobody. What both backends share is
//! here: the trait, its values, the SQL both speak alike, and the judgement of a token's row
//! ([`judge_row`]). The backends are `sqlite::tokens` and `postgres::tokens`.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use fleetwire_types::{BootstrapTokenIssued, NodeId};
use subtle::ConstantTimeEq;

use super::error::StoreError;
use crate::bootstrap_token::{MalformedToken, SplitToken};

/// Expired tokens are kept this long after their expiry, so that a late agent is told its
/// token expired rather than that it is unknown; `create` deletes older ones.
pub const KEEP_EXPIRED: Duration = Duration::from_secs(24 * 3600);

/// How many fresh ids `create` tries before giving up: with 36^6 (about 2 billion) ids a
/// second collision in a row means something other than chance.
pub(super) const CREATE_ATTEMPTS: u32 = 4;

/// A token just minted: the only value that ever holds its secret (Debug redacts it).
#[derive(Debug, Clone)]
pub struct IssuedBootstrapToken {
    pub token: SplitToken,
    pub node_id: NodeId,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

impl IssuedBootstrapToken {
    /// The answer of `POST /v1/tokens`: the token, shown this once.
    pub fn to_wire(&self) -> BootstrapTokenIssued {
        BootstrapTokenIssued {
            expires_at: self.expires_at.into(),
            node_id: self.node_id.clone(),
            token: self
                .token
                .expose()
                .parse()
                .expect("a generated token has the schema's format"),
            token_id: self
                .token
                .id
                .parse()
                .expect("a generated id has the schema's format"),
        }
    }
}

/// A stored token, without its secret (listings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapTokenInfo {
    pub token_id: String,
    pub node_id: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
}

/// A token that was just redeemed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redeemed {
    pub token_id: String,
}

/// Why a presented token was refused. A refusal changes nothing stored. Messages name at most
/// the token's id, and only once its secret matched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefusal {
    #[error(transparent)]
    Malformed(#[from] MalformedToken),
    /// No token has this id, or its secret is another: the two are not told apart, so a
    /// guesser learns nothing about which ids exist.
    #[error("unknown bootstrap token")]
    Unknown,
    #[error("bootstrap token {token_id} was already used at {}", used_at.to_rfc3339())]
    Used {
        token_id: String,
        used_at: DateTime<Utc>,
    },
    #[error("bootstrap token {token_id} expired at {}", expired_at.to_rfc3339())]
    Expired {
        token_id: String,
        expired_at: DateTime<Utc>,
    },
    /// The token was minted for another node id (which one is not said).
    #[error("bootstrap token {token_id} is for another node id")]
    OtherNode { token_id: String },
    #[error("bootstrap tokens: {0}")]
    Store(#[from] StoreError),
}

/// Where bootstrap tokens are kept. Blocking: callers on an async runtime use
/// `spawn_blocking`. Implemented on SQLite here and on PostgreSQL by
/// `store::postgres::tokens`.
pub trait BootstrapTokenStore: Send + Sync {
    /// Mints a token for `node_id` valid for `ttl` from `now`, and deletes tokens that expired
    /// more than [`KEEP_EXPIRED`] ago.
    fn create(
        &self,
        node_id: &NodeId,
        ttl: Duration,
        now: DateTime<Utc>,
    ) -> Result<IssuedBootstrapToken, StoreError> {
        self.create_as(node_id, ttl, now, Minted::Authenticated)
    }
    /// [`BootstrapTokenStore::create`], remembering in the same transaction when the token
    /// was minted by a `--plain-http` controller, which authenticates nobody.
    fn create_as(
        &self,
        node_id: &NodeId,
        ttl: Duration,
        now: DateTime<Utc>,
        minted: Minted,
    ) -> Result<IssuedBootstrapToken, StoreError>;
    /// Deletes the unused tokens a `--plain-http` controller minted (a controller starting in
    /// mTLS mode does: whoever reached the plain port could have minted them); how many.
    fn retire_plain_minted(&self) -> Result<usize, StoreError>;
    /// Whether `presented` would redeem for `node_id` at `now`, changing nothing: asked before
    /// the work a registration costs (signing its CSR), so a stranger's guess costs no more
    /// than a lookup.
    fn check(
        &self,
        presented: &str,
        node_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Redeemed, TokenRefusal>;
    /// Marks `presented` used by `node_id` at `now`, atomically: of two redeemers of one
    /// token, exactly one succeeds.
    fn redeem(
        &self,
        presented: &str,
        node_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Redeemed, TokenRefusal>;
    /// Every stored token, by id.
    fn list(&self) -> Result<Vec<BootstrapTokenInfo>, StoreError>;
    /// Deletes the token `token_id`; whether there was one.
    fn delete(&self, token_id: &str) -> Result<bool, StoreError>;
}

/// Who minted a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Minted {
    /// An operator token, the controller host's own CLI, or mTLS mode.
    Authenticated,
    /// A `--plain-http` controller's `POST /v1/tokens`.
    PlainHttp,
}
/// Deletes the unused tokens listed as plain-minted, then the list (both backends).
pub(super) const RETIRE_PLAIN: &str = "DELETE FROM bootstrap_tokens WHERE used_at IS NULL
    AND token_id IN (SELECT token_id FROM plain_minted_tokens)";
pub(super) const FORGET_PLAIN: &str = "DELETE FROM plain_minted_tokens";

pub(super) fn millis(time: DateTime<Utc>) -> i64 {
    time.timestamp_millis()
}

pub(super) fn time(doing: &'static str, millis: i64) -> Result<DateTime<Utc>, StoreError> {
    Utc.timestamp_millis_opt(millis)
        .single()
        .ok_or_else(|| StoreError::Query {
            doing,
            cause: format!("{millis} is not a time in milliseconds"),
        })
}

/// A token's row as either backend stores it: times in Unix milliseconds.
pub(super) struct StoredToken {
    pub digest: Vec<u8>,
    pub node_id: String,
    pub expires_at: i64,
    pub used_at: Option<i64>,
}

/// [`judge`] of the row read for `token` (`None`: no such id), for both backends.
pub(super) fn judge_row(
    token: SplitToken,
    node_id: &str,
    now: DateTime<Utc>,
    row: Option<StoredToken>,
) -> Result<String, TokenRefusal> {
    let Some(row) = row else {
        return Err(TokenRefusal::Unknown);
    };
    if !bool::from(row.digest.as_slice().ct_eq(&token.secret.digest())) {
        return Err(TokenRefusal::Unknown);
    }
    let token_id = token.id;
    if let Some(used_at) = row.used_at {
        return Err(TokenRefusal::Used {
            token_id,
            used_at: time("read a bootstrap token", used_at)?,
        });
    }
    if row.expires_at <= millis(now) {
        return Err(TokenRefusal::Expired {
            token_id,
            expired_at: time("read a bootstrap token", row.expires_at)?,
        });
    }
    if row.node_id != node_id {
        return Err(TokenRefusal::OtherNode { token_id });
    }
    Ok(token_id)
}
