//! Which documents the generated types enforce in full, and which are left to the schema pass.

use fleetwire_codegen::bundle::{Bundle, SchemaFile};
use fleetwire_codegen::exactness::analyse;
use serde_json::{json, Value};

fn bundle(doc: Value) -> Bundle {
    let file = SchemaFile {
        name: "t.schema.json".into(),
        path: "t.schema.json".into(),
        value: json!({"$defs": {"Doc": doc}}),
    };
    Bundle::from_files(vec![file], None).unwrap()
}

fn doc(properties: Value) -> Value {
    json!({"title": "Doc", "type": "object", "properties": properties, "additionalProperties": false})
}

#[test]
fn constraints_the_types_carry_are_exact() {
    let b = bundle(doc(json!({
        "id": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 10},
        "count": {"type": "integer", "format": "uint32", "minimum": 0, "maximum": 4294967295u64},
        "port": {"type": "integer", "format": "uint16", "minimum": 1, "maximum": 65535},
        "load": {"type": "number", "format": "double", "minimum": 0},
        "argv": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
        "maybe": {"type": ["integer", "null"], "format": "int32", "minimum": i32::MIN, "maximum": i32::MAX}
    })));
    assert_eq!(analyse(&b, "Doc"), Ok(()));
}

#[test]
fn extensions_are_annotations_and_leave_a_document_exact() {
    // `x-fleetwire-invalid-items` on the heartbeat's `vms` made NodeHeartbeat inexact, so every
    // heartbeat paid the schema pass on top of its typed parse (issue 27).
    let b = bundle(doc(json!({
        "vms": {"type": "array", "items": {"type": "string"}, "x-fleetwire-invalid-items": "set-aside"},
        "n": {"type": "integer", "format": "uint16", "minimum": 0, "maximum": 65535, "x-note": {"any": 1}}
    })));
    assert_eq!(analyse(&b, "Doc"), Ok(()));
}

#[test]
fn constraints_left_to_the_schema_make_a_document_inexact() {
    for (property, keyword) in [
        (
            json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true}),
            "uniqueItems",
        ),
        (json!({"type": "number", "multipleOf": 0.5}), "multipleOf"),
        (
            json!({"type": "integer", "format": "uint32", "minimum": 0, "maximum": 10}),
            "bounds",
        ),
        (json!({"type": "string", "format": "email"}), "email"),
        (json!({"type": "string", "enum": ["a", "b"]}), "enum"),
    ] {
        let b = bundle(doc(json!({ "p": property })));
        let why = analyse(&b, "Doc").unwrap_err().to_string();
        assert!(why.contains(keyword), "expected {keyword}: {why}");
    }
}

#[test]
fn an_integer_format_without_its_range_in_the_schema_is_inexact() {
    let b = bundle(doc(
        json!({ "code": {"type": "integer", "format": "int64"} }),
    ));
    assert!(analyse(&b, "Doc")
        .unwrap_err()
        .to_string()
        .contains("range"));
    let b = bundle(doc(
        json!({ "code": {"type": "integer", "format": "int64", "minimum": i64::MIN, "maximum": i64::MAX} }),
    ));
    assert_eq!(analyse(&b, "Doc"), Ok(()));
}
