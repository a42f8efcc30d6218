//! The documents a simulated node sends: its heartbeat, and with mTLS the bootstrap-token
//! request an operator makes for it and its registration.

use hyper::body::Bytes;

/// The lowest `ram_used_mb` a simulated node reports: every value has five digits, so
/// `--changing-figures` can rewrite it in place.
pub const RAM_USED_MIN: u64 = 10_000;
const RAM_USED_KEY: &[u8] = b"\"ram_used_mb\":";

/// Where the five digits of `ram_used_mb` sit in a body from [`heartbeat_body`].
pub fn ram_used_at(body: &[u8]) -> Option<usize> {
    body.windows(RAM_USED_KEY.len())
        .position(|w| w == RAM_USED_KEY)
        .map(|at| at + RAM_USED_KEY.len())
}

/// Simulated node `index`'s node id.
pub fn node_id(index: usize) -> String {
    format!("load-{index:07}")
}

/// Simulated node `index`'s address: its own on the loopback network (127.0.0.0/8), as node
/// addresses are unique among nodes (docs/security.md); nothing is ever sent to it.
pub fn address(index: usize) -> String {
    let n = index + 1;
    format!("127.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
}

/// A heartbeat body for simulated node `index`, the PPN fields plus fleetwire's.
pub fn heartbeat_body(index: usize, vms: usize) -> Bytes {
    let node_id = node_id(index);
    let vms: Vec<serde_json::Value> = (0..vms)
        .map(|v| {
            serde_json::json!({
                "vm_id": format!("{node_id}-vm{v}"), "vm_type": "small", "state": "Running",
                "ram_alloc_mb": 512, "vcpu_count": 1, "started_at": "2026-11-30T09:00:00Z",
                "tenant_id": "tenant-a", "host_ports": [{"host_port": 20000 + v, "guest_port": 22, "protocol": "tcp"}]
            })
        })
        .collect();
    let body = serde_json::json!({
        "node_id": node_id,
        "wg_ip": address(index),
        "hostname": format!("host-{index}"),
        "ram_total_mb": 65536, "ram_used_mb": RAM_USED_MIN + (index % 1024) as u64,
        "cpu_cores": 16, "cpu_load_pct": 12.5, "kvm_available": index.is_multiple_of(2),
        "vms": vms,
        "boot_id": "9b2c1f0e-5d7a-4c3b-8e6f-0a1b2c3d4e5f",
        "timestamp_utc": "2026-11-30T09:30:00.123456Z",
        "spawn_port": 9204, "runtime_boot_id": "4242-1700000000000000000",
        "disk_free_gb": 400, "disk_total_gb": 1000, "cpu_usage": 1.5,
        "memory_usage_mb": 4096, "disk_usage_gb": 60, "agent_version": "0.1.0"
    });
    Bytes::from(serde_json::to_vec(&body).expect("JSON"))
}

/// How long a simulated node's bootstrap token stays usable: enrolment uses it at once.
const TOKEN_TTL_S: i64 = 3600;

/// `POST /v1/tokens`: a bootstrap token for simulated node `index` only.
pub fn token_request_body(index: usize) -> Bytes {
    let body = serde_json::json!({ "node_id": node_id(index), "ttl_s": TOKEN_TTL_S });
    Bytes::from(serde_json::to_vec(&body).expect("JSON"))
}

/// `POST /v1/nodes/register` for simulated node `index`, carrying the CSR of its fresh key.
/// The facts match its heartbeats; no `smolvm_address`, so the controller probes nothing.
pub fn register_body(index: usize, csr_pem: &str) -> Bytes {
    let body = serde_json::json!({
        "node_id": node_id(index),
        "hostname": format!("host-{index}"),
        "wg_ip": address(index),
        "spawn_port": 9204,
        "csr_pem": csr_pem,
        "total_cpus": 16, "total_memory_mb": 65536, "total_disk_gb": 1000,
        "kvm_available": index.is_multiple_of(2),
        "agent_version": "0.1.0"
    });
    Bytes::from(serde_json::to_vec(&body).expect("JSON"))
}
