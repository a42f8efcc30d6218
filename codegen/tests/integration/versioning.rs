//! The schema set's one version (docs/versioning.md) and what follows it: the
//! `fleetwire-types` and `fleetwire-client` crates (found through `cargo metadata`, wherever its manifest lives), the
//! checked-in API documents, and the description, which leaves `info.version` to the set.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The crate whose version must be the schema set's.
const TYPES_CRATE: &str = "fleetwire-types";
/// The other generated crate, generated from the API document, whose version is the set's too.
const CLIENT_CRATE: &str = "fleetwire-client";

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn set_version() -> String {
    let bundle = fleetwire_codegen::Bundle::load(&workspace().join("schemas")).unwrap();
    bundle
        .set
        .expect("schemas/schema-set.json")
        .version
        .to_string()
}

#[test]
fn the_types_crate_version_is_the_schema_set_version() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace())
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).unwrap();
    for name in [TYPES_CRATE, CLIENT_CRATE] {
        let package = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("the workspace has {name}"));
        assert_eq!(
            package["version"].as_str(),
            Some(set_version().as_str()),
            "{} ({}) must have schemas/schema-set.json's version",
            name,
            package["manifest_path"]
        );
    }
    // Crates of the workspace that depend on it ask for that version.
    for package in metadata["packages"].as_array().unwrap() {
        for dep in package["dependencies"].as_array().unwrap() {
            if dep["name"] == TYPES_CRATE || dep["name"] == CLIENT_CRATE {
                let req = semver::VersionReq::parse(dep["req"].as_str().unwrap()).unwrap();
                let version = semver::Version::parse(&set_version()).unwrap();
                assert!(
                    req.matches(&version),
                    "{} asks for {} {req}, not {version}",
                    package["name"],
                    dep["name"]
                );
            }
        }
    }
}

#[test]
fn the_api_documents_say_the_schema_set_version() {
    let version = set_version();
    for file in ["fleet-api.json", "fleet-api.3.1.json"] {
        let path = workspace().join("generated/openapi").join(file);
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            doc["info"]["version"].as_str(),
            Some(version.as_str()),
            "{file}"
        );
    }
    // The description leaves it out: the version is stated in one place.
    let source: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace().join("schemas/fleet-api.openapi.json")).unwrap(),
    )
    .unwrap();
    assert!(source["info"].get("version").is_none());
}

#[test]
fn a_description_stating_another_version_is_refused() {
    let (_tmp, schemas) = copy_of_schemas();
    let api = schemas.join("fleet-api.openapi.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&api).unwrap()).unwrap();
    doc["info"]["version"] = "9.9.9".into();
    std::fs::write(&api, doc.to_string()).unwrap();
    let err = fleetwire_codegen::Bundle::load(&schemas).unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("/info/version is `9.9.9`") && err.contains("schema-set.json"),
        "{err}"
    );
}

/// A temporary workspace holding a copy of `schemas/`'s files (not its folders).
fn copy_of_schemas() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let schemas = tmp.path().join("schemas");
    std::fs::create_dir(&schemas).unwrap();
    for entry in std::fs::read_dir(workspace().join("schemas")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, schemas.join(path.file_name().unwrap())).unwrap();
        }
    }
    (tmp, schemas)
}

fn release(workspace: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fleetwire-codegen"))
        .arg("--workspace")
        .arg(workspace)
        .arg("release")
        .output()
        .unwrap()
}

fn set_manifest_version(schemas: &std::path::Path, version: &str) {
    let path = schemas.join("schema-set.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    doc["version"] = version.into();
    std::fs::write(&path, doc.to_string()).unwrap();
}

#[test]
fn release_copies_the_set_once_and_refuses_a_breaking_change_without_a_major_bump() {
    let (tmp, schemas) = copy_of_schemas();
    set_manifest_version(&schemas, "0.1.0");
    let out = release(tmp.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("released 0.1.0") && text.contains("`schemas-v0.1.0`"),
        "{text}"
    );
    let copy = schemas.join("releases/0.1.0");
    assert_eq!(
        std::fs::read(copy.join("node.schema.json")).unwrap(),
        std::fs::read(schemas.join("node.schema.json")).unwrap()
    );
    assert!(
        copy.join("schema-set.json").is_file() && copy.join("fleet-api.openapi.json").is_file()
    );
    let again = release(tmp.path());
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("already released"));

    // Health.version made required: breaking for operators reading the controller's answers.
    let node = schemas.join("node.schema.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&node).unwrap()).unwrap();
    doc["$defs"]["Health"]["required"] = serde_json::json!(["status", "version"]);
    std::fs::write(&node, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let refused = release(tmp.path());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("0.1.0 is released already, with other files"),
        "{err}"
    );
    set_manifest_version(&schemas, "0.1.1");
    let refused = release(tmp.path());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("BREAKING made-required: Health: `version` is now required."),
        "{err}"
    );
    assert!(
        err.contains("not released: 1 breaking change(s) without a major version bump"),
        "{err}"
    );
    assert!(!schemas.join("releases/0.1.1").exists());
    set_manifest_version(&schemas, "0.2.0");
    let out = release(tmp.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(schemas.join("releases/0.2.0/schema-set.json").is_file());
    set_manifest_version(&schemas, "0.1.5");
    let refused = release(tmp.path());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("0.1.5 is older than the released 0.2.0")
    );
}

#[test]
fn generation_refuses_a_root_document_without_its_wire_annotation_or_with_an_unknown_party() {
    let (tmp, schemas) = copy_of_schemas();
    let node = schemas.join("node.schema.json");
    let original: Value = serde_json::from_str(&std::fs::read_to_string(&node).unwrap()).unwrap();
    let mut without_annotation = original.clone();
    without_annotation["$defs"]["Health"]
        .as_object_mut()
        .unwrap()
        .remove("x-fleetwire-wire");
    let check = || {
        Command::new(env!("CARGO_BIN_EXE_fleetwire-codegen"))
            .arg("--workspace")
            .arg(tmp.path())
            .arg("check")
            .output()
            .unwrap()
    };

    std::fs::write(&node, without_annotation.to_string()).unwrap();
    let out = check();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("root documents without `x-fleetwire-wire`")
            && err.contains("Health (node.schema.json)"),
        "{err}"
    );

    let mut doc = original.clone();
    doc["$defs"]["Health"]["x-fleetwire-wire"]["readers"] = serde_json::json!({"dashboards": true});
    std::fs::write(&node, doc.to_string()).unwrap();
    let out = check();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("Health: /x-fleetwire-wire/readers/dashboards: unknown party (one of controller, agent, cli, operator, smolvm, nibrunner)"),
        "{err}"
    );

    // A folder without schema-set.json (another project's schemas) may leave it out: the page
    // states the general policy.
    std::fs::write(&node, without_annotation.to_string()).unwrap();
    std::fs::remove_file(schemas.join("schema-set.json")).unwrap();
    // Without the manifest the description would have to state its own info.version.
    std::fs::remove_file(schemas.join("fleet-api.openapi.json")).unwrap();
    std::fs::remove_file(schemas.join("agent-api.openapi.json")).unwrap();
    let site = tmp.path().join("site");
    let out = Command::new(env!("CARGO_BIN_EXE_fleetwire-codegen"))
        .arg("--workspace")
        .arg(tmp.path())
        .args(["docs", "--out"])
        .arg(&site)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(site.join("Health.html")).unwrap();
    assert!(page.contains("Read from a peer, a field its schema does not define is set aside"));
    assert!(page.contains("version <code class=\"stamp-version\">unversioned</code>"));
}
