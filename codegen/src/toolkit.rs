//! fleetwire-codegen as a toolkit: any folder of JSON Schemas (and an optional API description)
//! in, what it makes for fleetwire out — exact types, the validated reader's tables, the
//! OpenAPI documents, the site (docs/codegen.md). [`Toolkit`] is the build-script entry point of
//! a crate that runs it on its own schemas, and the command line's `--schemas`.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::build_script;
use crate::config::{Config, EXAMPLES_DIR, OPENAPI_30_FILE, OPENAPI_31_FILE};
use crate::target::Target;
use crate::{Generation, Outputs};

/// The build-script entry point for a crate with schemas of its own:
///
/// ```no_run
/// // build.rs, in `fn main`:
/// fleetwire_codegen::toolkit::Toolkit::new("schemas")
///     .api("schemas/shop-api.openapi.json")
///     .generate_to_out_dir();
/// // src/lib.rs: include!(concat!(env!("OUT_DIR"), "/fleetwire_generated.rs"));
/// ```
#[derive(Debug, Clone)]
pub struct Toolkit {
    config: Config,
}

/// The file a consumer includes at the module named by [`Toolkit::module`] (its crate root
/// by default): it declares `types`, the facts and the root documents, and re-exports them.
pub const MODULE_FILE: &str = "fleetwire_generated.rs";

impl Toolkit {
    /// The schemas in `schemas_dir` (relative paths are the build script's: the package root),
    /// for the crate cargo is building (`CARGO_PKG_NAME`), included at its root; no API
    /// description, examples under `schemas_dir/examples`.
    pub fn new(schemas_dir: impl Into<PathBuf>) -> Toolkit {
        let schemas_dir = schemas_dir.into();
        let crate_name = std::env::var("CARGO_PKG_NAME").unwrap_or_else(|_| "generated".into());
        Toolkit {
            config: Config {
                examples_dir: schemas_dir.join(EXAMPLES_DIR),
                schemas_dir,
                api_file: None,
                target: Target::consumer(&crate_name, "crate"),
                openapi_files: [OPENAPI_30_FILE.into(), OPENAPI_31_FILE.into()],
                agent_api_file: None,
            },
        }
    }

    /// The API description to bundle into OpenAPI documents and the site's API page.
    pub fn api(mut self, path: impl Into<PathBuf>) -> Toolkit {
        self.config.api_file = Some(path.into());
        self
    }

    /// The folder of example documents (`<dir>/<Document>/valid/*.json`).
    pub fn examples(mut self, dir: impl Into<PathBuf>) -> Toolkit {
        self.config.examples_dir = dir.into();
        self
    }

    /// The module the consumer includes [`MODULE_FILE`] in, as a path (`crate::wire`); the
    /// crate root by default.
    pub fn module(mut self, path: &str) -> Toolkit {
        self.config.target.types_module = format!("{path}::types");
        self
    }

