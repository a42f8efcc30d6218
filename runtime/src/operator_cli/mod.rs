//! `fleetwire nodes`, `fleetwire vms`, `fleetwire fleet`: the operator's commands, on the typed
//! client (`fleetwire-client`), in the style of `kubectl` and `nomad` (docs/operator-cli.md).

mod args;
mod commands;
mod connection;
mod exit;
mod output;
mod transport;

pub use args::{FleetArgs, NodesArgs, VmsArgs};
pub use commands::{fleet, nodes, vms};
pub use connection::{ConnectionArgs, ConnectionError, DEFAULT_URL};
pub use exit::Failure;
pub use transport::explain as explain_transport_failure;
