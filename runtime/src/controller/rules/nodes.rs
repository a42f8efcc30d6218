//! The node lifecycle rules: what a registration and a heartbeat do to a node's state, its
//! status, the boot-id pruning, the disk-pressure cordon (with hysteresis), the runtime-stall
//! self-cordon, and the operator's cordon and drain. Pure functions of the node state and the
//! controller's clock: the callers hold the node's lock and do the I/O afterwards.

use std::time::{Duration, Instant};

use fleetwire_types::{
    BootId, BoundedVec, HostState, NodeHeartbeat, NodeId, NodeRecord, RegisterNodeRequest,
    RejectedVm, StateMessage, Timestamp, VmRecord,
};

use crate::controller::config::settings::Settings;
use crate::controller::table::node_state::{CordonSource, NodeFlags, NodeState, VmEntry};

/// The status a node has at `now`: silent longer than `stale_after` (by the controller's
/// receive time) → unreachable; otherwise draining, registering (no heartbeat yet) or ready.
pub fn status(
    flags: &NodeFlags,
    last_seen: Option<Instant>,
    now: Instant,
    stale_after: Duration,
) -> HostState {
    let alive = last_seen.is_some_and(|seen| now.saturating_duration_since(seen) <= stale_after);
    if !alive {
        HostState::Unreachable
    } else if flags.draining {
        HostState::Draining
    } else if !flags.heartbeated {
        HostState::Registering
    } else {
        HostState::Ready
    }
}

/// The start-up grace (docs/controller.md, "Statuses after a restart"): a node loaded from
/// the store counts as heard from at `started` — so it is not judged stale before
/// `started + stale_after` merely because the controller was down — unless it was stale
/// already when the controller last heard from the fleet: its stored contact is more than
/// `stale_after` older than `newest`, the latest contact the store holds of any node (the
/// nearest thing the store knows to the moment the previous controller stopped).
pub fn loaded_last_seen(
    last_heartbeat: Timestamp,
    newest: Timestamp,
    started: Instant,
    stale_after: Duration,
) -> Option<Instant> {
    let behind = (newest.utc() - last_heartbeat.utc())
        .to_std()
        .unwrap_or_default();
    (behind <= stale_after).then_some(started)
}

/// Re-derives `record.status` (and posts it with the last contact to the liveness board);
/// the previous status when it changed.
pub fn refresh_status(
    state: &mut NodeState,
    now: Instant,
    stale_after: Duration,
) -> Option<HostState> {
    let status = status(&state.flags, state.last_seen, now, stale_after);
    let previous = std::mem::replace(&mut state.record.status, status);
    state.post_liveness();
    (previous != status).then_some(previous)
}

/// `engine_version_problem` of a smolvm node that declared no `smolvm_address` (a PPN agent,
/// or an agent whose runtime the controller cannot reach).
pub fn no_runtime_address() -> fleetwire_types::StateMessage {
    fleetwire_types::StateMessage::truncated(
        "the node reported no smolvm_address, so the controller cannot probe its runtime's GET /health for the engine version",
    )
}

/// A record for a node the controller has never seen, with only what every node has.
fn blank_record(
    node_id: NodeId,
    hostname: fleetwire_types::Hostname,
    wg_ip: fleetwire_types::Ipv4Address,
    received: Timestamp,
) -> NodeRecord {
    NodeRecord {
        addresses: Vec::new(),
        agent_version: None,
        available_cpus: None,
        available_disk_gb: None,
        available_memory_mb: None,
        boot_id: None,
        cert_not_after: None,
        cert_serial: None,
        cordon_reason: None,
        cordoned_at: None,
        cpu_usage: None,
        disk_cordoned_at: None,
        disk_usage_gb: None,
        engine_version: None,
        // A node first seen by its heartbeat is a PPN host agent, which runs QEMU
        // (service-vm-host): no smolvm to probe. A registration sets the runtime it declares.
        engine_version_problem: None,
        host_boot_id: None,
        hostname,
        kvm_available: false,
        last_heartbeat: received,
        memory_usage_mb: None,
        node_id,
        ram_available_mb: 0,
        registered_at: Some(received),
        rejected_vms: None,
        reserved: false,
        reserved_disk_gb: 0,
        runtime: crate::runtimes::wire_name(crate::runtimes::Runtime::Qemu),
        smolvm_address: None,
        spawn_port: fleetwire_types::HostPort(std::num::NonZeroU16::new(9204).expect("nonzero")),
        status: HostState::Registering,
        total_cpus: None,
        total_disk_gb: None,
        total_memory_mb: None,
        vm_count: 0,
        wg_ip,
    }
}

