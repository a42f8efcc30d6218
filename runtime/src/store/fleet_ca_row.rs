//! The row of `fleet_ca` as each backend records and reads it (`sqlite::fleet_ca`,
//! `postgres::fleet_ca`): what they share, below them and below `store::fleet_ca`, which
//! dispatches to them, so that no backend imports the module that imports it.

use chrono::{DateTime, SecondsFormat, Utc};

use super::error::StoreError;

/// What a backend's `record` read back from the row, after recording what was missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Whether the row was made by this call (the fleet CA recorded).
    pub inserted_fleet: bool,
    /// Whether the node CA was recorded by this call.
    pub inserted_node: bool,
    pub fleet: String,
    pub node: Option<String>,
    /// `node_legacy_until` as stored (RFC 3339).
    pub legacy_until: Option<String>,
}

/// The latest of the certificate ends in `not_afters` (RFC 3339, as node records hold
/// `cert_not_after`) and `now`, as `node_legacy_until` is stored. An end that does not parse
/// is an error naming it: a window guessed short would lock nodes out.
pub fn legacy_until<'a>(
    not_afters: impl IntoIterator<Item = &'a str>,
    now: DateTime<Utc>,
) -> Result<String, StoreError> {
    let mut latest = now;
    for text in not_afters {
        let end = DateTime::parse_from_rfc3339(text).map_err(|e| StoreError::Query {
            doing: "read the nodes' certificate ends (cert_not_after)",
            cause: format!("{text:?}: {e}"),
        })?;
        latest = latest.max(end.with_timezone(&Utc));
    }
    Ok(latest.to_rfc3339_opts(SecondsFormat::Secs, true))
}
