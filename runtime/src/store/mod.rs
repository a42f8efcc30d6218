//! Durable state of the controller behind one trait, so the embedded SQLite store can be
//! swapped for PostgreSQL without touching the controller.
//!
//! The store keeps one row per node: the node's record, its VM list and the controller's own
//! flags, each as a JSON document serialized from the generated types. Rows are written by a
//! single writer thread ([`writer`]) that batches heartbeat-derived changes (write-behind) and
//! commits registrations, cordons and placements before their request is answered.

pub mod backend;
pub mod batch_rules;
pub mod bootstrap_tokens;
pub mod contact_log;
pub mod error;
pub mod fleet_ca;
pub mod node_rows;
pub mod open;
pub mod postgres;
pub mod postgres_test_schema;
pub mod postgres_tokens;
pub mod sqlite;
#[cfg(test)]
mod suite;
pub mod writer;

pub use backend::{Durability, Store};
pub use error::StoreError;
pub use node_rows::{NodeWrite, StoredNode};
