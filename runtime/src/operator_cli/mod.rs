//! `fleetwire nodes`, `fleetwire vms`, `fleetwire fleet`, `fleetwire completion`: the
//! operator's commands, on the typed client (`fleetwire-client`), in the style of `kubectl` and
//! `nomad` (docs/operator-cli.md).

mod args;
mod commands;
mod connection;
mod create;
mod drain;
mod exit;
mod output;
mod paint;
mod print;
mod progress;
mod transport;

pub use args::{CompletionArgs, FleetArgs, NodesArgs, VmsArgs};
pub use commands::{completion, fleet, nodes, vms};
pub use connection::{ConnectionArgs, ConnectionError, DEFAULT_URL};
pub use exit::Failure;
pub use transport::explain as explain_transport_failure;
