//! fleetwire-codegen: every output is a function of one [`Bundle`] of `schemas/`.
//!
//! - [`rust`]: the types (typify) and the root-document table the validators hang off;
//! - [`openapi`]: the bundled OpenAPI documents (3.0.3, and 3.1.0 with the schemas as they are);
//! - [`client`]: the typed client's operations (`fleetwire-client`), from the API description;
//! - `model` and `site` (feature `site`): the documentation model and the reference site
//!   rendered from it with askama;
//! - the bundle itself, embedded in `fleetwire-types` for the validators.
//!
//! The generated crates (`generated/*`, [`GeneratedCrate`]) build from checked-in copies of
//! their sources, so they package without this crate; their build scripts run this crate's
//! command line ([`write_crate_sources`]) only inside the workspace, when `schemas/` has
//! changed since the copies were written. The runtime's build script calls
//! `write_site_out_dir` to compile the reference site into the controller. [`checked_in`]
//! lists the copies kept in the repository, which `fleetwire-codegen check` (and a test)
//! compare against a fresh generation.

pub mod bounded;
pub mod build_stamp;
pub mod bundle;
pub mod client;
pub mod config;
pub mod exactness;
pub mod examples;
pub mod git_revision;
pub mod keywords;
#[cfg(feature = "site")]
pub mod model;
pub mod nullability;
pub mod openapi;
pub mod openapi_as_read;
pub mod output_file;
pub mod peer_check;
pub mod policy_sentences;
pub mod releases;
pub mod replacements;
pub mod rust;
pub mod schema_diff;
pub mod schema_set;
#[cfg(feature = "site")]
pub mod site;
#[cfg(feature = "site")]
pub mod site_changelog;
pub mod string_enums;
pub mod string_lengths;
pub mod target;
pub mod toolkit;
pub mod typify_impls;
pub mod wire;

use std::path::{Path, PathBuf};

use output_file::write_if_changed;

use anyhow::{Context, Result};

pub use bundle::Bundle;

pub use config::{AGENT_API_30_FILE, AGENT_API_31_FILE};
/// fleetwire's two OpenAPI documents' file names.
pub use config::{FLEET_API_30_FILE as OPENAPI_30_FILE, FLEET_API_31_FILE as OPENAPI_31_FILE};

/// Everything generated from one reading of `schemas/`.
#[derive(Debug, Clone)]
pub struct Outputs {
    pub bundle: Bundle,
    /// The documentation model the reference site is rendered from.
    #[cfg(feature = "site")]
    pub model: model::Model,
    /// `types.rs`: every definition as a Rust type.
    pub types_rs: String,
    /// `facts.rs`: the root-document table and the other schema facts the hand-written code
    /// reads (the `Timestamp` pattern, the schema files, the strict deserializer's tables).
    pub facts_rs: String,
    /// `documents.rs`: the root documents' `WireDocument` impls and by-name readers.
    pub documents_rs: String,
    /// `bundle.schema.json`: all definitions in one file, local references only.
    pub bundle_json: String,
    /// `fleet-api.json`: the bundled OpenAPI 3.0.3 document.
    pub openapi_json: Option<String>,
    /// `fleet-api.3.1.json`: the same API as OpenAPI 3.1.0, its schemas in draft 2020-12.
    pub openapi_31_json: Option<String>,
    /// `agent-api.json` and `agent-api.3.1.json`: the node agent's local API, the same two ways.
    pub agent_openapi_json: Option<String>,
    pub agent_openapi_31_json: Option<String>,
    /// Every top-level file of the schema folder as read (file name, text): the inputs a
    /// generated crate embeds and its build script compares with the workspace's schemas.
    pub inputs: Vec<(String, String)>,
    /// The typed client's operations (`fleetwire-client`), from the API description.
    pub client_rs: Option<String>,
}

/// Reads fleetwire's `schemas_dir` once and generates every output from it.
pub fn generate(schemas_dir: &Path) -> Result<Outputs> {
    generate_with(&config::Config::fleetwire(schemas_dir))
}

