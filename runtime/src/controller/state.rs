//! The controller's in-memory node table: the state every read is served from and every
//! write starts in. Each node sits behind its own short-held lock; the table lock is only
//! taken for writing when a node is added or removed, so heartbeats of different nodes never
//! wait for each other and no lock is ever held across I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use compact_str::CompactString;
use fleetwire_types::{CertSerial, NodeCounts, NodeRecord, VmRecord};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use super::liveness::{Board, Cell};
use crate::store::node_rows::{NodeWrite, StoredNode};
use crate::store::writer::Change;

/// One VM the controller knows on a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmEntry {
    pub record: VmRecord,
    /// Placed by this controller (`POST /v1/vms`), as opposed to only reported by the node.
    pub placed: bool,
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
    vms: Vec<VmEntry>,
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
    forgotten: bool,
    /// The node's word on the table's liveness board (`None` outside a table).
    liveness: Option<Cell>,
    /// The certificate a renewal replaced, still taken until the node presents its new one:
    /// the renewal's answer may have been lost on its way (docs/security.md). Memory only.
    pub replaced_cert_serial: Option<CertSerial>,
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

/// A node record serialized, and where its `last_heartbeat` value sits in it: a heartbeat that
/// changes nothing else (the common case) costs a splice instead of a serialization, which is
/// what keeps `GET /v1/fleet` cheap while every node is heartbeating.
#[derive(Debug)]
struct Fragment {
    json: Bytes,
    /// The byte range of the `last_heartbeat` string, quotes included (`None` if not found,
    /// which a `NodeRecord` never is: then every change serializes afresh).
    time_at: Option<std::ops::Range<usize>>,
    /// `last_heartbeat` has changed since `json` was made.
    time_stale: bool,
}

impl Fragment {
    const TIME_KEY: &'static [u8] = b"\"last_heartbeat\":";

