//! Converting draft 2020-12 schemas to the OpenAPI 3.0 dialect, and the two bundled documents.
//! (The documents as consumers read them — every fixture and every live answer through an
//! independent OpenAPI validator — are checked by `tests/openapi/check_openapi.py`.)

use fleetwire_codegen::openapi::{to_openapi_30, to_openapi_31};
use std::collections::{BTreeMap, BTreeSet};

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
    // Every component is a definition, or a part of one the writer made a component of its
    // own (`openapi::hoist_members`), which goes back in its place for the comparison.
    let mut hoisted: BTreeSet<&str> = schemas_31
        .keys()
        .map(String::as_str)
        .filter(|name| !outputs.bundle.defs.contains_key(*name))
        .collect();
    for (name, schema) in schemas_31 {
        let Some(definition) = outputs.bundle.defs.get(name) else {
            continue;
        };
        let mut definition = definition.clone();
        with_format_range(&mut definition);
        // Through text, as the document was written and read (the same rounding of long
        // numbers), and numbers as numbers: the documents write a whole one as an integer
        // (`2.0` as `2`).
        let mut definition: Value =
            serde_json::from_str(&fleetwire_codegen::openapi::to_text(&definition).unwrap())
                .unwrap();
        numbers_as_f64(&mut definition);
        let mut expected = serde_json::to_string(&definition).unwrap();
        expected = expected.replace("\"#/$defs/", "\"#/components/schemas/");
        let mut schema = schema.clone();
        inline_hoisted(&mut schema, schemas_31, &mut hoisted);
        numbers_as_f64(&mut schema);
        assert_eq!(
            serde_json::to_string(&schema).unwrap(),
            expected,
            "{name} differs from its definition"
        );
    }
    assert!(
        hoisted.is_empty(),
        "components that are no definition nor part of one: {hoisted:?}"
    );
}

/// `schema` with each reference to a component that is no definition (in `hoisted`) replaced
/// by that component, where the writer took it from: `items`, a variant, `additionalProperties`.
fn inline_hoisted<'a>(
    schema: &mut Value,
    schemas: &'a serde_json::Map<String, Value>,
    hoisted: &mut BTreeSet<&'a str>,
) {
    let mut slots: Vec<&mut Value> = Vec::new();
    let map = schema.as_object_mut().unwrap();
    for (key, value) in map.iter_mut() {
        match key.as_str() {
            "items" | "additionalProperties" => slots.push(value),
            "oneOf" | "anyOf" => slots.extend(value.as_array_mut().unwrap().iter_mut()),
            _ => {}
        }
    }
    for slot in slots {
        let Some(target) = slot
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/components/schemas/"))
        else {
            continue;
        };
        let Some((name, member)) = schemas.get_key_value(target) else {
            continue;
        };
        if hoisted.remove(name.as_str()) {
            *slot = member.clone();
            inline_hoisted(slot, schemas, hoisted);
        }
    }
}

/// Every number as an f64: `2` and `2.0` are the same number to JSON Schema.
fn numbers_as_f64(value: &mut Value) {
    match value {
        Value::Number(n) => *value = json!(n.as_f64().unwrap()),
        Value::Object(map) => map.values_mut().for_each(numbers_as_f64),
        Value::Array(items) => items.iter_mut().for_each(numbers_as_f64),
        _ => {}
    }
}

fn documents() -> Vec<(&'static str, String)> {
    let outputs = generated();
    [
        ("fleet-api.json", outputs.openapi_json),
        ("fleet-api.3.1.json", outputs.openapi_31_json),
        ("agent-api.json", outputs.agent_openapi_json),
        ("agent-api.3.1.json", outputs.agent_openapi_31_json),
    ]
    .into_iter()
    .map(|(file, text)| (file, text.unwrap()))
    .collect()
}

/// openapi-generator's normalizer reads the reference of each array's `items`, each `oneOf`
/// and `anyOf` variant and each schema `additionalProperties` at the top of a component, and
/// warns ("Failed to get the schema name: null") where there is none (docs/interop.md): in
/// every document each of those is a reference.
#[test]
fn no_component_has_an_inline_schema_where_openapi_generator_reads_a_reference() {
    let mut hoisted = 0;
    for (file, text) in documents() {
        let doc: Value = serde_json::from_str(&text).unwrap();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for (name, schema) in schemas {
            let mut members: Vec<(&str, &Value)> = Vec::new();
            if let Some(items) = schema.get("items") {
                members.push(("items", items));
            }
            for keyword in ["oneOf", "anyOf"] {
                for variant in schema
                    .get(keyword)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    members.push((keyword, variant));
                }
            }
            if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
                members.push(("additionalProperties", values));
            }
            for (keyword, member) in members {
                let target = member
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.strip_prefix("#/components/schemas/"));
                assert!(
                    target.is_some_and(|t| schemas.contains_key(t)),
                    "{file}: {name}'s {keyword} is no reference to a component: {member}"
                );
            }
        }
        hoisted += ["ArgvItem", "GuestPortsItem"]
            .iter()
            .filter(|n| schemas.contains_key(**n))
            .count();
    }
    // The controller's Argv and GuestPorts, in both of its documents and the agent's.
    assert_eq!(hoisted, 8);
}

