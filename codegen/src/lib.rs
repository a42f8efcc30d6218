//! fleetwire-codegen: every output is a function of one [`Bundle`] of `schemas/`.
//!
//! - [`rust`]: the types (typify) and the root-document table the validators hang off;
//! - [`openapi`]: the bundled OpenAPI documents (3.0.3, and 3.1.0 with the schemas as they are);
//! - [`client`]: the typed client's operations (`fleetwire-client`), from the API descriptions
//!   (the controller's and the node agent's);
//! - `model` and `site` (feature `site`): the documentation model and the reference site
//!   rendered from it with askama;
//! - the bundle itself, embedded in `fleetwire-types` for the validators.
//!
//! [`Generation`] reads the schemas once and makes each output on demand; [`generate`] makes
//! them all. The generated crates (`generated/*`, [`GeneratedCrate`]) keep the generator's
//! output in `src/generated/`, written by `fleetwire-codegen generate` ([`write_checked_in`])
//! and, inside the workspace, by their build scripts after a schema edit; every build script
//! that runs the generator (those, the runtime's for the site, a toolkit consumer's) goes
//! through [`build_script`] (docs/codegen.md, "One generator path"). [`checked_in`] lists the
//! files kept in the repository, which `fleetwire-codegen check` (and the one drift test)
//! compare with a fresh generation.

pub mod bounded;
pub mod build_script;
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
    /// reads (the `Timestamp` pattern, the strict deserializer's tables).
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
    /// The typed client's operations (`fleetwire-client`), one file per API document (the
    /// fleet API's, the node agent's), by file name.
    pub client_rs: Vec<(PathBuf, String)>,
}

/// Reads fleetwire's `schemas_dir` once and generates every output from it.
pub fn generate(schemas_dir: &Path) -> Result<Outputs> {
    generate_with(&config::Config::fleetwire(schemas_dir))
}

/// Reads the schemas `config` names once and generates every output from them.
pub fn generate_with(config: &config::Config) -> Result<Outputs> {
    Generation::load(config)?.all()
}

/// One reading of the schemas `config` names, from which each output is made when it is asked
/// for: a build script that needs the site makes no client, and one that needs the client
/// builds no Rust type space.
pub struct Generation {
    config: config::Config,
    bundle: Bundle,
    /// Built on first use, once: the source of both the Rust output and the Rust names the
    /// site anchors.
    space: std::cell::OnceCell<rust::RustTypes>,
}

impl Generation {
    /// Reads and bundles the schemas, and checks what every output relies on.
    pub fn load(config: &config::Config) -> Result<Generation> {
        let bundle = Bundle::load_with_api(&config.schemas_dir, config.api_file.as_deref())?;
        // Every root document of a versioned set says who writes and reads it (the site's
        // policy, `diff`'s directions); a folder without `schema-set.json` has no releases to
        // judge, and its annotations, if any, are still checked (docs/versioning.md,
        // "Directions").
        if bundle.set.is_some() {
            wire::of_roots(&bundle)?;
        } else {
            for root in &bundle.roots {
                wire::of(&root.name, &bundle.defs[&root.name])?;
            }
        }
        Ok(Generation {
            config: config.clone(),
            bundle,
            space: std::cell::OnceCell::new(),
        })
    }

    pub fn config(&self) -> &config::Config {
        &self.config
    }

    pub fn bundle(&self) -> &Bundle {
        &self.bundle
    }

    fn space(&self) -> Result<&rust::RustTypes> {
        if let Some(space) = self.space.get() {
            return Ok(space);
        }
        let space = rust::type_space_for(&self.bundle, self.config.target.clone())?;
        Ok(self.space.get_or_init(|| space))
    }

    /// `types.rs`.
    pub fn types_rs(&self) -> Result<String> {
        rust::types(self.space()?)
    }

    /// `facts.rs`.
    pub fn facts_rs(&self) -> Result<String> {
        let space = self.space()?;
        rust::facts(
            &self.bundle,
            &rust::closed_structs(space)?,
            &space.target,
            &self.config.schemas_dir,
        )
    }

    /// `documents.rs`.
    pub fn documents_rs(&self) -> String {
        rust::documents(&self.bundle)
    }

    /// `bundle.schema.json`.
    pub fn bundle_json(&self) -> Result<String> {
        pretty(&self.bundle.to_value())
    }

    /// The API description as OpenAPI 3.0.3 and 3.1.0, each carrying the fixtures as its
    /// bodies' examples (docs/reference-site.md); `None` without an API description.
    pub fn openapi(&self) -> Result<(Option<String>, Option<String>)> {
        self.openapi_of(&self.bundle)
    }

    /// fleetwire's node agent API, the same two ways: its OpenAPI documents reach into the one
    /// schema set (docs/agent.md).
    pub fn agent_openapi(&self) -> Result<(Option<String>, Option<String>)> {
        let Some(path) = &self.config.agent_api_file else {
            return Ok((None, None));
        };
        let agent = agent_bundle(&self.bundle, path)?;
        self.openapi_of(&agent)
            .with_context(|| format!("the node agent's API ({})", path.display()))
    }

