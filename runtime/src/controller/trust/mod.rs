//! Who is who (docs/security.md): the node CA that signs node certificates (`certs`), the
//! controller's own certificates (`own_certs`), a node caller checked against its current
//! certificate (`node_identity`) and the operators' bearer tokens (`operator_tokens`).
//! Checks and keys only: applying them to requests is `http::operator_access` and the node
//! routes' own.

pub mod certs;
pub mod node_identity;
pub mod operator_tokens;
pub mod own_certs;
