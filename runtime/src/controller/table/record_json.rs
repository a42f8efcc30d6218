//! A node record serialized once and kept ([`Fragment`]), shared by `GET /v1/fleet` and the
//! store writer until the record changes; a heartbeat that changes only the contact time
//! splices the new time in instead of serializing again (docs/performance.md).

use axum::body::Bytes;
use fleetwire_types::NodeRecord;

/// A node record serialized, and where its `last_heartbeat` value sits in it: a heartbeat that
/// changes nothing else (the common case) costs a splice instead of a serialization, which is
/// what keeps `GET /v1/fleet` cheap while every node is heartbeating.
#[derive(Debug)]
pub(super) struct Fragment {
    pub(super) json: Bytes,
    /// The byte range of the `last_heartbeat` string, quotes included (`None` if not found,
    /// which a `NodeRecord` never is: then every change serializes afresh).
    time_at: Option<std::ops::Range<usize>>,
    /// `last_heartbeat` has changed since `json` was made.
    pub(super) time_stale: bool,
}

impl Fragment {
    const TIME_KEY: &'static [u8] = b"\"last_heartbeat\":";

    pub(super) fn of(record: &NodeRecord) -> Fragment {
        let json = serde_json::to_vec(record).expect("a NodeRecord serializes");
        // A key with its closing quote and colon cannot occur inside a JSON string (a quote in
        // a string is escaped), and no object nested in a NodeRecord has this key: the first
        // match is the record's own field.
        let time_at = json
            .windows(Self::TIME_KEY.len())
            .position(|w| w == Self::TIME_KEY)
            .and_then(|key| {
                let start = key + Self::TIME_KEY.len();
                let len = json[start + 1..].iter().position(|&b| b == b'"')?;
                Some(start..start + len + 2)
            });
        Fragment {
            json: Bytes::from(json),
            time_at,
            time_stale: false,
        }
    }

    pub(super) fn with_time(self, record: &NodeRecord) -> Fragment {
        let Some(at) = self.time_at else {
            return Fragment::of(record);
        };
        let time = serde_json::to_vec(&record.last_heartbeat).expect("a Timestamp serializes");
        let mut json = Vec::with_capacity(self.json.len() + time.len() - at.len());
        json.extend_from_slice(&self.json[..at.start]);
        json.extend_from_slice(&time);
        json.extend_from_slice(&self.json[at.end..]);
        Fragment {
            json: Bytes::from(json),
            time_at: Some(at.start..at.start + time.len()),
            time_stale: false,
        }
    }
}