/// What a heartbeat changed, for logs, the VM index and the caller.
#[derive(Debug, Default)]
pub struct HeartbeatOutcome {
    pub enrolled: bool,
    /// The status before, when the heartbeat changed it.
    pub previous_status: Option<HostState>,
    /// Why VMs were pruned: the runtime or the host restarted.
    pub restart: Option<&'static str>,
    /// Placed VMs dropped because the node no longer reports them.
    pub pruned: Vec<String>,
    /// `Some(true)` when the disk cordon was set, `Some(false)` when cleared.
    pub disk_cordon: Option<bool>,
    /// `Some(true)` when the runtime-stall cordon was set, `Some(false)` when cleared.
    pub stall_cordon: Option<bool>,
    /// VM ids the node no longer has, for the VM index (ids it newly has were recorded
    /// there when `claim` took them).
    pub removed_vm_ids: Vec<String>,
    /// Whether the record or flags changed in more than `last_heartbeat` (the VM list is
    /// tracked on its own).
    pub record_changed: bool,
}

impl HeartbeatOutcome {
    pub fn log(&self, node_id: &str) {
        if self.enrolled {
            tracing::info!(node_id, "node enrolled by its first heartbeat");
        }
        if let Some(previous) = self.previous_status {
            tracing::info!(node_id, from = %previous, "node heartbeating again");
        }
        if let Some(reason) = self.restart {
            tracing::warn!(node_id, reason, pruned = ?self.pruned, "restart detected; pruned VM records the node no longer reports");
        } else if !self.pruned.is_empty() {
            tracing::info!(node_id, pruned = ?self.pruned, "placed VMs no longer reported by the node were dropped");
        }
        match self.disk_cordon {
            Some(true) => {
                tracing::warn!(node_id, "disk pressure: node cordoned for new placements")
            }
            Some(false) => tracing::info!(node_id, "disk recovered: disk cordon cleared"),
            None => {}
        }
        match self.stall_cordon {
            Some(true) => tracing::warn!(node_id, "runtime stalled: node self-cordoned"),
            Some(false) => tracing::info!(node_id, "runtime answering again: self-cordon cleared"),
            None => {}
        }
    }
}

/// Replaces the node record's `rejected_vms` with the entries the last heartbeat had set
/// aside (`crate::controller::rules::heartbeat_entries`), at most the schema's 64; whether the record changed.
/// A heartbeat with nothing set aside after one without costs one comparison.
pub fn set_rejected_vms(state: &mut NodeState, mut rejected: Vec<RejectedVm>) -> bool {
    if rejected.is_empty() && state.record.rejected_vms.is_none() {
        return false;
    }
    rejected.truncate(crate::controller::rules::heartbeat_entries::MAX_KEPT);
    let rejected = (!rejected.is_empty())
        .then(|| BoundedVec::new(rejected).expect("truncated to the schema's maxItems"));
    replace_if_changed(&mut state.record.rejected_vms, rejected)
}

/// A node enrolled by its first heartbeat (as PPN agents enroll).
pub fn enroll_by_heartbeat(heartbeat: &NodeHeartbeat, received: Timestamp) -> NodeState {
    let record = blank_record(
        heartbeat.node_id.clone(),
        heartbeat.hostname.clone(),
        heartbeat.wg_ip.clone(),
        received,
    );
    NodeState::new(record, Vec::new(), NodeFlags::default())
}

