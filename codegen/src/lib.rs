//! fleetwire-codegen: every output is a function of one [`Bundle`] of `schemas/`.
//!
//! - [`rust`]: the types (typify) and the root-document table the validators hang off;
//! - [`openapi`]: the bundled OpenAPI documents (3.0.3, and 3.1.0 with the schemas as they are);
//! - `model` and `site` (feature `site`): the documentation model and the reference site
//!   rendered from it with askama;
//! - the bundle itself, embedded in `fleetwire-types` for the validators.
//!
//! Two build scripts call it on every schema change: `fleetwire-types`' calls [`generate`] and
//! [`write_out_dir`] (without the `site` feature, so a consumer of the types compiles no
//! HTML), and the runtime's calls `write_site_out_dir` to compile the reference site into the
//! controller. [`checked_in`] lists the copies kept in the repository for readers and external
//! tools, which `fleetwire-codegen check` (and a test) compare against a fresh generation.

pub mod bounded;
pub mod bundle;
pub mod config;
pub mod exactness;
pub mod keywords;
#[cfg(feature = "site")]
pub mod model;
pub mod nullability;
pub mod openapi;
pub mod peer_check;
pub mod replacements;
pub mod rust;
#[cfg(feature = "site")]
pub mod site;
pub mod string_enums;
pub mod string_lengths;
pub mod target;
pub mod toolkit;
pub mod typify_impls;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub use bundle::Bundle;

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
}

/// Reads fleetwire's `schemas_dir` once and generates every output from it.
pub fn generate(schemas_dir: &Path) -> Result<Outputs> {
    generate_with(&config::Config::fleetwire(schemas_dir))
}

/// Reads the schemas `config` names once and generates every output from them.
pub fn generate_with(config: &config::Config) -> Result<Outputs> {
    let bundle = Bundle::load_with_api(&config.schemas_dir, config.api_file.as_deref())?;
    // One type space for both the Rust output and the Rust names the site anchors.
    let space = rust::type_space_for(&bundle, config.target.clone())?;
    let types_rs = rust::types(&space)?;
    let facts_rs = rust::facts(&bundle, &rust::closed_structs(&space)?, &space.target)?;
    let documents_rs = rust::documents(&bundle);
    let bundle_json = pretty(&bundle.to_value())?;
    let openapi_json = openapi::document(&bundle)?
        .map(|doc| pretty(&doc))
        .transpose()?;
    let openapi_31_json = openapi::document_31(&bundle)?
        .map(|doc| pretty(&doc))
        .transpose()?;
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
    })
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

/// Writes the files `fleetwire-types` includes into its `OUT_DIR`.
pub fn write_out_dir(outputs: &Outputs, out_dir: &Path) -> Result<()> {
    write_if_changed(&out_dir.join("types.rs"), &outputs.types_rs)?;
    write_if_changed(&out_dir.join("facts.rs"), &outputs.facts_rs)?;
    write_if_changed(&out_dir.join("documents.rs"), &outputs.documents_rs)?;
    write_if_changed(&out_dir.join("bundle.schema.json"), &outputs.bundle_json)?;
    Ok(())
}

/// Writes the reference site into `out_dir/site` and the table that compiles it into the
/// runtime (`site_files.rs`, `include_bytes!` of each file) into `out_dir`.
#[cfg(feature = "site")]
pub fn write_site_out_dir(outputs: &Outputs, out_dir: &Path) -> Result<()> {
    let site_dir = out_dir.join("site");
    let pages = site::write(&outputs.model, &site_dir)?;
    write_if_changed(
        &out_dir.join("site_files.rs"),
        &site::files_table(&site_dir, &pages),
    )?;
    Ok(())
}

/// The generated files kept in the repository, relative to the workspace root.
pub fn checked_in(outputs: &Outputs) -> Vec<(PathBuf, String)> {
    let mut files = vec![
        (
            PathBuf::from("generated/snapshot/types.rs"),
            outputs.types_rs.clone(),
        ),
        (
            PathBuf::from("generated/snapshot/bundle.schema.json"),
            outputs.bundle_json.clone(),
        ),
    ];
    for (name, api) in [
        (OPENAPI_30_FILE, &outputs.openapi_json),
        (OPENAPI_31_FILE, &outputs.openapi_31_json),
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
        .collect()
}

/// Writes every checked-in copy under `workspace`; returns the paths that changed.
pub fn write_checked_in(outputs: &Outputs, workspace: &Path) -> Result<Vec<PathBuf>> {
    let mut changed = Vec::new();
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

/// Writes `content` unless the file already holds it (so cargo sees no needless change).
pub(crate) fn write_if_changed(path: &Path, content: &str) -> Result<bool> {
    if std::fs::read_to_string(path).is_ok_and(|c| c == content) {
        return Ok(false);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, content).with_context(|| format!("writing {}", path.display()))?;
    Ok(true)
}
