//! `POST /v1/vms` and `DELETE /v1/vms/{vm_id}`: choosing a node the PPN way, holding its
//! capacity while the node's agent starts the VM, and recording the result durably.
//!
//! A node qualifies when it is ready, its runtime runs the VM's workload (an image needs
//! smolvm, a command without an image needs process: `workload::runtime_runs`), neither cordoned nor disk-cordoned, has
//! `ram_available_mb >= ram_mb + 512` (PPN's rule, counting placements in flight), has room
//! on its disk ledger, and, for a VM restored from a checkpoint, runs the capturing engine's
//! version or newer. The most available memory wins; `prefer_kvm` tries KVM nodes first;
//! reserved nodes only when nothing else qualifies. The check and the reservation happen
//! together under the node's lock, so concurrent placements never overbook a node.

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::Instant;

use fleetwire_types::{CreateVmRequest, HostState, Timestamp, Violation, VmId, VmRecord};

use crate::controller::agent_client::{AgentCallError, AgentEndpoint};
use crate::controller::rules::ledger;
use crate::controller::rules::nodes;
use crate::controller::shared::Controller;
use crate::controller::table::node_state::{DeletedVm, NodeSlot, NodeState, VmEntry, WhenStored};
use crate::controller::table::node_table::DirtyNode;
use crate::store::error::StoreError;
use crate::workload::{runtime_runs, Workload, WrongRuntime};

/// What the request asks a node's runtime to run.
fn workload_of(request: &CreateVmRequest) -> Workload {
    Workload {
        image: request.image.is_some(),
        command: request.command.is_some(),
        machine: request.boot.is_some() || request.disk_image.is_some(),
    }
}

/// Memory PPN keeps free on a node beyond the VM's own.
pub const RAM_HEADROOM_MB: u64 = 512;

/// Why a VM was not placed or not deleted.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// What the schema cannot say about the request (an image needs the network).
    #[error("not a valid CreateVmRequest: {}", .0.message)]
    InvalidRequest(Violation),
    /// Valid by the schema, but against a rule it cannot state: a checkpoint's engine version
    /// that passes the schema's pattern but is no SemVer version the placement can compare
    /// (`workload::checkpoint_engine_version`), or more than one boot source
    /// (`workload::one_boot_source`). Answered 422, as the API document says.
    #[error("not a usable CreateVmRequest at {}: {}", .0.instance_path.as_str(), .0.message)]
    Unusable(Violation),
    /// The requested VM id is taken, or held by a placement in flight.
    #[error("a VM with id {:?} already exists", .0.as_str())]
    VmIdTaken(VmId),
    /// The node the request prefers cannot take the VM.
    #[error("preferred node {node_id:?} cannot take the VM: {why}")]
    PreferredNodeUnsuitable { node_id: String, why: Unsuitable },
    /// No node can take the VM.
    #[error("{0}")]
    NoCapacity(NoCapacity),
    /// The chosen node's agent found the request unusable there (422: a process VM without a
    /// command on a node without a default one).
    #[error("node {node_id:?} cannot run the VM: {error}")]
    RefusedByNode {
        node_id: String,
        error: AgentCallError,
    },
    /// The chosen node's agent did not start the VM.
    #[error("node {node_id:?} failed to start the VM: {error}")]
    SpawnFailed {
        node_id: String,
        error: AgentCallError,
    },
    /// The node was unenrolled while its agent started the VM.
    #[error("node {node_id:?} was unenrolled while it started VM {:?}", .vm_id.as_str())]
    Unenrolled { node_id: String, vm_id: VmId },
    /// No VM has the id.
    #[error("no VM with id {0:?}")]
    NoSuchVm(String),
    /// The owning node's agent did not delete the VM.
    #[error("node {node_id:?} failed to delete the VM: {error}")]
    DeleteFailed {
        node_id: String,
        error: AgentCallError,
    },
    /// The placement or deletion could not be committed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What no node has room for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoCapacity {
    pub ram_mb: u64,
    pub disk_gb: u64,
    /// The VM is restored from a checkpoint (which needs its engine version or newer).
    pub checkpoint: bool,
    pub workload: Workload,
    /// The nodes passed over because they drain or are cordoned, by id: what an operator
    /// changed, said so that "no room" is not taken for a full fleet.
    pub draining: Vec<String>,
    pub cordoned: Vec<String>,
}

