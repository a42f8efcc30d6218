//! `GET /v1/vms/{vm_id}/logs`: a piece of a VM's output, from the agent of the node that has
//! it. The output stays where it is written, on the node (`VM_STATE_DIR/logs`); the controller
//! relays the operator's request to the agent over the channel it spawns VMs on (mTLS with its
//! own client certificate, docs/security.md), once the operator's token was checked, so
//! operators never call an agent and no output is copied into the store
//! (docs/operator-cli.md, "A VM's output").

use fleetwire_types::VmLogChunk;

use crate::controller::agent_client::AgentCallError;
use crate::controller::fleet::placement;
use crate::controller::shared::Controller;

/// Why a VM's output could not be read.
#[derive(Debug, thiserror::Error)]
pub enum VmOutputError {
    #[error("no VM with id {0:?}")]
    NoSuchVm(String),
    /// The node's agent keeps none for it (a smolvm node), or no longer knows the VM.
    #[error("node {node_id:?} has no output of VM {vm_id:?}: {error}")]
    NoOutput {
        node_id: String,
        vm_id: String,
        error: AgentCallError,
    },
    /// The node's agent did not answer, or not with a `VmLogChunk`.
    #[error("node {node_id:?} did not give the VM's output: {error}")]
    Failed {
        node_id: String,
        error: AgentCallError,
    },
}

/// The output of `vm_id` from `offset` on, as its node's agent answers it.
pub async fn read(
    controller: &Controller,
    vm_id: &str,
    offset: u64,
) -> Result<VmLogChunk, VmOutputError> {
    let (node_id, _, agent) = placement::owner(controller, vm_id)
        .ok_or_else(|| VmOutputError::NoSuchVm(vm_id.to_string()))?;
    controller
        .agents
        .logs(&node_id, agent, vm_id, offset)
        .await
        .map_err(|error| match error {
            AgentCallError::Refused {
                status: reqwest::StatusCode::NOT_FOUND,
                ..
            } => VmOutputError::NoOutput {
                node_id: node_id.clone(),
                vm_id: vm_id.to_string(),
                error,
            },
            error => VmOutputError::Failed {
                node_id: node_id.clone(),
                error,
            },
        })
}
