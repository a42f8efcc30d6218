//! The command-line tool on a schema folder that is not fleetwire's (the parcel schemas of
//! `tests/toolkit-consumer`): `generate --schemas --out` writes the Rust sources, the bundle and
//! the OpenAPI documents, `docs --schemas --out` the site, and neither says a word of
//! fleetwire's schemas (docs/codegen.md).

use std::path::{Path, PathBuf};
use std::process::Command;

fn parcel_schemas() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/toolkit-consumer/schemas")
}

fn codegen(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_fleetwire-codegen"))
        .args(args)
        .output()
        .expect("fleetwire-codegen runs");
    assert!(
        out.status.success(),
        "fleetwire-codegen {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `command` on the parcel schemas and their API description, with `extra` arguments, into a
/// fresh folder.
fn on_parcels_with_api(command: &str, extra: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let schemas = parcel_schemas();
    let api = schemas.join("parcel-api.openapi.json");
    let mut args = vec![
        command,
        "--schemas",
        schemas.to_str().unwrap(),
        "--api",
        api.to_str().unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    codegen(&args);
    dir
}

#[test]
fn generate_writes_any_schema_folder_s_outputs() {
    let dir = on_parcels_with_api("generate", &[]);
    for file in [
        "types.rs",
        "facts.rs",
        "documents.rs",
        "bundle.schema.json",
        "fleetwire_generated.rs",
        "openapi/openapi.json",
        "openapi/openapi.3.1.json",
    ] {
        let text = std::fs::read_to_string(dir.path().join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        for fleetwire in ["NodeHeartbeat", "HostReportedState", "TIMESTAMP_PATTERN"] {
            assert!(!text.contains(fleetwire), "{file} names {fleetwire}");
        }
    }
    let types = std::fs::read_to_string(dir.path().join("types.rs")).unwrap();
    assert!(types.contains("pub struct Shipment"));
    assert!(types.contains("::fleetwire_types::toolkit::BoundedVec"));
    assert!(
        !types.contains("crate::bounded::"),
        "support named in-crate"
    );
    let facts = std::fs::read_to_string(dir.path().join("facts.rs")).unwrap();
    assert!(facts.contains("impl SchemaSet for Schemas"));
}

#[test]
fn generate_without_an_api_writes_no_openapi_document() {
    let dir = tempfile::tempdir().unwrap();
    let schemas = parcel_schemas();
    codegen(&[
        "generate",
        "--schemas",
        schemas.to_str().unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(dir.path().join("types.rs").exists());
    assert!(!dir.path().join("openapi").exists());
}

#[test]
fn docs_renders_the_site_of_any_schema_folder() {
    let dir = on_parcels_with_api("docs", &["--crate", "parcels"]);
    let index = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(index.contains("Shipment") && index.contains("Depot"));
    assert!(!index.contains("NodeHeartbeat"));
    let shipment = std::fs::read_to_string(dir.path().join("Shipment.html")).unwrap();
    assert!(shipment.contains("LockerDelivery") && shipment.contains("DoorDelivery"));
    assert!(
        shipment.contains("parcels::Shipment"),
        "the section's Rust path"
    );
    // The pages are the parcel set's: its name and crate, none of fleetwire's own words.
    assert!(
        index.contains("<h1>parcels reference</h1>"),
        "the set's name"
    );
    for page in [&index, &shipment] {
        let at = page
            .find("fleetwire reference")
            .map(|i| &page[i.saturating_sub(200)..i + 40]);
        assert!(at.is_none(), "fleetwire's brand: {at:?}");
        assert!(
            !page.contains("fleetwire_types::"),
            "fleetwire's crate path"
        );
        assert!(
            !page.contains("fleetwire never writes"),
            "fleetwire's policy"
        );
        assert!(!page.contains("fleetwire validate"), "fleetwire's command");
    }
    assert!(
        shipment.contains("<code>parcels::"),
        "Rust types named by the parcel crate"
    );
    assert!(dir.path().join("examples/Shipment/door.json").exists());
    let api_page = std::fs::read_to_string(dir.path().join("api.html")).unwrap();
    assert!(api_page.contains("/v1/shipments"));
    assert!(dir.path().join("openapi/openapi.json").exists());
}

#[test]
fn a_refused_keyword_fails_generate_with_its_file_and_pointer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.schema.json"),
        r#"{"$defs": {"Doc": {"title": "Doc", "type": "object",
            "properties": {"a": {"type": "string", "if": {"minLength": 1}}}}}}"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fleetwire-codegen"))
        .args(["generate", "--schemas"])
        .arg(dir.path())
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "bad.schema.json: /$defs/Doc/properties/a/if: the keyword `if` is not supported"
        ),
        "{stderr}"
    );
    assert!(!dir.path().join("out").exists());
}

#[test]
fn a_document_named_like_one_of_fleetwire_s_gets_none_of_its_policy() {
    let dir = tempfile::tempdir().unwrap();
    let schemas = dir.path().join("schemas");
    std::fs::create_dir(&schemas).unwrap();
    std::fs::write(
        schemas.join("health.schema.json"),
        r#"{"title": "Health", "type": "object", "additionalProperties": false,
            "properties": {"up": {"type": "boolean"}}}"#,
    )
    .unwrap();
    let site = dir.path().join("site");
    codegen(&[
        "docs",
        "--schemas",
        schemas.to_str().unwrap(),
        "--out",
        site.to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(site.join("Health.html")).unwrap();
    assert!(
        !page.contains("every fleetwire server"),
        "fleetwire's policy shown"
    );
}