    /// The crate the site says the types are imported from (default: the package's name).
    pub fn crate_name(mut self, name: &str) -> Toolkit {
        self.config.target.crate_name = name.replace('-', "_");
        self
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Every output, in memory.
    pub fn generate(&self) -> Result<Outputs> {
        crate::generate_with(&self.config)
    }

    /// Writes the Rust sources, the bundle, [`MODULE_FILE`] and the OpenAPI documents into
    /// `out_dir` (`generate --schemas DIR --out DIR`); returns the files written.
    pub fn write_to(&self, out_dir: &Path) -> Result<Vec<PathBuf>> {
        let files = module_files(&Generation::load(&self.config)?)?;
        crate::write_files(out_dir, &files, &[])?;
        Ok(files
            .into_iter()
            .map(|(path, _)| out_dir.join(path))
            .collect())
    }

    /// The whole of a build script: `cargo:rerun-if-changed` for the schemas folder, each
    /// schema file, the API description and the examples; the files of [`Toolkit::write_to`]
    /// written into `OUT_DIR`. Panics with the reason (file and JSON pointer) when the schemas
    /// do not generate, which fails the build with it (`build_script::run`, the one way a build
    /// script runs the generator).
    pub fn generate_to_out_dir(&self) {
        build_script::run(&self.config, |generation| {
            crate::write_files(&build_script::out_dir(), &module_files(generation)?, &[])?;
            Ok(())
        });
    }
}

/// The generated files of one schema set, as a crate other than `fleetwire-types` includes
/// them: `types.rs`, `facts.rs`, `documents.rs`, `bundle.schema.json`, [`MODULE_FILE`], and the
/// OpenAPI documents under `openapi/` when there is an API description (paths relative to the
/// folder they are written to).
pub fn module_files(generation: &Generation) -> Result<Vec<(PathBuf, String)>> {
    let (openapi_30, openapi_31) = generation.openapi()?;
    let mut openapi = Vec::new();
    for (name, text) in generation
        .config()
        .openapi_files
        .iter()
        .zip([openapi_30, openapi_31])
    {
        if let Some(text) = text {
            openapi.push((format!("openapi/{name}"), text));
        }
    }
    let names: Vec<&str> = openapi.iter().map(|(n, _)| n.as_str()).collect();
    let mut files = crate::rust_sources(generation)?;
    files.push((PathBuf::from(MODULE_FILE), module_file(&names)));
    files.extend(
        openapi
            .into_iter()
            .map(|(name, text)| (PathBuf::from(name), text)),
    );
    Ok(files)
}

/// [`MODULE_FILE`]: the modules around the generated files, with the `use`s they name their
/// support by (what `fleetwire-types`' `lib.rs` says around its own `src/generated/`).
fn module_file(openapi: &[&str]) -> String {
    let openapi: Vec<String> = openapi
        .iter()
        .map(|path| {
            let name = path.trim_start_matches("openapi/");
            format!("({name:?}, include_str!(concat!(env!(\"OUT_DIR\"), \"/{path}\")))")
        })
        .collect();
    format!(
        r#"// Generated by fleetwire-codegen's toolkit. Do not edit.
// The generated types, schema facts and root documents of this crate's schemas, read with
// fleetwire_types::read (docs/codegen.md in fleetwire).

/// The generated types, one per schema definition.
#[allow(clippy::all, dead_code, missing_docs, rustdoc::all)]
pub mod types {{
    include!(concat!(env!("OUT_DIR"), "/types.rs"));
}}

/// What the schemas say that the reader reads: the root documents, the strict deserializer's
/// tables, the schema files, `Schemas`.
#[allow(clippy::all, dead_code)]
pub mod facts {{
    use {toolkit}::{{DocumentInfo, SchemaSet, StructRules}};
    include!(concat!(env!("OUT_DIR"), "/facts.rs"));

    /// All definitions of all schema files in one document (local `$ref`s only).
    pub const BUNDLE_SCHEMA: &str = include_str!(concat!(env!("OUT_DIR"), "/bundle.schema.json"));
}}

/// The root documents' `WireDocument` impls and by-name readers.
#[allow(clippy::all)]
pub mod documents {{
    use super::facts::{{Schemas, DOCUMENTS}};
    use super::types;
    use {toolkit}::{{
        compile_validator_in, jsonschema, read, read_strict, strict, Accepted, DocumentInfo,
        Rejection, WireDocument,
    }};
    include!(concat!(env!("OUT_DIR"), "/documents.rs"));
}}

pub use documents::{{read_named, read_named_strict, reserialize_named, written_named}};
pub use facts::{{Schemas, BUNDLE_SCHEMA, DOCUMENTS, SCHEMA_FILES}};
pub use types::*;

/// The OpenAPI documents bundled from the API description, when there is one: (file name, text).
pub const OPENAPI_FILES: &[(&str, &str)] = &[{openapi}];
"#,
        toolkit = crate::target::TOOLKIT_PATH,
        openapi = openapi.join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_script_reruns_on_the_folders_each_schema_file_and_the_api() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.schema.json", "a.schema.json", "notes.txt"] {
            std::fs::write(dir.path().join(name), "{}").unwrap();
        }
        let api = dir.path().join("api.openapi.json");
        let toolkit = Toolkit::new(dir.path()).api(&api);
        assert_eq!(
            build_script::watched(toolkit.config()),
            [
                dir.path().to_path_buf(),
                dir.path().join("a.schema.json"),
                dir.path().join("b.schema.json"),
                api,
                dir.path().join(EXAMPLES_DIR),
            ]
        );
    }

    #[test]
    fn a_schema_error_names_the_file_the_pointer_and_the_keyword() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("x.schema.json"),
            r#"{"$defs": {"A": {"type": "object", "unevaluatedProperties": false}}}"#,
        )
        .unwrap();
        let err = format!("{:#}", Toolkit::new(dir.path()).generate().unwrap_err());
        assert!(
            err.contains("x.schema.json: /$defs/A/unevaluatedProperties: the keyword `unevaluatedProperties` is not supported"),
            "{err}"
        );
    }
}