/// Reads the schemas `config` names once and generates every output from them.
pub fn generate_with(config: &config::Config) -> Result<Outputs> {
    let bundle = Bundle::load_with_api(&config.schemas_dir, config.api_file.as_deref())?;
    let schemas_dir = config.schemas_dir.as_path();
    let inputs = read_inputs(schemas_dir)?;
    // Every root document of a versioned set says who writes and reads it (the site's policy,
    // `diff`'s directions); a folder without `schema-set.json` has no releases to judge, and its
    // annotations, if any, are still checked (docs/versioning.md, "Directions").
    if bundle.set.is_some() {
        wire::of_roots(&bundle)?;
    } else {
        for root in &bundle.roots {
            wire::of(&root.name, &bundle.defs[&root.name])?;
        }
    }
    // One type space for both the Rust output and the Rust names the site anchors.
    let space = rust::type_space_for(&bundle, config.target.clone())?;
    let types_rs = rust::types(&space)?;
    let facts_rs = rust::facts(&bundle, &rust::closed_structs(&space)?, &space.target)?;
    let documents_rs = rust::documents(&bundle);
    let bundle_json = pretty(&bundle.to_value())?;
    // The API documents carry the fixtures as their bodies' examples (docs/reference-site.md).
    let examples_dir = &config.examples_dir;
    let openapi_json = openapi::document(&bundle)?
        .map(|doc| pretty(&openapi::with_examples(doc, examples_dir)?))
        .transpose()?;
    let openapi_31_json = openapi::document_31(&bundle)?
        .map(|doc| pretty(&openapi::with_examples(doc, examples_dir)?))
        .transpose()?;
    let (agent_openapi_json, agent_openapi_31_json) = match &config.agent_api_file {
        Some(path) => {
            let agent = agent_bundle(&bundle, path)?;
            let named = || format!("the node agent's API ({})", path.display());
            (
                openapi::document(&agent)
                    .with_context(named)?
                    .map(|doc| pretty(&openapi::with_examples(doc, examples_dir)?))
                    .transpose()?,
                openapi::document_31(&agent)
                    .with_context(named)?
                    .map(|doc| pretty(&openapi::with_examples(doc, examples_dir)?))
                    .transpose()?,
            )
        }
        None => (None, None),
    };
    // The typed client is fleetwire's (`fleetwire-client`), built on its types.
    let client_rs = match config.target.is_fleetwire() {
        true => client::client(&bundle)?,
        false => None,
    };
    #[cfg(feature = "site")]
    let model = {
        let mut model = model::Model::build(&bundle, &space, &config.examples_dir)?;
        // The site offers both documents beside the API page (docs/reference-site.md).
        for (name, text) in config
            .openapi_files
            .iter()
            .zip([&openapi_json, &openapi_31_json])
        {
            if let Some(text) = text {
                model.openapi_files.push((name.clone(), text.clone()));
            }
        }
        model.stamp = build_stamp::of(schemas_dir, &bundle);
        model.changelog = releases::history(schemas_dir, &bundle)?;
        model
    };
    Ok(Outputs {
        bundle,
        #[cfg(feature = "site")]
        model,
        types_rs,
        facts_rs,
        documents_rs,
        bundle_json,
        openapi_json,
        openapi_31_json,
        agent_openapi_json,
        agent_openapi_31_json,
        inputs,
        client_rs,
    })
}

/// The same definitions with the node agent's API description at `path` in place of the
/// controller's: its OpenAPI documents reach into the one schema set (docs/agent.md).
fn agent_bundle(bundle: &Bundle, path: &Path) -> Result<Bundle> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut api: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))?;
    if let Some(set) = &bundle.set {
        bundle::stamp_api_version(&mut api, &set.version)?;
    }
    policy_sentences::say(&mut api)?;
    Ok(Bundle {
        api: Some(api),
        ..bundle.clone()
    })
}

pub use rust::INPUTS_DIR;

/// Where a generated crate keeps its checked-in generated sources, relative to the crate.
pub const CRATE_CODE_DIR: &str = "src/generated/code";