#[test]
fn hoisted_members_are_named_after_their_component_and_refused_when_taken() {
    use fleetwire_codegen::openapi::hoist_members;
    let schemas = |v: Value| v.as_object().unwrap().clone();
    let out = hoist_members(schemas(json!({
        "Exit": {"oneOf": [
            {"title": "exit code", "type": "integer"},
            {"type": "string"},
            {"$ref": "#/components/schemas/Other"}
        ]},
        "Lists": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
        "Map": {"type": "object", "additionalProperties": {"type": "integer"}},
        "Closed": {"type": "object", "additionalProperties": false},
        "Other": {"type": "boolean"}
    })))
    .unwrap();
    assert_eq!(
        out.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "Exit",
            "ExitExitCode",
            "ExitVariant2",
            "Lists",
            "ListsItem",
            "ListsItemItem",
            "Map",
            "MapValue",
            "Closed",
            "Other"
        ]
    );
    assert_eq!(
        out["Exit"]["oneOf"],
        json!([
            {"$ref": "#/components/schemas/ExitExitCode"},
            {"$ref": "#/components/schemas/ExitVariant2"},
            {"$ref": "#/components/schemas/Other"}
        ])
    );
    assert_eq!(
        out["ExitExitCode"],
        json!({"title": "exit code", "type": "integer"})
    );
    assert_eq!(
        out["ListsItem"],
        json!({"type": "array", "items": {"$ref": "#/components/schemas/ListsItemItem"}})
    );
    assert_eq!(out["Closed"]["additionalProperties"], false);
    let err = hoist_members(schemas(json!({
        "Argv": {"type": "array", "items": {"type": "string"}},
        "ArgvItem": {"type": "string"}
    })))
    .unwrap_err();
    assert!(err.to_string().contains("ArgvItem"), "{err}");
}

