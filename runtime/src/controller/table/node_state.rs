//! One node as the controller holds it ([`NodeState`]): the record as served, its VMs, the
//! controller's own flags and pending capacity, and the store-write bookkeeping (the
//! generations of what changed against what the store holds, and whether the node is queued
//! for write-behind), decided under the node's own lock ([`NodeState::mark_changed`]). The
//! record's cached serialization is `record_json`; the table of all nodes is `node_table`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use compact_str::CompactString;
use fleetwire_types::{CertSerial, NodeRecord, VmRecord};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::controller::table::liveness::Cell;
use crate::controller::table::record_json::Fragment;
use crate::store::node_rows::{NodeWrite, StoredNode};
use crate::store::writer::Change;

/// One VM the controller knows on a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmEntry {
    pub record: VmRecord,
    /// Placed by this controller (`POST /v1/vms`), as opposed to only reported by the node.
    pub placed: bool,
}

/// A VM deleted through the API (`DELETE /v1/vms/{id}`, after its agent confirmed): a
/// heartbeat the node built before the delete may still list it, and must not bring it back.
/// Kept until a heartbeat leaves it out, or for the placement grace (`stale_after`) at most,
/// after which a node that still lists it is believed. Memory only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedVm {
    pub vm_id: CompactString,
    pub at: Instant,
}

/// Who set the data-plane cordon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CordonSource {
    /// `POST /v1/nodes/{id}/cordon`; only uncordon clears it.
    Operator,
    /// The agent reported `runtime_stalled`; cleared when it reports the runtime answering.
    RuntimeStalled,
}

/// What the controller keeps about a node beyond its served record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeFlags {
    #[serde(default)]
    pub draining: bool,
    /// Whether the node has heartbeated since it enrolled ("registering" until then).
    #[serde(default)]
    pub heartbeated: bool,
    #[serde(default)]
    pub cordon: Option<CordonSource>,
    /// A registration reported a new runtime boot id: the next heartbeat prunes placed VMs
    /// it does not report, as a heartbeat with a new boot id would.
    #[serde(default)]
    pub runtime_restarted: bool,
}

/// Disk and memory held for placements whose spawn call is still in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    pub disk_gb: u64,
    pub ram_mb: u64,
}

/// How soon a change of a node must be in the store (see `Controller::node_changed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenStored {
    /// Committed by id before the caller goes on (answers a registration, a placement, an
    /// operator's action, an enrolling heartbeat, or finishes a self-heal), fsynced.
    BeforeAnswer,
    /// Written behind within the flush interval (a heartbeat, a probe result): the whole row,
    /// or only the last contact time when that is all that changed.
    WriteBehind(Change),
}

/// What the store must do for a change, as decided under the node's lock.
#[must_use = "the store writes the change only when `Controller::node_changed` acts on this"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreWrite {
    /// Nothing more: the node is queued for write-behind already.
    Nothing,
    /// Commit the node by id.
    Commit,
    /// Queue the node for the next write-behind batch.
    Queue(Change),
}

/// One node.
#[derive(Debug)]
pub struct NodeState {
    /// The record as served; `status` is kept current by heartbeats and the staleness sweep.
    pub record: NodeRecord,
    /// Read with [`NodeState::vms`], change with [`NodeState::vms_mut`] (which drops the
    /// cached serialization).
    pub(super) vms: Vec<VmEntry>,
    pub flags: NodeFlags,
    /// When this process last heard from the node, by its monotonic clock; for a node loaded
    /// from the store and not heard from since, the controller's start (the start-up grace,
    /// `nodes::loaded_last_seen`), or `None` when it was silent already before the restart:
    /// it is unreachable until it heartbeats.
    pub last_seen: Option<Instant>,
    pub pending: Pending,
    /// The record serialized, shared by the fleet listing and the store writer until it changes.
    fragment: Option<Fragment>,
    /// The VM list serialized, for the store writer, until it changes.
    vms_json: Option<Bytes>,
    /// Bumped whenever the VM list changes.
    vms_generation: u64,
    /// The generation the store is known to hold (`None`: not stored yet).
    vms_stored: Option<u64>,
    /// Bumped whenever the record or flags change in more than the last contact time.
    record_generation: u64,
    /// The record generation the store is known to hold in full.
    record_stored: Option<u64>,
    /// Queued for the next write-behind batch.
    queued: bool,
    /// Removed from the table: whoever removed it commits its deletion, by id.
    pub(super) forgotten: bool,
    /// The node's word on the table's liveness board (`None` outside a table).
    pub(super) liveness: Option<Cell>,
    /// The certificate a renewal replaced, still taken until the node presents its new one:
    /// the renewal's answer may have been lost on its way (docs/security.md). Memory only.
    pub replaced_cert_serial: Option<CertSerial>,
    /// VMs deleted through the API that a late heartbeat may still list ([`DeletedVm`]).
    pub deleted_vms: Vec<DeletedVm>,
}

