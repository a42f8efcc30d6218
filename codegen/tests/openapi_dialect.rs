//! Converting draft 2020-12 schemas to the OpenAPI 3.0 dialect, and the two bundled documents.
//! (The documents as consumers read them — every fixture and every live answer through an
//! independent OpenAPI validator — are checked by `tests/openapi/check_openapi.py`.)

use fleetwire_codegen::openapi::{to_openapi_30, to_openapi_31};
use serde_json::{json, Value};

fn to_30(schema: Value) -> Value {
    to_openapi_30(&schema).unwrap()
}

#[test]
fn nullable_types_use_nullable_beside_their_type() {
    assert_eq!(
        to_30(json!({"type": ["integer", "null"], "minimum": 0})),
        json!({"type": "integer", "minimum": 0, "nullable": true})
    );
}

#[test]
fn a_nullable_reference_is_the_reference_or_a_null_only_schema() {
    // No `nullable` beside `allOf`: without a `type` it has no effect in 3.0.3, and the
    // reference refuses null.
    assert_eq!(
        to_30(
            json!({"oneOf": [{"$ref": "#/$defs/HostPort"}, {"type": "null"}], "description": "d"})
        ),
        json!({"anyOf": [
            {"$ref": "#/components/schemas/HostPort"},
            {"nullable": true, "enum": [null]}
        ], "description": "d"})
    );
    // Several non-null variants keep their keyword, null added as one more.
    let converted = to_30(json!({"oneOf": [
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
        {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]},
        {"type": "null"}
    ]}));
    assert_eq!(converted["oneOf"].as_array().unwrap().len(), 3);
    assert_eq!(
        converted["oneOf"][2],
        json!({"nullable": true, "enum": [null]})
    );
    assert!(converted.get("nullable").is_none());
}

#[test]
fn siblings_of_a_reference_are_kept_through_all_of() {
    assert_eq!(
        to_30(json!({"$ref": "#/$defs/Timestamp", "description": "When."})),
        json!({"description": "When.", "allOf": [{"$ref": "#/components/schemas/Timestamp"}]})
    );
}

#[test]
fn const_examples_and_exclusive_bounds_are_translated() {
    assert_eq!(
        to_30(json!({"const": "x", "examples": ["x"], "exclusiveMinimum": 0})),
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
fn the_3_1_form_is_the_schema_with_its_references_moved() {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "$ref": {"type": "string"},
            "at": {"oneOf": [{"$ref": "#/$defs/Timestamp"}, {"type": "null"}]},
            "n": {"type": ["integer", "null"], "exclusiveMinimum": 0}
        },
        "examples": [{"$ref": "#/$defs/NotAReference"}]
    });
    assert_eq!(
        to_openapi_31(&schema).unwrap(),
        json!({
            "type": "object",
            "properties": {
                "$ref": {"type": "string"},
                "at": {"oneOf": [{"$ref": "#/components/schemas/Timestamp"}, {"type": "null"}]},
                "n": {"type": ["integer", "null"], "exclusiveMinimum": 0}
            },
            "examples": [{"$ref": "#/$defs/NotAReference"}]
        })
    );
    let err = to_openapi_31(&json!({"$defs": {}})).unwrap_err();
    assert!(err.to_string().contains("$defs"), "{err}");
}

fn generated() -> fleetwire_codegen::Outputs {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    fleetwire_codegen::generate(&workspace.join("schemas")).unwrap()
}

#[test]
fn the_bundled_api_document_is_openapi_3_0_with_every_body_schema() {
    let outputs = generated();
    let doc: Value = serde_json::from_str(outputs.openapi_json.as_deref().unwrap()).unwrap();
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
    // `nullable` stands beside a `type` (elsewhere 3.0.3 gives it no effect), or in the
    // null-only schema, which admits null through its `enum`.
    fn walk(v: &Value, at: &str) {
        match v {
            Value::Object(map) => {
                if map.contains_key("nullable") && !map.contains_key("type") {
                    assert_eq!(v, &json!({"nullable": true, "enum": [null]}), "{at}");
                }
                map.iter().for_each(|(k, v)| walk(v, &format!("{at}/{k}")));
            }
            Value::Array(items) => items
                .iter()
                .enumerate()
                .for_each(|(i, v)| walk(v, &format!("{at}/{i}"))),
            _ => {}
        }
    }
    walk(&doc, "");
}

