//! The VM runtimes a node can declare, by the name it registers with. One list for the
//! controller (which refuses unknown names) and the node agent (which resolves its driver).

/// `smolvm`: the smolvm serve API (the default, and what PPN nodes run).
pub const SMOLVM: &str = "smolvm";
/// `process`: plain host processes, for hosts without a microVM runtime.
pub const PROCESS: &str = "process";

/// Every runtime name this build has a driver for.
pub const KNOWN: &[&str] = &[SMOLVM, PROCESS];

/// Whether `name` names a runtime this build knows.
pub fn is_known(name: &str) -> bool {
    KNOWN.contains(&name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_schema_default_is_a_known_runtime() {
        let defaulted: fleetwire_types::RegisterNodeRequest = serde_json::from_value(
            serde_json::json!({"node_id": "n", "hostname": "h", "wg_ip": "10.0.0.1",
                "total_cpus": 1, "total_memory_mb": 1, "total_disk_gb": 1, "kvm_available": false}),
        )
        .unwrap();
        assert!(super::is_known(&defaulted.runtime));
        assert!(!super::is_known("firecracker"));
    }
}