/// A whole number in a schema is written as an integer: openapi-generator's 3.1 parser
/// (swagger-parser) turns a closed object's `additionalProperties: false` into a schema object
/// when a number among its properties is written with a fraction or an exponent and changes
/// form when it copies the schema (`"default": 2.0`, `3.4028234663852886e+38`), and its
/// normalizer then warns (docs/interop.md).
#[test]
fn whole_numbers_in_schemas_are_written_as_integers() {
    use fleetwire_codegen::openapi::{to_text, whole_numbers_as_integers};
    let mut schema = json!({
        "type": "object",
        "properties": {
            "maximum": {"type": "number", "default": 2.0, "minimum": -1.0, "maximum": 1.5},
            "big": {"type": "number", "maximum": f64::from(f32::MAX), "enum": [3.0, 0.5]},
            "object": {"default": {"maximum": 2.0}, "examples": [2.0], "x-note": 2.0}
        }
    });
    whole_numbers_as_integers(&mut schema);
    let properties = &schema["properties"];
    assert!(properties["maximum"]["default"].is_u64());
    assert!(properties["maximum"]["minimum"].is_i64());
    assert_eq!(properties["maximum"]["maximum"], 1.5);
    assert!(properties["big"]["enum"][0].is_u64());
    // Values are left as written: a default's members, examples, extensions.
    assert!(properties["object"]["default"]["maximum"].is_f64());
    assert!(properties["object"]["examples"][0].is_f64());
    assert!(properties["object"]["x-note"].is_f64());
    // Beyond 64 bits the number stays an f64, whose digits the document's text writes.
    assert!(properties["big"]["maximum"].is_f64());
    let text = to_text(&schema).unwrap();
    assert!(
        text.contains(r#""maximum": 340282346638528859811704183484516925440,"#),
        "{text}"
    );
    assert!(text.contains(r#""default": 2,"#), "{text}");
    assert!(text.contains(r#""x-note": 2.0"#), "{text}");
    assert!(text.ends_with("}\n"));
    // The digits are the same number.
    let read: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(read["properties"]["big"]["maximum"], f64::from(f32::MAX));

    for (file, text) in documents() {
        let doc: Value = serde_json::from_str(&text).unwrap();
        let mut whole_floats = Vec::new();
        for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
            let mut written = schema.clone();
            whole_numbers_as_integers(&mut written);
            assert_eq!(
                &written, schema,
                "{file}: {name} has a whole number written as a float"
            );
            collect_whole_floats(schema, &mut whole_floats);
        }
        for number in whole_floats {
            assert!(
                text.contains(&format!(": {number:.0}")),
                "{file}: {number} is not written as its digits"
            );
        }
    }
}

fn collect_whole_floats(value: &Value, out: &mut Vec<f64>) {
    match value {
        Value::Number(n) if n.is_f64() && n.as_f64().unwrap().fract() == 0.0 => {
            out.push(n.as_f64().unwrap())
        }
        Value::Object(map) => map.values().for_each(|v| collect_whole_floats(v, out)),
        Value::Array(items) => items.iter().for_each(|v| collect_whole_floats(v, out)),
        _ => {}
    }
}

/// Every body's examples refer to `components.examples.<Type>.<name>`, each written once and
/// each referred to: openapi-generator warns for each response example written inline.
#[test]
fn body_examples_are_references_to_components_written_once() {
    for (file, text) in documents() {
        let doc: Value = serde_json::from_str(&text).unwrap();
        let components = doc["components"]["examples"].as_object().unwrap();
        let mut referred = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let bodies = op.get("requestBody").into_iter().chain(
                    op["responses"]
                        .as_object()
                        .into_iter()
                        .flat_map(|r| r.values()),
                );
                for body in bodies {
                    for media in body
                        .get("content")
                        .and_then(Value::as_object)
                        .into_iter()
                        .flatten()
                        .map(|(_, m)| m)
                    {
                        let Some(examples) = media.get("examples").and_then(Value::as_object)
                        else {
                            continue;
                        };
                        let type_name = media["schema"]["$ref"]
                            .as_str()
                            .unwrap()
                            .rsplit('/')
                            .next()
                            .unwrap();
                        for (name, example) in examples {
                            let key =
                                fleetwire_codegen::openapi::example_component(type_name, name);
                            assert_eq!(
                                example,
                                &json!({"$ref": format!("#/components/examples/{key}")}),
                                "{file}: {method} {path}: example {name}"
                            );
                            assert!(components.contains_key(&key), "{file}: no example {key}");
                            referred.insert(key);
                        }
                    }
                }
            }
        }
        assert_eq!(
            referred.iter().collect::<Vec<_>>(),
            components.keys().collect::<Vec<_>>(),
            "{file}: components.examples are the examples the bodies refer to"
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

#[test]
fn links_of_the_api_description_reach_both_documents_and_name_real_operations() {
    let outputs = generated();
    for text in [&outputs.openapi_json, &outputs.openapi_31_json] {
        let doc: Value = serde_json::from_str(text.as_deref().unwrap()).unwrap();
        let links = &doc["paths"]["/v1/nodes/register"]["post"]["responses"]["200"]["links"];
        assert_eq!(links["GetNode"]["operationId"], "get_node");
        assert_eq!(
            links["GetNode"]["parameters"]["node_id"],
            "$response.body#/node/node_id"
        );
        let create = &doc["paths"]["/v1/vms"]["post"]["responses"]["200"]["links"];
        assert_eq!(create["DeleteVm"]["operationId"], "delete_vm");
        // Every link names an operation of the document, with parameters it has.
        let mut operations = std::collections::BTreeMap::new();
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                let params: Vec<String> = op["parameters"]
                    .as_array()
                    .map(|p| {
                        p.iter()
                            .map(|p| p["name"].as_str().unwrap().to_string())
                            .collect()
                    })
                    .unwrap_or_default();
                operations.insert(op["operationId"].as_str().unwrap().to_string(), params);
            }
        }
        let mut count = 0;
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                for response in op["responses"].as_object().unwrap().values() {
                    for link in response["links"]
                        .as_object()
                        .into_iter()
                        .flat_map(|l| l.values())
                    {
                        let target = link["operationId"].as_str().unwrap();
                        let params = operations.get(target).expect("a link to a real operation");
                        for name in link["parameters"]
                            .as_object()
                            .into_iter()
                            .flat_map(|p| p.keys())
                        {
                            assert!(params.contains(name), "{target} has no parameter {name}");
                        }
                        count += 1;
                    }
                }
            }
        }
        assert!(count >= 10, "only {count} links");
    }
}

#[test]
fn request_bodies_are_read_with_unknown_fields_set_aside_and_answers_stay_closed() {
    let outputs = generated();
    let doc: Value = serde_json::from_str(outputs.openapi_json.as_deref().unwrap()).unwrap();
    let heartbeat = &doc["paths"]["/v1/nodes/heartbeat"]["post"];
    let body = &heartbeat["requestBody"];
    assert_eq!(
        body["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/NodeHeartbeat"
    );
    assert_eq!(body["x-fleetwire-unknown-fields"], "warn");
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["NodeHeartbeat"]["additionalProperties"], false);
    // The request body still carries the type's fixtures as examples.
    assert_eq!(
        body["content"]["application/json"]["examples"]["full"]["$ref"],
        "#/components/examples/NodeHeartbeat.full"
    );
    assert!(doc["components"]["examples"]["NodeHeartbeat.full"]["value"].is_object());
    let created = &doc["paths"]["/v1/vms"]["post"]["responses"]["200"];
    assert_eq!(
        created["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/VmRecord"
    );
    // The API fuzzer's view (the `as-read` command) opens the marked bodies.
    let read = fleetwire_codegen::openapi_as_read::as_read(doc).unwrap();
    assert_eq!(
        read["paths"]["/v1/nodes/heartbeat"]["post"]["requestBody"]["content"]["application/json"]
            ["schema"]["$ref"],
        "#/components/schemas/NodeHeartbeatAsRead"
    );
    assert!(read["components"]["schemas"]["NodeHeartbeatAsRead"]
        .get("additionalProperties")
        .is_none());
}

/// What client generators need to take a document whole (issue 31): one component per wire
/// type (a twin made openapi-python-client drop operations), titles that name one component
/// each (generators name models by title), and per operation an `operationId`, a tag, and a
/// model (a component) for every answer with a body.
#[test]
fn every_document_has_one_component_per_type_unique_titles_and_complete_operations() {
    let outputs = generated();
    for (file, text) in [
        ("fleet-api.json", &outputs.openapi_json),
        ("fleet-api.3.1.json", &outputs.openapi_31_json),
        ("agent-api.json", &outputs.agent_openapi_json),
        ("agent-api.3.1.json", &outputs.agent_openapi_31_json),
    ] {
        let doc: Value = serde_json::from_str(text.as_deref().unwrap()).unwrap();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut titles: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, schema) in schemas {
            assert!(
                !name.ends_with(fleetwire_codegen::openapi_as_read::AS_READ_SUFFIX),
                "{file}: {name} is a twin of a wire type"
            );
            let Some(title) = schema.get("title").and_then(Value::as_str) else {
                continue;
            };
            if let Some(other) = titles.insert(title, name) {
                panic!("{file}: {other} and {name} both have the title {title}");
            }
            assert!(
                title == name || !schemas.contains_key(title),
                "{file}: {name}'s title names another component, {title}"
            );
        }
        let mut operations = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                if !["get", "put", "post", "delete", "patch"].contains(&method.as_str()) {
                    continue;
                }
                operations += 1;
                let at = format!("{file}: {method} {path}");
                assert!(op["operationId"].is_string(), "{at} has no operationId");
                assert!(
                    op["tags"].as_array().is_some_and(|t| !t.is_empty()),
                    "{at} has no tag"
                );
                let mut models = 0;
                for (status, answer) in op["responses"].as_object().unwrap() {
                    let Some(content) = answer.get("content").and_then(Value::as_object) else {
                        continue;
                    };
                    for (media, m) in content {
                        // JSON is read into a component, or a list of one; text is a string.
                        let schema = &m["schema"];
                        let model = if media == "application/json" {
                            schema
                                .get("$ref")
                                .or_else(|| schema.pointer("/items/$ref"))
                                .and_then(Value::as_str)
                                .is_some_and(|r| r.starts_with("#/components/schemas/"))
                        } else {
                            schema["type"] == "string"
                        };
                        assert!(model, "{at} answers {status} {media} with no model");
                        models += 1;
                    }
                }
                assert!(models > 0, "{at} has no answer with a model");
            }
        }
        assert!(operations > 0, "{file} has no operations");
    }
}

