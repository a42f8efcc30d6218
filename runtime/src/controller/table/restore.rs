//! A node as stored → its in-memory state ([`restore`]), and why a stored row cannot be read
//! back ([`RestoreError`]).

use fleetwire_types::NodeRecord;

use crate::controller::table::node_state::{NodeFlags, NodeState, VmEntry};
use crate::store::node_rows::StoredNode;

/// Why a stored row is not a node this controller can load.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("its record is not a NodeRecord: {0}")]
    Record(fleetwire_types::Rejection),
    #[error("its VM list is unreadable")]
    Vms(#[source] serde_json::Error),
    #[error("its flags are unreadable")]
    Flags(#[source] serde_json::Error),
    #[error("its record names node {0:?}")]
    OtherNode(String),
}

/// A node as stored → its in-memory state.
pub fn restore(row: &StoredNode) -> Result<NodeState, RestoreError> {
    // Read back through the validated reader like any other wire document.
    let accepted =
        fleetwire_types::read::<NodeRecord>(&row.record).map_err(RestoreError::Record)?;
    // A record stored by a newer controller: keep what this one knows, and say so.
    crate::unknown_fields::note(&accepted, "the store");
    let mut record = accepted.value;
    if let Some(seen) = row.seen {
        if seen > record.last_heartbeat {
            record.last_heartbeat = seen;
        }
    }
    let vms: Vec<VmEntry> = serde_json::from_slice(&row.vms).map_err(RestoreError::Vms)?;
    let flags: NodeFlags = serde_json::from_slice(&row.flags).map_err(RestoreError::Flags)?;
    if record.node_id.as_str() != row.node_id {
        return Err(RestoreError::OtherNode(record.node_id.to_string()));
    }
    Ok(NodeState::loaded(record, vms, flags))
}
