//! Durable state of the controller behind its traits (`backend::Store` for the nodes,
//! `tokens::BootstrapTokenStore` for bootstrap tokens, `fleet_ca::pin` for the fleet CA), so
//! the embedded SQLite store can be swapped for PostgreSQL without touching the controller.
//! Each backend is a folder of its own (`sqlite/`, `postgres/`) that imports only the shared
//! parts, never the other backend.
//!
//! The store keeps one row per node: the node's record, its VM list and the controller's own
//! flags, each as a JSON document serialized from the generated types. Rows are written by a
//! single writer thread ([`writer`]) that batches heartbeat-derived changes (write-behind) and
//! commits registrations, cordons and placements before their request is answered.

pub mod backend;
pub mod batch_rules;
pub mod contact_log;
pub mod error;
pub mod fleet_ca;
pub mod fleet_ca_row;
pub mod node_rows;
pub mod open;
pub mod postgres;
pub mod sqlite;
#[cfg(test)]
mod suite;
pub mod tokens;
pub mod writer;

pub use backend::{Durability, Store};
pub use error::StoreError;
pub use node_rows::{NodeWrite, StoredNode};
