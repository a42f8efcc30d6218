//! Taking a heartbeat, the hot path: the node rules under the node's lock, the VM index, and
//! the node's change on its way to the store. Both entry points (the router's handler,
//! `api::post_heartbeat`, and the route served ahead of the router, `heartbeat_route`) reach
//! [`take_heartbeat_with`] through `heartbeat_answer`.

use std::time::Instant;

use compact_str::CompactString;
use fleetwire_types::{HostPort, NodeHeartbeat, NodeRecord, RejectedVm, Timestamp};

use crate::controller::fleet::node_changes::NodeChange;
use crate::controller::rules::heartbeat_entries;
use crate::controller::rules::nodes;
use crate::controller::shared::Controller;
use crate::controller::table::node_state::WhenStored;
use crate::controller::table::node_table::DirtyNode;
use crate::controller::trust::node_identity::{self, NodeCaller, NodeIdentityError, Presented};
use crate::store::error::StoreError;
use crate::store::writer::Change;

/// Why a heartbeat was not taken; a refused heartbeat changes nothing.
#[derive(Debug, thiserror::Error)]
pub enum HeartbeatError {
    /// The sender may not act for the heartbeat's node (mTLS mode).
    #[error(transparent)]
    Identity(#[from] NodeIdentityError),
    /// mTLS mode: a heartbeat never enrolls; the node registers first.
    #[error(
        "node {0:?} is not enrolled: it registers (with a bootstrap token) before it heartbeats"
    )]
    NotEnrolled(String),
    /// mTLS mode: the heartbeat names another agent address than the one the node's
    /// registration certified; the node registers again to move.
    #[error(
        "node {node_id:?} is registered at {certified}, the address its certificate names; a \
         heartbeat cannot move it to {claimed} (at {pointer}): the node registers again to \
         change its address"
    )]
    OutsideCertificate {
        node_id: String,
        /// `/wg_ip` or `/spawn_port`.
        pointer: &'static str,
        certified: String,
        claimed: String,
    },
    /// `--plain-http`: a heartbeat would enroll a reserved node id (`ids::reserved_node_id`).
    #[error("not a valid NodeHeartbeat: /node_id: {node_id:?} is reserved: {why}")]
    ReservedNodeId { node_id: String, why: &'static str },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// mTLS mode: `heartbeat`'s agent address must be the record's, which only a registration
/// sets and certifies; a heartbeat never sends the controller elsewhere (issue 28). Two
/// comparisons, nothing allocated unless refused.
fn certified_endpoint(
    record: &NodeRecord,
    heartbeat: &NodeHeartbeat,
    default_port: &HostPort,
) -> Result<(), HeartbeatError> {
    let port = heartbeat.spawn_port.as_ref().unwrap_or(default_port);
    let pointer = if heartbeat.wg_ip != record.wg_ip {
        "/wg_ip"
    } else if *port != record.spawn_port {
        "/spawn_port"
    } else {
        return Ok(());
    };
    Err(HeartbeatError::OutsideCertificate {
        node_id: record.node_id.to_string(),
        pointer,
        certified: format!("{}:{}", record.wg_ip.0, record.spawn_port.0),
        claimed: format!("{}:{}", heartbeat.wg_ip.0, port.0),
    })
}

/// Takes a heartbeat (tests; both entry points read a body with `heartbeat_answer`): returns once an enrolling heartbeat's new node is committed, any other
/// once its change is queued (or, while the store is behind, written).
#[cfg(test)]
pub async fn take_heartbeat(
    controller: &Controller,
    heartbeat: NodeHeartbeat,
) -> Result<(), HeartbeatError> {
    take_heartbeat_with(controller, heartbeat, Vec::new(), NodeCaller::Unchecked).await
}

/// Takes a heartbeat whose `rejected` entries of `vms` were set aside (by
/// `heartbeat_entries::read`): the node record shows them until the next heartbeat. `caller`
/// must be the heartbeat's node (`node_identity`).
pub async fn take_heartbeat_with(
    controller: &Controller,
    heartbeat: NodeHeartbeat,
    rejected: Vec<RejectedVm>,
    caller: NodeCaller<'_>,
) -> Result<(), HeartbeatError> {
    let change = apply(controller, heartbeat, rejected, caller)?;
    let queued = Instant::now();
    change.stored().await?;
    controller
        .metrics
        .heartbeat_phases
        .store
        .observe(queued.elapsed().as_secs_f64());
    Ok(())
}

/// The heartbeat applied to its node (enrolling it when new, unless the caller is checked),
/// and the node's change.
fn apply<'c>(
    controller: &'c Controller,
    heartbeat: NodeHeartbeat,
    mut rejected: Vec<RejectedVm>,
    caller: NodeCaller<'_>,
) -> Result<NodeChange<'c>, HeartbeatError> {
    let presented = node_identity::claim(caller, heartbeat.node_id.as_str())?;
    if !rejected.is_empty() {
        controller.metrics.rejected_vm_entries(rejected.len());
        tracing::warn!(
            node_id = heartbeat.node_id.as_str(),
            set_aside = rejected.len(),
            first = %rejected[0].reason.as_str(),
            "heartbeat taken without its invalid vms entries"
        );
    }
    let now = Instant::now();
    let received = Timestamp::now();
    let node_id = CompactString::from(heartbeat.node_id.as_str());
    let (slot, new) = match presented {
        None => match controller.table.get(&node_id) {
            Some(slot) => (slot, false),
            // Judged only when the heartbeat would enroll the node.
            None => {
                if let Some(why) = crate::ids::reserved_node_id(&node_id) {
                    return Err(HeartbeatError::ReservedNodeId {
                        node_id: node_id.to_string(),
                        why,
                    });
                }
                controller.table.get_or_insert(&node_id, || {
                    nodes::enroll_by_heartbeat(&heartbeat, received)
                })
            }
        },
        Some(_) => match controller.table.get(&node_id) {
            Some(slot) => (slot, false),
            None => return Err(HeartbeatError::NotEnrolled(node_id.to_string())),
        },
    };
    let (mut outcome, change) = {
        let mut state = slot.lock();
        let locked = Instant::now();
        let phases = &controller.metrics.heartbeat_phases;
        phases
            .lock
            .observe(locked.duration_since(now).as_secs_f64());
        if let Some(serial) = presented {
            let which = node_identity::current(
                &node_id,
                serial,
                state.record.cert_serial.as_ref(),
                state.replaced_cert_serial.as_ref(),
            )?;
            certified_endpoint(
                &state.record,
                &heartbeat,
                &controller.settings.default_spawn_port,
            )?;
            // The new certificate arrived: the one it replaced is done.
            if which == Presented::Current {
                state.replaced_cert_serial = None;
            }
        }
        // Asked only about VMs new to the node, so a steady heartbeat pays nothing for it.
        let mut foreign = Vec::new();
        let mut claim = |position: usize, vm: &fleetwire_types::VmRecord| {
            match controller.table.claim_vm_id(&node_id, vm.vm_id.as_str()) {
                Ok(()) => true,
                // Held by a placement in flight: the placement records it on its node.
                Err(owner) if owner.is_empty() => false,
                Err(owner) => {
                    let index = heartbeat_entries::original_index(position, &rejected);
                    foreign.push(heartbeat_entries::placed_elsewhere(
                        index, &vm.vm_id, &owner,
                    ));
                    false
                }
            }
        };
        let mut outcome = nodes::apply_heartbeat(
            &mut state,
            heartbeat,
            now,
            received,
            &controller.settings,
            &mut claim,
        );
        if !foreign.is_empty() {
            controller.metrics.foreign_vm_entries(foreign.len());
            tracing::warn!(
                node_id = node_id.as_str(),
                set_aside = foreign.len(),
                first = foreign[0].vm_id.as_deref().map_or("", |id| id.as_str()),
                "heartbeat lists VMs the controller records on other nodes: set aside"
            );
            rejected.append(&mut foreign);
            rejected.sort_by_key(|entry| entry.index);
        }
        outcome.record_changed |= nodes::set_rejected_vms(&mut state, rejected);
        if !outcome.removed_vm_ids.is_empty() {
            controller.table.index_vms(
                &node_id,
                outcome.removed_vm_ids.iter().map(String::as_str),
                [],
            );
        }
        // An enrolling heartbeat is committed by id, as a registration is; any other is
        // written behind, as a full row only when more than its contact time changed.
        let when = match (new, outcome.record_changed) {
            (true, _) => WhenStored::BeforeAnswer,
            (false, true) => WhenStored::WriteBehind(Change::Row),
            (false, false) => WhenStored::WriteBehind(Change::Contact),
        };
        // By its slot and id, so the store writer needs neither a lookup nor the node's own
        // copy of its id.
        let node = DirtyNode::Slot(slot.clone(), node_id);
        let change = controller.node_changed(node, &mut state, when);
        phases.apply.observe(locked.elapsed().as_secs_f64());
        (outcome, change)
    };
    controller.metrics.heartbeat();
    outcome.enrolled = new;
    if new
        || outcome.previous_status.is_some()
        || outcome.restart.is_some()
        || !outcome.pruned.is_empty()
        || outcome.disk_cordon.is_some()
        || outcome.stall_cordon.is_some()
    {
        outcome.log(change.node_id());
    }
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::config::settings::Settings;
    use crate::controller::shared::Credentials;
    use crate::controller::test_support::{heartbeat, stored};
    use crate::store::sqlite::SqliteStore;
    use std::time::Duration;

    /// `ram_available_mb` of the stored records (8192 minus the heartbeat's `ram_used_mb`).
    fn stored_ram_available(path: &std::path::Path) -> Vec<serde_json::Value> {
        stored(path, "ram_available_mb")
    }

    #[tokio::test]
    async fn heartbeats_are_answered_after_their_write_when_enrolling_or_when_the_store_is_behind()
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite3");
        let settings = Settings {
            flush_interval: Duration::from_millis(600),
            ..Settings::for_tests()
        };
        let started = Controller::start(
            settings,
            Box::new(SqliteStore::open(&path).unwrap()),
            None,
            Credentials::none(),
        )
        .unwrap();
        let controller = started.controller;

        // Enrolling: committed before the answer.
        take_heartbeat(&controller, heartbeat("n1", 1000))
            .await
            .unwrap();
        assert_eq!(stored_ram_available(&path), [7192]);

        // A changed record with room in the queue: written behind, not yet stored.
        take_heartbeat(&controller, heartbeat("n1", 2000))
            .await
            .unwrap();
        assert_eq!(stored_ram_available(&path), [7192]);
        controller.flushed().await.unwrap();
        assert_eq!(stored_ram_available(&path), [6192]);

        // A store so slow that one row fills the 300 ms budget: the answer waits for it.
        controller
            .writer
            .assume_costs(Duration::from_secs(1), Duration::from_secs(1));
        take_heartbeat(&controller, heartbeat("n1", 3000))
            .await
            .unwrap();
        assert_eq!(stored_ram_available(&path), [5192]);
        started.writer.shutdown().await;
    }
}
