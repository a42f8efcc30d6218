//! The disk-overcommit ledger (docs/controller.md, "Disk-overcommit ledger"):
//! `reserved_disk_gb` is the sum of the nominal disk footprints of the VMs placed on a node.
//! Placement reserves, deletion releases, admission refuses a node whose ledger would pass
//! `total_disk_gb * ratio`, and the periodic self-heal recomputes it from the VM records.

use crate::controller::table::node_state::{NodeState, VmEntry};

/// The most a node's ledger may hold, or `None` when the node never said how big its disk is
/// (a PPN node enrolled by heartbeat alone): then the ledger does not gate it.
pub fn limit_gb(total_disk_gb: Option<u64>, ratio: f64) -> Option<u64> {
    total_disk_gb.map(|total| (total as f64 * ratio).floor() as u64)
}

/// Why the ledger refuses a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerFull {
    pub reserved_gb: u64,
    pub in_flight_gb: u64,
    pub request_gb: u64,
    pub limit_gb: u64,
}

impl std::fmt::Display for LedgerFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "its disk ledger holds {} GB (+{} GB being placed) of {} GB; {} GB more does not fit",
            self.reserved_gb, self.in_flight_gb, self.limit_gb, self.request_gb
        )
    }
}

/// Whether `request_gb` more fits on the node, counting placements still in flight.
pub fn admits(state: &NodeState, request_gb: u64, ratio: f64) -> Result<(), LedgerFull> {
    let Some(limit) = limit_gb(state.record.total_disk_gb, ratio) else {
        return Ok(());
    };
    let reserved = state.record.reserved_disk_gb;
    let in_flight = state.pending.disk_gb;
    if reserved
        .saturating_add(in_flight)
        .saturating_add(request_gb)
        > limit
    {
        return Err(LedgerFull {
            reserved_gb: reserved,
            in_flight_gb: in_flight,
            request_gb,
            limit_gb: limit,
        });
    }
    Ok(())
}

/// The ledger as the VM records say it should be.
pub fn recompute(vms: &[VmEntry]) -> u64 {
    vms.iter()
        .filter_map(|vm| vm.record.disk_gb)
        .fold(0u64, u64::saturating_add)
}

/// Corrects the node's ledger from its VM records; `(was, now)` when it had drifted.
pub fn heal(state: &mut NodeState) -> Option<(u64, u64)> {
    let expected = recompute(state.vms());
    let was = state.record.reserved_disk_gb;
    if was == expected {
        return None;
    }
    state.record.reserved_disk_gb = expected;
    Some((was, expected))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::table::node_state::NodeFlags;
    use fleetwire_types::{NodeRecord, VmRecord};

    fn node(total: Option<u64>, reserved: u64) -> NodeState {
        let mut record: NodeRecord = serde_json::from_value(serde_json::json!({
            "node_id": "n", "hostname": "h", "wg_ip": "10.0.0.1", "ram_available_mb": 1,
            "vm_count": 0, "kvm_available": false, "last_heartbeat": "2026-01-01T00:00:00Z",
            "status": "ready"
        }))
        .unwrap();
        record.total_disk_gb = total;
        record.reserved_disk_gb = reserved;
        NodeState::new(record, Vec::new(), NodeFlags::default())
    }

    #[test]
    fn admission_counts_reserved_and_in_flight_against_the_overcommit_limit() {
        let mut state = node(Some(100), 150);
        assert_eq!(limit_gb(Some(100), 2.0), Some(200));
        assert!(admits(&state, 50, 2.0).is_ok());
        assert!(admits(&state, 51, 2.0).is_err());
        state.pending.disk_gb = 30;
        let full = admits(&state, 30, 2.0).unwrap_err();
        assert_eq!(full.in_flight_gb, 30);
        assert!(admits(&node(None, 10_000), 10_000, 2.0).is_ok());
    }

    #[test]
    fn self_heal_recomputes_the_ledger_from_vm_records() {
        let mut state = node(Some(100), 70);
        let vm = |id: &str, disk: Option<u64>| {
            let mut record: VmRecord = serde_json::from_value(serde_json::json!({
                "vm_id": id, "vm_type": "t", "state": "Running", "ram_alloc_mb": 1, "vcpu_count": 1
            }))
            .unwrap();
            record.disk_gb = disk;
            VmEntry {
                record,
                placed: true,
            }
        };
        *state.vms_mut() = vec![vm("a", Some(30)), vm("b", None), vm("c", Some(10))];
        assert_eq!(heal(&mut state), Some((70, 40)));
        assert_eq!(heal(&mut state), None);
    }
}
