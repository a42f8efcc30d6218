//! The in-memory node table and what is read from it: each node's state (`node_state`), its
//! cached serialization (`record_json`), the table with its VM index (`node_table`), the
//! liveness board (`liveness`, `node_counts`), a stored row read back (`restore`), the store
//! writer's view (`table_source`) and `GET /v1/fleet` streamed from it (`fleet_document`).
//! The lowest layer of the controller: it knows the store's row types and nothing above it.

pub mod fleet_document;
pub mod liveness;
pub mod node_counts;
pub mod node_state;
pub mod node_table;
pub mod record_json;
pub mod restore;
pub mod table_source;
