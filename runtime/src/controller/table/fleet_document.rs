//! `GET /v1/fleet` as a streamed body: the cached serializations of the node records are
//! copied into chunks of about 256 kB as the connection takes them, so a fleet of 100,000
//! nodes (54 MB) is never assembled in one buffer (nor copied twice, nor faulted into fresh
//! memory on every read).
//!
//! The counts are written after the nodes, from the very statuses the listing saw, so they
//! always agree with it: `{"nodes":[...],"counts":{...},"last_updated":"..."}` is the same
//! `FleetStatus` (a JSON object's members have no order).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Bytes;
use fleetwire_types::{FleetStatus, HostState, NodeCounts, Timestamp};
use hyper::body::{Body, Frame};

use crate::controller::table::node_counts::{count, zero_counts};
use crate::controller::table::node_state::NodeSlot;

/// A chunk is sent once it holds this many bytes.
const CHUNK: usize = 256 * 1024;

/// The fleet document, produced chunk by chunk.
pub struct FleetDocument {
    /// The nodes in node-id order, as the table held them when the request came.
    slots: std::vec::IntoIter<NodeSlot>,
    counts: NodeCounts,
    listed: usize,
    started: bool,
    done: bool,
}

impl FleetDocument {
    pub fn new(slots: Vec<NodeSlot>) -> FleetDocument {
        FleetDocument {
            slots: slots.into_iter(),
            counts: zero_counts(),
            listed: 0,
            started: false,
            done: false,
        }
    }

    /// The whole document in one buffer (for tests and benchmarks).
    pub fn into_bytes(mut self) -> Bytes {
        let mut all = Vec::new();
        while let Some(chunk) = self.next_chunk() {
            all.extend_from_slice(&chunk);
        }
        Bytes::from(all)
    }

    fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut chunk = Vec::with_capacity(CHUNK + 4096);
        if !self.started {
            chunk.extend_from_slice(b"{\"nodes\":[");
            self.started = true;
        }
        while chunk.len() < CHUNK {
            let Some(slot) = self.slots.next() else {
                chunk.extend_from_slice(b"],");
                chunk.extend_from_slice(&self.tail());
                self.done = true;
                break;
            };
            let mut node = slot.lock();
            count(&mut self.counts, node.record.status);
            // An unreachable node is counted but not listed, as PPN's listing drops it.
            if node.record.status == HostState::Unreachable {
                continue;
            }
            if self.listed > 0 {
                chunk.push(b',');
            }
            chunk.extend_from_slice(node.fragment());
            self.listed += 1;
        }
        Some(Bytes::from(chunk))
    }

    /// `"counts":{...},"last_updated":"..."}`: the rest of a serialized `FleetStatus` whose
    /// node list is already written.
    fn tail(&self) -> Vec<u8> {
        let rest = FleetStatus {
            counts: Some(self.counts.clone()),
            last_updated: Timestamp::now(),
            nodes: Vec::new(),
        };
        let json = serde_json::to_vec(&rest).expect("a FleetStatus serializes");
        const EMPTY_NODES: &[u8] = b",\"nodes\":[]}";
        assert!(
            json.starts_with(b"{") && json.ends_with(EMPTY_NODES),
            "FleetStatus serializes its nodes last"
        );
        let mut tail = json[1..json.len() - EMPTY_NODES.len()].to_vec();
        tail.push(b'}');
        tail
    }
}

impl Body for FleetDocument {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.get_mut().next_chunk().map(|c| Ok(Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::table::node_state::{NodeFlags, NodeState};
    use fleetwire_types::NodeRecord;
    use std::sync::Arc;

    fn slot(index: usize, status: &str) -> NodeSlot {
        let record: NodeRecord = serde_json::from_value(serde_json::json!({
            "node_id": format!("node-{index:05}"), "hostname": format!("host-{index}"),
            "wg_ip": "10.0.0.1", "ram_available_mb": 1, "vm_count": 0, "kvm_available": false,
            "last_heartbeat": "2026-01-01T00:00:00Z", "status": status
        }))
        .unwrap();
        Arc::new(parking_lot::Mutex::new(NodeState::new(
            record,
            Vec::new(),
            NodeFlags::default(),
        )))
    }

    #[test]
    fn a_large_fleet_streams_in_chunks_and_reads_back_as_one_fleet_status() {
        // About 250 bytes a record: 3,000 nodes make several chunks.
        let slots: Vec<NodeSlot> = (0..3_000)
            .map(|i| slot(i, if i % 10 == 0 { "unreachable" } else { "ready" }))
            .collect();
        let mut document = FleetDocument::new(slots.clone());
        let mut chunks = 0;
        let mut all = Vec::new();
        while let Some(chunk) = document.next_chunk() {
            chunks += 1;
            all.extend_from_slice(&chunk);
        }
        assert!(document.is_end_stream());
        assert!(chunks >= 3, "{chunks} chunks of {} bytes", all.len());
        let fleet: FleetStatus = fleetwire_types::read_strict(&all).unwrap();
        assert_eq!(fleet.nodes.len(), 2_700);
        assert!(fleet
            .nodes
            .windows(2)
            .all(|w| w[0].node_id.as_str() < w[1].node_id.as_str()));
        let counts = fleet.counts.unwrap();
        assert_eq!((counts.ready, counts.unreachable), (2_700, 300));
        // In one buffer it is the same document (but for the time it was made).
        let whole: FleetStatus =
            fleetwire_types::read_strict(&FleetDocument::new(slots).into_bytes()).unwrap();
        assert!(whole.nodes == fleet.nodes && whole.counts == Some(counts));
    }

    #[test]
    fn an_empty_fleet_is_a_valid_document() {
        let all = FleetDocument::new(Vec::new()).into_bytes();
        let fleet: FleetStatus = fleetwire_types::read_strict(&all).unwrap();
        assert!(fleet.nodes.is_empty());
        assert_eq!(fleet.counts.unwrap().ready, 0);
    }
}