/// Applies a heartbeat received at `now` (`received` on the wall clock). The node's reported
/// figures and VM list are replaced; liveness is the receive time, never `timestamp_utc`;
/// `engine_version` is not something a node can set (the heartbeat type has no such field,
/// so a node-sent value is dropped at parse). `claim` is asked about each reported VM the
/// node did not have (with its position in the heartbeat's `vms`) and says whether the node
/// may have it; a VM it refuses is left out (see `NodeTable::claim_vm_id`).
pub fn apply_heartbeat(
    state: &mut NodeState,
    heartbeat: NodeHeartbeat,
    now: Instant,
    received: Timestamp,
    settings: &Settings,
    claim: &mut dyn FnMut(usize, &VmRecord) -> bool,
) -> HeartbeatOutcome {
    let mut outcome = HeartbeatOutcome::default();
    // Whether the record changes (beyond its contact time) is tracked field by field as the
    // heartbeat is applied: comparing it with a copy taken first would read, copy and free
    // every string of the record, most of which a heartbeat never touches and which at
    // 100,000 nodes are no longer in cache. Debug builds (the tests) check the tracking
    // against such a copy.
    #[cfg(debug_assertions)]
    let record_before = state.record.clone();
    let flags_before = state.flags.clone();
    let NodeHeartbeat {
        agent_version,
        boot_id: host_boot_id,
        cpu_cores: _,
        cpu_load_pct: _,
        cpu_usage,
        disk_free_gb,
        disk_total_gb,
        disk_usage_gb,
        hostname,
        kvm_available,
        memory_usage_mb,
        node_id,
        ram_total_mb,
        ram_used_mb,
        reserved,
        runtime_boot_id,
        runtime_capacity,
        runtime_stalled,
        spawn_port,
        timestamp_utc: _,
        vms,
        wg_ip,
    } = heartbeat;

    // Restart detection: a new runtime boot id (its warm pool and machines are gone), or a
    // new host boot id (the machine rebooted).
    let runtime_boot_id = runtime_boot_id.or_else(|| {
        runtime_capacity
            .as_ref()
            .map(|c| c.boot_id.clone())
            .filter(|b| !b.is_empty())
    });
    let runtime_restarted = std::mem::take(&mut state.flags.runtime_restarted)
        || changed(&state.record.boot_id, &runtime_boot_id);
    let host_rebooted = changed(&state.record.host_boot_id, &Some(host_boot_id.clone()));
    if runtime_restarted {
        outcome.restart = Some("the runtime's boot id changed");
    } else if host_rebooted {
        outcome.restart = Some("the host's boot id changed");
    }

    let record = &mut state.record;
    let mut record_changed = false;
    record_changed |= replace_if_changed(&mut record.hostname, hostname);
    record_changed |= replace_if_changed(&mut record.wg_ip, wg_ip);
    record_changed |= replace_if_changed(
        &mut record.ram_available_mb,
        ram_total_mb.saturating_sub(ram_used_mb),
    );
    record_changed |= replace_if_changed(&mut record.kvm_available, kvm_available);
    record_changed |= replace_if_changed(&mut record.reserved, reserved);
    record.last_heartbeat = received;
    // PPN agents do not say: the controller's --default-spawn-port (docs/controller.md).
    record_changed |= replace_if_changed(
        &mut record.spawn_port,
        spawn_port.unwrap_or_else(|| settings.default_spawn_port.clone()),
    );
    record_changed |= replace_if_changed(&mut record.host_boot_id, Some(host_boot_id));
    if runtime_boot_id.is_some() {
        record_changed |= replace_if_changed(&mut record.boot_id, runtime_boot_id);
    }
    if agent_version.is_some() {
        record_changed |= replace_if_changed(&mut record.agent_version, agent_version);
    }
    if cpu_usage.is_some() {
        record_changed |= replace_if_changed(&mut record.cpu_usage, cpu_usage);
    }
    if memory_usage_mb.is_some() {
        record_changed |= replace_if_changed(&mut record.memory_usage_mb, memory_usage_mb);
    }
    if disk_usage_gb.is_some() {
        record_changed |= replace_if_changed(&mut record.disk_usage_gb, disk_usage_gb);
    }
    if disk_total_gb.is_some() {
        record_changed |= replace_if_changed(&mut record.total_disk_gb, disk_total_gb);
    }
    if let Some(free) = disk_free_gb {
        record_changed |= replace_if_changed(&mut record.available_disk_gb, Some(free));
        outcome.disk_cordon = disk_pressure(record, free, received, settings);
        record_changed |= outcome.disk_cordon.is_some();
    }
    outcome.stall_cordon = runtime_stall(state, runtime_stalled, received);
    record_changed |= outcome.stall_cordon.is_some();

    let restarted = outcome.restart.is_some();
    let allocations_before = (
        state.record.vm_count,
        state.record.available_cpus,
        state.record.available_memory_mb,
    );
    let (pruned, removed) = merge_reported_vms(
        state,
        vms,
        &node_id,
        &received,
        now,
        restarted,
        settings.stale_after,
        claim,
    );
    outcome.pruned = pruned;
    outcome.removed_vm_ids = removed;
    recompute_allocations(state);
    record_changed |= allocations_before
        != (
            state.record.vm_count,
            state.record.available_cpus,
            state.record.available_memory_mb,
        );

    state.flags.heartbeated = true;
    state.last_seen = Some(now);
    let before = state.record.status;
    if refresh_status(state, now, settings.stale_after).is_some() {
        record_changed = true;
        if before == HostState::Unreachable {
            outcome.previous_status = Some(before);
        }
    }
    #[cfg(debug_assertions)]
    assert_eq!(
        record_changed,
        NodeRecord {
            last_heartbeat: state.record.last_heartbeat,
            ..record_before
        } != state.record,
        "a change of the record is tracked exactly"
    );
    outcome.record_changed = record_changed || state.flags != flags_before;
    outcome
}

/// Sets `field` to `new` unless they are equal. The same value either way, but a heartbeat
/// repeats most of its strings, and keeping the stored one frees the just-parsed copy (in
/// cache) instead of one allocated a heartbeat ago: at 100,000 nodes that one has left the
/// cache, and freeing it and later handing its block out again cost a memory access each.
/// True when it changed.
fn replace_if_changed<T: PartialEq>(field: &mut T, new: T) -> bool {
    let changed = *field != new;
    if changed {
        *field = new;
    }
    changed
}