impl std::fmt::Display for NoCapacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no ready node has room for {} MB of memory (plus {RAM_HEADROOM_MB} MB headroom) and {} GB of disk",
            self.ram_mb, self.disk_gb
        )?;
        if self.checkpoint {
            f.write_str(" at the checkpoint's engine version or newer")?;
        }
        if self.workload.image || self.workload.command || self.workload.machine {
            write!(f, " with a runtime that runs {}", self.workload)?;
        }
        for (nodes, what) in [(&self.draining, "draining"), (&self.cordoned, "cordoned")] {
            match nodes.as_slice() {
                [] => {}
                [one] => write!(f, "; node {one} is {what}")?,
                many => write!(f, "; nodes {} are {what}", many.join(", "))?,
            }
        }
        Ok(())
    }
}

/// Why a node cannot take the VM.
#[derive(Debug, Clone, PartialEq)]
pub enum Unsuitable {
    /// No node has the id.
    NoSuchNode,
    NotReady(HostState),
    Cordoned,
    DiskCordoned,
    Memory {
        available_mb: u64,
        needed_mb: u64,
    },
    Ledger(ledger::LedgerFull),
    Engine {
        node: Option<String>,
        needed: String,
    },
    /// Its runtime cannot run the VM's workload.
    Runtime(WrongRuntime),
}

impl std::fmt::Display for Unsuitable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsuitable::NoSuchNode => f.write_str("no node has this id"),
            Unsuitable::NotReady(status) => write!(f, "it is {status}, not ready"),
            Unsuitable::Cordoned => f.write_str("it is cordoned"),
            Unsuitable::DiskCordoned => f.write_str("it is cordoned for disk pressure"),
            Unsuitable::Memory {
                available_mb,
                needed_mb,
            } => write!(
                f,
                "it has {available_mb} MB of memory available, {needed_mb} MB needed"
            ),
            Unsuitable::Ledger(full) => full.fmt(f),
            Unsuitable::Runtime(why) => why.fmt(f),
            Unsuitable::Engine { node, needed } => match node {
                Some(version) => write!(
                    f,
                    "its engine is {version}, the checkpoint needs {needed} or newer"
                ),
                None => write!(
                    f,
                    "its engine version is unknown, the checkpoint needs {needed} or newer"
                ),
            },
        }
    }
}

/// Whether the node can take `request` now, counting placements in flight.
pub fn check(state: &NodeState, request: &CreateVmRequest, ratio: f64) -> Result<(), Unsuitable> {
    let record = &state.record;
    if record.status != HostState::Ready {
        return Err(Unsuitable::NotReady(record.status));
    }
    if record.cordoned_at.is_some() {
        return Err(Unsuitable::Cordoned);
    }
    if record.disk_cordoned_at.is_some() {
        return Err(Unsuitable::DiskCordoned);
    }
    runtime_runs(crate::runtimes::of(&record.runtime), workload_of(request))
        .map_err(Unsuitable::Runtime)?;
    let available_mb = record.ram_available_mb.saturating_sub(state.pending.ram_mb);
    let needed_mb = request.ram_mb.get().saturating_add(RAM_HEADROOM_MB);
    if available_mb < needed_mb {
        return Err(Unsuitable::Memory {
            available_mb,
            needed_mb,
        });
    }
    ledger::admits(state, request.disk_gb.get(), ratio).map_err(Unsuitable::Ledger)?;
    if let Some(checkpoint) = &request.restore_checkpoint {
        // `create_vm` refused a version that does not parse; none reaches here.
        let Ok(needed) = semver::Version::parse(&checkpoint.engine_version) else {
            return Err(Unsuitable::Engine {
                node: record.engine_version.as_ref().map(|v| v.to_string()),
                needed: checkpoint.engine_version.to_string(),
            });
        };
        let node = record
            .engine_version
            .as_ref()
            .and_then(|v| semver::Version::parse(v).ok());
        if node.as_ref().is_none_or(|v| *v < needed) {
            return Err(Unsuitable::Engine {
                node: record.engine_version.as_ref().map(|v| v.to_string()),
                needed: needed.to_string(),
            });
        }
    }
    Ok(())
}