    fn openapi_of(&self, bundle: &Bundle) -> Result<(Option<String>, Option<String>)> {
        let examples_dir = &self.config.examples_dir;
        let with_examples = |doc: Option<serde_json::Value>| -> Result<Option<String>> {
            doc.map(|doc| openapi::to_text(&openapi::with_examples(doc, examples_dir)?))
                .transpose()
        };
        Ok((
            with_examples(openapi::document(bundle)?)?,
            with_examples(openapi::document_31(bundle)?)?,
        ))
    }

    /// The typed client's operations, one file per API document ([`client::Api`]: the fleet
    /// API's and, when there is one, the node agent's), named by their file in the client
    /// crate's `src/generated/`: fleetwire's only (`fleetwire-client`, built on its types).
    pub fn client_rs(&self) -> Result<Vec<(PathBuf, String)>> {
        if !self.config.target.is_fleetwire() {
            return Ok(Vec::new());
        }
        let mut files = Vec::new();
        if let Some(text) = client::client(&self.bundle, &client::FLEET)? {
            files.push((PathBuf::from(client::FLEET.file), text));
        }
        if let Some(path) = &self.config.agent_api_file {
            let agent = agent_bundle(&self.bundle, path)?;
            if let Some(text) = client::client(&agent, &client::AGENT)
                .with_context(|| format!("the node agent's API ({})", path.display()))?
            {
                files.push((PathBuf::from(client::AGENT.file), text));
            }
        }
        Ok(files)
    }

    /// The documentation model the site is rendered from, offering `openapi` (the two
    /// documents [`Generation::openapi`] made) beside the API page.
    #[cfg(feature = "site")]
    pub fn model(&self, openapi: &(Option<String>, Option<String>)) -> Result<model::Model> {
        let schemas_dir = self.config.schemas_dir.as_path();
        let mut model =
            model::Model::build(&self.bundle, self.space()?, &self.config.examples_dir)?;
        for (name, text) in self
            .config
            .openapi_files
            .iter()
            .zip([&openapi.0, &openapi.1])
        {
            if let Some(text) = text {
                model.openapi_files.push((name.clone(), text.clone()));
            }
        }
        model.stamp = build_stamp::of(schemas_dir, &self.bundle);
        model.changelog = releases::history(schemas_dir, &self.bundle)?;
        Ok(model)
    }

    /// Every output.
    pub fn all(self) -> Result<Outputs> {
        let (openapi_json, openapi_31_json) = self.openapi()?;
        let (agent_openapi_json, agent_openapi_31_json) = self.agent_openapi()?;
        #[cfg(feature = "site")]
        let model = self.model(&(openapi_json.clone(), openapi_31_json.clone()))?;
        Ok(Outputs {
            #[cfg(feature = "site")]
            model,
            types_rs: self.types_rs()?,
            facts_rs: self.facts_rs()?,
            documents_rs: self.documents_rs(),
            bundle_json: self.bundle_json()?,
            openapi_json,
            openapi_31_json,
            agent_openapi_json,
            agent_openapi_31_json,
            client_rs: self.client_rs()?,
            bundle: self.bundle,
        })
    }
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

/// Where a generated crate keeps the generator's output, relative to the crate: a folder
/// only the generator writes (`generate`, or the crate's build script after a schema edit).
pub const CRATE_GENERATED_DIR: &str = "src/generated";

/// The generated crates of the workspace, each with the sources the generator writes into its
/// [`CRATE_GENERATED_DIR`] (README "Generated files in the repository").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

    /// The crate's generator-owned folder, relative to the workspace.
    pub fn generated_dir(self) -> PathBuf {
        Path::new(self.dir()).join(CRATE_GENERATED_DIR)
    }

    /// The crate's generated sources (path relative to its generated folder, text), made from
    /// `generation` as needed: the client's build script builds no type space.
    pub fn sources(self, generation: &Generation) -> Result<Vec<(PathBuf, String)>> {
        Ok(match self {
            GeneratedCrate::Types => rust_sources(generation)?,
            GeneratedCrate::Client => generation.client_rs()?,
        })
    }
}

/// The Rust sources of a schema set, and the bundle its validators are compiled from: what
/// `fleetwire-types` carries in `src/generated/`, and what a toolkit consumer's build puts into
/// `OUT_DIR` (docs/codegen.md, "Outputs").
pub fn rust_sources(generation: &Generation) -> Result<Vec<(PathBuf, String)>> {
    Ok(vec![
        (PathBuf::from("types.rs"), generation.types_rs()?),
        (PathBuf::from("facts.rs"), generation.facts_rs()?),
        (PathBuf::from("documents.rs"), generation.documents_rs()),
        (
            PathBuf::from("bundle.schema.json"),
            generation.bundle_json()?,
        ),
    ])
}

