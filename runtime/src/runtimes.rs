//! The VM runtimes this build has a driver for: one enum for the controller (which refuses other
//! names at registration) and the node agent (which resolves its driver by it). On the wire a
//! runtime is the schema's open [`RuntimeName`] (any lower-case name, so that an unknown one is
//! answered `unknown_runtime`, docs/controller.md); [`Runtime`] is the closed set of those names
//! this build knows, converted to and from it here and nowhere else.

use fleetwire_types::RuntimeName;

/// A runtime this build drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// The smolvm serve API (the schema's default runtime, and what PPN nodes run).
    Smolvm,
    /// Plain host processes, for hosts without a microVM runtime.
    Process,
}

impl Runtime {
    /// Every runtime, in the order the controller lists them.
    pub const ALL: [Runtime; 2] = [Runtime::Smolvm, Runtime::Process];

    /// The name it registers with (`RegisterNodeRequest.runtime`) and `VM_RUNTIME` takes.
    pub const fn name(self) -> &'static str {
        match self {
            Runtime::Smolvm => "smolvm",
            Runtime::Process => "process",
        }
    }

    /// The runtime named `name` on the wire, if this build knows it.
    pub fn of(name: &RuntimeName) -> Option<Runtime> {
        name.parse().ok()
    }

    /// Its name as the schema's type.
    pub fn wire_name(self) -> RuntimeName {
        self.into()
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of [`Runtime::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no runtime named {0:?}")]
pub struct UnknownRuntime(pub String);

impl std::str::FromStr for Runtime {
    type Err = UnknownRuntime;

    fn from_str(name: &str) -> Result<Runtime, UnknownRuntime> {
        Runtime::ALL
            .into_iter()
            .find(|r| r.name() == name)
            .ok_or_else(|| UnknownRuntime(name.to_string()))
    }
}

impl From<Runtime> for RuntimeName {
    fn from(runtime: Runtime) -> RuntimeName {
        runtime
            .name()
            .parse()
            .expect("every runtime's name is a RuntimeName")
    }
}

/// `smolvm`, as a constant for `match` patterns on a wire name.
pub const SMOLVM: &str = Runtime::Smolvm.name();
/// `process`, as a constant for `match` patterns on a wire name.
pub const PROCESS: &str = Runtime::Process.name();

/// Every runtime name this build has a driver for, in [`Runtime::ALL`]'s order.
pub const KNOWN: &[&str] = &[SMOLVM, PROCESS];

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
        assert_eq!(Runtime::of(&defaulted.runtime), Some(Runtime::Smolvm));
        assert!(!is_known("firecracker"));
    }

    #[test]
    fn every_runtime_round_trips_through_its_wire_name() {
        assert_eq!(KNOWN.len(), Runtime::ALL.len());
        for (runtime, name) in Runtime::ALL.into_iter().zip(KNOWN) {
            assert_eq!(runtime.to_string(), *name);
            assert_eq!(Runtime::of(&runtime.wire_name()), Some(runtime));
            assert!(is_known(name));
        }
        assert_eq!(
            "Smolvm".parse::<Runtime>(),
            Err(UnknownRuntime("Smolvm".into()))
        );
    }
}
