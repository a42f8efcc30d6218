//! The VM runtimes this build has a driver for: the schema's `KnownRuntime` (generated, with
//! every value in `Runtime::ALL` and its spelling in `as_str`), used by the controller (which
//! refuses other names at registration) and the node agent (which resolves its driver by it).
//! On the wire a runtime is the schema's open [`RuntimeName`] (any lower-case name, so that an
//! unknown one is answered `unknown_runtime`, docs/controller.md); this module converts between
//! the two, and nothing else spells a runtime's name.

use fleetwire_types::RuntimeName;

/// A runtime this build drives (`smolvm`, `process`, `qemu`): generated from the schema.
pub use fleetwire_types::KnownRuntime as Runtime;

/// The runtime named `name` on the wire, if this build drives it.
pub fn of(name: &RuntimeName) -> Option<Runtime> {
    name.parse().ok()
}

/// A runtime's name as the schema's open type.
pub fn wire_name(runtime: Runtime) -> RuntimeName {
    runtime
        .as_str()
        .parse()
        .expect("every KnownRuntime is a RuntimeName")
}

/// `smolvm`, as a constant for `match` patterns on a wire name.
pub const SMOLVM: &str = Runtime::Smolvm.as_str();
/// `process`, as a constant for `match` patterns on a wire name.
pub const PROCESS: &str = Runtime::Process.as_str();
/// `qemu`, as a constant for `match` patterns on a wire name.
pub const QEMU: &str = Runtime::Qemu.as_str();

/// Every runtime name this build has a driver for, in [`Runtime::ALL`]'s order.
pub const KNOWN: [&str; Runtime::ALL.len()] = {
    let mut names = [""; Runtime::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = Runtime::ALL[i].as_str();
        i += 1;
    }
    names
};

/// Whether `name` names a runtime this build knows.
pub fn is_known(name: &str) -> bool {
    name.parse::<Runtime>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_default_is_a_known_runtime() {
        let defaulted: fleetwire_types::RegisterNodeRequest = serde_json::from_value(
            serde_json::json!({"node_id": "n", "hostname": "h", "wg_ip": "10.0.0.1",
                "total_cpus": 1, "total_memory_mb": 1, "total_disk_gb": 1, "kvm_available": false}),
        )
        .unwrap();
        assert_eq!(of(&defaulted.runtime), Some(Runtime::Smolvm));
        assert!(!is_known("firecracker"));
    }

    #[test]
    fn every_runtime_round_trips_through_its_wire_name() {
        assert_eq!(KNOWN, ["smolvm", "process", "qemu"]);
        for (runtime, name) in Runtime::ALL.into_iter().zip(KNOWN) {
            assert_eq!(runtime.to_string(), name);
            assert_eq!(of(&wire_name(runtime)), Some(runtime));
            assert!(is_known(name));
        }
        assert!("Smolvm".parse::<Runtime>().is_err());
    }
}
