//! `fleetwire-codegen`: regenerate, check, or publish what `schemas/` defines.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use fleetwire_codegen::config::Config;

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
    /// Rewrite the checked-in generated files (the OpenAPI documents, the generated crates' sources).
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
    /// Classify every change of the schema set since a git revision, per direction of the
    /// wire (docs/versioning.md); exit 1 when a change is breaking and the schema-set version
    /// was not raised by a major step.
    Diff {
        /// The revision to compare against: a release tag (`schemas-v0.1.0`), `HEAD~1`, …
        #[arg(
            long,
            required_unless_present = "base_dir",
            conflicts_with = "base_dir"
        )]
        base: Option<String>,
        /// The revision to check. Default: the working tree.
        #[arg(long, conflicts_with = "head_dir")]
        head: Option<String>,
        /// A folder of schemas to compare against instead of a revision (a release under
        /// `schemas/releases/`, another project's set).
        #[arg(long)]
        base_dir: Option<PathBuf>,
        /// A folder of schemas to check instead of the working tree's `schemas/`.
        #[arg(long)]
        head_dir: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Record the schema set as released: copy it to `schemas/releases/<version>/` (the site's
    /// changelog compares releases), after checking it against the previous release.
    Release,
    /// Write an OpenAPI document as an API fuzzer must read it: each request body marked
    /// `x-fleetwire-unknown-fields: warn` refers to open copies (`<Type>AsRead`) of the closed
    /// types it reaches, since the servers set unknown fields aside instead of refusing them.
    AsRead {
        /// A document `generate` wrote (`generated/openapi/*.json`).
        document: PathBuf,
        /// Where to write the fuzzer's view.
        out: PathBuf,
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

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Text,
    Json,
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
    match &cli.command {
        Command::PeerCheck { openapi } => return peer_check(&cli.workspace, openapi.clone()),
        Command::AsRead { document, out } => return as_read(document, out),
        Command::Diff {
            base,
            head,
            base_dir,
            head_dir,
            format,
        } => {
            let base = match (base, base_dir) {
                (Some(rev), _) => Side::Revision(rev.clone()),
                (None, Some(dir)) => Side::Folder(dir.clone()),
                (None, None) => unreachable!("clap requires one"),
            };
            let head = match (head, head_dir) {
                (Some(rev), _) => Side::Revision(rev.clone()),
                (None, Some(dir)) => Side::Folder(dir.clone()),
                (None, None) => Side::Folder(cli.workspace.join("schemas")),
            };
            return diff(&cli.workspace, &base, &head, *format);
        }
        Command::Release => return release(&cli.workspace),
        _ => {}
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
    let fleetwire =
        || fleetwire_codegen::Generation::load(&Config::fleetwire(&cli.workspace.join("schemas")));
    match cli.command {
        Command::Generate { .. } => {
            let changed = fleetwire_codegen::write_checked_in(&fleetwire()?, &cli.workspace)?;
            if changed.is_empty() {
                println!("generated files are up to date");
            }
            for path in changed {
                println!("wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Docs { inputs, out } => {
            let outputs = match inputs.toolkit() {
                Some(toolkit) => toolkit.generate()?,
                None => fleetwire()?.all()?,
            };
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
        Command::PeerCheck { .. }
        | Command::Diff { .. }
        | Command::Release
        | Command::AsRead { .. } => {
            unreachable!("handled above")
        }
        Command::Check => {
            let stale = fleetwire_codegen::stale_files(&fleetwire()?, &cli.workspace)?;
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

/// One side of `diff`: a git revision of the workspace, or a folder.
enum Side {
    Revision(String),
    Folder(PathBuf),
}

impl Side {
    /// The side's schemas (a revision's in a temporary folder kept while it is alive) and its
    /// label for the report.
    fn load(
        &self,
        workspace: &std::path::Path,
    ) -> Result<(fleetwire_codegen::Bundle, String, Option<tempfile::TempDir>)> {
        use fleetwire_codegen::{git_revision, Bundle};
        match self {
            Side::Revision(rev) => {
                let dir = git_revision::schemas_at(workspace, rev)?;
                let bundle = Bundle::load(dir.path())
                    .map_err(|err| err.context(format!("loading the schemas of `{rev}`")))?;
                let label = match git_revision::resolve(workspace, rev) {
                    Ok(commit) if !commit.starts_with(rev.as_str()) => {
                        format!("{rev} ({})", &commit[..12.min(commit.len())])
                    }
                    _ => rev.clone(),
                };
                Ok((bundle, label, Some(dir)))
            }
            Side::Folder(dir) => {
                let bundle = Bundle::load(dir)?;
                let label = if *dir == workspace.join("schemas") {
                    "working tree".to_string()
                } else {
                    dir.display().to_string()
                };
                Ok((bundle, label, None))
            }
        }
    }
}

fn diff(workspace: &std::path::Path, base: &Side, head: &Side, format: Format) -> Result<ExitCode> {
    use fleetwire_codegen::{schema_diff, wire};
    let (base_set, base_label, _base_dir) = base.load(workspace)?;
    let (head_set, head_label, _head_dir) = head.load(workspace)?;
    // The head is what ships: every root document must say who writes and reads it.
    wire::of_roots(&head_set)?;
    let report = schema_diff::diff(&base_set, &head_set, &base_label, &head_label);
    match format {
        Format::Text => print!("{}", schema_diff::text(&report)),
        Format::Json => print!("{}", schema_diff::json(&report)),
    }
    if report.verdict.ok {
        Ok(ExitCode::SUCCESS)
    } else {
        if matches!(format, Format::Json) {
            eprintln!("{}", report.verdict.message);
        }
        Ok(ExitCode::FAILURE)
    }
}

fn release(workspace: &std::path::Path) -> Result<ExitCode> {
    let released = fleetwire_codegen::releases::release(&workspace.join("schemas"))?;
    match released {
        fleetwire_codegen::releases::Released::Already(version) => {
            println!("{version} is already released, with these very files");
        }
        fleetwire_codegen::releases::Released::Written { version, dir, diff } => {
            if let Some(diff) = diff {
                print!("{}", fleetwire_codegen::schema_diff::text(&diff));
            }
            println!(
                "released {version} into {}; commit it and tag the commit `{}`",
                dir.display(),
                fleetwire_codegen::releases::tag(&version)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
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

fn as_read(document: &std::path::Path, out: &std::path::Path) -> Result<ExitCode> {
    let text = std::fs::read_to_string(document)
        .with_context(|| format!("reading {}", document.display()))?;
    let doc: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON", document.display()))?;
    let read = fleetwire_codegen::openapi_as_read::as_read(doc)
        .with_context(|| document.display().to_string())?;
    std::fs::write(out, serde_json::to_string_pretty(&read)?)
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(ExitCode::SUCCESS)
}
