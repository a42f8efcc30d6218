//! STAND-IN for a PPN fleet controller (`service-vm-fleet`), for interoperability tests only.
//!
//! It implements the controller semantics of `shared/reference/ppn-wire.md` with PPN's own
//! shapes: its structs carry PPN's fields only and, like PPN's readers, ignore fields they do not
//! know. State is in memory, a heartbeat replaces a node's record and VM list wholesale, nodes
//! silent for more than 30 s (judged on the node's `timestamp_utc`, as PPN does) are left out
//! of the listings, and there is no `/v1/nodes/register` route: PPN agents enroll by heartbeat.
//! Its answers follow the real `service-vm-fleet` (commit f39485af, checked by
//! tests/e2e/peers/ppn.rs): errors are plain-text bodies; a preferred node needs `ram_mb` of
//! available memory (no headroom); an agent that cannot be reached or refuses the spawn gives
//! 502 with the agent's status and message, an answer that is no VmRecord 500; a delete asks
//! the agent and forgets the VM whatever it answers (204, or 404 for a VM it does not know).
//! PPN calls agents on one port for all nodes, `VM_HOST_SPAWN_PORT` (default 9220); tests
//! cannot use a fixed port, so the stand-in is told the agents' port instead.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::support::background::BackgroundServer;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct PpnVmRecord {
    pub vm_id: String,
    pub vm_type: String,
    pub state: String,
    pub ram_alloc_mb: u64,
    pub vcpu_count: u32,
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub tenant_id: Option<String>,
    #[serde(default)]
    pub host_ports: Vec<PpnHostPortMapping>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct PpnHostPortMapping {
    pub host_port: u16,
    pub guest_port: u16,
    pub protocol: String,
}