impl NodeState {
    pub fn new(record: NodeRecord, vms: Vec<VmEntry>, flags: NodeFlags) -> NodeState {
        NodeState {
            record,
            vms,
            flags,
            last_seen: None,
            pending: Pending::default(),
            fragment: None,
            vms_json: None,
            vms_generation: 0,
            vms_stored: None,
            record_generation: 0,
            record_stored: None,
            queued: false,
            forgotten: false,
            liveness: None,
            replaced_cert_serial: None,
            deleted_vms: Vec::new(),
        }
    }

    /// A node read back from the store, which holds its VM list already.
    pub fn loaded(record: NodeRecord, vms: Vec<VmEntry>, flags: NodeFlags) -> NodeState {
        let mut state = NodeState::new(record, vms, flags);
        state.vms_stored = Some(state.vms_generation);
        state.record_stored = Some(state.record_generation);
        state
    }

    /// The store accepted this row of the node.
    pub fn row_written(&mut self, row: &StoredNode) {
        if self
            .vms_stored
            .is_none_or(|stored| stored < row.vms_generation)
        {
            self.vms_stored = Some(row.vms_generation);
        }
        if self
            .record_stored
            .is_none_or(|stored| stored < row.record_generation)
        {
            self.record_stored = Some(row.record_generation);
        }
    }

    pub fn vms(&self) -> &[VmEntry] {
        &self.vms
    }

    /// The VM list, to change: its cached serialization is dropped.
    pub fn vms_mut(&mut self) -> &mut Vec<VmEntry> {
        self.vms_json = None;
        self.vms_generation += 1;
        &mut self.vms
    }

    /// Replaces the VM list, keeping the cached serialization when nothing changed (the
    /// common case: a heartbeat repeating the same VMs).
    pub fn replace_vms(&mut self, vms: Vec<VmEntry>) {
        if self.vms != vms {
            self.vms_json = None;
            self.vms_generation += 1;
            self.vms = vms;
        }
    }

    /// The record as JSON, serialized once per change; after a change of `last_heartbeat`
    /// alone, the new time is spliced into the cached serialization.
    pub fn fragment(&mut self) -> &Bytes {
        let record = &self.record;
        let fragment = match self.fragment.take() {
            Some(fragment) if !fragment.time_stale => fragment,
            Some(fragment) => fragment.with_time(record),
            None => Fragment::of(record),
        };
        &self.fragment.insert(fragment).json
    }

    /// Records a change of the node: drops what it caches of its old state, and says what the
    /// store must write for it. Called through `Controller::node_changed`, which acts on the
    /// answer, so that no change is marked without being written or written unmarked.
    pub fn mark_changed(&mut self, when: WhenStored) -> StoreWrite {
        match when {
            WhenStored::BeforeAnswer => {
                self.changed_for_commit();
                StoreWrite::Commit
            }
            WhenStored::WriteBehind(change) => {
                let queue = match change {
                    Change::Row => self.changed(),
                    Change::Contact => self.seen(),
                };
                if queue {
                    StoreWrite::Queue(change)
                } else {
                    StoreWrite::Nothing
                }
            }
        }
    }

    /// Forgets the cached serialization after a change; true when the node must be queued for
    /// write-behind (it was not already).
    #[must_use]
    fn changed(&mut self) -> bool {
        self.changed_for_commit();
        self.queue()
    }

    /// Like [`NodeState::changed`] for a change its caller commits by id before answering
    /// (a registration, a placement, an operator action): not queued for write-behind as
    /// well, where the commit would write the same row a second time.
    fn changed_for_commit(&mut self) {
        self.record_generation += 1;
        self.fragment = None;
    }