#[test]
fn a_number_says_the_range_its_format_holds() {
    let largest = f64::from(f32::MAX);
    assert_eq!(
        to_30(json!({"type": "number", "format": "float", "minimum": 0})),
        json!({"type": "number", "format": "float", "minimum": 0, "maximum": largest})
    );
    assert_eq!(
        to_openapi_31(&json!({"type": "number", "format": "float"})).unwrap(),
        json!({"type": "number", "format": "float", "maximum": largest, "minimum": -largest})
    );
    // A double, and a float the schema bounds itself, are left as they are.
    assert_eq!(
        to_30(json!({"type": "number", "format": "double"})),
        json!({"type": "number", "format": "double"})
    );
    assert_eq!(
        to_30(json!({"type": "number", "format": "float", "minimum": 0, "maximum": 100})),
        json!({"type": "number", "format": "float", "minimum": 0, "maximum": 100})
    );
    assert_eq!(
        to_30(json!({"type": "integer", "format": "uint64", "minimum": 0})),
        json!({"type": "integer", "format": "uint64", "minimum": 0, "maximum": u64::MAX})
    );
    assert_eq!(
        to_30(json!({"type": "integer", "format": "int32"})),
        json!({"type": "integer", "format": "int32", "minimum": i32::MIN, "maximum": i32::MAX})
    );
}