// Every field is required by PPN's shape, so reading a body into this checks it is whole;
// not every test looks at every field.
#[allow(dead_code)]
#[derive(Debug, Clone, Deserialize)]
pub struct PpnHeartbeat {
    pub node_id: String,
    pub wg_ip: String,
    pub hostname: String,
    pub ram_total_mb: u64,
    pub ram_used_mb: u64,
    pub cpu_cores: u32,
    pub cpu_load_pct: f32,
    pub kvm_available: bool,
    #[serde(default)]
    pub reserved: bool,
    pub vms: Vec<PpnVmRecord>,
    pub boot_id: String,
    pub timestamp_utc: DateTime<Utc>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct PpnNodeRecord {
    pub node_id: String,
    pub hostname: String,
    pub wg_ip: String,
    pub ram_available_mb: u64,
    pub vm_count: u32,
    pub kvm_available: bool,
    #[serde(default)]
    pub reserved: bool,
    pub last_heartbeat: DateTime<Utc>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct PpnFleetStatus {
    pub nodes: Vec<PpnNodeRecord>,
    pub last_updated: DateTime<Utc>,
}

// Every field is required by PPN's shape, so reading a body into this checks it is whole;
// not every test looks at every field.
#[allow(dead_code)]
#[derive(Debug, Clone, Deserialize)]
pub struct PpnCreateVmRequest {
    pub vm_type: String,
    pub ram_mb: u64,
    pub vcpu_count: u32,
    #[serde(default)]
    pub prefer_kvm: bool,
    pub preferred_node: Option<String>,
    #[serde(default)]
    pub tenant_id: Option<String>,
}

#[derive(Default)]
struct Fleet {
    nodes: BTreeMap<String, PpnNodeRecord>,
    vms: BTreeMap<String, Vec<PpnVmRecord>>,
    /// Every heartbeat body received, raw, for the tests to inspect.
    heartbeats: Vec<serde_json::Value>,
}

#[derive(Clone)]
struct Ctx {
    fleet: Arc<Mutex<Fleet>>,
    agent_port: u16,
    http: reqwest::Client,
}

/// A running stand-in PPN controller.
pub struct StandinPpnController {
    pub server: BackgroundServer,
    fleet: Arc<Mutex<Fleet>>,
}

const STALE_AFTER_S: i64 = 30;

impl StandinPpnController {
    /// Starts on `port` (0: any free port); spawns go to agents on `agent_port`.
    pub fn start(port: u16, agent_port: u16) -> StandinPpnController {
        let fleet = Arc::new(Mutex::new(Fleet::default()));
        let ctx = Ctx {
            fleet: fleet.clone(),
            agent_port,
            http: {
                crate::support::install_crypto_provider();
                reqwest::Client::new()
            },
        };
        let router = Router::new()
            .route("/v1/nodes/heartbeat", post(heartbeat))
            .route("/v1/nodes", get(list_nodes))
            .route("/v1/nodes/{node_id}", get(get_node))
            .route("/v1/fleet", get(fleet_status))
            .route("/v1/vms", post(create_vm).get(list_vms))
            .route("/v1/vms/{vm_id}", delete(delete_vm))
            .with_state(ctx);
        StandinPpnController {
            server: BackgroundServer::start(router, port),
            fleet,
        }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The raw heartbeat bodies received so far.
    pub fn heartbeats(&self) -> Vec<serde_json::Value> {
        self.fleet.lock().unwrap().heartbeats.clone()
    }
}

fn fresh(fleet: &Fleet) -> Vec<PpnNodeRecord> {
    let now = Utc::now();
    fleet
        .nodes
        .values()
        .filter(|n| (now - n.last_heartbeat).num_seconds() <= STALE_AFTER_S)
        .cloned()
        .collect()
}

async fn heartbeat(State(ctx): State<Ctx>, Json(raw): Json<serde_json::Value>) -> StatusCode {
    let hb: PpnHeartbeat = match serde_json::from_value(raw.clone()) {
        Ok(hb) => hb,
        Err(_) => return StatusCode::UNPROCESSABLE_ENTITY,
    };
    let mut fleet = ctx.fleet.lock().unwrap();
    fleet.heartbeats.push(raw);
    let record = PpnNodeRecord {
        node_id: hb.node_id.clone(),
        hostname: hb.hostname,
        wg_ip: hb.wg_ip,
        ram_available_mb: hb.ram_total_mb.saturating_sub(hb.ram_used_mb),
        vm_count: hb.vms.len() as u32,
        kvm_available: hb.kvm_available,
        reserved: hb.reserved,
        last_heartbeat: hb.timestamp_utc,
    };
    fleet.nodes.insert(hb.node_id.clone(), record);
    fleet.vms.insert(hb.node_id, hb.vms);
    StatusCode::OK
}

async fn list_nodes(State(ctx): State<Ctx>) -> Json<Vec<PpnNodeRecord>> {
    Json(fresh(&ctx.fleet.lock().unwrap()))
}

async fn get_node(
    State(ctx): State<Ctx>,
    Path(node_id): Path<String>,
) -> Result<Json<PpnNodeRecord>, StatusCode> {
    let fleet = ctx.fleet.lock().unwrap();
    fresh(&fleet)
        .into_iter()
        .find(|n| n.node_id == node_id)
        .map(Json)
        .ok_or(StatusCode::NOT_FOUND)
}

async fn fleet_status(State(ctx): State<Ctx>) -> Json<PpnFleetStatus> {
    Json(PpnFleetStatus {
        nodes: fresh(&ctx.fleet.lock().unwrap()),
        last_updated: Utc::now(),
    })
}

/// PPN placement: enough RAM (request + 512 MB), most available RAM wins, KVM nodes first when
/// asked, reserved nodes only when nothing else qualifies. Then the agent's `/v1/spawn`.
async fn create_vm(
    State(ctx): State<Ctx>,
    Json(raw): Json<serde_json::Value>,
) -> Result<Json<PpnVmRecord>, (StatusCode, String)> {
    let req: PpnCreateVmRequest = serde_json::from_value(raw.clone())
        .map_err(|e| (StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
    let node = {
        let fleet = ctx.fleet.lock().unwrap();
        let nodes = fresh(&fleet);
        let fits = |n: &&PpnNodeRecord| n.ram_available_mb >= req.ram_mb + 512;
        if let Some(wanted) = &req.preferred_node {
            let node = nodes.iter().find(|n| &n.node_id == wanted).ok_or((
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("preferred_node '{wanted}' is not registered"),
            ))?;
            // PPN checks a preferred node without the 512 MB headroom.
            if node.ram_available_mb < req.ram_mb {
                return Err((
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "preferred_node '{wanted}' has {}MB available, {}MB requested",
                        node.ram_available_mb, req.ram_mb
                    ),
                ));
            }
            node.clone()
        } else {
            let mut candidates: Vec<&PpnNodeRecord> = nodes.iter().filter(fits).collect();
            candidates.sort_by_key(|n| {
                (
                    n.reserved,
                    req.prefer_kvm && !n.kvm_available,
                    std::cmp::Reverse(n.ram_available_mb),
                )
            });
            candidates.first().map(|n| (*n).clone()).ok_or((
                StatusCode::SERVICE_UNAVAILABLE,
                "insufficient RAM on all registered nodes".to_string(),
            ))?
        }
    };
    let url = format!("http://{}:{}/v1/spawn", node.wg_ip, ctx.agent_port);
    let resp = ctx.http.post(&url).json(&raw).send().await.map_err(|e| {
        (
            StatusCode::BAD_GATEWAY,
            format!("cannot reach vm-host at {url}: {e}"),
        )
    })?;
    if !resp.status().is_success() {
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        return Err((
            StatusCode::BAD_GATEWAY,
            format!("vm-host {} returned {status}: {body}", node.node_id),
        ));
    }
    let mut record: PpnVmRecord = resp.json().await.map_err(|e| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("vm-host response not a VmRecord: {e}"),
        )
    })?;
    record.tenant_id = req.tenant_id;
    let mut fleet = ctx.fleet.lock().unwrap();
    let vms = fleet.vms.entry(node.node_id.clone()).or_default();
    vms.retain(|v| v.vm_id != record.vm_id);
    vms.push(record.clone());
    let count = vms.len() as u32;
    if let Some(n) = fleet.nodes.get_mut(&node.node_id) {
        n.vm_count = count;
    }
    Ok(Json(record))
}

#[derive(Deserialize)]
struct TenantFilter {
    tenant_id: Option<String>,
}

async fn list_vms(
    State(ctx): State<Ctx>,
    Query(filter): Query<TenantFilter>,
) -> Json<Vec<PpnVmRecord>> {
    let fleet = ctx.fleet.lock().unwrap();
    Json(
        fleet
            .vms
            .values()
            .flatten()
            .filter(|v| filter.tenant_id.is_none() || v.tenant_id == filter.tenant_id)
            .cloned()
            .collect(),
    )
}

async fn delete_vm(State(ctx): State<Ctx>, Path(vm_id): Path<String>) -> StatusCode {
    let owner = {
        let fleet = ctx.fleet.lock().unwrap();
        fleet
            .vms
            .iter()
            .find(|(_, vms)| vms.iter().any(|v| v.vm_id == vm_id))
            .and_then(|(node, _)| fleet.nodes.get(node).cloned())
    };
    let Some(node) = owner else {
        return StatusCode::NOT_FOUND;
    };
    // PPN asks the agent and forgets the VM whatever the agent answers.
    let url = format!("http://{}:{}/v1/vms/{vm_id}", node.wg_ip, ctx.agent_port);
    let _ = ctx.http.delete(&url).send().await;
    let mut fleet = ctx.fleet.lock().unwrap();
    let mut count = None;
    if let Some(vms) = fleet.vms.get_mut(&node.node_id) {
        vms.retain(|v| v.vm_id != vm_id);
        count = Some(vms.len() as u32);
    }
    if let (Some(count), Some(n)) = (count, fleet.nodes.get_mut(&node.node_id)) {
        n.vm_count = count;
    }
    StatusCode::NO_CONTENT
}
