//! The crates as their users see them: the typed client against a live controller, the
//! generated crates packaged and used downstream, and the module graph of every crate.

mod agent_client;
mod client;
mod downstream;
mod module_graph;
mod one_version;
mod workspace_manifest;
