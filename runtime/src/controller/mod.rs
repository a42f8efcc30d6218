//! `fleetwire controller`: the fleet's control plane. It enrolls nodes (by registration, or
//! by a PPN agent's first heartbeat), keeps their state from heartbeats, places VMs on them
//! and serves the API of `schemas/fleet-api.openapi.json` on the PPN controller port, built
//! only on the generated types. See `docs/controller.md`.
//!
//! This module only declares its parts and re-exports what the command line needs; each part
//! imports from the part that defines an item, never through here.

pub mod agent_client;
pub mod api;
pub mod api_failures;
pub mod arguments;
pub mod certs;
pub mod docs;
pub mod enrollment;
pub mod fleet_document;
pub mod heartbeat;
pub mod heartbeat_answer;
pub mod heartbeat_entries;
pub mod heartbeat_route;
pub mod jobs;
pub mod leadership;
pub mod ledger;
pub mod liveness;
pub mod logging;
pub mod metrics;
pub mod node_changes;
pub mod node_counts;
pub mod node_identity;
pub mod nodes;
pub mod operator_access;
pub mod operator_tokens;
pub mod own_certs;
pub mod placement;
pub mod restore;
pub mod routes;
pub mod server;
pub mod settings;
pub mod shared;
pub mod state;
pub mod table_source;
#[cfg(test)]
mod test_support;

pub use arguments::{ControllerArgs, LogFormat};
pub use server::run;
pub use settings::{Settings, SettingsError};
pub use shared::{Controller, Started};
