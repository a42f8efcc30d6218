//! `fleetwire-codegen`: regenerate, check, or publish what `schemas/` defines.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
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

/// Another schema folder than the workspace's (the toolkit, docs/codegen.md).
#[derive(clap::Args)]
struct Inputs {
    /// A folder of `*.schema.json` files: generate for it instead of the workspace's `schemas/`.
    #[arg(long)]
    schemas: Option<PathBuf>,
    /// Its API description (OpenAPI 3.0.3 paths whose bodies reference the schemas).
    #[arg(long, requires = "schemas")]
    api: Option<PathBuf>,
    /// Its example documents (`<dir>/<Document>/valid/*.json`). Default: `examples/` in it.
    #[arg(long, requires = "schemas")]
    examples: Option<PathBuf>,
    /// The crate its generated code is part of (the Rust paths the site shows).
    #[arg(long = "crate", requires = "schemas", default_value = "generated")]
    crate_name: String,
}

impl Inputs {
    /// The toolkit's configuration, when a schema folder is given.
    fn toolkit(&self) -> Option<fleetwire_codegen::toolkit::Toolkit> {
        let mut toolkit = fleetwire_codegen::toolkit::Toolkit::new(self.schemas.clone()?)
            .crate_name(&self.crate_name);
        if let Some(api) = &self.api {
            toolkit = toolkit.api(api);
        }
        if let Some(examples) = &self.examples {
            toolkit = toolkit.examples(examples);
        }
        Some(toolkit)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Rewrite the checked-in generated files (OpenAPI document, type and bundle snapshots).
    /// With `--schemas DIR --out DIR`: write the types, schema facts, root documents, bundle
    /// and OpenAPI documents of any schema folder into `--out`, as a build script would.
    Generate {
        #[command(flatten)]
        inputs: Inputs,
        /// The folder to write into (with `--schemas`).
        #[arg(long, requires = "schemas")]
        out: Option<PathBuf>,
    },
    /// Exit 1, printing a diff, when a checked-in generated file is stale.
    Check,
    /// Write the reference site as a static folder, ready to publish as-is.
    Docs {
        #[command(flatten)]
        inputs: Inputs,
        /// The folder to write (created if missing). Files an earlier run wrote there that are
        /// no longer part of the site are removed; no other file is touched.
        /// Default: `docs-site/dist` in the workspace.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Compare the schemas of smolvm's API (`schemas/smolvm.schema.json`) with smolvm's own
    /// OpenAPI document; exit 1 on any disagreement not listed as a deliberate exception.
    PeerCheck {
        /// smolvm's OpenAPI document (`smolvm serve openapi -o FILE`).
        /// Default: `../shared/reference/smolvm-<version>.openapi.json` beside the workspace,
        /// for the version the schemas describe.
        #[arg(long)]
        openapi: Option<PathBuf>,
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
    if let Command::PeerCheck { openapi } = &cli.command {
        return peer_check(&cli.workspace, openapi.clone());
    }
    if let Command::Generate { inputs, out } = &cli.command {
        if let Some(toolkit) = inputs.toolkit() {
            let out = out
                .as_deref()
                .context("`generate --schemas` needs `--out DIR`")?;
            for path in toolkit.write_to(out)? {
                println!("wrote {}", path.display());
            }
            return Ok(ExitCode::SUCCESS);
        }
    }
    let outputs = match &cli.command {
        Command::Docs { inputs, .. } => match inputs.toolkit() {
            Some(toolkit) => toolkit.generate()?,
            None => fleetwire_codegen::generate(&cli.workspace.join("schemas"))?,
        },
        _ => fleetwire_codegen::generate(&cli.workspace.join("schemas"))?,
    };
    match cli.command {
        Command::Generate { .. } => {
            let changed = fleetwire_codegen::write_checked_in(&outputs, &cli.workspace)?;
            if changed.is_empty() {
                println!("generated files are up to date");
            }
            for path in changed {
                println!("wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Docs { out, .. } => {
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
        Command::PeerCheck { .. } => unreachable!("handled above"),
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

fn peer_check(workspace: &std::path::Path, openapi: Option<PathBuf>) -> Result<ExitCode> {
    use fleetwire_codegen::peer_check;
    let bundle = fleetwire_codegen::Bundle::load(&workspace.join("schemas"))?;
    let version = peer_check::upstream_version(&bundle, "smolvm")?;
    let path = openapi.unwrap_or_else(|| {
        workspace
            .join("../shared/reference")
            .join(format!("smolvm-{version}.openapi.json"))
    });
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading smolvm's OpenAPI document {}", path.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let report = peer_check::check(&bundle, "smolvm", &doc, peer_check::EXCEPTIONS)?;
    for d in &report.disagreements {
        eprintln!("disagreement: {d}");
    }
    for at in &report.unused_exceptions {
        eprintln!("exception {at} matches nothing any more: remove it from peer_check::EXCEPTIONS");
    }
    if report.is_clean() {
        println!(
            "smolvm {version}: {} definitions agree with {} ({} deliberate exceptions)",
            report.checked.len(),
            path.display(),
            peer_check::EXCEPTIONS.len()
        );
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::FAILURE)
    }
}
