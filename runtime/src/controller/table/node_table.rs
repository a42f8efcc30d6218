//! The controller's in-memory node table ([`NodeTable`]): the state every read is served
//! from and every write starts in. Each node sits behind its own short-held lock; the table
//! lock is only taken for writing when a node is added or removed, so heartbeats of different
//! nodes never wait for each other and no lock is ever held across I/O. It also holds the
//! index of VM ids to their nodes and each node's word on the liveness board.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use compact_str::CompactString;
use fleetwire_types::NodeCounts;
use parking_lot::{Mutex, RwLock};

use crate::controller::table::liveness::{Board, Cell};
use crate::controller::table::node_state::{NodeSlot, NodeState};
use crate::store::node_rows::NodeWrite;

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
    use crate::controller::table::node_state::NodeFlags;
    use fleetwire_types::NodeRecord;

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