/// Capacity held on a node while its agent starts the VM; given back when dropped (the
/// spawn failed, or the request was cancelled) unless the VM was recorded.
struct Hold {
    node_id: String,
    slot: NodeSlot,
    agent: AgentEndpoint,
    disk_gb: u64,
    ram_mb: u64,
    held: bool,
}

impl Hold {
    /// Gives the held capacity back; call with the node locked.
    fn settle(&mut self, state: &mut NodeState) {
        if std::mem::take(&mut self.held) {
            state.pending.disk_gb -= self.disk_gb;
            state.pending.ram_mb -= self.ram_mb;
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.held {
            let slot = self.slot.clone();
            self.settle(&mut slot.lock());
        }
    }
}

/// A VM id held by a placement in flight; released when dropped unless recorded on a node.
struct IdHold<'a> {
    controller: &'a Controller,
    vm_id: VmId,
}

impl Drop for IdHold<'_> {
    fn drop(&mut self) {
        self.controller.table.release_vm_id(&self.vm_id);
    }
}

fn unsuitable(node_id: &str, why: Unsuitable) -> PlacementError {
    PlacementError::PreferredNodeUnsuitable {
        node_id: node_id.to_string(),
        why,
    }
}

/// Checks and reserves in one step under the node's lock.
fn try_hold(
    node_id: &str,
    slot: &NodeSlot,
    request: &CreateVmRequest,
    ratio: f64,
) -> Result<Hold, Unsuitable> {
    let mut state = slot.lock();
    check(&state, request, ratio)?;
    let (disk_gb, ram_mb) = (request.disk_gb.get(), request.ram_mb.get());
    state.pending.disk_gb += disk_gb;
    state.pending.ram_mb += ram_mb;
    Ok(Hold {
        node_id: node_id.to_string(),
        slot: slot.clone(),
        agent: AgentEndpoint {
            ip: state.record.wg_ip.0,
            port: state.record.spawn_port.0.get(),
        },
        disk_gb,
        ram_mb,
        held: true,
    })
}

/// Chooses a node and holds the VM's capacity on it.
/// `full` names nodes whose agent refused the VM for want of room (host ports, a stalled
/// runtime): passed over as if they had none.
fn admit(
    controller: &Controller,
    request: &CreateVmRequest,
    full: &[String],
) -> Result<Hold, PlacementError> {
    let ratio = controller.settings.disk_overcommit_ratio;
    if let Some(preferred) = &request.preferred_node {
        let slot = controller
            .table
            .get(preferred)
            .ok_or_else(|| unsuitable(preferred, Unsuitable::NoSuchNode))?;
        return try_hold(preferred, &slot, request, ratio)
            .map_err(|why| unsuitable(preferred, why));
    }
    // Rank every qualifying node, then hold on the best one that still qualifies when locked
    // (another placement may have taken the room in between).
    let mut ranked = Vec::new();
    controller.table.for_each(|node_id, state| {
        if check(state, request, ratio).is_ok() && !full.iter().any(|f| f == node_id) {
            let record = &state.record;
            let kvm_last = request.prefer_kvm && !record.kvm_available;
            let free = record.ram_available_mb.saturating_sub(state.pending.ram_mb);
            ranked.push((
                (record.reserved, kvm_last, Reverse(free)),
                node_id.to_string(),
            ));
        }
    });
    ranked.sort();
    for (_, node_id) in ranked {
        if let Some(slot) = controller.table.get(&node_id) {
            if let Ok(hold) = try_hold(&node_id, &slot, request, ratio) {
                return Ok(hold);
            }
        }
    }
    let (mut draining, mut cordoned) = (Vec::new(), Vec::new());
    controller.table.for_each(|node_id, state| {
        if state.record.status == HostState::Draining {
            draining.push(node_id.to_string());
        } else if state.record.cordoned_at.is_some() {
            cordoned.push(node_id.to_string());
        }
    });
    draining.sort();
    cordoned.sort();
    Err(PlacementError::NoCapacity(NoCapacity {
        ram_mb: request.ram_mb.get(),
        disk_gb: request.disk_gb.get(),
        checkpoint: request.restore_checkpoint.is_some(),
        workload: workload_of(request),
        draining,
        cordoned,
    }))
}