fn changed(old: &Option<BootId>, new: &Option<BootId>) -> bool {
    matches!((old, new), (Some(old), Some(new)) if old != new)
}

/// The disk-pressure cordon with hysteresis: set below `disk_cordon_below_gb`, cleared only
/// at `disk_uncordon_above_gb` or more, so a node hovering at the threshold does not flap.
fn disk_pressure(
    record: &mut NodeRecord,
    free_gb: u64,
    received: Timestamp,
    settings: &Settings,
) -> Option<bool> {
    match record.disk_cordoned_at {
        None if free_gb < settings.disk_cordon_below_gb => {
            record.disk_cordoned_at = Some(received);
            Some(true)
        }
        Some(_) if free_gb >= settings.disk_uncordon_above_gb => {
            record.disk_cordoned_at = None;
            Some(false)
        }
        _ => None,
    }
}

/// The agent's self-cordon while its runtime's `/capacity` answers 503. An operator's cordon
/// is never cleared by it.
fn runtime_stall(state: &mut NodeState, stalled: bool, received: Timestamp) -> Option<bool> {
    match (stalled, state.flags.cordon) {
        (true, None) => {
            state.flags.cordon = Some(CordonSource::RuntimeStalled);
            state.record.cordoned_at = Some(received);
            state.record.cordon_reason = Some(
                StateMessage::try_from("runtime stalled: its GET /capacity answered 503")
                    .expect("a short message"),
            );
            Some(true)
        }
        (false, Some(CordonSource::RuntimeStalled)) => {
            state.flags.cordon = None;
            state.record.cordoned_at = None;
            state.record.cordon_reason = None;
            Some(false)
        }
        _ => None,
    }
}

/// Replaces the node's VM list with the reported one. Placed VMs keep what the controller
/// knows that an agent may omit (tenant, disk reservation, creation time, checkpoint,
/// command). A placed VM the report leaves out is kept for `grace` after its creation, since
/// a heartbeat built before the spawn may arrive after it, except after a restart: then it is
/// gone and pruned at once. Symmetrically, a VM deleted through the API within `grace` is not
/// taken back from a report that still lists it (a heartbeat built before the delete); the
/// first report that leaves it out ends that. A reported VM the node did not have is taken
/// only when `claim` allows it. Returns the pruned ids and the ids the node no longer has.
#[allow(clippy::too_many_arguments)]
fn merge_reported_vms(
    state: &mut NodeState,
    reported: Vec<VmRecord>,
    node_id: &NodeId,
    received: &Timestamp,
    now: Instant,
    restarted: bool,
    grace: Duration,
    claim: &mut dyn FnMut(usize, &VmRecord) -> bool,
) -> (Vec<String>, Vec<String>) {
    // Empty but for the moments after a delete: a steady heartbeat pays for nothing here.
    let mut deleted = std::mem::take(&mut state.deleted_vms);
    deleted.retain(|d| now.saturating_duration_since(d.at) < grace);
    let mut still_listed = vec![false; deleted.len()];
    let old = state.vms();
    let mut seen = vec![false; old.len()];
    let mut vms = Vec::with_capacity(reported.len());
    for (position, mut vm) in reported.into_iter().enumerate() {
        let placed = match old.iter().position(|e| e.record.vm_id == vm.vm_id) {
            Some(index) => {
                seen[index] = true;
                let previous = &old[index];
                if previous.placed {
                    keep_controller_fields(&mut vm, &previous.record);
                }
                previous.placed
            }
            None => {
                if let Some(at) = deleted.iter().position(|d| d.vm_id == vm.vm_id.as_str()) {
                    still_listed[at] = true;
                    continue;
                }
                if !claim(position, &vm) {
                    continue;
                }
                false
            }
        };
        if vm.node_id.as_ref() != Some(node_id) {
            vm.node_id = Some(node_id.clone());
        }
        vms.push(VmEntry { record: vm, placed });
    }
    let mut removed = Vec::new();
    let mut pruned = Vec::new();
    for (entry, _) in old.iter().zip(&seen).filter(|(_, seen)| !**seen) {
        let young = entry
            .record
            .created_at
            .is_some_and(|t| (received.utc() - t.utc()).to_std().unwrap_or_default() < grace);
        if entry.placed && young && !restarted {
            vms.push(entry.clone());
            continue;
        }
        if entry.placed {
            pruned.push(entry.record.vm_id.to_string());
        }
        removed.push(entry.record.vm_id.to_string());
    }
    state.record.vm_count = u32::try_from(vms.len()).unwrap_or(u32::MAX);
    state.replace_vms(vms);
    if !deleted.is_empty() {
        let mut listed = still_listed.into_iter();
        deleted.retain(|_| listed.next().unwrap_or(false));
        state.deleted_vms = deleted;
    }
    (pruned, removed)
}

