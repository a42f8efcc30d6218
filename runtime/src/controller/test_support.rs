//! What the controller's unit tests share: a heartbeat to send, a node's state to start from,
//! and the store's rows to check.

use fleetwire_types::{NodeHeartbeat, NodeRecord};

use crate::controller::table::node_state::{NodeFlags, NodeState};
use crate::store::backend::Store;
use crate::store::sqlite::SqliteStore;

/// A valid heartbeat of node `node_id` on a host of 8192 MB using `ram_used_mb`.
pub fn heartbeat(node_id: &str, ram_used_mb: u64) -> NodeHeartbeat {
    let body = serde_json::json!({
        "node_id": node_id, "wg_ip": "10.0.0.1", "hostname": "h1",
        "ram_total_mb": 8192, "ram_used_mb": ram_used_mb, "cpu_cores": 4,
        "cpu_load_pct": 3.5, "kvm_available": true, "vms": [], "boot_id": "host-a",
        "timestamp_utc": "2001-01-01T00:00:00Z"
    });
    fleetwire_types::read_strict(&serde_json::to_vec(&body).unwrap()).unwrap()
}

/// One field of every node record stored in the database at `path`, in node-id order.
pub fn stored(path: &std::path::Path, field: &str) -> Vec<serde_json::Value> {
    let rows = SqliteStore::open(path).unwrap().load_nodes().unwrap();
    rows.iter()
        .map(|row| {
            let record: serde_json::Value = serde_json::from_slice(&row.record).unwrap();
            record[field].clone()
        })
        .collect()
}

/// A ready node `n` with no VMs, as the table holds one.
pub fn node_state() -> NodeState {
    let record: NodeRecord = serde_json::from_value(serde_json::json!({
        "node_id": "n", "hostname": "h", "wg_ip": "10.0.0.1", "ram_available_mb": 1,
        "vm_count": 0, "kvm_available": false, "last_heartbeat": "2026-01-01T00:00:00Z",
        "status": "ready"
    }))
    .unwrap();
    NodeState::new(record, Vec::new(), NodeFlags::default())
}