/// The generated files kept in the repository, relative to the workspace root.
pub fn checked_in(generation: &Generation) -> Result<Vec<(PathBuf, String)>> {
    let mut files = Vec::new();
    for crate_ in GeneratedCrate::ALL {
        let dir = crate_.generated_dir();
        for (path, text) in crate_.sources(generation)? {
            files.push((dir.join(path), text));
        }
    }
    let (fleet_30, fleet_31) = generation.openapi()?;
    let (agent_30, agent_31) = generation.agent_openapi()?;
    for (name, api) in [
        (OPENAPI_30_FILE, fleet_30),
        (OPENAPI_31_FILE, fleet_31),
        (AGENT_API_30_FILE, agent_30),
        (AGENT_API_31_FILE, agent_31),
    ] {
        if let Some(api) = api {
            files.push((PathBuf::from("generated/openapi").join(name), api));
        }
    }
    Ok(files)
}

/// One checked-in file that differs from what the schemas generate now.
#[derive(Debug, Clone)]
pub struct Stale {
    pub path: PathBuf,
    /// A unified diff from the checked-in copy to the fresh one.
    pub diff: String,
}

/// Compares `files` (paths relative to `root`, fresh text) with what `root` holds, and the
/// files of each folder in `owned` (relative to `root`, written by the generator alone) with
/// `files`: a file there that is no longer generated is stale too.
pub fn stale(root: &Path, files: &[(PathBuf, String)], owned: &[PathBuf]) -> Vec<Stale> {
    let removed = owned.iter().flat_map(|dir| {
        let sources: Vec<(PathBuf, String)> = files
            .iter()
            .filter_map(|(p, t)| Some((p.strip_prefix(dir).ok()?.to_path_buf(), t.clone())))
            .collect();
        extra_files(&root.join(dir), &sources)
            .into_iter()
            .map(move |name| {
                let path = dir.join(name);
                Stale {
                    diff: format!("{} is no longer generated: remove it\n", path.display()),
                    path,
                }
            })
    });
    files
        .iter()
        .filter_map(|(path, fresh)| {
            let current = std::fs::read_to_string(root.join(path)).unwrap_or_default();
            (current != *fresh).then(|| Stale {
                diff: similar::TextDiff::from_lines(&current, fresh)
                    .unified_diff()
                    .context_radius(3)
                    .header(
                        &format!("{} (checked in)", path.display()),
                        &format!("{} (generated)", path.display()),
                    )
                    .to_string(),
                path: path.clone(),
            })
        })
        .chain(removed)
        .collect()
}

/// The generated crates' generator-owned folders, relative to the workspace.
fn owned_dirs() -> Vec<PathBuf> {
    GeneratedCrate::ALL
        .iter()
        .map(|crate_| crate_.generated_dir())
        .collect()
}

/// Compares the checked-in generated files under `workspace` with a fresh generation
/// (`fleetwire-codegen check`, and the drift test).
pub fn stale_files(generation: &Generation, workspace: &Path) -> Result<Vec<Stale>> {
    Ok(stale(workspace, &checked_in(generation)?, &owned_dirs()))
}

/// The files of `dir` (relative to it, recursively) that `sources` does not have.
pub fn extra_files(dir: &Path, sources: &[(PathBuf, String)]) -> Vec<PathBuf> {
    let mut extra = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(dir.join(&rel)) else {
            continue;
        };
        for entry in entries.filter_map(|entry| entry.ok()) {
            let path = rel.join(entry.file_name());
            if entry.path().is_dir() {
                stack.push(path);
            } else if !sources.iter().any(|(p, _)| *p == path) {
                extra.push(path);
            }
        }
    }
    extra.sort();
    extra
}

/// Writes `files` (paths relative to `root`) and removes the files of the `owned` folders
/// that are no longer generated; returns the paths (relative to `root`) that changed. The one
/// writer of checked-in generated files: `generate` and the generated crates' build scripts.
pub fn write_files(
    root: &Path,
    files: &[(PathBuf, String)],
    owned: &[PathBuf],
) -> Result<Vec<PathBuf>> {
    let mut changed = Vec::new();
    for file in stale(root, files, owned) {
        let full = root.join(&file.path);
        match files.iter().find(|(p, _)| *p == file.path) {
            Some((_, text)) => {
                write_if_changed(&full, text)?;
            }
            None => std::fs::remove_file(&full)
                .with_context(|| format!("removing {}", full.display()))?,
        }
        changed.push(file.path);
    }
    Ok(changed)
}

/// Writes every checked-in generated file under `workspace` (`fleetwire-codegen generate`),
/// removing those no longer generated; returns the paths that changed.
pub fn write_checked_in(generation: &Generation, workspace: &Path) -> Result<Vec<PathBuf>> {
    write_files(workspace, &checked_in(generation)?, &owned_dirs())
}

fn pretty(value: &serde_json::Value) -> Result<String> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    Ok(text)
}
