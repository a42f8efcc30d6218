//! The one drift test: every generated file kept in the repository (the generated crates'
//! `src/generated/` folders and the OpenAPI documents) is what the schemas and the generator
//! make now, and the generator-owned folders hold nothing else (`fleetwire-codegen check` runs
//! the same comparison). `cargo run -p fleetwire-codegen -- generate` refreshes them; inside the
//! workspace `cargo build` already refreshes the crates' sources, except under `CI`, which
//! checks what was committed (docs/codegen.md, "One generator path").

use std::path::Path;

use fleetwire_codegen::config::Config;
use fleetwire_codegen::Generation;

#[test]
fn checked_in_generated_files_are_current() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let generation =
        Generation::load(&Config::fleetwire(&workspace.join("schemas"))).expect("schemas load");
    let stale = fleetwire_codegen::stale_files(&generation, &workspace).expect("schemas generate");
    let report: Vec<String> = stale.iter().map(|s| s.diff.clone()).collect();
    assert!(
        stale.is_empty(),
        "generated files are stale; run `cargo run -p fleetwire-codegen -- generate`:\n{}",
        report.join("\n")
    );
}

#[test]
fn a_file_the_generator_did_not_write_in_its_folder_is_stale() {
    let root = tempfile::tempdir().unwrap();
    let owned = Path::new("crate/src/generated").to_path_buf();
    let files = vec![(owned.join("types.rs"), "// generated\n".to_string())];
    std::fs::create_dir_all(root.path().join(&owned)).unwrap();
    std::fs::write(root.path().join(owned.join("types.rs")), "// generated\n").unwrap();
    std::fs::write(root.path().join(owned.join("notes.rs")), "// by hand\n").unwrap();
    let stale = fleetwire_codegen::stale(root.path(), &files, std::slice::from_ref(&owned));
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert_eq!(stale[0].path, owned.join("notes.rs"));
    // The one writer removes it.
    fleetwire_codegen::write_files(root.path(), &files, std::slice::from_ref(&owned)).unwrap();
    assert!(!root.path().join(owned.join("notes.rs")).exists());
    assert!(fleetwire_codegen::stale(root.path(), &files, &[owned]).is_empty());
}
