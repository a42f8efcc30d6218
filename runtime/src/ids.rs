//! Fleet ids (node, VM and tenant ids as wide as PPN fleets use them: `NodeId`, `VmId`,
//! `TenantId` in schemas/node.schema.json) and the one mapping from such an id to the narrow
//! identifiers of the documents nibrunner reads (reported.json's `hostId`, desired.json's
//! `appId` and `deploymentId`) and of a runtime's machine names.
//!
//! The mapping (docs/interop.md, "PPN"): an id that is already a valid narrow identifier is
//! kept as it is, so every id fleetwire accepted before ids were widened maps to itself. Any
//! other id becomes a readable prefix (ASCII letters, digits and `_` kept, every other run of
//! characters turned into one `-`, at most [`PREFIX_CHARS`] characters) followed by `-` and
//! the first 12 hex digits (48 bits) of the SHA-256 of the original id, so two different ids
//! map to the same identifier only by a hash collision; the agent refuses a spawn whose
//! mapped id is already taken (409) rather than merge two VMs. The original id stays visible
//! beside the mapped one (desired.json's `vmId`, the VM records' `vm_id`).

use fleetwire_types::{AppId, DeploymentId, HostId, NodeId, VmId};

/// Longest narrow identifier: nibrunner's identifiers are at most 63 characters
/// (`HostId` in schemas/reported-state.schema.json).
pub const MAX_LOCAL_CHARS: usize = 63;

/// Hex digits of the hash suffix.
const HASH_HEX: usize = 12;

/// Longest readable prefix before the `-` and the hash suffix.
pub const PREFIX_CHARS: usize = MAX_LOCAL_CHARS - 1 - HASH_HEX;

/// What a VM id fleetwire makes up starts with; 16 random hex digits follow.
const NEW_VM_ID_PREFIX: &str = "vm-";
const NEW_VM_ID_CHARS: usize = NEW_VM_ID_PREFIX.len() + 16;
// A made-up id fits the schema's `VmId` bounds (its pattern only refuses control characters).
const _: () = assert!(NEW_VM_ID_CHARS >= VmId::MIN_LENGTH && NEW_VM_ID_CHARS <= VmId::MAX_LENGTH);

/// Why `node_id` cannot be a node's id, or `None` when it can (issue 28). Compared as DNS
/// compares names (ASCII case ignored), since the id becomes the DNS name of the node's
/// certificate: route names under `/v1/nodes/` (`GET /v1/nodes/register` would not reach
/// the node), and names of the local host (RFC 6761), which a node certificate must never be
/// valid for.
pub fn reserved_node_id(node_id: &str) -> Option<&'static str> {
    const ROUTES: [&str; 2] = ["register", "heartbeat"];
    const LOCAL: &str = "localhost";
    if ROUTES.iter().any(|r| node_id.eq_ignore_ascii_case(r)) {
        return Some("it is the name of a route under /v1/nodes/");
    }
    let local = node_id.eq_ignore_ascii_case(LOCAL)
        || node_id.eq_ignore_ascii_case("localhost.localdomain")
        || node_id
            .len()
            .checked_sub(LOCAL.len() + 1)
            .and_then(|dot| node_id.get(dot..))
            .is_some_and(|tail| tail.eq_ignore_ascii_case(".localhost"));
    local.then_some("it names the local host (RFC 6761), which a node certificate must not")
}

/// A fresh VM id, for a create or spawn request that names none (the controller's and the
/// agent's local API alike): `vm-` and 16 random hex digits.
pub fn new_vm_id() -> VmId {
    let bits: u64 = rand::random();
    format!("{NEW_VM_ID_PREFIX}{bits:016x}")
        .parse()
        .expect("`vm-` and 16 hex digits make a VmId")
}

/// Whether `id` is valid as it is in every narrow namespace: nibrunner's identifier syntax
/// (a letter or digit, then up to 62 letters, digits, `_` or `-`) and a smolvm machine name
/// (no `--`, not ending in `-`).
pub fn is_local(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_LOCAL_CHARS
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
        && !id.contains("--")
        && !id.ends_with('-')
}

/// The narrow identifier for the fleet id `id` (see the module's documentation).
pub fn local_id(id: &str) -> String {
    if is_local(id) {
        return id.to_string();
    }
    let mut prefix = String::with_capacity(PREFIX_CHARS);
    for c in id.chars() {
        if prefix.len() == PREFIX_CHARS {
            break;
        }
        if c.is_ascii_alphanumeric() || c == '_' {
            prefix.push(c);
        } else if !prefix.is_empty() && !prefix.ends_with('-') {
            prefix.push('-');
        }
    }
    // A narrow id starts with a letter or digit, and the `-` before the hash must not make `--`.
    let prefix = prefix.trim_start_matches('_').trim_end_matches('-');
    let prefix = if prefix.is_empty() { "id" } else { prefix };
    let digest = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
    let mut out = format!("{prefix}-");
    for byte in &digest.as_ref()[..HASH_HEX / 2] {
        out.push_str(&format!("{byte:02x}"));
    }
    debug_assert!(is_local(&out), "{out:?} is a narrow id");
    out
}

