//! Command-line entry points.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "fleetwire",
    // One version for the binary, the schema set, the site and the changelog, and which
    // release that is (docs/versioning.md, "One version"): `0.2.0 (unreleased work after
    // release 0.1.0)`.
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("FLEETWIRE_RELEASE_LINE"), ")"),
    about = "Run and inspect a fleet of microVM hosts"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A fleet of one on this machine: a controller and a local agent (process driver), all state
    /// under ./.fleetwire; Ctrl-C stops both.
    Up(crate::up::UpArgs),
    /// Run the fleet controller (enrollment, heartbeats, placement) on port 9203.
    Controller(Box<crate::controller::ControllerArgs>),
    /// Check a wire document (reported.json, a heartbeat, ...) against its schema.
    Validate(crate::validate::ValidateArgs),
    /// Run the node agent: enroll, heartbeat, run machines, write reported.json.
    Agent(Box<crate::agent::AgentArgs>),
    /// The fleet CA: create it before the controller's first start, or check an operator's.
    Ca(crate::ca_cli::CaArgs),
    /// Mint bootstrap tokens that enroll nodes, and operator tokens for the API.
    Token(crate::token_cli::TokenArgs),
    /// List, inspect, cordon, uncordon, drain and unenroll nodes.
    Nodes(crate::operator_cli::NodesArgs),
    /// List, inspect, create and delete VMs.
    Vms(crate::operator_cli::VmsArgs),
    /// The fleet at a glance: node counts by status, and every node (unreachable ones marked).
    Fleet(crate::operator_cli::FleetArgs),
    /// Print the shell completion script: `source <(fleetwire completion bash)`.
    Completion(crate::operator_cli::CompletionArgs),
}

pub fn main() -> ExitCode {
    crate::tls::install_crypto_provider();
    let cli = Cli::parse();
    match cli.command {
        Command::Up(args) => crate::up::run(&args),
        Command::Validate(args) => crate::validate::run(&args),
        Command::Controller(args) => crate::controller::run(*args),
        Command::Agent(args) => crate::agent::run(&args),
        Command::Ca(args) => crate::ca_cli::run(&args),
        Command::Token(args) => crate::token_cli::run(args),
        Command::Nodes(args) => crate::operator_cli::nodes(args),
        Command::Vms(args) => crate::operator_cli::vms(args),
        Command::Fleet(args) => crate::operator_cli::fleet(args),
        Command::Completion(args) => crate::operator_cli::completion(&args, Cli::command()),
    }
}