#[test]
fn the_3_1_document_has_the_same_paths_and_the_2020_12_schemas_as_they_are() {
    let outputs = generated();
    let doc_30: Value = serde_json::from_str(outputs.openapi_json.as_deref().unwrap()).unwrap();
    let doc_31: Value = serde_json::from_str(outputs.openapi_31_json.as_deref().unwrap()).unwrap();
    assert_eq!(doc_31["openapi"], "3.1.0");
    // The same paths, but for what only 3.1 can say: the node routes take a client
    // certificate (mutualTLS), offered first in their `security`.
    let node_security = |doc: &Value| {
        let mut paths = doc["paths"].clone();
        let mut found = Vec::new();
        for (path, item) in paths.as_object_mut().unwrap() {
            for operation in item.as_object_mut().unwrap().values_mut() {
                if operation["x-fleetwire-access"] == "node" {
                    let taken = operation.as_object_mut().unwrap().remove("security");
                    found.push((path.clone(), taken));
                }
            }
        }
        (paths, found)
    };
    let (paths_30, security_30) = node_security(&doc_30);
    let (paths_31, security_31) = node_security(&doc_31);
    assert_eq!(paths_31, paths_30);
    assert_eq!(security_31.len(), 2, "register and heartbeat");
    for ((path, in_30), (_, in_31)) in security_30.iter().zip(&security_31) {
        let in_31 = in_31.as_ref().unwrap().as_array().unwrap();
        assert_eq!(
            in_31[0],
            serde_json::json!({"nodeCertificate": []}),
            "{path}"
        );
        for requirement in in_30.as_ref().unwrap().as_array().unwrap() {
            let anyone = requirement.as_object().unwrap().is_empty();
            assert_eq!(
                in_31.contains(requirement),
                !anyone,
                "{path}: {requirement}"
            );
        }
    }
    assert_eq!(
        doc_31["components"]["securitySchemes"]["nodeCertificate"]["type"],
        "mutualTLS"
    );
    assert!(doc_30["components"]["securitySchemes"]
        .get("nodeCertificate")
        .is_none());
    assert_eq!(doc_31["info"], doc_30["info"]);
    let schemas_30 = doc_30["components"]["schemas"].as_object().unwrap();
    let schemas_31 = doc_31["components"]["schemas"].as_object().unwrap();
    assert_eq!(
        schemas_31.keys().collect::<Vec<_>>(),
        schemas_30.keys().collect::<Vec<_>>()
    );
    for (name, schema) in schemas_31 {
        let mut expected = serde_json::to_string(&outputs.bundle.defs[name]).unwrap();
        expected = expected.replace("\"#/$defs/", "\"#/components/schemas/");
        assert_eq!(
            serde_json::to_string(schema).unwrap(),
            expected,
            "{name} differs from its definition"
        );
    }
}

#[test]
#[cfg(feature = "site")]
fn the_reference_site_offers_both_documents_beside_the_api_page() {
    let outputs = generated();
    let files = fleetwire_codegen::site::render(&outputs.model).unwrap();
    let file = |path: &str| {
        files
            .iter()
            .find(|(p, _)| p == std::path::Path::new(path))
            .map(|(_, bytes)| String::from_utf8(bytes.clone()).unwrap())
            .unwrap_or_else(|| panic!("the site has no {path}"))
    };
    assert_eq!(
        file("openapi/fleet-api.json"),
        outputs.openapi_json.clone().unwrap()
    );
    assert_eq!(
        file("openapi/fleet-api.3.1.json"),
        outputs.openapi_31_json.clone().unwrap()
    );
    let api_page = file("api.html");
    for (href, version) in [
        ("openapi/fleet-api.json", "OpenAPI 3.0.3"),
        ("openapi/fleet-api.3.1.json", "OpenAPI 3.1.0"),
    ] {
        assert!(
            api_page.contains(&format!("href=\"{href}\"")),
            "api.html does not link {href}"
        );
        assert!(
            api_page.contains(version),
            "api.html does not say {version}"
        );
    }
}
