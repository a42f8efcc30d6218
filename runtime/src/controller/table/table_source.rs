//! The store writer's view of the node table ([`TableSource`]): what a queued node's row is
//! now, and which rows the store has accepted.

use std::sync::Weak;

use crate::controller::table::node_state;
use crate::controller::table::node_table::{DirtyNode, NodeTable};
use crate::store::node_rows::NodeWrite;
use crate::store::writer::Source;

/// The store writer's view of the node table of `T` (the controller), held weakly: once the
/// controller is gone there is nothing left to write.
pub struct TableSource<T>(pub Weak<T>);

impl<T: AsRef<NodeTable> + Send + Sync + 'static> Source for TableSource<T> {
    type Key = DirtyNode;

    fn snapshot(&self, node: &mut DirtyNode) -> Option<NodeWrite> {
        self.0.upgrade().and_then(|c| T::as_ref(&c).snapshot(node))
    }

    fn prefetch(&self, node: &DirtyNode) {
        if let DirtyNode::Slot(slot, _) = node {
            node_state::prefetch(slot);
        }
    }

    fn written(&self, writes: &[NodeWrite]) {
        if let Some(controller) = self.0.upgrade() {
            T::as_ref(&controller).written(writes);
        }
    }
}