/// `POST /v1/vms`.
pub async fn create_vm(
    controller: &Arc<Controller>,
    mut request: CreateVmRequest,
) -> Result<VmRecord, PlacementError> {
    // What the schema cannot say: an image is pulled from its registry (`workload`).
    if let Some(v) = crate::workload::image_network(
        "",
        request.image.as_ref().map(|i| i.as_str()),
        request.network,
    ) {
        return Err(PlacementError::InvalidRequest(v));
    }
    if let Some(v) = crate::workload::one_boot_source(
        "",
        request.image.is_some(),
        request.boot.is_some(),
        request.disk_image.is_some().then_some("disk_image"),
    ) {
        return Err(PlacementError::Unusable(v));
    }
    if let Some(checkpoint) = &request.restore_checkpoint {
        if let Some(v) = crate::workload::checkpoint_engine_version(
            "/restore_checkpoint",
            &checkpoint.engine_version,
        ) {
            return Err(PlacementError::Unusable(v));
        }
    }
    let vm_id = request.vm_id.clone().unwrap_or_else(crate::ids::new_vm_id);
    request.vm_id = Some(vm_id.clone());
    if !controller.table.hold_vm_id(&vm_id) {
        return Err(PlacementError::VmIdTaken(vm_id));
    }
    let _id = IdHold { controller, vm_id };
    place(controller, request).await
}