    /// After a change of `record.status` alone (a node going silent, or loaded from the
    /// store): drops the cached serialization and leaves the store alone. A status is derived
    /// from the node's flags and last contact, never read back (a loaded node keeps it for the
    /// start-up grace, `nodes::loaded_last_seen`), so the stored row needs no write for it; and a whole fleet
    /// going silent at once (a partition, a restart) costs the store nothing, where a
    /// hundred thousand full rows would take the writer over a second.
    pub fn status_changed(&mut self) {
        self.fragment = None;
    }

    /// Like [`NodeState::changed`] when only `last_heartbeat` (and nothing else in the record
    /// or flags) changed: the store then only needs the new contact time, and the cached
    /// serialization only the new time.
    #[must_use]
    fn seen(&mut self) -> bool {
        if let Some(fragment) = &mut self.fragment {
            fragment.time_stale = true;
        }
        self.queue()
    }

    /// Marks the node for write-behind; true when it was not marked already.
    fn queue(&mut self) -> bool {
        !std::mem::replace(&mut self.queued, true)
    }

    /// Copies the node's status and last contact to its word on the liveness board, for the
    /// staleness sweep (see the `liveness` module); called whenever the status is re-derived.
    pub fn post_liveness(&self) {
        if let Some(cell) = &self.liveness {
            cell.post(
                self.record.status,
                self.last_seen,
                self.record.last_heartbeat,
            );
        }
    }

    pub fn vm(&self, vm_id: &str) -> Option<&VmEntry> {
        self.vms.iter().find(|v| v.record.vm_id.as_str() == vm_id)
    }

    /// What the store needs to catch up with the node (`node_id`, the id the table holds it
    /// under): its last contact time alone when that is all that changed since the row was
    /// written in full, else the whole row. Clears the write-behind mark.
    pub fn to_write(&mut self, node_id: CompactString) -> NodeWrite {
        let in_full = self.record_stored == Some(self.record_generation)
            && self.vms_stored == Some(self.vms_generation);
        if in_full {
            self.queued = false;
            return NodeWrite::Seen {
                node_id,
                last_heartbeat: self.record.last_heartbeat,
            };
        }
        NodeWrite::Upsert(Box::new(self.stored_as(node_id.into_string())))
    }

    /// The node as a full store row; clears the write-behind mark.
    pub fn stored(&mut self) -> StoredNode {
        self.stored_as(self.record.node_id.to_string())
    }

    /// [`NodeState::stored`] under `node_id`, the id the table holds the node under (which its
    /// record names).
    fn stored_as(&mut self, node_id: String) -> StoredNode {
        debug_assert_eq!(node_id, self.record.node_id.as_str());
        self.queued = false;
        StoredNode {
            node_id,
            record: self.fragment().to_vec(),
            vms: {
                let vms = &self.vms;
                self.vms_json
                    .get_or_insert_with(|| {
                        Bytes::from(serde_json::to_vec(vms).expect("VM entries serialize"))
                    })
                    .to_vec()
            },
            vms_changed: self.vms_stored != Some(self.vms_generation),
            vms_generation: self.vms_generation,
            record_generation: self.record_generation,
            seen: None,
            flags: serde_json::to_vec(&self.flags).expect("node flags serialize"),
        }
    }
}
pub type NodeSlot = Arc<Mutex<NodeState>>;

