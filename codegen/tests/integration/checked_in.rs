//! The generated files kept in the repository (the OpenAPI documents and the generated crates' sources)
//! are what the schemas generate now. `FLEETWIRE_BLESS=1 cargo test -p fleetwire-codegen` or
//! `cargo run -p fleetwire-codegen -- generate` refreshes them.

use std::path::Path;

#[test]
fn checked_in_generated_files_are_current() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let outputs =
        fleetwire_codegen::generate(&workspace.join("schemas")).expect("schemas generate");
    if std::env::var_os("FLEETWIRE_BLESS").is_some() {
        fleetwire_codegen::write_checked_in(&outputs, &workspace).expect("writing generated files");
        return;
    }
    let stale = fleetwire_codegen::stale_files(&outputs, &workspace);
    let report: Vec<String> = stale.iter().map(|s| s.diff.clone()).collect();
    assert!(
        stale.is_empty(),
        "generated files are stale; run `cargo run -p fleetwire-codegen -- generate`:\n{}",
        report.join("\n")
    );
}
