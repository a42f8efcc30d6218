//! Compatibility with the PPN fleet wire format (shared/reference/ppn-wire.md): a PPN agent's
//! heartbeat is one of our `NodeHeartbeat`s, and what our controller sends back parses as PPN's
//! own shapes. The `Ppn*` structs below are PPN's documents as its serde readers see them:
//! exactly its fields and types, unknown fields ignored. Ours are read strictly: PPN's documents
//! carry no field our schemas do not define.

use std::path::Path;

use chrono::{DateTime, Utc};
use fleetwire_types::{
    read_strict as read, CreateVmRequest, FleetStatus, NodeHeartbeat, NodeRecord, VmRecord,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, Serialize)]
struct PpnHeartbeat {
    node_id: String,
    wg_ip: String,
    hostname: String,
    ram_total_mb: u64,
    ram_used_mb: u64,
    cpu_cores: u32,
    cpu_load_pct: f32,
    kvm_available: bool,
    #[serde(default)]
    reserved: bool,
    vms: Vec<PpnVmRecord>,
    boot_id: String,
    timestamp_utc: DateTime<Utc>,
}

#[derive(Debug, Deserialize, Serialize)]
struct PpnNodeRecord {
    node_id: String,
    hostname: String,
    wg_ip: String,
    ram_available_mb: u64,
    vm_count: u32,
    kvm_available: bool,
    #[serde(default)]
    reserved: bool,
    last_heartbeat: DateTime<Utc>,
}

#[derive(Debug, Deserialize)]
struct PpnFleetStatus {
    nodes: Vec<PpnNodeRecord>,
    #[allow(dead_code)]
    last_updated: DateTime<Utc>,
}

#[derive(Debug, Deserialize, Serialize, PartialEq)]
enum PpnVmState {
    Running,
    Stopped,
    Provisioning,
    Error,
}

#[derive(Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum PpnProtocol {
    Tcp,
    Udp,
}

#[derive(Debug, Deserialize, Serialize, PartialEq)]
struct PpnHostPortMapping {
    host_port: u16,
    guest_port: u16,
    protocol: PpnProtocol,
}

#[derive(Debug, Deserialize, Serialize)]
struct PpnVmRecord {
    vm_id: String,
    vm_type: String,
    state: PpnVmState,
    ram_alloc_mb: u64,
    vcpu_count: u32,
    started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    host_ports: Vec<PpnHostPortMapping>,
}

#[derive(Debug, Deserialize, Serialize)]
struct PpnCreateVmRequest {
    vm_type: String,
    ram_mb: u64,
    vcpu_count: u32,
    #[serde(default)]
    prefer_kvm: bool,
    preferred_node: Option<String>,
    #[serde(default)]
    tenant_id: Option<String>,
}

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../schemas/examples")
            .join(path),
    )
    .unwrap()
}

#[test]
fn a_ppn_heartbeat_as_the_wire_format_shows_it_is_a_node_heartbeat() {
    let bytes = fixture("NodeHeartbeat/valid/ppn-heartbeat.json");
    // It is PPN's own document (PPN parses it)...
    let ppn: PpnHeartbeat = serde_json::from_slice(&bytes).unwrap();
    // ...and ours reads it, field for field.
    let ours: NodeHeartbeat = read(&bytes).unwrap();
    assert_eq!(ours.node_id.as_str(), ppn.node_id);
    assert_eq!(ours.ram_total_mb, ppn.ram_total_mb);
    assert_eq!(ours.cpu_cores, ppn.cpu_cores);
    assert_eq!(ours.vms.len(), ppn.vms.len());
    assert_eq!(ours.timestamp_utc.utc(), ppn.timestamp_utc);
    // A heartbeat PPN's agent serializes from its own structs is read too.
    let reserialized = serde_json::to_vec(&ppn).unwrap();
    read::<NodeHeartbeat>(&reserialized).unwrap();
}

#[test]
fn a_superset_heartbeat_still_parses_as_ppn() {
    let ours: NodeHeartbeat = read(&fixture("NodeHeartbeat/valid/full.json")).unwrap();
    let ppn: PpnHeartbeat = serde_json::from_slice(&serde_json::to_vec(&ours).unwrap()).unwrap();
    assert_eq!(ppn.node_id, ours.node_id.as_str());
}

#[test]
fn node_records_and_fleet_status_we_serialize_parse_as_ppn() {
    for path in std::fs::read_dir(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/examples/NodeRecord/valid"),
    )
    .unwrap()
    {
        let ours: NodeRecord = read(&std::fs::read(path.unwrap().path()).unwrap()).unwrap();
        let ppn: PpnNodeRecord =
            serde_json::from_slice(&serde_json::to_vec(&ours).unwrap()).unwrap();
        assert_eq!(ppn.node_id, ours.node_id.as_str());
        assert_eq!(ppn.ram_available_mb, ours.ram_available_mb);
        assert_eq!(ppn.last_heartbeat, ours.last_heartbeat.utc());
    }
    let fleet: FleetStatus = read(&fixture("FleetStatus/valid/three-nodes.json")).unwrap();
    let ppn: PpnFleetStatus = serde_json::from_slice(&serde_json::to_vec(&fleet).unwrap()).unwrap();
    assert_eq!(ppn.nodes.len(), fleet.nodes.len());
}

#[test]
fn vm_records_we_serialize_parse_as_ppn() {
    for name in ["ppn-vm.json", "full.json"] {
        let ours: VmRecord = read(&fixture(&format!("VmRecord/valid/{name}"))).unwrap();
        let ppn: PpnVmRecord = serde_json::from_slice(&serde_json::to_vec(&ours).unwrap()).unwrap();
        assert_eq!(ppn.vm_id, ours.vm_id.as_str());
        assert_eq!(ppn.host_ports.len(), ours.host_ports.len());
        // And PPN's serialization of it reads back as ours.
        read::<VmRecord>(&serde_json::to_vec(&ppn).unwrap()).unwrap();
    }
}

#[test]
fn a_ppn_create_vm_request_is_ours_and_ours_is_ppns() {
    let ppn = PpnCreateVmRequest {
        vm_type: "microvm".into(),
        ram_mb: 512,
        vcpu_count: 1,
        prefer_kvm: true,
        preferred_node: None,
        tenant_id: Some("acme".into()),
    };
    let ours: CreateVmRequest = read(&serde_json::to_vec(&ppn).unwrap()).unwrap();
    assert!(ours.prefer_kvm);
    let back: PpnCreateVmRequest =
        serde_json::from_slice(&serde_json::to_vec(&ours).unwrap()).unwrap();
    assert_eq!(back.ram_mb, 512);
}