async fn place(
    controller: &Arc<Controller>,
    request: CreateVmRequest,
) -> Result<VmRecord, PlacementError> {
    let accepted_at = Timestamp::now();
    // A store that cannot write (a full disk) could not record the VM: refused before a node
    // starts one that nobody would know of (docs/controller.md, "Durability").
    if let Some(error) = controller.writer.failing() {
        return Err(PlacementError::Store(error));
    }
    let mut full: Vec<String> = Vec::new();
    let (mut hold, mut vm) = loop {
        let hold = admit(controller, &request, &full)?;
        match controller
            .agents
            .spawn(&hold.node_id, hold.agent, &request)
            .await
        {
            Ok(vm) => break (hold, vm),
            // The agent has no room the controller cannot see (a qemu node's host ports):
            // that node counts as full, and the next one is tried.
            Err(AgentCallError::Refused { status, .. })
                if status == reqwest::StatusCode::SERVICE_UNAVAILABLE
                    && request.preferred_node.is_none() =>
            {
                tracing::info!(node_id = hold.node_id, "the node has no room for the VM");
                full.push(hold.node_id.clone());
            }
            Err(
                error @ AgentCallError::Refused {
                    status: reqwest::StatusCode::UNPROCESSABLE_ENTITY,
                    ..
                },
            ) => {
                tracing::info!(node_id = hold.node_id, %error, "the node cannot run the VM");
                return Err(PlacementError::RefusedByNode {
                    node_id: hold.node_id.clone(),
                    error,
                });
            }
            Err(error) => {
                tracing::warn!(node_id = hold.node_id, %error, "spawn failed");
                return Err(PlacementError::SpawnFailed {
                    node_id: hold.node_id.clone(),
                    error,
                });
            }
        }
    };
    // The controller's copy: the agent's answer plus what the controller decided.
    vm.tenant_id = request.tenant_id.clone();
    vm.node_id = Some(
        hold.node_id
            .parse()
            .expect("a node id from the table is valid"),
    );
    vm.disk_gb = Some(hold.disk_gb);
    vm.created_at = Some(accepted_at);
    if vm.restore_checkpoint.is_none() {
        vm.restore_checkpoint = request.restore_checkpoint.clone();
    }
    if vm.command.is_none() {
        vm.command = request.command.clone();
    }
    if vm.image.is_none() {
        vm.image = request.image.clone();
    }
    if vm.state == fleetwire_types::VmState::Error {
        // Recorded all the same: the node keeps retrying per its restart policy, and the
        // record (its message included) is the caller's answer and what GET /v1/vms shows
        // until the operator deletes it (`docs/controller.md`).
        tracing::warn!(
            vm_id = vm.vm_id.as_str(),
            node_id = hold.node_id,
            message = vm.message.as_ref().map_or("", |m| m.as_str()),
            "the node could not start the VM"
        );
    }
    let change = {
        let slot = hold.slot.clone();
        let mut state = slot.lock();
        hold.settle(&mut state);
        let still_enrolled = controller
            .table
            .get(&hold.node_id)
            .is_some_and(|current| Arc::ptr_eq(&current, &hold.slot));
        if !still_enrolled {
            return Err(PlacementError::Unenrolled {
                node_id: hold.node_id.clone(),
                vm_id: vm.vm_id.clone(),
            });
        }
        state.record.reserved_disk_gb = state.record.reserved_disk_gb.saturating_add(hold.disk_gb);
        // Until the next heartbeat says otherwise, the VM's memory is taken.
        state.record.ram_available_mb = state.record.ram_available_mb.saturating_sub(hold.ram_mb);
        let entry = VmEntry {
            record: vm.clone(),
            placed: true,
        };
        match state
            .vms_mut()
            .iter_mut()
            .find(|e| e.record.vm_id == vm.vm_id)
        {
            Some(existing) => *existing = entry,
            None => state.vms_mut().push(entry),
        }
        state.record.vm_count = u32::try_from(state.vms().len()).unwrap_or(u32::MAX);
        nodes::recompute_allocations(&mut state);
        controller
            .table
            .index_vms(&hold.node_id, [], [vm.vm_id.as_str()]);
        let node = DirtyNode::Id(hold.node_id.clone());
        controller.node_changed(node, &mut state, WhenStored::BeforeAnswer)
    };
    change.stored().await?;
    tracing::info!(
        vm_id = vm.vm_id.as_str(),
        node_id = hold.node_id,
        disk_gb = hold.disk_gb,
        "VM placed"
    );
    Ok(vm)
}

/// The node that has `vm_id`: its id, its slot and its agent's address.
pub fn owner(controller: &Controller, vm_id: &str) -> Option<(String, NodeSlot, AgentEndpoint)> {
    let node_id = controller.table.vm_node(vm_id).filter(|n| !n.is_empty())?;
    let slot = controller.table.get(&node_id)?;
    let agent = {
        let state = slot.lock();
        state.vm(vm_id)?;
        AgentEndpoint {
            ip: state.record.wg_ip.0,
            port: state.record.spawn_port.0.get(),
        }
    };
    Some((node_id, slot, agent))
}

