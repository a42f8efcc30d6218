//! Converting draft 2020-12 schemas to the OpenAPI 3.0 dialect.

use fleetwire_codegen::openapi::to_openapi_30;
use serde_json::json;

#[test]
fn nullable_types_and_references_use_nullable() {
    let converted = to_openapi_30(&json!({"type": ["integer", "null"], "minimum": 0})).unwrap();
    assert_eq!(
        converted,
        json!({"type": "integer", "minimum": 0, "nullable": true})
    );
    let converted = to_openapi_30(
        &json!({"oneOf": [{"$ref": "#/$defs/HostPort"}, {"type": "null"}], "description": "d"}),
    )
    .unwrap();
    assert_eq!(
        converted,
        json!({"allOf": [{"$ref": "#/components/schemas/HostPort"}], "description": "d", "nullable": true})
    );
}

#[test]
fn siblings_of_a_reference_are_kept_through_all_of() {
    let converted =
        to_openapi_30(&json!({"$ref": "#/$defs/Timestamp", "description": "When."})).unwrap();
    assert_eq!(
        converted,
        json!({"description": "When.", "allOf": [{"$ref": "#/components/schemas/Timestamp"}]})
    );
}

#[test]
fn const_examples_and_exclusive_bounds_are_translated() {
    let converted =
        to_openapi_30(&json!({"const": "x", "examples": ["x"], "exclusiveMinimum": 0})).unwrap();
    assert_eq!(
        converted,
        json!({"enum": ["x"], "example": "x", "minimum": 0, "exclusiveMinimum": true})
    );
}

#[test]
fn keywords_without_a_3_0_form_are_errors() {
    let err =
        to_openapi_30(&json!({"type": "array", "prefixItems": [{"type": "string"}]})).unwrap_err();
    assert!(err.to_string().contains("prefixItems"), "{err}");
}

#[test]
fn the_bundled_api_document_is_openapi_3_0_with_every_body_schema() {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let outputs = fleetwire_codegen::generate(&workspace.join("schemas")).unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(outputs.openapi_json.as_deref().unwrap()).unwrap();
    assert_eq!(doc["openapi"], "3.0.3");
    let api: openapiv3::OpenAPI = serde_json::from_value(doc.clone()).unwrap();
    let schemas = &api.components.as_ref().unwrap().schemas;
    for name in [
        "NodeHeartbeat",
        "NodeRecord",
        "FleetStatus",
        "CreateVmRequest",
        "VmRecord",
        "ApiError",
        "RegisterNodeRequest",
    ] {
        assert!(
            schemas.contains_key(name),
            "components.schemas lacks {name}"
        );
    }
    // No reference is left pointing outside the document.
    let text = serde_json::to_string(&doc).unwrap();
    assert!(
        !text.contains(".schema.json#"),
        "an external reference survived"
    );
    assert!(
        !text.contains("#/$defs/"),
        "a JSON Schema reference survived"
    );
}
