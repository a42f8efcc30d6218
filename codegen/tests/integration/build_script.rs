//! What a generated crate's build script does inside the workspace after a schema edit
//! (`build_script::refresh_crate`, docs/codegen.md "One generator path"): the crate's
//! generator-owned folder is rewritten to match the edited schemas, and under `CI` it is left as
//! committed while the stale files are named. Run on a copy of the schemas, so the workspace's own
//! files are never touched.

use std::path::Path;

use fleetwire_codegen::build_script::refresh_crate;
use fleetwire_codegen::config::Config;
use fleetwire_codegen::{GeneratedCrate, Generation};

/// Copies `from` into `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn a_schema_edit_rewrites_the_crate_s_generated_folder_unless_ci_only_checks() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let copy = tempfile::tempdir().unwrap();
    let schemas = copy.path().join("schemas");
    copy_dir(&workspace.join("schemas"), &schemas);
    let crate_dir = copy.path().join("generated/types");
    copy_dir(
        &workspace.join("generated/types/src/generated"),
        &crate_dir.join("src/generated"),
    );
    // A stray file in the generator's folder is not the generator's.
    std::fs::write(crate_dir.join("src/generated/notes.rs"), "// by hand\n").unwrap();

    // A schema edit: a new description on the heartbeat's `node_id`.
    let node = schemas.join("node.schema.json");
    let text = std::fs::read_to_string(&node).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let node_id = &mut doc["$defs"]["NodeHeartbeat"]["properties"]["node_id"];
    assert!(
        node_id.is_object(),
        "NodeHeartbeat.node_id is in node.schema.json"
    );
    node_id["description"] = "The reporting node, as the edit of this test says.".into();
    std::fs::write(&node, serde_json::to_string_pretty(&doc).unwrap()).unwrap();

    let generation = Generation::load(&Config::fleetwire(&schemas)).unwrap();
    let types_rs = crate_dir.join("src/generated/types.rs");
    let before = std::fs::read_to_string(&types_rs).unwrap();

    // Under CI: named, left as committed.
    let stale = refresh_crate(&generation, GeneratedCrate::Types, &crate_dir, true).unwrap();
    assert!(
        stale.contains(&Path::new("src/generated/types.rs").to_path_buf()),
        "{stale:?}"
    );
    assert!(
        stale.contains(&Path::new("src/generated/notes.rs").to_path_buf()),
        "{stale:?}"
    );
    assert_eq!(std::fs::read_to_string(&types_rs).unwrap(), before);

    // A developer's build: rewritten, the stray file gone, and then nothing left to do.
    let written = refresh_crate(&generation, GeneratedCrate::Types, &crate_dir, false).unwrap();
    assert_eq!(written, stale);
    let after = std::fs::read_to_string(&types_rs).unwrap();
    assert!(
        after.contains("The reporting node, as the edit of this test says."),
        "the edited description is in the rewritten types"
    );
    assert!(!crate_dir.join("src/generated/notes.rs").exists());
    assert!(
        refresh_crate(&generation, GeneratedCrate::Types, &crate_dir, true)
            .unwrap()
            .is_empty()
    );
}
