//! Puts this crate's generated sources into `OUT_DIR`, where `src/generated/` includes them.
//!
//! They are the copies checked in under `src/generated/code/` (a packaged crate has only
//! those, and needs nothing else: no code generator among its dependencies). Inside the
//! fleetwire workspace, when a file of `schemas/` no longer matches the copy the sources were
//! generated from (`src/generated/code/inputs/`), or `FLEETWIRE_REGENERATE=1` is set, the
//! workspace's own `fleetwire-codegen` generates them afresh instead, so `cargo build` after a
//! schema edit builds the edited schemas; `cargo run -p fleetwire-codegen -- generate` then
//! refreshes the copies, and a test fails until it has (README "Generated files in the
//! repository"). The same script serves every generated crate (`generated/*/build.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs};

/// The checked-in sources, relative to the crate (codegen's `CRATE_CODE_DIR`).
const CODE_DIR: &str = "src/generated/code";
/// The copies of the schema files among them (codegen's `INPUTS_DIR`).
const INPUTS_DIR: &str = "inputs";

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let code = manifest.join(CODE_DIR);
    println!("cargo:rerun-if-changed={CODE_DIR}");
    println!("cargo:rerun-if-env-changed=FLEETWIRE_REGENERATE");
    let from = match workspace_schemas(&manifest) {
        Some((workspace, schemas)) => {
            println!("cargo:rerun-if-changed={}", schemas.display());
            let forced = env::var_os("FLEETWIRE_REGENERATE").is_some_and(|v| v == "1");
            if forced || !inputs_match(&schemas, &code.join(INPUTS_DIR)) {
                regenerate(&workspace, &out);
                "regenerated"
            } else {
                copy_tree(&code, &out);
                "checked-in"
            }
        }
        None => {
            copy_tree(&code, &out);
            "checked-in"
        }
    };
    // Which sources were built: a test in the workspace fails while they are not the checked-in ones.
    println!("cargo:rustc-env=FLEETWIRE_GENERATED_FROM={from}");
}

/// The workspace root and its `schemas/` when this crate is built inside the fleetwire
/// workspace (`generated/<crate>/` beside `schemas/` and `codegen/`), not from a package.
fn workspace_schemas(manifest: &Path) -> Option<(PathBuf, PathBuf)> {
    let workspace = manifest.parent()?.parent()?;
    let schemas = workspace.join("schemas");
    let generator = workspace.join("codegen").join("Cargo.toml");
    (schemas.is_dir() && generator.is_file()).then(|| (workspace.to_path_buf(), schemas))
}

/// Whether the top-level `*.json` files of `schemas` are exactly the copies in `inputs`.
fn inputs_match(schemas: &Path, inputs: &Path) -> bool {
    let (current, copies) = (json_files(schemas), json_files(inputs));
    current.len() == copies.len()
        && current.iter().zip(&copies).all(|(a, b)| {
            a.file_name() == b.file_name()
                && matches!((fs::read(a), fs::read(b)), (Ok(x), Ok(y)) if x == y)
        })
}

/// The top-level `*.json` files of `dir`, sorted by name (none when it cannot be read).
fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_file() && path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// Runs the workspace's code generator into `out`, with a target folder of its own (the
/// outer build holds the workspace's), and without the outer build's compiler settings.
fn regenerate(workspace: &Path, out: &Path) {
    let package = env::var("CARGO_PKG_NAME").expect("cargo sets it");
    let crate_key = package.strip_prefix("fleetwire-").unwrap_or(&package);
    let target = out
        .ancestors()
        .nth(4)
        .unwrap_or(out)
        .join("fleetwire-codegen-for-build-scripts");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace)
        .args(["run", "--quiet", "-p", "fleetwire-codegen", "--target-dir"])
        .arg(&target)
        .arg("--")
        .arg("--workspace")
        .arg(workspace)
        .args(["crate-sources", "--crate", crate_key, "--out"])
        .arg(out)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .expect("running cargo for fleetwire-codegen");
    assert!(
        status.success(),
        "fleetwire-codegen could not generate {package}'s sources from {} (its errors are above)",
        workspace.join("schemas").display()
    );
}

/// Copies every file under `from` to the same place under `to`, leaving files whose content
/// is already there untouched (so cargo sees no needless change).
fn copy_tree(from: &Path, to: &Path) {
    let entries = fs::read_dir(from).unwrap_or_else(|e| panic!("reading {}: {e}", from.display()));
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("creating {}: {e}", to.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let target = to.join(path.file_name().expect("an entry has a name"));
        if path.is_dir() {
            copy_tree(&path, &target);
            continue;
        }
        let content = fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        if fs::read(&target).ok().as_deref() != Some(content.as_slice()) {
            fs::write(&target, content)
                .unwrap_or_else(|e| panic!("writing {}: {e}", target.display()));
        }
    }
}
