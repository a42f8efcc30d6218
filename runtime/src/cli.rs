//! Command-line entry points.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "fleetwire",
    version,
    about = "Run and inspect a fleet of microVM hosts"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a wire document (reported.json, a heartbeat, ...) against its schema.
    Validate(crate::validate::ValidateArgs),
    /// Run the node agent: enroll, heartbeat, run machines, write reported.json.
    Agent(Box<crate::agent::AgentArgs>),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Validate(args) => crate::validate::run(&args),
        Command::Agent(args) => crate::agent::run(&args),
    }
}
