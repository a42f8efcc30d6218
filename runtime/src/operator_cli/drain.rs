//! `fleetwire nodes drain`: as `kubectl drain` does it, from the client. The node is marked
//! draining (placements pass it over), then each of its VMs is moved (deleted on it and
//! created again, with the same id and request, on a node placement chooses) or, with
//! `--stop`, deleted; the command waits until the node reports none, within `--deadline`,
//! showing progress. `--detach` only marks the node (docs/operator-cli.md, "Draining a node").

use std::process::ExitCode;
use std::time::Instant;

use fleetwire_client::{Client, Error};
use fleetwire_types::{
    CreateVmRequest, HostState, NodeRecord, NodeStatusFilter, VmRecord, VmState,
};
use serde_json::{Map, Value};

use super::args::DrainArgs;
use super::create::which;
use super::exit::Failure;
use super::print::{err_line, fail, out, Done, POLL};
use super::progress::Progress;

pub async fn drain(client: &Client, args: DrainArgs) -> Done {
    let node_id = &args.node_id;
    let node = client.drain_node(node_id).await?.into_inner();
    let vms = on_node(client, node_id.as_str()).await?;
    if args.detach {
        out(&format!(
            "node {} draining: no new VMs; its {} VMs stay until moved or deleted\n",
            node.node_id.as_str(),
            vms.len()
        ));
        return Ok(ExitCode::SUCCESS);
    }
    // Nothing is deleted unless another node could take the VMs, and each has a request that
    // makes it again.
    let mut requests = Vec::new();
    if !args.stop && !vms.is_empty() {
        let others = client.list_nodes(Some(&NodeStatusFilter::Ready)).await?;
        let why = match no_room_elsewhere(&others, &node, &vms) {
            Some(why) => Some(why),
            None => match vms.iter().map(request_of).collect::<Result<Vec<_>, _>>() {
                Ok(all) => {
                    requests = all;
                    None
                }
                Err(why) => Some(why),
            },
        };
        if let Some(why) = why {
            return Ok(fail(
                Failure::Unavailable,
                &format!(
                    "node {} is draining, but its VMs cannot move: {why}; nothing was moved (add a node, uncordon one, or stop them with --stop)",
                    node_id.as_str()
                ),
            ));
        }
    }
    let deadline = Instant::now() + args.deadline;
    let total = vms.len();
    let verb = if args.stop { "stopping" } else { "moving" };
    let mut progress = Progress::start(&format!(
        "draining node {}: {total} VMs to {}",
        node_id.as_str(),
        if args.stop { "stop" } else { "move" }
    ));
    let mut moved = Vec::new();
    for (n, vm) in vms.iter().enumerate() {
        progress.say(&format!("{verb} {} ({}/{total})", which(vm), n + 1));
        if let Err(error) = client.delete_vm(&vm.vm_id).await {
            if Failure::of_call(&error) != Failure::NotFound {
                progress.finish();
                return Err(error);
            }
        }
        let Some(request) = requests.get(n) else {
            continue;
        };
        match moved_vm(client, request, deadline, &mut progress).await {
            Ok(vm) => moved.push(vm),
            Err(error) => {
                progress.finish();
                err_line(&format!(
                    "VM {} was deleted on node {} but not created again; its request: {}",
                    vm.vm_id.as_str(),
                    node_id.as_str(),
                    serde_json::to_string(request).unwrap_or_default()
                ));
                return Err(error);
            }
        }
    }
    // The node's agent stops them; its heartbeats say when none is left.
    loop {
        let left = on_node(client, node_id.as_str()).await?;
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            progress.finish();
            return Ok(fail(
                Failure::Unavailable,
                &format!(
                    "node {} still has {} VMs after {} (--deadline)",
                    node_id.as_str(),
                    left.len(),
                    humantime::format_duration(args.deadline)
                ),
            ));
        }
        progress.say(&format!(
            "waiting for node {} to stop {} VMs",
            node_id.as_str(),
            left.len()
        ));
        tokio::time::sleep(POLL).await;
    }
    progress.finish();
    for vm in &moved {
        out(&format!("{}: {}\n", which(vm), vm.state));
    }
    let done = if args.stop {
        format!("{total} stopped")
    } else {
        format!("{} moved", moved.len())
    };
    out(&format!("node {} drained: {done}\n", node_id.as_str()));
    let failed = moved.iter().any(|vm| vm.state == VmState::Error);
    Ok(if failed {
        Failure::Unavailable.into()
    } else {
        ExitCode::SUCCESS
    })
}