fn keep_controller_fields(vm: &mut VmRecord, placed: &VmRecord) {
    if vm.tenant_id.is_none() {
        vm.tenant_id.clone_from(&placed.tenant_id);
    }
    if vm.disk_gb.is_none() {
        vm.disk_gb = placed.disk_gb;
    }
    if vm.created_at.is_none() {
        vm.created_at = placed.created_at;
    }
    if vm.restore_checkpoint.is_none() {
        vm.restore_checkpoint.clone_from(&placed.restore_checkpoint);
    }
    if vm.command.is_none() {
        vm.command.clone_from(&placed.command);
    }
    if vm.image.is_none() {
        vm.image.clone_from(&placed.image);
    }
}

/// Allocation-based bookkeeping: declared totals minus what the node's VMs are allocated.
pub fn recompute_allocations(state: &mut NodeState) {
    // Saturating: the figures are the node's word, and any u64 is a valid `ram_alloc_mb`
    // (found by the API fuzzing, docs/reliability/api-fuzz.md).
    let (cpus, memory) = state.vms().iter().fold((0u64, 0u64), |(c, m), vm| {
        (
            c.saturating_add(u64::from(vm.record.vcpu_count)),
            m.saturating_add(vm.record.ram_alloc_mb),
        )
    });
    let record = &mut state.record;
    record.available_cpus = record
        .total_cpus
        .map(|total| u32::try_from(u64::from(total).saturating_sub(cpus)).unwrap_or(0));
    record.available_memory_mb = record.total_memory_mb.map(|t| t.saturating_sub(memory));
}

/// What a registration changed.
#[derive(Debug, Default)]
pub struct RegistrationOutcome {
    pub new: bool,
    pub runtime_restarted: bool,
}

/// A node enrolled by registration: "registering" until its first heartbeat.
pub fn enroll_by_registration(request: &RegisterNodeRequest, received: Timestamp) -> NodeState {
    let mut record = blank_record(
        request.node_id.clone(),
        request.hostname.clone(),
        request.wg_ip.clone(),
        received,
    );
    record.ram_available_mb = request.total_memory_mb;
    NodeState::new(record, Vec::new(), NodeFlags::default())
}

/// Applies a registration received at `now`: the node's identity, addresses, runtime and
/// declared totals. Registration counts as contact, like a heartbeat.
pub fn apply_registration(
    state: &mut NodeState,
    request: RegisterNodeRequest,
    now: Instant,
    received: Timestamp,
    stale_after: Duration,
) -> RegistrationOutcome {
    let mut outcome = RegistrationOutcome::default();
    if changed(&state.record.boot_id, &request.boot_id) {
        state.flags.runtime_restarted = true;
        outcome.runtime_restarted = true;
    }
    let record = &mut state.record;
    record.hostname = request.hostname;
    record.wg_ip = request.wg_ip;
    record.addresses = request.addresses.into_inner();
    record.spawn_port = request.spawn_port;
    record.runtime = request.runtime;
    record.smolvm_address = request.smolvm_address;
    // Until the probe this registration asks for has answered, only a missing address is a
    // known reason; a process node has no engine version to read.
    record.engine_version_problem = match (&record.smolvm_address, record.runtime.as_str()) {
        (None, crate::runtimes::SMOLVM) => Some(no_runtime_address()),
        _ => None,
    };
    if request.boot_id.is_some() {
        record.boot_id = request.boot_id;
    }
    if request.host_boot_id.is_some() {
        record.host_boot_id = request.host_boot_id;
    }
    if request.agent_version.is_some() {
        record.agent_version = request.agent_version;
    }
    record.total_cpus = Some(request.total_cpus);
    record.total_memory_mb = Some(request.total_memory_mb);
    record.total_disk_gb = Some(request.total_disk_gb);
    record.kvm_available = request.kvm_available;
    record.reserved = request.reserved;
    record.last_heartbeat = received;
    state.last_seen = Some(now);
    recompute_allocations(state);
    refresh_status(state, now, stale_after);
    outcome
}

/// Sets the operator's data-plane cordon (idempotent: an existing cordon keeps its time).
pub fn cordon(state: &mut NodeState, reason: Option<StateMessage>, at: Timestamp) {
    if state.record.cordoned_at.is_none() {
        state.record.cordoned_at = Some(at);
    }
    state.flags.cordon = Some(CordonSource::Operator);
    state.record.cordon_reason = reason.or_else(|| {
        Some(StateMessage::try_from("cordoned by an operator").expect("a short message"))
    });
}

/// Clears the data-plane cordon and ends a drain.
pub fn uncordon(state: &mut NodeState, now: Instant, stale_after: Duration) {
    state.flags.cordon = None;
    state.flags.draining = false;
    state.record.cordoned_at = None;
    state.record.cordon_reason = None;
    refresh_status(state, now, stale_after);
}

