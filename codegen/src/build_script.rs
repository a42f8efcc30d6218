//! The one way a build script runs the generator (docs/codegen.md, "One generator path"):
//! [`run`] tells cargo what to watch, reads the schemas once, makes only what the script asks
//! for and writes it with the one writer of generated files (`write_files`); schemas that do
//! not generate fail the build with the file, the JSON pointer and the keyword.
//!
//! Three kinds of build script call it, in-process (no nested cargo):
//! - a toolkit consumer's (`Toolkit::generate_to_out_dir`): its module into [`out_dir`];
//! - a generated crate's, inside the fleetwire workspace ([`generated_crate`]): the crate's
//!   generator-owned `src/generated/`, in place, after an edit of `schemas/` or of the
//!   generator, so `cargo build` builds the edited schemas and `git status` shows the change;
//!   a packaged crate has no `schemas/` beside it and builds what it carries;
//! - the runtime's ([`reference_site`]): the reference site into `OUT_DIR`.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::bundle::SCHEMA_SUFFIX;
use crate::config::Config;
use crate::{GeneratedCrate, Generation, CRATE_GENERATED_DIR};

/// The variable under which a generated crate's build leaves stale sources as they are, for
/// the drift test to report instead of rewriting them: CI's (`.ci/run` sets `CI=true`), which
/// checks what was committed.
pub const CHECK_ONLY_ENV: &str = "CI";

/// The whole of a build script that runs the generator: `cargo:rerun-if-changed` for what the
/// generation reads ([`watched`]), then what `make` makes of the one reading of the schemas
/// (and writes, with `write_files`). Panics with the reason when the schemas do not generate,
/// which fails the build with it.
pub fn run(config: &Config, make: impl FnOnce(&Generation) -> Result<()>) {
    for path in watched(config) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let made = Generation::load(config).and_then(|generation| make(&generation));
    if let Err(err) = made {
        panic!(
            "fleetwire-codegen: generating from {}: {err:#}",
            config.schemas_dir.display()
        );
    }
}

/// What a generation reads: the schema folder (cargo scans a folder whole, so a new file, an
/// example, `schema-set.json` or a release counts), each schema file (named in cargo's reason
/// to rebuild), the API descriptions and the examples folder. The generator's own code and
/// templates are compiled into the build script, which cargo reruns when they change.
pub fn watched(config: &Config) -> Vec<PathBuf> {
    let mut paths = vec![config.schemas_dir.clone()];
    if let Ok(entries) = std::fs::read_dir(&config.schemas_dir) {
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.to_string_lossy().ends_with(SCHEMA_SUFFIX))
            .collect();
        files.sort();
        paths.extend(files);
    }
    paths.extend(config.api_file.clone());
    paths.extend(config.agent_api_file.clone());
    paths.push(config.examples_dir.clone());
    paths
}

/// The build script of a generated crate (`generated/*/build.rs`, with its `regenerate`
/// feature, which the workspace turns on): inside the fleetwire workspace, [`run`] for
/// fleetwire's schemas and this crate's sources; outside it (a packaged crate), nothing.
pub fn generated_crate(crate_: GeneratedCrate) {
    let manifest = manifest_dir();
    let workspace = manifest.join("../..");
    let schemas = workspace.join("schemas");
    let in_workspace = schemas.is_dir()
        && workspace.join("codegen/Cargo.toml").is_file()
        && same_dir(&workspace.join(crate_.dir()), &manifest);
    if in_workspace {
        println!("cargo:rerun-if-env-changed={CHECK_ONLY_ENV}");
        run(&Config::fleetwire(&schemas), |generation| {
            write_crate(generation, crate_)
        });
    } else {
        // What it carries is what it builds: nothing to watch but this script.
        println!("cargo:rerun-if-changed=build.rs");
    }
}

/// The runtime's build script: fleetwire's reference site into `OUT_DIR`, where
/// `fleetwire::reference_site` compiles it in (docs/reference-site.md).
#[cfg(feature = "site")]
pub fn reference_site() {
    let schemas = manifest_dir().join("../schemas");
    run(&Config::fleetwire(&schemas), |generation| {
        let out = out_dir();
        let openapi = generation.openapi()?;
        let model = generation.model(&openapi)?;
        let site_dir = out.join("site");
        let pages = crate::site::write(&model, &site_dir)?;
        let table = crate::site::files_table(&site_dir, &out.join("site-compressed"), &pages)?;
        crate::output_file::write_if_changed(&out.join("site_files.rs"), table)?;
        // The release the site's version line names, for `fleetwire --version` to say the same.
        println!(
            "cargo:rustc-env=FLEETWIRE_RELEASE_LINE={}",
            model.stamp.release
        );
        Ok(())
    });
}

/// Brings the crate's `src/generated/` up to date with `generation`, saying so on cargo's
/// output; under [`CHECK_ONLY_ENV`], only says what is stale (the drift test fails on it).
fn write_crate(generation: &Generation, crate_: GeneratedCrate) -> Result<()> {
    let check_only = std::env::var_os(CHECK_ONLY_ENV).is_some_and(|v| !v.is_empty());
    for path in refresh_crate(generation, crate_, &manifest_dir(), check_only)? {
        match check_only {
            true => println!(
                "cargo:warning={}/{} is stale: run `cargo run -p fleetwire-codegen -- generate` and commit it",
                crate_.dir(),
                path.display()
            ),
            false => println!(
                "cargo:warning=regenerated {}/{} from schemas/ (commit it with the schema change)",
                crate_.dir(),
                path.display()
            ),
        }
    }
    Ok(())
}

/// The files of `crate_`'s generator-owned folder under `crate_dir` that differ from
/// `generation` (paths relative to `crate_dir`): rewritten (a file no longer generated removed),
/// or with `check_only` left as they are.
pub fn refresh_crate(
    generation: &Generation,
    crate_: GeneratedCrate,
    crate_dir: &Path,
    check_only: bool,
) -> Result<Vec<PathBuf>> {
    let owned = PathBuf::from(CRATE_GENERATED_DIR);
    let files: Vec<(PathBuf, String)> = crate_
        .sources(generation)?
        .into_iter()
        .map(|(path, text)| (owned.join(path), text))
        .collect();
    let owned = [owned];
    match check_only {
        true => Ok(crate::stale(crate_dir, &files, &owned)
            .into_iter()
            .map(|stale| stale.path)
            .collect()),
        false => crate::write_files(crate_dir, &files, &owned),
    }
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
}

/// The build script's `OUT_DIR`.
pub fn out_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
}

fn same_dir(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b)
}
