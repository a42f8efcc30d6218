//! What both backends (`sqlite`, `postgres`) do alike with a batch and the contact log, so that
//! they keep one behaviour: which contacts go with a deletion, how a load finds each node's
//! latest contact, how a failed merge of the log names its row.

use std::collections::HashMap;

use super::contact_log::{self, MergeError};
use super::error::StoreError;
use super::node_rows::{NodeWrite, StoredNode};

/// A write-behind batch that leaves more rows than this in the contact log folds them into
/// one: every this many batches on top of the folded row, with the default 500 ms flush
/// interval about every ten seconds under steady heartbeats. A fold rewrites every node's
/// latest time once (about a megabyte at 100,000 nodes), and a restart reads about this many
/// rows on top of the folded one (commits add rows without folding).
pub const FOLD_AFTER_BATCHES: u32 = 20;

/// The contact log's rows as read: `(batch, blob)`, in the order written.
pub type LogRows = [(i64, Vec<u8>)];

/// Each node the batch deletes, with the index of its last deletion in the batch: its logged
/// contacts go with it, and so do the batch's own contacts of it queued before that deletion
/// (those after it are a node enrolled again under the same id).
pub fn deletions(batch: &[NodeWrite]) -> HashMap<&str, usize> {
    batch
        .iter()
        .enumerate()
        .filter_map(|(i, write)| match write {
            NodeWrite::Delete(id) => Some((id.as_str(), i)),
            _ => None,
        })
        .collect()
}

/// Whether the batch's write `i` (a contact time) is logged: not followed by a deletion of its
/// node in the batch.
pub fn logged(batch: &[NodeWrite], deleted: &HashMap<&str, usize>, i: usize) -> bool {
    deleted.is_empty() || deleted.get(batch[i].node_id()).is_none_or(|&at| at < i)
}

/// Sets the `seen` of each of `nodes` (in node-id order, bytewise as `str` compares) to its
/// latest time in the contact log `batches`: a merge join.
pub fn attach_latest_contacts(
    nodes: &mut [StoredNode],
    batches: &LogRows,
) -> Result<(), StoreError> {
    let blobs: Vec<&[u8]> = batches.iter().map(|(_, blob)| blob.as_slice()).collect();
    let mut next = 0;
    contact_log::for_each_latest(&blobs, |id, time| {
        while nodes
            .get(next)
            .is_some_and(|node| node.node_id.as_str() < id)
        {
            next += 1;
        }
        if let Some(node) = nodes.get_mut(next).filter(|node| node.node_id == id) {
            node.seen = Some(time);
        }
        Ok::<(), StoreError>(())
    })
    .map_err(|e| log_error(batches, e))
}

/// A failed merge of the contact log's rows `batches`, as a store error naming the row.
pub fn log_error<E: Into<StoreError>>(batches: &LogRows, error: MergeError<E>) -> StoreError {
    match error {
        MergeError::Damaged { blob, error } => StoreError::ContactLogRow {
            batch: batches[blob].0,
            cause: error.to_string(),
        },
        MergeError::Stopped(error) => error.into(),
    }
}

/// A row of migration 5's `liveness` table as the contact time it becomes.
pub fn liveness_contact(node_id: String, text: &str) -> Result<NodeWrite, StoreError> {
    let last_heartbeat = text
        .parse()
        .map_err(|e| StoreError::UnreadableContactTime {
            node_id: node_id.clone(),
            cause: format!("{e}"),
        })?;
    Ok(NodeWrite::Seen {
        node_id: node_id.into(),
        last_heartbeat,
    })
}

/// A document as the text the stores keep.
pub fn text(bytes: &[u8]) -> Result<&str, StoreError> {
    std::str::from_utf8(bytes).map_err(|e| StoreError::NotUtf8 {
        cause: e.to_string(),
    })
}
