//! `fleetwire-codegen`: regenerate, check, or publish what `schemas/` defines.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    version,
    about = "Generate fleetwire's types, OpenAPI document and reference site from schemas/"
)]
struct Cli {
    /// The workspace root (the folder holding `schemas/`).
    #[arg(long, global = true, default_value_os_t = default_workspace())]
    workspace: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Rewrite the checked-in generated files (OpenAPI document, type and bundle snapshots).
    Generate,
    /// Exit 1, printing a diff, when a checked-in generated file is stale.
    Check,
    /// Write the reference site as a static folder, ready to publish as-is.
    Docs {
        /// The folder to write (created if missing). Files an earlier run wrote there that are
        /// no longer part of the site are removed; no other file is touched.
        /// Default: `docs-site/dist` in the workspace.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn default_workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let outputs = fleetwire_codegen::generate(&cli.workspace.join("schemas"))?;
    match cli.command {
        Command::Generate => {
            let changed = fleetwire_codegen::write_checked_in(&outputs, &cli.workspace)?;
            if changed.is_empty() {
                println!("generated files are up to date");
            }
            for path in changed {
                println!("wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Docs { out } => {
            let out = out.unwrap_or_else(|| cli.workspace.join("docs-site").join("dist"));
            let published = fleetwire_codegen::site::publish(&outputs.model, &out)?;
            for stale in &published.removed {
                println!("removed {}", stale.display());
            }
            let written = published.written;
            println!(
                "wrote the reference site ({} files) to {}; open {}",
                written.len(),
                out.display(),
                out.join("index.html").display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Check => {
            let stale = fleetwire_codegen::stale_files(&outputs, &cli.workspace);
            for file in &stale {
                eprintln!("{} is stale:\n{}", file.path.display(), file.diff);
            }
            if stale.is_empty() {
                println!("generated files are up to date");
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("run `cargo run -p fleetwire-codegen -- generate` to refresh them");
                Ok(ExitCode::FAILURE)
            }
        }
    }
}