/// Every top-level `*.json` file of `schemas_dir`, sorted by name.
fn read_inputs(schemas_dir: &Path) -> Result<Vec<(String, String)>> {
    let entries = std::fs::read_dir(schemas_dir)
        .with_context(|| format!("reading schema directory {}", schemas_dir.display()))?;
    let mut inputs = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if let Some(name) = name.filter(|n| n.ends_with(".json") && path.is_file()) {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            inputs.push((name, text));
        }
    }
    inputs.sort();
    Ok(inputs)
}

/// The generated crates of the workspace, each with the sources its build script puts into
/// `OUT_DIR` (README "Generated files in the repository").
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GeneratedCrate {
    /// `fleetwire-types`, in `generated/types`.
    Types,
    /// `fleetwire-client`, in `generated/client`.
    Client,
}

impl GeneratedCrate {
    pub const ALL: [GeneratedCrate; 2] = [GeneratedCrate::Types, GeneratedCrate::Client];

    /// The crate's folder, relative to the workspace.
    pub fn dir(self) -> &'static str {
        match self {
            GeneratedCrate::Types => "generated/types",
            GeneratedCrate::Client => "generated/client",
        }
    }

    /// The crate's generated sources (path relative to its code folder, text); the schema
    /// files it was generated from are among them, under [`INPUTS_DIR`].
    pub fn sources(self, outputs: &Outputs) -> Vec<(PathBuf, String)> {
        let mut files = match self {
            GeneratedCrate::Types => vec![
                (PathBuf::from("types.rs"), outputs.types_rs.clone()),
                (PathBuf::from("facts.rs"), outputs.facts_rs.clone()),
                (PathBuf::from("documents.rs"), outputs.documents_rs.clone()),
                (
                    PathBuf::from("bundle.schema.json"),
                    outputs.bundle_json.clone(),
                ),
            ],
            GeneratedCrate::Client => outputs
                .client_rs
                .iter()
                .map(|text| (PathBuf::from(client::CLIENT_FILE), text.clone()))
                .collect(),
        };
        for (name, text) in &outputs.inputs {
            files.push((Path::new(INPUTS_DIR).join(name), text.clone()));
        }
        files
    }

    /// The crate's checked-in code folder, relative to the workspace.
    pub fn code_dir(self) -> PathBuf {
        Path::new(self.dir()).join(CRATE_CODE_DIR)
    }
}

/// The first half of a build script of a crate beside `schemas/` in the workspace (its
/// `CARGO_MANIFEST_DIR`'s sibling): tells cargo to run the script again when `schemas/` or any
/// of `also_watched` (paths relative to the workspace) changes, generates every output, and
/// returns them with the script's `OUT_DIR`. Fails the build, with the reason, when the schemas
/// do not generate.
pub fn build_script_outputs(also_watched: &[&str]) -> (Outputs, PathBuf) {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let workspace = manifest.join("..");
    let schemas = workspace.join("schemas");
    // A folder is scanned as a whole (the schema files and their examples); each file is named
    // too, so a changed schema is named in cargo's reason to rebuild.
    let files = std::fs::read_dir(&schemas).expect("schemas/ is readable");
    let files = files.map(|entry| entry.expect("a schemas/ entry").path());
    let watched = also_watched.iter().map(|path| workspace.join(path));
    for path in std::iter::once(schemas.clone()).chain(files).chain(watched) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    match generate(&schemas) {
        Ok(outputs) => (outputs, out),
        Err(err) => panic!("generating from {}: {err:#}", schemas.display()),
    }
}

/// Writes the sources `crate_` includes into `out_dir` (its build script's `OUT_DIR`, or a
/// folder of checked-in copies), removing files of an earlier generation that are no longer
/// part of it; returns the paths written or removed.
pub fn write_crate_sources(
    crate_: GeneratedCrate,
    outputs: &Outputs,
    out_dir: &Path,
) -> Result<Vec<PathBuf>> {
    let sources = crate_.sources(outputs);
    let mut changed = Vec::new();
    for stale in extra_inputs(out_dir, &sources) {
        std::fs::remove_file(&stale).with_context(|| format!("removing {}", stale.display()))?;
        changed.push(stale);
    }
    for (path, content) in sources {
        let path = out_dir.join(path);
        if write_if_changed(&path, &content)? {
            changed.push(path);
        }
    }
    Ok(changed)
}