#[test]
fn the_agent_api_has_documents_of_its_own_beside_the_controller_s() {
    let outputs = generated();
    for (text, version) in [
        (&outputs.agent_openapi_json, "3.0.3"),
        (&outputs.agent_openapi_31_json, "3.1.0"),
    ] {
        let doc: Value = serde_json::from_str(text.as_deref().unwrap()).unwrap();
        assert_eq!(doc["openapi"], version);
        assert_eq!(doc["info"]["version"], fleetwire_types_version());
        let spawn = &doc["paths"]["/v1/spawn"]["post"];
        assert_eq!(spawn["operationId"], "spawn_vm");
        assert_eq!(
            spawn["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/CreateVmRequest"
        );
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for name in [
            "VmRecord",
            "HostDesiredState",
            "HostReportedState",
            "ApiError",
            "Health",
        ] {
            assert!(
                schemas.contains_key(name),
                "components.schemas lacks {name}"
            );
        }
        // Only what the agent's paths reach: no controller-only body.
        assert!(!schemas.contains_key("NodeHeartbeat"));
    }
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let generation = fleetwire_codegen::Generation::load(
        &fleetwire_codegen::config::Config::fleetwire(&workspace.join("schemas")),
    )
    .unwrap();
    let checked_in = fleetwire_codegen::checked_in(&generation).unwrap();
    for name in [
        "generated/openapi/agent-api.json",
        "generated/openapi/agent-api.3.1.json",
    ] {
        assert!(
            checked_in
                .iter()
                .any(|(path, _)| path == std::path::Path::new(name)),
            "{name} is not kept in the repository"
        );
    }
}

fn fleetwire_types_version() -> String {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace.join("schemas/schema-set.json")).unwrap(),
    )
    .unwrap();
    manifest["version"].as_str().unwrap().to_string()
}

/// What the documents add to a number whose `format` names a machine type and whose schema
/// leaves it unbounded: the range that type holds (`a_number_says_the_range_its_format_holds`).
fn with_format_range(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let largest = f64::from(f32::MAX);
            let range = match (
                map.get("type").and_then(Value::as_str),
                map.get("format").and_then(Value::as_str),
            ) {
                (Some("number"), Some("float")) => Some((json!(-largest), json!(largest))),
                (Some("integer"), Some("uint8")) => Some((json!(0), json!(u8::MAX))),
                (Some("integer"), Some("uint16")) => Some((json!(0), json!(u16::MAX))),
                (Some("integer"), Some("uint32")) => Some((json!(0), json!(u32::MAX))),
                (Some("integer"), Some("uint64")) => Some((json!(0), json!(u64::MAX))),
                (Some("integer"), Some("int8")) => Some((json!(i8::MIN), json!(i8::MAX))),
                (Some("integer"), Some("int16")) => Some((json!(i16::MIN), json!(i16::MAX))),
                (Some("integer"), Some("int32")) => Some((json!(i32::MIN), json!(i32::MAX))),
                (Some("integer"), Some("int64")) => Some((json!(i64::MIN), json!(i64::MAX))),
                _ => None,
            };
            if let Some((lowest, highest)) = range {
                if !map.contains_key("maximum") && !map.contains_key("exclusiveMaximum") {
                    map.insert("maximum".into(), highest);
                }
                if !map.contains_key("minimum") && !map.contains_key("exclusiveMinimum") {
                    map.insert("minimum".into(), lowest);
                }
            }
            map.values_mut().for_each(with_format_range);
        }
        Value::Array(items) => items.iter_mut().for_each(with_format_range),
        _ => {}
    }
}
