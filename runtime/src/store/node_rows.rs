//! One node as the store holds it ([`StoredNode`]), and one change to apply to it
//! ([`NodeWrite`]).

use compact_str::CompactString;
use fleetwire_types::Timestamp;

/// One node as stored: JSON documents, opaque to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredNode {
    pub node_id: String,
    /// The node's `NodeRecord`, serialized.
    pub record: Vec<u8>,
    /// The node's VM list (the controller's `VmEntry` list), serialized.
    pub vms: Vec<u8>,
    /// Whether `vms` differs from what the store last accepted for this node; when false
    /// the store may leave the stored list as it is (it is the bulk of a row).
    pub vms_changed: bool,
    /// Which version of the VM list `vms` is, for `Source::written`.
    pub vms_generation: u64,
    /// Which version of the record and flags these are, for `Source::written`.
    pub record_generation: u64,
    /// On load: the node's last contact time from a later [`NodeWrite::Seen`], newer than the
    /// record's `last_heartbeat` when set.
    pub seen: Option<Timestamp>,
    /// The controller's private flags for the node (drain, cordon source, ...), serialized.
    pub flags: Vec<u8>,
}

impl StoredNode {
    /// A new node's row with `record` as its record, an empty VM list and no flags (for tests
    /// and benchmarks).
    pub fn for_test(node_id: &str, record: &str) -> StoredNode {
        StoredNode {
            node_id: node_id.into(),
            record: record.as_bytes().to_vec(),
            vms: b"[]".to_vec(),
            vms_changed: true,
            vms_generation: 0,
            record_generation: 0,
            seen: None,
            flags: b"{}".to_vec(),
        }
    }
}

/// One change to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeWrite {
    /// Insert or replace the node's row. Boxed: a batch at 100,000 nodes holds tens of
    /// thousands of writes, nearly all of them contact times a quarter of a row's size,
    /// and the writer sorts and walks them.
    Upsert(Box<StoredNode>),
    /// Only the node's last contact time changed since its row was last written in full
    /// (the common heartbeat): a few bytes instead of the whole row.
    Seen {
        /// Inline (no allocation) for ids of up to 24 bytes: one of these is made per
        /// heartbeat at 100,000 nodes, on a worker, and dropped on the writer's thread.
        node_id: CompactString,
        /// The controller's receive time of the node's last heartbeat.
        last_heartbeat: Timestamp,
    },
    /// Forget the node.
    Delete(String),
}

impl NodeWrite {
    pub fn node_id(&self) -> &str {
        match self {
            NodeWrite::Upsert(node) => &node.node_id,
            NodeWrite::Seen { node_id, .. } => node_id,
            NodeWrite::Delete(id) => id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contact_time_write_stays_a_fraction_of_a_row() {
        // A batch holds a write per heartbeat at 100,000 nodes, nearly all contact times: the
        // row is boxed so that they stay small (an id inline, a time, the tag).
        let size = std::mem::size_of::<NodeWrite>();
        assert!(size <= 48, "NodeWrite is {size} bytes");
        assert!(std::mem::size_of::<StoredNode>() >= 2 * size);
    }
}