/// Puts the node in "draining": no new VMs, running ones left alone.
pub fn drain(state: &mut NodeState, now: Instant, stale_after: Duration) {
    state.flags.draining = true;
    refresh_status(state, now, stale_after);
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetwire_types::read_strict as read;

    fn settings() -> Settings {
        Settings::for_tests()
    }

    fn heartbeat(extra: serde_json::Value) -> NodeHeartbeat {
        let mut body = serde_json::json!({
            "node_id": "n1", "wg_ip": "10.0.0.1", "hostname": "h1",
            "ram_total_mb": 8192, "ram_used_mb": 1024, "cpu_cores": 4, "cpu_load_pct": 3.5,
            "kvm_available": true, "vms": [], "boot_id": "host-a",
            "timestamp_utc": "2001-01-01T00:00:00Z"
        });
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        read(&serde_json::to_vec(&body).unwrap()).unwrap()
    }

    #[test]
    fn the_start_up_grace_covers_nodes_heard_from_until_the_restart_only() {
        let newest: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let at = |s: &str| -> Timestamp { s.parse().unwrap() };
        let started = Instant::now();
        let stale = Duration::from_secs(30);
        // Heard from until the end, or within the window before it: alive from the start.
        for last in ["2026-12-01T10:00:00Z", "2026-12-01T09:59:30Z"] {
            assert_eq!(
                loaded_last_seen(at(last), newest, started, stale),
                Some(started)
            );
        }
        // Silent longer than the window before the restart: unreachable already.
        assert_eq!(
            loaded_last_seen(at("2026-12-01T09:59:29Z"), newest, started, stale),
            None
        );
        let flags = NodeFlags {
            heartbeated: true,
            ..NodeFlags::default()
        };
        let graced = loaded_last_seen(newest, newest, started, stale);
        assert_eq!(status(&flags, graced, started, stale), HostState::Ready);
        assert_eq!(
            status(&flags, graced, started + stale, stale),
            HostState::Ready
        );
        assert_eq!(
            status(
                &flags,
                graced,
                started + stale + Duration::from_millis(1),
                stale
            ),
            HostState::Unreachable
        );
    }

    fn vm(id: &str) -> serde_json::Value {
        serde_json::json!({"vm_id": id, "vm_type": "small", "state": "Running", "ram_alloc_mb": 512, "vcpu_count": 1})
    }

    fn observe(state: &mut NodeState, hb: NodeHeartbeat) -> HeartbeatOutcome {
        apply_heartbeat(
            state,
            hb,
            Instant::now(),
            Timestamp::now(),
            &settings(),
            &mut |_, _| true,
        )
    }

    #[test]
    fn the_default_staleness_is_thirty_seconds_by_receive_time() {
        let defaults =
            Settings::from_args(&crate::controller::config::arguments::ControllerArgs::defaults())
                .unwrap();
        assert_eq!(defaults.stale_after, Duration::from_secs(30));
        let flags = NodeFlags {
            heartbeated: true,
            ..Default::default()
        };
        let seen = Instant::now();
        let at = |secs| seen + Duration::from_secs(secs);
        assert_eq!(
            status(&flags, Some(seen), at(30), defaults.stale_after),
            HostState::Ready
        );
        assert_eq!(
            status(&flags, Some(seen), at(31), defaults.stale_after),
            HostState::Unreachable
        );
        assert_eq!(
            status(&flags, None, seen, defaults.stale_after),
            HostState::Unreachable
        );
        let fresh = NodeFlags::default();
        assert_eq!(
            status(&fresh, Some(seen), seen, defaults.stale_after),
            HostState::Registering
        );
    }

    #[test]
    fn a_heartbeat_replaces_the_record_and_judges_liveness_by_receive_time() {
        // The node's clock says 2001: irrelevant.
        let hb = heartbeat(serde_json::json!({"vms": [vm("a"), vm("b")]}));
        let mut state = enroll_by_heartbeat(&hb, Timestamp::now());
        let outcome = observe(&mut state, hb);
        assert_eq!(state.record.status, HostState::Ready);
        assert_eq!(state.record.ram_available_mb, 7168);
        assert_eq!(state.record.vm_count, 2);
        assert!(outcome.removed_vm_ids.is_empty());
        assert!(state.record.last_heartbeat.utc().timestamp() > 1_700_000_000);
        let outcome = observe(&mut state, heartbeat(serde_json::json!({"vms": [vm("b")]})));
        assert_eq!(state.record.vm_count, 1);
        assert_eq!(outcome.removed_vm_ids, vec!["a"]);
    }

    #[test]
    fn a_reported_vm_the_claim_refuses_is_left_out_and_one_the_node_had_is_not_asked_about() {
        let hb = heartbeat(serde_json::json!({"vms": [vm("a")]}));
        let mut state = enroll_by_heartbeat(&hb, Timestamp::now());
        observe(&mut state, hb);
        let mut asked = Vec::new();
        let outcome = apply_heartbeat(
            &mut state,
            heartbeat(serde_json::json!({"vms": [vm("a"), vm("elsewhere"), vm("c")]})),
            Instant::now(),
            Timestamp::now(),
            &settings(),
            &mut |position, vm| {
                asked.push((position, vm.vm_id.to_string()));
                vm.vm_id.as_str() != "elsewhere"
            },
        );
        assert_eq!(asked, [(1, "elsewhere".into()), (2, "c".into())]);
        let kept: Vec<&str> = state
            .vms()
            .iter()
            .map(|e| e.record.vm_id.as_str())
            .collect();
        assert_eq!(kept, ["a", "c"]);
        assert_eq!(state.record.vm_count, 2);
        assert!(outcome.removed_vm_ids.is_empty());
    }

    #[test]
    fn allocations_that_overflow_a_u64_leave_nothing_available() {
        let mut huge = vm("a");
        huge["ram_alloc_mb"] = serde_json::json!(u64::MAX);
        huge["vcpu_count"] = serde_json::json!(u32::MAX);
        let hb = heartbeat(serde_json::json!({"vms": [huge.clone(), vm("b")]}));
        let mut state = enroll_by_heartbeat(&hb, Timestamp::now());
        state.record.total_memory_mb = Some(8192);
        state.record.total_cpus = Some(4);
        observe(&mut state, hb);
        assert_eq!(state.record.available_memory_mb, Some(0));
        assert_eq!(state.record.available_cpus, Some(0));
    }

    #[test]
    fn a_heartbeat_that_only_renews_contact_is_told_apart() {
        let hb = heartbeat(serde_json::json!({"vms": [vm("a")]}));
        let mut state = enroll_by_heartbeat(&hb, Timestamp::now());
        assert!(observe(&mut state, hb).record_changed);
        let same = heartbeat(serde_json::json!({"vms": [vm("a")]}));
        assert!(!observe(&mut state, same).record_changed);
        let more_memory_used =
            heartbeat(serde_json::json!({"vms": [vm("a")], "ram_used_mb": 2048}));
        assert!(observe(&mut state, more_memory_used).record_changed);
        // Each string a heartbeat repeats is replaced when it does change.
        for (field, value) in [
            ("hostname", "renamed"),
            ("wg_ip", "10.9.9.9"),
            ("boot_id", "host-boot-2"),
            ("runtime_boot_id", "runtime-boot-2"),
            ("agent_version", "9.9.9"),
        ] {
            let mut body = serde_json::json!({"vms": [vm("a")], "ram_used_mb": 2048});
            body[field] = value.into();
            assert!(
                observe(&mut state, heartbeat(body)).record_changed,
                "{field}"
            );
            let record = serde_json::to_value(&state.record).unwrap();
            let stored = match field {
                "boot_id" => "host_boot_id",
                "runtime_boot_id" => "boot_id",
                other => other,
            };
            assert_eq!(record[stored], value, "{field}");
        }
        // Each figure is a change when it changes, and only then.
        let mut body = serde_json::json!({
            "vms": [vm("a")], "ram_used_mb": 2048, "boot_id": "host-boot-2",
            "runtime_boot_id": "runtime-boot-2", "agent_version": "9.9.9",
            "hostname": "renamed", "wg_ip": "10.9.9.9"
        });
        let _ = observe(&mut state, heartbeat(body.clone()));
        assert!(!observe(&mut state, heartbeat(body.clone())).record_changed);
        for (field, value) in [
            ("kvm_available", serde_json::json!(false)),
            ("reserved", serde_json::json!(true)),
            ("spawn_port", serde_json::json!(9301)),
            ("cpu_usage", serde_json::json!(12.5)),
            ("memory_usage_mb", serde_json::json!(700)),
            ("disk_usage_gb", serde_json::json!(30)),
            ("disk_total_gb", serde_json::json!(500)),
            ("disk_free_gb", serde_json::json!(400)),
            ("vms", serde_json::json!([vm("a"), vm("b")])),
        ] {
            body[field] = value;
            assert!(
                observe(&mut state, heartbeat(body.clone())).record_changed,
                "{field} changed"
            );
            assert!(
                !observe(&mut state, heartbeat(body.clone())).record_changed,
                "{field} repeated"
            );
        }
    }

    #[test]
    fn disk_cordon_has_hysteresis() {
        let s = settings();
        let (below, above) = (s.disk_cordon_below_gb, s.disk_uncordon_above_gb);
        let hb = heartbeat(serde_json::json!({}));
        let mut state = enroll_by_heartbeat(&hb, Timestamp::now());
        observe(&mut state, hb);
        let free = |gb: u64| heartbeat(serde_json::json!({"disk_free_gb": gb}));
        assert_eq!(observe(&mut state, free(below)).disk_cordon, None);
        assert_eq!(observe(&mut state, free(below - 1)).disk_cordon, Some(true));
        assert!(state.record.disk_cordoned_at.is_some());
        // Between the thresholds: still cordoned, and the node stays ready.
        assert_eq!(observe(&mut state, free(above - 1)).disk_cordon, None);
        assert!(state.record.disk_cordoned_at.is_some());
        assert_eq!(state.record.status, HostState::Ready);
        assert_eq!(observe(&mut state, free(above)).disk_cordon, Some(false));
        assert!(state.record.disk_cordoned_at.is_none());
    }

    #[test]
    fn a_stalled_runtime_self_cordons_without_touching_an_operator_cordon() {
        let hb = heartbeat(serde_json::json!({}));
        let mut state = enroll_by_heartbeat(&hb, Timestamp::now());
        observe(&mut state, hb);
        let stalled = |s: bool| {
            heartbeat(serde_json::json!({"runtime_stalled": s, "runtime_capacity": null}))
        };
        assert_eq!(observe(&mut state, stalled(true)).stall_cordon, Some(true));
        assert!(state.record.cordoned_at.is_some());
        assert_eq!(
            observe(&mut state, stalled(false)).stall_cordon,
            Some(false)
        );
        assert!(state.record.cordoned_at.is_none());
        cordon(&mut state, None, Timestamp::now());
        assert_eq!(observe(&mut state, stalled(false)).stall_cordon, None);
        assert!(state.record.cordoned_at.is_some());
    }

    #[test]
    fn a_new_boot_id_prunes_placed_vms_the_node_does_not_report() {
        let hb = heartbeat(serde_json::json!({"runtime_boot_id": "r1"}));
        let mut state = enroll_by_heartbeat(&hb, Timestamp::now());
        observe(&mut state, hb);
        let mut placed: VmRecord = serde_json::from_value(vm("p")).unwrap();
        placed.created_at = Some(Timestamp::now());
        placed.tenant_id = Some("t1".parse().unwrap());
        state.vms_mut().push(VmEntry {
            record: placed,
            placed: true,
        });
        // Same boot id, not yet reported: kept (the spawn may be newer than the heartbeat).
        let outcome = observe(
            &mut state,
            heartbeat(serde_json::json!({"runtime_boot_id": "r1"})),
        );
        assert!(outcome.pruned.is_empty());
        assert!(state.vm("p").is_some());
        // Reported without a tenant: the controller's tenant is kept.
        observe(
            &mut state,
            heartbeat(serde_json::json!({"runtime_boot_id": "r1", "vms": [vm("p")]})),
        );
        assert_eq!(
            state
                .vm("p")
                .unwrap()
                .record
                .tenant_id
                .as_deref()
                .map(|s| s.as_str()),
            Some("t1")
        );
        // New boot id and not reported: pruned at once.
        let outcome = observe(
            &mut state,
            heartbeat(serde_json::json!({"runtime_boot_id": "r2"})),
        );
        assert_eq!(outcome.pruned, vec!["p"]);
        assert!(outcome.restart.is_some());
        assert!(state.vm("p").is_none());
        assert_eq!(
            state.record.boot_id.as_deref().map(|s| s.as_str()),
            Some("r2")
        );
    }

    #[test]
    fn status_moves_through_registering_ready_draining_and_back() {
        let request: RegisterNodeRequest = read(
            br#"{"node_id":"n1","hostname":"h","wg_ip":"10.0.0.1","total_cpus":8,
                 "total_memory_mb":16384,"total_disk_gb":100,"kvm_available":true}"#,
        )
        .unwrap();
        let now = Instant::now();
        let mut state = enroll_by_registration(&request, Timestamp::now());
        apply_registration(
            &mut state,
            request,
            now,
            Timestamp::now(),
            Duration::from_secs(30),
        );
        assert_eq!(state.record.status, HostState::Registering);
        assert_eq!(state.record.ram_available_mb, 16384);
        assert_eq!(state.record.available_cpus, Some(8));
        observe(&mut state, heartbeat(serde_json::json!({"vms": [vm("a")]})));
        assert_eq!(state.record.status, HostState::Ready);
        assert_eq!(state.record.available_cpus, Some(7));
        assert_eq!(state.record.available_memory_mb, Some(16384 - 512));
        drain(&mut state, Instant::now(), Duration::from_secs(30));
        assert_eq!(state.record.status, HostState::Draining);
        uncordon(&mut state, Instant::now(), Duration::from_secs(30));
        assert_eq!(state.record.status, HostState::Ready);
    }
}
