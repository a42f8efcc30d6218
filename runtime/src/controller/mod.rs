//! `fleetwire controller`: the fleet's control plane. It enrolls nodes (by registration, or
//! by a PPN agent's first heartbeat), keeps their state from heartbeats, places VMs on them
//! and serves the API of `schemas/fleet-api.openapi.json` on the PPN controller port, built
//! only on the generated types. See `docs/controller.md`.
//!
//! Its parts are layers, each using only those below it (docs/architecture.md): `config`,
//! `table` (the in-memory node table), `trust` (certificates, identities, tokens), `rules`
//! (pure node rules), then `metrics`, `agent_client` and `shared` (the running
//! [`Controller`]), `fleet` (enrollment, heartbeats, placement, jobs), `http` (routes and
//! handlers), `leadership` and `server` on top. This module only declares them and re-exports
//! what the command line needs; each part imports from the part that defines an item, never
//! through here.

pub mod agent_client;
pub mod config;
pub mod fleet;
pub mod http;
pub mod leadership;
pub mod metrics;
pub mod rules;
pub mod server;
pub mod shared;
pub mod table;
#[cfg(test)]
mod test_support;
pub mod trust;

pub use config::arguments::{ControllerArgs, LogFormat};
pub use config::settings::{Settings, SettingsError};
pub use server::run;
pub use shared::{Controller, Started};