    fn of(record: &NodeRecord) -> Fragment {
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

    fn with_time(self, record: &NodeRecord) -> Fragment {
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
        // address (these are all inside the live slot).
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

/// A node queued for write-behind.
pub enum DirtyNode {
    /// By its slot, when the caller holds it (the heartbeat path), with its id as the caller
    /// named it: the store writer then needs neither a lookup in a table of 100,000 nodes nor
    /// a read of the node's own copy of its id, which at that size is rarely in cache.
    Slot(NodeSlot, CompactString),
    /// By id.
    Id(String),
}

impl DirtyNode {
    /// The node's id.
    pub fn node_id(&self) -> &str {
        match self {
            DirtyNode::Slot(_, node_id) => node_id,
            DirtyNode::Id(node_id) => node_id,
        }
    }

    /// The node's id, owned (a commit names nodes by id).
    pub fn into_node_id(self) -> String {
        match self {
            DirtyNode::Slot(_, node_id) => node_id.into_string(),
            DirtyNode::Id(node_id) => node_id,
        }
    }
}

impl From<String> for DirtyNode {
    fn from(node_id: String) -> DirtyNode {
        DirtyNode::Id(node_id)
    }
}

/// The nodes by id twice: hashed for the lookup every heartbeat makes (one probe instead of a
/// walk down a tree of 100,000 ids), ordered for the walks that list them. Ids of up to 24
/// bytes are kept inline in the tables rather than behind a pointer: at 100,000 nodes the
/// table is rarely in cache, and comparing the key through a pointer cost one more wait for
/// memory per heartbeat.
#[derive(Default)]
struct Nodes {
    by_id: HashMap<CompactString, NodeSlot>,
    ordered: BTreeMap<CompactString, NodeSlot>,
}

impl Nodes {
    fn insert(&mut self, node_id: CompactString, slot: NodeSlot) {
        self.by_id.insert(node_id.clone(), slot.clone());
        self.ordered.insert(node_id, slot);
    }

    fn remove(&mut self, node_id: &str) -> Option<NodeSlot> {
        self.ordered.remove(node_id);
        self.by_id.remove(node_id)
    }
}

/// The liveness board and the node holding each of its words. Its lock is never held while
/// another is taken.
#[derive(Default)]
struct Liveness {
    board: Board,
    by_word: Vec<Option<NodeSlot>>,
}

impl Liveness {
    /// A word for the node in `slot`, recorded as its holder; the caller hands the word to the
    /// node (see [`attach`]) once this lock is released.
    fn enter(&mut self, slot: &NodeSlot) -> Cell {
        let cell = self.board.take();
        let index = cell.index();
        if index >= self.by_word.len() {
            self.by_word.resize(index + 1, None);
        }
        self.by_word[index] = Some(slot.clone());
        cell
    }
}

/// Gives a node its board word and posts its status there.
fn attach(slot: &NodeSlot, cell: Cell) {
    let mut state = slot.lock();
    state.liveness = Some(cell);
    state.post_liveness();
}

/// The table of nodes and the index of VM ids to their nodes.
#[derive(Default)]
pub struct NodeTable {
    nodes: RwLock<Nodes>,
    liveness: Mutex<Liveness>,
    /// vm_id → node_id; an empty node id marks an id held by a placement in flight.
    vm_index: Mutex<HashMap<String, String>>,
}

impl NodeTable {
    pub fn get(&self, node_id: &str) -> Option<NodeSlot> {
        self.nodes.read().by_id.get(node_id).cloned()
    }

    /// The node's slot, created with `make` when the node is new (the bool says so).
    pub fn get_or_insert(
        &self,
        node_id: &str,
        make: impl FnOnce() -> NodeState,
    ) -> (NodeSlot, bool) {
        if let Some(slot) = self.get(node_id) {
            return (slot, false);
        }
        let mut nodes = self.nodes.write();
        if let Some(slot) = nodes.by_id.get(node_id) {
            return (slot.clone(), false);
        }
        let slot = Arc::new(Mutex::new(make()));
        let cell = self.liveness.lock().enter(&slot);
        attach(&slot, cell);
        nodes.insert(node_id.into(), slot.clone());
        (slot, true)
    }

    /// Inserts a node loaded from the store.
    pub fn insert_loaded(&self, node_id: String, state: NodeState) {
        let mut index = self.vm_index.lock();
        for vm in &state.vms {
            index.insert(vm.record.vm_id.to_string(), node_id.clone());
        }
        let slot = Arc::new(Mutex::new(state));
        let cell = self.liveness.lock().enter(&slot);
        attach(&slot, cell);
        self.nodes.write().insert(node_id.into(), slot);
    }

    /// Removes a node and its VMs from the index; the removed state, if it was there.
    pub fn remove(&self, node_id: &str) -> Option<NodeSlot> {
        let slot = self.nodes.write().remove(node_id)?;
        let mut state = slot.lock();
        state.forgotten = true;
        if let Some(cell) = state.liveness.take() {
            let mut liveness = self.liveness.lock();
            liveness.by_word[cell.index()] = None;
            liveness.board.release(cell);
        }
        let mut index = self.vm_index.lock();
        for vm in &state.vms {
            if index
                .get(vm.record.vm_id.as_str())
                .is_some_and(|n| n == node_id)
            {
                index.remove(vm.record.vm_id.as_str());
            }
        }
        drop(index);
        drop(state);
        Some(slot)
    }

    /// Every slot, in node id order, for walks that do slow work per node (serializing): the
    /// table lock is held only while the handles are copied, so enrollments never wait for
    /// such a walk, nor heartbeats for an enrollment queued behind it.
    pub fn ordered_slots(&self) -> Vec<NodeSlot> {
        self.nodes.read().ordered.values().cloned().collect()
    }

    /// The liveness board's words of nodes due for the staleness sweep's look at `now` (see
    /// [`Board::due`]).
    pub fn due_for_sweep(
        &self,
        now: Instant,
        stale_after: Duration,
        forget_after: Duration,
    ) -> Vec<usize> {
        self.liveness
            .lock()
            .board
            .due(now, stale_after, forget_after)
    }

    /// Nodes by status, as last posted to the liveness board.
    pub fn node_counts(&self) -> NodeCounts {
        self.liveness.lock().board.counts()
    }

    /// Calls `visit` with each node of `due` (board words from [`NodeTable::due_for_sweep`])
    /// still in the table, locked.
    pub fn for_each_due(&self, due: &[usize], mut visit: impl FnMut(&mut NodeState)) {
        let slots: Vec<NodeSlot> = {
            let liveness = self.liveness.lock();
            due.iter()
                .filter_map(|&index| liveness.by_word.get(index).cloned().flatten())
                .collect()
        };
        for slot in slots {
            let mut state = slot.lock();
            if !state.forgotten {
                visit(&mut state);
            }
        }
    }

    /// Calls `visit` for every node in node id order, with the node locked. New nodes wait
    /// until the walk ends; heartbeats of other nodes do not.
    pub fn for_each(&self, mut visit: impl FnMut(&str, &mut NodeState)) {
        let nodes = self.nodes.read();
        for (id, slot) in nodes.ordered.iter() {
            visit(id, &mut slot.lock());
        }
    }

    /// The node currently recorded for `vm_id` (empty while a placement holds the id).
    pub fn vm_node(&self, vm_id: &str) -> Option<String> {
        self.vm_index.lock().get(vm_id).cloned()
    }

    /// Holds `vm_id` for a placement; false when it is already in use.
    pub fn hold_vm_id(&self, vm_id: &str) -> bool {
        let mut index = self.vm_index.lock();
        if index.contains_key(vm_id) {
            return false;
        }
        index.insert(vm_id.to_string(), String::new());
        true
    }

    /// Releases a held id unless it has since been recorded on a node.
    pub fn release_vm_id(&self, vm_id: &str) {
        let mut index = self.vm_index.lock();
        if index.get(vm_id).is_some_and(|n| n.is_empty()) {
            index.remove(vm_id);
        }
    }

    /// Records `vm_id`, which `node_id`'s heartbeat reports and its record does not hold yet,
    /// as that node's, unless the index holds it already: placed or reported on another node
    /// (`Err` with that node's id), or held by a placement in flight (`Err` with `""`). Which
    /// node runs a VM is the controller's record; a heartbeat never moves it (issue 28).
    /// Checked and recorded under one lock, so two nodes reporting a new id cannot both win.
    pub fn claim_vm_id(&self, node_id: &str, vm_id: &str) -> Result<(), String> {
        let mut index = self.vm_index.lock();
        match index.get(vm_id) {
            Some(owner) if owner != node_id => Err(owner.clone()),
            Some(_) => Ok(()),
            None => {
                index.insert(vm_id.to_string(), node_id.to_string());
                Ok(())
            }
        }
    }

    /// Records that `node_id` now has `added` and no longer has `removed`.
    pub fn index_vms<'a>(
        &self,
        node_id: &str,
        removed: impl IntoIterator<Item = &'a str>,
        added: impl IntoIterator<Item = &'a str>,
    ) {
        let mut index = self.vm_index.lock();
        for vm_id in removed {
            if index.get(vm_id).is_some_and(|n| n == node_id) {
                index.remove(vm_id);
            }
        }
        for vm_id in added {
            index.insert(vm_id.to_string(), node_id.to_string());
        }
    }

    /// Records that the store now holds these rows' VM lists.
    pub fn written(&self, writes: &[NodeWrite]) {
        for write in writes {
            if let NodeWrite::Upsert(row) = write {
                if let Some(slot) = self.get(&row.node_id) {
                    slot.lock().row_written(row);
                }
            }
        }
    }

    /// The store row of a queued node as it is now: an upsert (or its contact time), or a
    /// delete once it is forgotten; `None` for a slot whose node was forgotten (its deletion
    /// is committed by id, and a node since re-created under the id is queued on its own).
    pub fn snapshot(&self, node: &mut DirtyNode) -> Option<NodeWrite> {
        match node {
            DirtyNode::Id(node_id) => Some(match self.get(node_id) {
                Some(slot) => slot.lock().to_write(std::mem::take(node_id).into()),
                None => NodeWrite::Delete(std::mem::take(node_id)),
            }),
            DirtyNode::Slot(slot, node_id) => {
                let mut state = slot.lock();
                if state.forgotten {
                    return None;
                }
                Some(state.to_write(std::mem::take(node_id)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeState {
        let record: NodeRecord = serde_json::from_value(serde_json::json!({
            "node_id": "n", "hostname": "h", "wg_ip": "10.0.0.1", "ram_available_mb": 1,
            "vm_count": 0, "kvm_available": false, "last_heartbeat": "2026-01-01T00:00:00Z",
            "status": "ready"
        }))
        .unwrap();
        NodeState::new(record, Vec::new(), NodeFlags::default())
    }

    #[test]
    fn a_vm_id_is_claimed_once_and_never_from_another_node_or_a_placement_in_flight() {
        let table = NodeTable::default();
        assert_eq!(table.claim_vm_id("a", "v1"), Ok(()));
        assert_eq!(table.claim_vm_id("a", "v1"), Ok(()));
        assert_eq!(table.claim_vm_id("b", "v1"), Err("a".to_string()));
        assert_eq!(table.vm_node("v1").as_deref(), Some("a"));
        assert!(table.hold_vm_id("v2"));
        assert_eq!(table.claim_vm_id("b", "v2"), Err(String::new()));
        // Once node a no longer has it, another node may.
        table.index_vms("a", ["v1"], []);
        assert_eq!(table.claim_vm_id("b", "v1"), Ok(()));
        assert_eq!(table.vm_node("v1").as_deref(), Some("b"));
    }

    #[test]
    fn a_queued_slot_of_a_forgotten_node_writes_nothing_and_its_id_deletes() {
        let table = NodeTable::default();
        let (old, _) = table.get_or_insert("n", node);
        let slot = |slot: &NodeSlot| DirtyNode::Slot(slot.clone(), "n".into());
        assert!(matches!(
            table.snapshot(&mut slot(&old)),
            Some(NodeWrite::Upsert(row)) if row.node_id == "n"
        ));
        table.remove("n").unwrap();
        assert_eq!(table.snapshot(&mut slot(&old)), None);
        assert_eq!(
            table.snapshot(&mut DirtyNode::from("n".to_string())),
            Some(NodeWrite::Delete("n".into()))
        );
        // Re-created under the same id: the new slot writes, the id finds it.
        let (new, _) = table.get_or_insert("n", node);
        assert!(matches!(
            table.snapshot(&mut slot(&new)),
            Some(NodeWrite::Upsert(row)) if row.node_id == "n"
        ));
        assert!(matches!(
            table.snapshot(&mut DirtyNode::Id("n".into())),
            Some(NodeWrite::Upsert(row)) if row.node_id == "n"
        ));
    }

    #[test]
    fn a_new_contact_time_spliced_into_the_cached_record_equals_a_fresh_serialization() {
        let mut state = node();
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
        let mut state = node();
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
        let mut state = node();
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

    #[test]
    fn ids_kept_inline_and_ids_too_long_for_it_are_found_listed_in_order_and_removed() {
        let table = NodeTable::default();
        let ids = [
            "b".repeat(63),
            "a".repeat(25),
            "a".repeat(24),
            "node-7".to_string(),
        ];
        let named = |id: &str| {
            let mut state = node();
            state.record.node_id = id.try_into().unwrap();
            state
        };
        for id in &ids {
            let (_, new) = table.get_or_insert(id, || named(id));
            assert!(new);
        }
        for id in &ids {
            assert!(table.get(id).is_some(), "{id}");
            assert!(!table.get_or_insert(id, node).1, "{id} is not new");
        }
        assert!(table.get(&"a".repeat(23)).is_none());
        // Queued by slot and by id, each writes its row under its whole id.
        for id in &ids {
            let slot = table.get(id).unwrap();
            let mut queued = [
                DirtyNode::Slot(slot, id.as_str().into()),
                DirtyNode::Id(id.clone()),
            ];
            for node in &mut queued {
                match table.snapshot(node) {
                    Some(NodeWrite::Upsert(row)) => assert_eq!(&row.node_id, id),
                    other => panic!("{id}: {other:?}"),
                }
            }
        }
        let mut listed = Vec::new();
        table.for_each(|id, _| listed.push(id.to_string()));
        let mut sorted = ids.to_vec();
        sorted.sort();
        assert_eq!(listed, sorted);
        assert!(table.remove(&ids[0]).is_some());
        assert!(table.remove(&ids[2]).is_some());
        assert!(table.get(&ids[0]).is_none() && table.get(&ids[2]).is_none());
        assert_eq!(table.ordered_slots().len(), 2);
    }
}
