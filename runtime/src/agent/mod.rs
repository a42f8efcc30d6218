//! `fleetwire agent`: the node agent. It enrolls with the fleet controller and heartbeats to it
//! (docs/agent.md, "Enrollment and heartbeats"), runs the host's machines through a runtime
//! driver, converges them on desired.json, and writes reported.json after every pass.

pub mod args;
pub mod backoff;
pub mod config;
pub mod desired;
pub mod enroll;
pub mod heartbeat;
pub mod host_facts;
pub mod identity;
pub mod local_api;
pub mod meters;
pub mod pass_timing;
pub mod reconcile;
pub mod runtime_tls;
pub mod serve;
pub mod shared;
pub mod trust;
pub mod vm_records;

pub use args::AgentArgs;
pub use serve::{run, serve_until};
