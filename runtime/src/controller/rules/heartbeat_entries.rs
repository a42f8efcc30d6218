//! Reading a heartbeat so that one bad entry of its `vms` never discards the node.
//!
//! A heartbeat that is valid is read as before, by the one validated reader and nothing else
//! (the hot path, docs/performance.md). Only when the reader refuses it and every violation
//! lies inside entries of `vms` (e.g. a PPN agent's VM id over the length limit) is the body
//! parsed again: those entries are set aside as `RejectedVm`s with the violation's pointer,
//! the rest is read as the heartbeat, and the node record shows what was set aside
//! (`rejected_vms`, schemas/node.schema.json). Anything else wrong refuses the heartbeat whole.

use std::collections::BTreeMap;

use fleetwire_types::{Accepted, NodeHeartbeat, RejectedVm, Rejection, Violation, WireDocument};
use serde_json::Value;

use crate::http::ApiFailure;

/// At most this many set-aside entries are kept on the node record (the schema's maxItems);
/// the metric counts them all.
pub const MAX_KEPT: usize = 64;

/// A heartbeat read from `bytes` (with the unknown fields it carried, already counted and
/// logged), and the entries of its `vms` that were set aside (all of them, in order; the
/// caller keeps the first [`MAX_KEPT`]).
pub fn read(bytes: &[u8]) -> Result<(Accepted<NodeHeartbeat>, Vec<RejectedVm>), ApiFailure> {
    let (heartbeat, rejected) = match fleetwire_types::read::<NodeHeartbeat>(bytes) {
        Ok(heartbeat) => (heartbeat, Vec::new()),
        Err(rejection) => set_aside(bytes, rejection)?,
    };
    crate::unknown_fields::note(&heartbeat, "request body");
    Ok((heartbeat, rejected))
}

/// The failure path: keeps the heartbeat when only entries of `vms` are bad.
fn set_aside(
    bytes: &[u8],
    rejection: Rejection,
) -> Result<(Accepted<NodeHeartbeat>, Vec<RejectedVm>), ApiFailure> {
    let bad = match &rejection {
        Rejection::Invalid(violations) => bad_entries(violations),
        Rejection::Malformed(_) => None,
    };
    let refuse = || ApiFailure::rejected(NodeHeartbeat::INFO.name, rejection.clone());
    let Some(bad) = bad else {
        return Err(refuse());
    };
    let Ok(mut value) = serde_json::from_slice::<Value>(bytes) else {
        return Err(refuse());
    };
    let Some(vms) = value.get_mut("vms").and_then(Value::as_array_mut) else {
        return Err(refuse());
    };
    let mut rejected = Vec::with_capacity(bad.len());
    let mut kept = Vec::with_capacity(vms.len().saturating_sub(bad.len()));
    for (index, entry) in std::mem::take(vms).into_iter().enumerate() {
        match bad.get(&index) {
            Some(violation) => rejected.push(rejected_vm(index, &entry, violation)),
            None => kept.push(entry),
        }
    }
    *vms = kept;
    match fleetwire_types::read_value::<NodeHeartbeat>(&value) {
        Ok(heartbeat) => Ok((heartbeat, rejected)),
        Err(_) => Err(refuse()),
    }
}

/// The first violation of each bad `vms` entry by index, or `None` when some violation is
/// outside the entries of `vms`.
fn bad_entries(violations: &[Violation]) -> Option<BTreeMap<usize, &Violation>> {
    let mut bad = BTreeMap::new();
    for violation in violations {
        let index = entry_index(violation.instance_path.as_str())?;
        bad.entry(index).or_insert(violation);
    }
    (!bad.is_empty()).then_some(bad)
}

/// `3` for `/vms/3` and `/vms/3/...`.
fn entry_index(pointer: &str) -> Option<usize> {
    let rest = pointer.strip_prefix("/vms/")?;
    let index = rest.split('/').next()?;
    if index.is_empty() || (index.len() > 1 && index.starts_with('0')) {
        return None;
    }
    index.parse().ok()
}

fn rejected_vm(index: usize, entry: &Value, violation: &Violation) -> RejectedVm {
    let vm_id = entry
        .get("vm_id")
        .and_then(Value::as_str)
        .map(|id| safe_text(id, fleetwire_types::VmId::MAX_LENGTH));
    RejectedVm {
        index: u32::try_from(index).unwrap_or(u32::MAX),
        vm_id: vm_id.map(|id| id.parse().expect("safe text is a RejectedVm vm_id")),
        instance_path: violation.instance_path.clone(),
        reason: fleetwire_types::RejectedVmReason::truncated(&safe_text(
            &fleetwire_types::describe(violation),
            fleetwire_types::RejectedVmReason::MAX_LENGTH,
        )),
    }
}

/// The position in the heartbeat's `vms` as sent of the entry at `kept` among those taken
/// (`rejected`: the entries set aside by [`read`], in order).
pub fn original_index(kept: usize, rejected: &[RejectedVm]) -> usize {
    let mut index = kept;
    for entry in rejected {
        if usize::try_from(entry.index).is_ok_and(|r| r <= index) {
            index += 1;
        }
    }
    index
}

