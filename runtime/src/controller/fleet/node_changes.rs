//! Marking a node changed: one call records the change in the node's state and says how soon
//! the store must have it ([`Controller::node_changed`]); the caller awaits what it returns
//! once the node's lock is released. The state's mark and the writer's call are never paired
//! by hand, so no change is marked without being written, nor written without its mark.
//! Forgetting a node ([`Controller::forget_node`]) is the same kind of change.

use crate::controller::shared::Controller;
use crate::controller::table::node_state::{NodeState, StoreWrite, WhenStored};
use crate::controller::table::node_table::DirtyNode;
use crate::store::error::StoreError;
use crate::store::writer::Queued;

/// A node's change on its way to the store: await [`NodeChange::stored`] after releasing the
/// node's lock.
#[must_use = "a node's change reaches the store only when `stored` is awaited"]
pub struct NodeChange<'a> {
    controller: &'a Controller,
    node: DirtyNode,
    write: StoreWrite,
}

impl Controller {
    /// Records a change of `state` (the locked state of `node`) and returns what the caller
    /// awaits for it to be stored: its commit ([`WhenStored::BeforeAnswer`]), or its place in
    /// the write-behind queue ([`WhenStored::WriteBehind`]; while the queue is full, the next
    /// batch, so that changes come no faster than the store takes them).
    pub fn node_changed(
        &self,
        node: DirtyNode,
        state: &mut NodeState,
        when: WhenStored,
    ) -> NodeChange<'_> {
        NodeChange {
            controller: self,
            write: state.mark_changed(when),
            node,
        }
    }

    /// Removes the node from the table; its deletion, to await like a change committed before
    /// the answer. `None` when the table has no such node.
    pub fn forget_node(&self, node_id: String) -> Option<NodeChange<'_>> {
        self.table.remove(&node_id)?;
        Some(NodeChange {
            controller: self,
            node: DirtyNode::Id(node_id),
            write: StoreWrite::Commit,
        })
    }

    /// Awaits several changes as one: their commits in one transaction (a sweep forgetting
    /// nodes, a self-heal correcting many).
    pub async fn stored_together(&self, changes: Vec<NodeChange<'_>>) -> Result<(), StoreError> {
        let mut commit = Vec::new();
        let mut full = false;
        for change in changes {
            match change.write {
                StoreWrite::Nothing => {}
                StoreWrite::Commit => commit.push(change.node.into_node_id()),
                StoreWrite::Queue(what) => {
                    full |= self.writer.mark_dirty(change.node, what) == Queued::Full;
                }
            }
        }
        if !commit.is_empty() {
            // A commit writes everything queued before it as well.
            self.writer.commit(commit).await
        } else if full {
            self.writer.flushed().await
        } else {
            Ok(())
        }
    }
}

impl NodeChange<'_> {
    /// The id of the node changed.
    pub fn node_id(&self) -> &str {
        self.node.node_id()
    }

    /// Returns once the change is as durable as asked: committed, or queued in time (or,
    /// while the store is behind, written).
    pub async fn stored(self) -> Result<(), StoreError> {
        let writer = &self.controller.writer;
        match self.write {
            StoreWrite::Nothing => Ok(()),
            StoreWrite::Commit => writer.commit(vec![self.node.into_node_id()]).await,
            // Queued after the node's lock is released: its write-behind mark is already set,
            // so a batch taken in between leaves it for the next one, which this adds it to.
            StoreWrite::Queue(what) => match writer.mark_dirty(self.node, what) {
                Queued::InTime => Ok(()),
                Queued::Full => writer.flushed().await,
            },
        }
    }
}