/// The `hostId` of reported.json, meters.json and desired.json for the node `node_id`.
pub fn host_id(node_id: &NodeId) -> HostId {
    local_id(node_id.as_str())
        .parse()
        .expect("a mapped id is a HostId")
}

/// The `appId` of the desired.json instance that runs the VM `vm_id`.
pub fn app_id(vm_id: &VmId) -> AppId {
    local_id(vm_id.as_str())
        .parse()
        .expect("a mapped id is an AppId")
}

/// The `deploymentId` of the desired.json instance that runs the VM `vm_id`.
pub fn deployment_id(vm_id: &VmId) -> DeploymentId {
    local_id(vm_id.as_str())
        .parse()
        .expect("a mapped id is a DeploymentId")
}

/// `id` as one percent-encoded URL path segment (`/`, `%`, spaces, `?`, `#` and every
/// non-ASCII byte encoded), for building `.../v1/vms/{vm_id}`.
pub fn path_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_ids_map_to_themselves() {
        for id in [
            "n1",
            "gcp-cloud-1",
            "vm-0123456789abcdef",
            "a_b",
            &"x".repeat(63),
        ] {
            assert_eq!(local_id(id), id);
        }
    }

    #[test]
    fn wide_ids_get_a_readable_prefix_and_a_hash() {
        let mapped = local_id("gpu-01.dc1");
        assert!(mapped.starts_with("gpu-01-dc1-"), "{mapped}");
        assert_eq!(mapped.len(), "gpu-01-dc1-".len() + 12);
        assert!(is_local(&mapped));
        // Deterministic: the same id always maps to the same identifier.
        assert_eq!(local_id("gpu-01.dc1"), mapped);
        // The hash is the SHA-256 of the original id, so this value never changes.
        assert_eq!(mapped, "gpu-01-dc1-db0d99220d33");
    }

    #[test]
    fn ids_that_sanitize_alike_stay_apart() {
        let a = local_id("gpu-01.dc1");
        let b = local_id("gpu-01_dc1".replace('_', " ").as_str());
        let c = local_id("gpu-01..dc1");
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_ne!(b, c);
    }

    #[test]
    fn every_kind_of_wide_id_becomes_a_valid_narrow_id() {
        let long_type = "A".repeat(64);
        let cases = [
            "acme.corp".to_string(),
            "gpu large-1764600000".to_string(),
            format!("{}-1764600000", long_type.to_lowercase()),
            "--x--".to_string(),
            "x-".to_string(),
            "_x".to_string(),
            "日本語".to_string(),
            "a/b?c#d%e".to_string(),
            "x".repeat(64),
            "node.".repeat(50),
        ];
        for id in &cases {
            let mapped = local_id(id);
            assert!(is_local(&mapped), "{id:?} -> {mapped:?}");
            assert!(mapped.len() <= MAX_LOCAL_CHARS);
            mapped.parse::<HostId>().unwrap();
            mapped.parse::<AppId>().unwrap();
            mapped.parse::<fleetwire_types::MachineName>().unwrap();
        }
        assert!(local_id("日本語").starts_with("id-"));
        assert!(local_id("--x--").starts_with("x-"));
    }

    #[test]
    fn typed_mappings_agree_with_local_id() {
        let node: NodeId = "gpu-01.dc1.example.org".parse().unwrap();
        assert_eq!(host_id(&node).as_str(), local_id(node.as_str()));
        let vm: VmId = "gpu.large-1764600000".parse().unwrap();
        assert_eq!(app_id(&vm).as_str(), local_id(vm.as_str()));
        assert_eq!(deployment_id(&vm).as_str(), app_id(&vm).as_str());
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(path_segment("vm-1.a"), "vm-1.a");
        assert_eq!(path_segment("gpu large/1"), "gpu%20large%2F1");
        assert_eq!(path_segment("é%"), "%C3%A9%25");
    }

    #[test]
    fn route_names_and_local_host_names_are_reserved_node_ids() {
        for reserved in [
            "register",
            "Heartbeat",
            "localhost",
            "LOCALHOST",
            "a.localhost",
            "localhost.localdomain",
        ] {
            assert!(reserved_node_id(reserved).is_some(), "{reserved}");
        }
        for fine in [
            "gpu-01.dc1",
            "registered",
            "localhost-1",
            "mylocalhost",
            "localhost.dc1",
        ] {
            assert_eq!(reserved_node_id(fine), None, "{fine}");
        }
    }
}