/// The set-aside entry for a valid VM that the controller records on node `owner`: a node's
/// heartbeat does not move a VM (issue 28).
pub fn placed_elsewhere(index: usize, vm_id: &fleetwire_types::VmId, owner: &str) -> RejectedVm {
    let reason = format!(
        "/vms/{index}/vm_id: the controller records VM {:?} on node {owner:?}; a heartbeat cannot move a VM to another node",
        safe_text(vm_id.as_str(), fleetwire_types::VmId::MAX_LENGTH)
    );
    RejectedVm {
        index: u32::try_from(index).unwrap_or(u32::MAX),
        vm_id: Some(
            safe_text(vm_id.as_str(), fleetwire_types::VmId::MAX_LENGTH)
                .parse()
                .expect("safe text is a RejectedVm vm_id"),
        ),
        instance_path: format!("/vms/{index}/vm_id")
            .parse()
            .expect("a JSON pointer"),
        reason: fleetwire_types::RejectedVmReason::truncated(&reason),
    }
}

/// `text` cut to `max` characters with control characters and line separators replaced by
/// U+FFFD, so that a peer's string is safe to show in a record and a log line.
fn safe_text(text: &str, max: usize) -> String {
    text.chars()
        .take(max)
        .map(|c| {
            if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn heartbeat(vms: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "node_id": "gpu-01.dc1", "wg_ip": "10.0.0.1", "hostname": "h",
            "ram_total_mb": 8192, "ram_used_mb": 1024, "cpu_cores": 4, "cpu_load_pct": 1.5,
            "kvm_available": true, "vms": vms, "boot_id": "b",
            "timestamp_utc": "2026-01-01T00:00:00Z"
        }))
        .unwrap()
    }

    fn vm(id: &str) -> Value {
        json!({"vm_id": id, "vm_type": "t", "state": "Running", "ram_alloc_mb": 512, "vcpu_count": 1})
    }

    #[test]
    fn a_valid_heartbeat_sets_nothing_aside() {
        let (hb, rejected) = read(&heartbeat(json!([vm("a.b-1764600000")]))).unwrap();
        assert_eq!(hb.value.vms.len(), 1);
        assert!(rejected.is_empty());
    }

    #[test]
    fn bad_entries_are_set_aside_and_the_rest_is_kept() {
        let long = "x".repeat(200);
        let mut no_state = vm("ok-2");
        no_state.as_object_mut().unwrap().remove("state");
        let body = heartbeat(json!([vm("ok-1"), vm(&long), no_state, vm("bad\nid"), 7]));
        let (hb, rejected) = read(&body).unwrap();
        let kept: Vec<&str> = hb.value.vms.iter().map(|v| v.vm_id.as_str()).collect();
        assert_eq!(kept, ["ok-1"]);
        let indexes: Vec<u32> = rejected.iter().map(|r| r.index).collect();
        assert_eq!(indexes, [1, 2, 3, 4]);
        assert_eq!(rejected[0].instance_path.as_str(), "/vms/1/vm_id");
        assert_eq!(rejected[0].vm_id.as_deref().map(|s| s.len()), Some(128));
        assert!(
            rejected[0].reason.starts_with("/vms/1/vm_id: "),
            "{}",
            *rejected[0].reason
        );
        assert_eq!(
            rejected[1].vm_id.as_deref().map(|s| s.as_str()),
            Some("ok-2")
        );
        assert_eq!(rejected[1].instance_path.as_str(), "/vms/2");
        assert_eq!(
            rejected[2].vm_id.as_deref().map(|s| s.as_str()),
            Some("bad\u{FFFD}id")
        );
        assert_eq!(rejected[3].vm_id, None);
        assert_eq!(rejected[3].instance_path.as_str(), "/vms/4");
    }

    #[test]
    fn anything_wrong_outside_the_entries_refuses_the_heartbeat() {
        let mut body: Value =
            serde_json::from_slice(&heartbeat(json!([vm(&"x".repeat(200))]))).unwrap();
        body["node_id"] = json!("bad id");
        let failure = read(&serde_json::to_vec(&body).unwrap()).unwrap_err();
        assert_eq!(failure.status, 400);
        assert!(failure
            .body
            .violations
            .iter()
            .any(|v| v.instance_path.as_str() == "/node_id"));
        body["node_id"] = json!("n1");
        body["vms"] = json!("not an array");
        assert!(read(&serde_json::to_vec(&body).unwrap()).is_err());
        assert!(read(b"{").is_err());
    }

    #[test]
    fn positions_among_the_kept_entries_map_back_to_the_heartbeat_as_sent() {
        let body = heartbeat(json!([vm("k0"), 7, vm("k1"), 8, 9, vm("k2")]));
        let (hb, rejected) = read(&body).unwrap();
        let sent: Vec<usize> = (0..hb.value.vms.len())
            .map(|kept| original_index(kept, &rejected))
            .collect();
        assert_eq!(sent, [0, 2, 5]);
        let entry = placed_elsewhere(2, &hb.value.vms[1].vm_id, "n2");
        assert_eq!(entry.instance_path.as_str(), "/vms/2/vm_id");
        assert_eq!(entry.vm_id.as_deref().map(|s| s.as_str()), Some("k1"));
        assert!(entry.reason.contains("on node \"n2\""), "{}", *entry.reason);
    }

    #[test]
    fn entry_indexes_are_read_from_pointers() {
        assert_eq!(entry_index("/vms/0"), Some(0));
        assert_eq!(entry_index("/vms/12/vm_id"), Some(12));
        assert_eq!(entry_index("/vms"), None);
        assert_eq!(entry_index("/vms/01"), None);
        assert_eq!(entry_index("/node_id"), None);
    }
}