/// Starts loading the memory that [`NodeState::to_write`] reads of the node in `slot` (its
/// lock, write-behind marks and generations, and contact time) without taking the lock.
/// A hint only: it reads nothing and changes nothing.
pub fn prefetch(slot: &NodeSlot) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        use std::mem::offset_of;
        const READ_BY_TO_WRITE: [usize; 6] = [
            offset_of!(NodeState, queued),
            offset_of!(NodeState, forgotten),
            offset_of!(NodeState, record_generation),
            offset_of!(NodeState, record_stored),
            offset_of!(NodeState, vms_generation),
            offset_of!(NodeState, record.last_heartbeat),
        ];
        let lock = Arc::as_ptr(slot).cast::<i8>();
        let state = slot.data_ptr().cast::<i8>().cast_const();
        // SAFETY: a prefetch only hints the cache; it neither reads nor faults, whatever the
        // address (these are all inside the live slot). Still `unsafe` on Rust 1.95 (a raw
        // pointer argument), so the one block allowed in the controller.
        #[allow(unsafe_code)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(lock);
            for offset in READ_BY_TO_WRITE {
                _mm_prefetch::<_MM_HINT_T0>(state.wrapping_add(offset));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = slot;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_contact_time_spliced_into_the_cached_record_equals_a_fresh_serialization() {
        let mut state = crate::controller::test_support::node_state();
        state.record.vm_count = 3;
        let _ = state.changed();
        let first = state.fragment().clone();
        assert_eq!(first, serde_json::to_vec(&state.record).unwrap());
        // Timestamps of every fractional length, longer and shorter than the one before.
        for time in [
            "2026-01-01T00:00:05.123456789Z",
            "2026-01-01T00:00:06Z",
            "2026-01-01T00:00:07.5Z",
            "2026-01-01T00:00:08.123456Z",
            "2026-01-01T00:00:09+02:00",
        ] {
            state.record.last_heartbeat = time.parse().unwrap();
            let _ = state.seen();
            let spliced = state.fragment().clone();
            assert_eq!(
                String::from_utf8_lossy(&spliced),
                String::from_utf8_lossy(&serde_json::to_vec(&state.record).unwrap()),
                "after {time}"
            );
        }
        // Any other change serializes afresh.
        state.record.hostname = "other".try_into().unwrap();
        let _ = state.changed();
        let fresh = serde_json::to_vec(&state.record).unwrap();
        assert_eq!(state.fragment(), &fresh);
    }

    #[test]
    fn only_a_new_contact_time_is_written_as_such_once_the_row_is_stored() {
        let mut state = crate::controller::test_support::node_state();
        assert!(state.changed(), "a new node is queued");
        let NodeWrite::Upsert(row) = state.to_write("n".into()) else {
            panic!("a new node is written in full")
        };
        // Until the store confirms the row, it is written in full again.
        assert!(state.seen());
        assert!(matches!(state.to_write("n".into()), NodeWrite::Upsert(_)));
        state.row_written(&row);
        assert!(state.seen());
        state.record.last_heartbeat = "2026-01-01T00:00:05Z".parse().unwrap();
        match state.to_write("n".into()) {
            NodeWrite::Seen { last_heartbeat, .. } => {
                assert_eq!(last_heartbeat.to_string(), "2026-01-01T00:00:05Z")
            }
            other => panic!("expected Seen, got {other:?}"),
        }
        // Any other change, or a new VM list, is a full row again.
        assert!(state.changed());
        assert!(matches!(state.to_write("n".into()), NodeWrite::Upsert(_)));
        let NodeWrite::Upsert(row) = state.to_write("n".into()) else {
            unreachable!()
        };
        state.row_written(&row);
        state.vms_mut();
        assert!(matches!(state.to_write("n".into()), NodeWrite::Upsert(_)));
        // A change its caller commits is not queued, but its commit writes the full row, and
        // the next heartbeat still queues the node.
        let NodeWrite::Upsert(row) = state.to_write("n".into()) else {
            unreachable!()
        };
        state.row_written(&row);
        state.changed_for_commit();
        assert!(state.seen(), "not marked as queued: a heartbeat queues it");
        assert!(matches!(state.to_write("n".into()), NodeWrite::Upsert(_)));
    }

    #[test]
    fn a_heartbeat_queues_its_node_once_per_batch_as_a_row_or_a_contact_time() {
        let mut state = crate::controller::test_support::node_state();
        let (row, contact) = (
            WhenStored::WriteBehind(Change::Row),
            WhenStored::WriteBehind(Change::Contact),
        );
        assert_eq!(
            state.mark_changed(contact),
            StoreWrite::Queue(Change::Contact)
        );
        assert_eq!(
            state.mark_changed(row),
            StoreWrite::Nothing,
            "already queued"
        );
        let _ = state.to_write("n".into());
        assert_eq!(state.mark_changed(row), StoreWrite::Queue(Change::Row));
        assert_eq!(
            state.mark_changed(contact),
            StoreWrite::Nothing,
            "already queued"
        );
        // A change committed by id is not queued as well.
        let _ = state.to_write("n".into());
        assert_eq!(
            state.mark_changed(WhenStored::BeforeAnswer),
            StoreWrite::Commit
        );
        assert_eq!(state.mark_changed(row), StoreWrite::Queue(Change::Row));
    }
}