/// The VMs the controller records on `node_id`.
async fn on_node(client: &Client, node_id: &str) -> Result<Vec<VmRecord>, Error> {
    Ok(client
        .list_vms(None)
        .await?
        .into_inner()
        .into_iter()
        .filter(|vm| vm.node_id.as_ref().is_some_and(|n| n.as_str() == node_id))
        .collect())
}

/// Why no other node could take the VMs, if none could: no other ready node, or none with the
/// memory the largest needs (placement's rule: its memory plus 512 MB).
fn no_room_elsewhere(
    ready: &[NodeRecord],
    draining: &NodeRecord,
    vms: &[VmRecord],
) -> Option<String> {
    let others: Vec<&NodeRecord> = ready
        .iter()
        .filter(|n| n.node_id != draining.node_id && n.status == HostState::Ready)
        .filter(|n| n.cordoned_at.is_none() && n.disk_cordoned_at.is_none())
        .collect();
    if others.is_empty() {
        return Some("no other node is ready and uncordoned".to_string());
    }
    let largest = vms.iter().map(|vm| vm.ram_alloc_mb).max().unwrap_or(0);
    let most = others.iter().map(|n| n.ram_available_mb).max().unwrap_or(0);
    let needed = largest.saturating_add(512);
    (most < needed).then(|| {
        format!("no other node has {needed} MB of memory available (the most is {most} MB)")
    })
}

/// The VM created again from its record, on the node placement chooses, waited for until it
/// left `Provisioning` (or the deadline).
async fn moved_vm(
    client: &Client,
    request: &CreateVmRequest,
    deadline: Instant,
    progress: &mut Progress,
) -> Result<VmRecord, Error> {
    // The delete freed its id: a late heartbeat of the old node does not take it back
    // (docs/controller.md, `DELETE /v1/vms/{vm_id}`).
    let mut now = client.create_vm(request).await?.into_inner();
    while now.state == VmState::Provisioning && Instant::now() < deadline {
        progress.say(&super::create::state_line(&now));
        tokio::time::sleep(POLL).await;
        now = client.get_vm(&now.vm_id).await?.into_inner();
    }
    progress.say(&super::create::state_line(&now));
    Ok(now)
}

/// The create request a VM's record says it was made with: its id, type, size, tenant and
/// workload.
fn request_of(vm: &VmRecord) -> Result<CreateVmRequest, String> {
    let mut body = Map::new();
    body.insert("vm_id".into(), Value::from(vm.vm_id.as_str()));
    body.insert("vm_type".into(), Value::from(vm.vm_type.as_str()));
    body.insert("ram_mb".into(), Value::from(vm.ram_alloc_mb));
    body.insert("vcpu_count".into(), Value::from(vm.vcpu_count));
    if let Some(disk_gb) = vm.disk_gb {
        body.insert("disk_gb".into(), Value::from(disk_gb));
    }
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            body.insert(key.to_string(), value);
        }
    };
    put(
        "tenant_id",
        serde_json::to_value(&vm.tenant_id)
            .ok()
            .filter(|v| !v.is_null()),
    );
    put(
        "image",
        serde_json::to_value(&vm.image)
            .ok()
            .filter(|v| !v.is_null()),
    );
    put(
        "command",
        serde_json::to_value(&vm.command)
            .ok()
            .filter(|v| !v.is_null()),
    );
    // An image is pulled from its registry: it was created with the network.
    put("network", vm.image.is_some().then_some(Value::Bool(true)));
    put(
        "restore_checkpoint",
        serde_json::to_value(&vm.restore_checkpoint)
            .ok()
            .filter(|v| !v.is_null()),
    );
    fleetwire_types::read_value_strict(&Value::Object(body)).map_err(|rejection| {
        format!(
            "the record of VM {} makes no valid create request: {}",
            vm.vm_id.as_str(),
            fleetwire_types::summarize(rejection.violations())
        )
    })
}