/// `DELETE /v1/vms/{vm_id}`: the owning agent deletes the VM, then the controller forgets it
/// and releases its disk reservation.
pub async fn delete_vm(controller: &Arc<Controller>, vm_id: &str) -> Result<(), PlacementError> {
    let (node_id, slot, agent) =
        owner(controller, vm_id).ok_or_else(|| PlacementError::NoSuchVm(vm_id.to_string()))?;
    controller
        .agents
        .delete(&node_id, agent, vm_id)
        .await
        .map_err(|error| PlacementError::DeleteFailed {
            node_id: node_id.clone(),
            error,
        })?;
    let change = {
        let mut state = slot.lock();
        // The agent has deleted it: a heartbeat it built before must not bring it back.
        state.deleted_vms.push(DeletedVm {
            vm_id: vm_id.into(),
            at: Instant::now(),
        });
        let Some(position) = state
            .vms()
            .iter()
            .position(|e| e.record.vm_id.as_str() == vm_id)
        else {
            // Deleted concurrently (another DELETE, or a heartbeat that no longer lists it).
            return Ok(());
        };
        let entry = state.vms_mut().remove(position);
        if let Some(disk_gb) = entry.record.disk_gb {
            state.record.reserved_disk_gb = state.record.reserved_disk_gb.saturating_sub(disk_gb);
        }
        state.record.vm_count = u32::try_from(state.vms().len()).unwrap_or(u32::MAX);
        nodes::recompute_allocations(&mut state);
        controller.table.index_vms(&node_id, [vm_id], []);
        let node = DirtyNode::Id(node_id.clone());
        controller.node_changed(node, &mut state, WhenStored::BeforeAnswer)
    };
    change.stored().await?;
    tracing::info!(vm_id, node_id, "VM deleted");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::table::node_state::NodeFlags;

    fn node(runtime: &str) -> NodeState {
        let text = include_str!("../../../../schemas/examples/NodeRecord/valid/full.json");
        let mut record: fleetwire_types::NodeRecord =
            fleetwire_types::read_strict(text.as_bytes()).expect("the fixture is a NodeRecord");
        record.status = HostState::Ready;
        record.cordoned_at = None;
        record.disk_cordoned_at = None;
        record.ram_available_mb = 1 << 20;
        record.reserved_disk_gb = 0;
        record.runtime = runtime.parse().unwrap();
        NodeState::new(record, Vec::new(), NodeFlags::default())
    }

    fn request(extra: serde_json::Value) -> CreateVmRequest {
        let mut body =
            serde_json::json!({"vm_type": "t", "ram_mb": 64, "vcpu_count": 1, "disk_gb": 1});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        fleetwire_types::read_value_strict(&body).unwrap()
    }

    #[test]
    fn only_a_runtime_that_runs_the_workload_qualifies() {
        let (smolvm, process) = (node("smolvm"), node("process"));
        let image = request(serde_json::json!({"image": "alpine:3.20", "network": true}));
        let command = request(serde_json::json!({"command": ["/bin/true"]}));
        let both = request(
            serde_json::json!({"image": "alpine:3.20", "network": true, "command": ["/bin/true"]}),
        );
        let neither = request(serde_json::json!({}));
        assert_eq!(check(&smolvm, &image, 1.0), Ok(()));
        assert_eq!(check(&smolvm, &both, 1.0), Ok(()));
        assert!(matches!(
            check(&smolvm, &command, 1.0),
            Err(Unsuitable::Runtime(_))
        ));
        assert_eq!(check(&process, &command, 1.0), Ok(()));
        assert!(matches!(
            check(&process, &image, 1.0),
            Err(Unsuitable::Runtime(_))
        ));
        assert!(matches!(
            check(&process, &both, 1.0),
            Err(Unsuitable::Runtime(_))
        ));
        assert_eq!(check(&smolvm, &neither, 1.0), Ok(()));
        assert_eq!(check(&process, &neither, 1.0), Ok(()));

        let qemu = node("qemu");
        let kernel = request(serde_json::json!({"boot": {"kernel": "vmlinuz"}}));
        let disk = request(serde_json::json!({"disk_image": "debian-12.qcow2"}));
        for machine in [&kernel, &disk] {
            assert_eq!(check(&qemu, machine, 1.0), Ok(()));
            for other in [&smolvm, &process] {
                assert!(matches!(
                    check(other, machine, 1.0),
                    Err(Unsuitable::Runtime(_))
                ));
            }
        }
        for not_qemu in [&image, &command, &both] {
            assert!(matches!(
                check(&qemu, not_qemu, 1.0),
                Err(Unsuitable::Runtime(_))
            ));
        }
        // A PPN spawn names nothing: the qemu node boots its base image.
        assert_eq!(check(&qemu, &neither, 1.0), Ok(()));
    }
}
