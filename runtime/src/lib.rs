//! fleetwire's programs, built only on the generated types of `fleetwire-types`.

pub mod agent;
pub mod atomic_file;
pub mod bootstrap_token;
pub mod cli;
pub mod cli_values;
pub mod controller;
pub mod document_file;
pub mod drivers;
pub mod file_error;
pub mod fleet_identity;
pub mod http;
pub mod ids;
pub mod loadgen;
pub mod reference_site;
pub mod reported;
pub mod runtimes;
pub mod service_manager;
pub mod shutdown;
pub mod store;
pub mod tls;
pub mod tls_server;
pub mod token_cli;
pub mod unknown_fields;
pub mod up;
pub mod validate;
pub mod workload;
