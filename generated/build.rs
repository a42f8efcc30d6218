//! Regenerates the types and the validator table from `../schemas` on every schema change.

use std::path::PathBuf;

fn main() {
    let manifest =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let schemas = manifest.join("../schemas");
    println!("cargo:rerun-if-changed={}", schemas.display());
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("../docs-site/templates").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("../docs-site/static").display()
    );
    for entry in std::fs::read_dir(&schemas).expect("schemas/ is readable") {
        println!(
            "cargo:rerun-if-changed={}",
            entry.expect("schemas/ entry").path().display()
        );
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let outputs = match fleetwire_codegen::generate(&schemas) {
        Ok(outputs) => outputs,
        Err(err) => panic!(
            "generating fleetwire-types from {}: {err:#}",
            schemas.display()
        ),
    };
    fleetwire_codegen::write_out_dir(&outputs, &out).expect("writing generated sources");
}
