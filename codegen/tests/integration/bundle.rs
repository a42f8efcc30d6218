//! Bundling schema files: cross-file references, root documents, and the errors that say
//! what is wrong and where.

use fleetwire_codegen::bundle::{Bundle, SchemaFile};
use serde_json::{json, Value};

fn file(name: &str, value: Value) -> SchemaFile {
    SchemaFile {
        name: name.into(),
        path: name.into(),
        value,
    }
}

fn ids() -> SchemaFile {
    file(
        "ids.schema.json",
        json!({"$defs": {
            "NodeId": {"description": "An id.", "type": "string", "pattern": "^[a-z]+$"},
            "Ping": {"title": "Ping", "type": "object", "properties": {"node": {"$ref": "#/$defs/NodeId", "description": "Who."}}}
        }}),
    )
}

#[test]
fn cross_file_references_become_local_and_titles_mark_root_documents() {
    let state = file(
        "state.schema.json",
        json!({
            "title": "State", "type": "object",
            "properties": {"node": {"$ref": "ids.schema.json#/$defs/NodeId", "description": "Which node."}},
            "$defs": {"Local": {"description": "A local helper.", "type": "integer"}}
        }),
    );
    let bundle = Bundle::from_files(vec![ids(), state], None).unwrap();
    let names: Vec<&String> = bundle.defs.keys().collect();
    assert_eq!(
        names,
        ["NodeId", "Ping", "State", "Local"],
        "schema order is kept"
    );
    assert_eq!(
        bundle.defs["State"]["properties"]["node"]["$ref"],
        "#/$defs/NodeId"
    );
    let roots: Vec<&str> = bundle.roots.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(roots, ["Ping", "State"]);
    assert!(bundle.schema_for("State")["$defs"]["NodeId"].is_object());
}

#[test]
fn a_definition_defined_twice_is_an_error_naming_both_files() {
    let again = file(
        "again.schema.json",
        json!({"$defs": {"NodeId": {"type": "string"}}}),
    );
    let err = Bundle::from_files(vec![ids(), again], None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("NodeId")
            && err.contains("ids.schema.json")
            && err.contains("again.schema.json"),
        "{err}"
    );
}

#[test]
fn a_dangling_reference_is_an_error_naming_the_definition() {
    let broken = file(
        "broken.schema.json",
        json!({"$defs": {"Uses": {"$ref": "#/$defs/Missing"}}}),
    );
    let err = format!("{:#}", Bundle::from_files(vec![broken], None).unwrap_err());
    assert!(err.contains("Uses") && err.contains("Missing"), "{err}");
}

#[test]
fn references_outside_the_schema_folder_are_refused_with_their_location() {
    let remote = file(
        "remote.schema.json",
        json!({"$defs": {"Uses": {"properties": {"x": {"$ref": "https://example.com/x.json"}}}}}),
    );
    let err = format!("{:#}", Bundle::from_files(vec![remote], None).unwrap_err());
    assert!(
        err.contains("/properties/x/$ref") && err.contains("example.com"),
        "{err}"
    );
}

#[test]
fn a_title_that_differs_from_the_definition_name_is_refused() {
    let odd = file(
        "odd.schema.json",
        json!({"$defs": {"Ping": {"title": "Pong", "type": "object"}}}),
    );
    let err = format!("{:#}", Bundle::from_files(vec![odd], None).unwrap_err());
    assert!(err.contains("Ping") && err.contains("Pong"), "{err}");
}