/// Files in `code_dir`'s inputs folder that `sources` no longer has (a schema file removed).
fn extra_inputs(code_dir: &Path, sources: &[(PathBuf, String)]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(code_dir.join(INPUTS_DIR)) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| {
            path.strip_prefix(code_dir)
                .is_ok_and(|rel| !sources.iter().any(|(p, _)| p == rel))
        })
        .collect()
}

/// Writes the reference site into `out_dir/site` and the table that compiles it into the
/// runtime (`site_files.rs`, `include_bytes!` of each file) into `out_dir`.
#[cfg(feature = "site")]
pub fn write_site_out_dir(outputs: &Outputs, out_dir: &Path) -> Result<()> {
    let site_dir = out_dir.join("site");
    let pages = site::write(&outputs.model, &site_dir)?;
    write_if_changed(
        &out_dir.join("site_files.rs"),
        &site::files_table(&site_dir, &out_dir.join("site-compressed"), &pages)?,
    )?;
    Ok(())
}

/// The generated files kept in the repository, relative to the workspace root.
pub fn checked_in(outputs: &Outputs) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for crate_ in GeneratedCrate::ALL {
        let dir = crate_.code_dir();
        for (path, text) in crate_.sources(outputs) {
            files.push((dir.join(path), text));
        }
    }
    for (name, api) in [
        (OPENAPI_30_FILE, &outputs.openapi_json),
        (OPENAPI_31_FILE, &outputs.openapi_31_json),
        (AGENT_API_30_FILE, &outputs.agent_openapi_json),
        (AGENT_API_31_FILE, &outputs.agent_openapi_31_json),
    ] {
        if let Some(api) = api {
            files.push((PathBuf::from("generated/openapi").join(name), api.clone()));
        }
    }
    files
}

/// One checked-in file that differs from what the schemas generate now.
#[derive(Debug, Clone)]
pub struct Stale {
    pub path: PathBuf,
    /// A unified diff from the checked-in copy to the fresh one.
    pub diff: String,
}

/// Compares the checked-in copies under `workspace` with a fresh generation.
pub fn stale_files(outputs: &Outputs, workspace: &Path) -> Vec<Stale> {
    let removed = extra_checked_in(outputs, workspace)
        .into_iter()
        .map(|path| Stale {
            diff: format!("{} is no longer generated: remove it\n", path.display()),
            path,
        });
    checked_in(outputs)
        .into_iter()
        .filter_map(|(path, fresh)| {
            let current = std::fs::read_to_string(workspace.join(&path)).unwrap_or_default();
            (current != fresh).then(|| Stale {
                diff: similar::TextDiff::from_lines(&current, &fresh)
                    .unified_diff()
                    .context_radius(3)
                    .header(
                        &format!("{} (checked in)", path.display()),
                        &format!("{} (generated)", path.display()),
                    )
                    .to_string(),
                path,
            })
        })
        .chain(removed)
        .collect()
}

/// Checked-in files, relative to `workspace`, that a fresh generation no longer has.
fn extra_checked_in(outputs: &Outputs, workspace: &Path) -> Vec<PathBuf> {
    GeneratedCrate::ALL
        .into_iter()
        .flat_map(|crate_| {
            let code_dir = workspace.join(crate_.code_dir());
            extra_inputs(&code_dir, &crate_.sources(outputs))
                .into_iter()
                .filter_map(|path| path.strip_prefix(workspace).ok().map(Path::to_path_buf))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Writes every checked-in copy under `workspace`, removing those no longer generated;
/// returns the paths that changed.
pub fn write_checked_in(outputs: &Outputs, workspace: &Path) -> Result<Vec<PathBuf>> {
    let mut changed = Vec::new();
    for path in extra_checked_in(outputs, workspace) {
        let full = workspace.join(&path);
        std::fs::remove_file(&full).with_context(|| format!("removing {}", full.display()))?;
        changed.push(path);
    }
    for (path, content) in checked_in(outputs) {
        if write_if_changed(&workspace.join(&path), &content)? {
            changed.push(path);
        }
    }
    Ok(changed)
}

fn pretty(value: &serde_json::Value) -> Result<String> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    Ok(text)
}
