//! Request bodies as the servers read them. The schemas' objects are closed (what fleetwire
//! writes), but a server sets a field it does not know aside and names it in a `Warning: 299`
//! header instead of refusing the body (docs/interop.md, "unknown fields in every peer
//! document"). The published documents say so with one extension on each request body,
//! `x-fleetwire-unknown-fields: warn`, and keep one component per wire type: a twin type per
//! request body stopped client generators (duplicate models, dropped operations: issue 31).
//! An API fuzzer, which would take the closed schema as a promise to refuse unknown fields,
//! reads a view derived from that extension (`as_read`, the `as-read` command): there each
//! marked body refers to an open copy, `<Name>AsRead`, of every closed definition it reaches;
//! answers keep the closed ones (docs/reliability/api-fuzz.md).

use std::collections::BTreeSet;

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

use crate::bundle::{collect_refs, ref_name};

/// The suffix of an open copy's component name (in the fuzzer's view only).
pub const AS_READ_SUFFIX: &str = "AsRead";

/// Marks an array whose invalid entries a server sets aside (value `set-aside`).
pub const SET_ASIDE_KEYWORD: &str = "x-fleetwire-invalid-items";

/// On a request body: what the server does with a field the body's schema does not define.
pub const UNKNOWN_FIELDS_KEYWORD: &str = "x-fleetwire-unknown-fields";
/// `warn`: set aside and named in a `Warning: 299` header, not refused.
pub const UNKNOWN_FIELDS_WARN: &str = "warn";

/// What `warn` means, said on each marked request body.
pub const UNKNOWN_FIELDS_SENTENCE: &str = "A field the body's schema does not define is set aside and named in a `Warning: 299` header, not refused (`x-fleetwire-unknown-fields: warn`, docs/interop.md), unless the request says otherwise with its `fieldValidation` parameter (Strict refuses it, Ignore sets it aside silently).";

/// Marks every request body of `doc` with `x-fleetwire-unknown-fields: warn`: every server
/// of the fleet reads every body that way.
pub fn mark_request_bodies(doc: &mut Value) -> Result<()> {
    for body in request_bodies(doc) {
        let body = body
            .as_object_mut()
            .context("a request body must be an object")?;
        body.insert(UNKNOWN_FIELDS_KEYWORD.into(), UNKNOWN_FIELDS_WARN.into());
        let said = body
            .get("description")
            .and_then(Value::as_str)
            .map(|d| format!("{d} "))
            .unwrap_or_default();
        body.insert(
            "description".into(),
            Value::String(format!("{said}{UNKNOWN_FIELDS_SENTENCE}")),
        );
    }
    Ok(())
}

/// The document as an API fuzzer must read it: each request body marked
/// `x-fleetwire-unknown-fields: warn` refers to open copies of the closed definitions it
/// reaches. An error when no request body is marked (not a published document).
pub fn as_read(mut doc: Value) -> Result<Value> {
    let schemas = doc
        .pointer("/components/schemas")
        .and_then(Value::as_object)
        .context("the document has no components.schemas")?
        .clone();
    let mut bodies: Vec<String> = Vec::new();
    let mut marked = 0;
    for body in request_bodies(&mut doc) {
        if body.get(UNKNOWN_FIELDS_KEYWORD) != Some(&Value::from(UNKNOWN_FIELDS_WARN)) {
            continue;
        }
        marked += 1;
        for schema in body_schemas(body) {
            bodies.extend(collect_refs(schema).iter().map(|r| ref_name(r).to_string()));
        }
    }
    if marked == 0 {
        bail!("no request body carries `{UNKNOWN_FIELDS_KEYWORD}: {UNKNOWN_FIELDS_WARN}`: not a document fleetwire-codegen published");
    }
    let reachable = reachable_from(&schemas, bodies)?;
    // The definitions that are closed, or reach a closed one: those need an open copy.
    let mut open: BTreeSet<String> = BTreeSet::new();
    loop {
        let before = open.len();
        for name in &reachable {
            let schema = &schemas[name];
            let refers_to_open = collect_refs(schema)
                .iter()
                .any(|r| open.contains(ref_name(r)));
            if has_closed_object(schema) || refers_to_open {
                open.insert(name.clone());
            }
        }
        if open.len() == before {
            break;
        }
    }
    let mut copies = Map::new();
    for name in &open {
        let mut copy = opened(&schemas[name], &open);
        if let Some(obj) = copy.as_object_mut() {
            // Each title names one component (generators name models by title).
            if let Some(title) = obj.get("title").and_then(Value::as_str) {
                let title = format!("{title}{AS_READ_SUFFIX}");
                obj.insert("title".into(), Value::String(title));
            }
        }
        copies.insert(format!("{name}{AS_READ_SUFFIX}"), copy);
    }
    let target = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
        .context("the document has no components.schemas")?;
    target.extend(copies);
    for body in request_bodies(&mut doc) {
        if body.get(UNKNOWN_FIELDS_KEYWORD) == Some(&Value::from(UNKNOWN_FIELDS_WARN)) {
            for schema in body_schemas(body) {
                redirect(schema, &open);
            }
        }
    }
    Ok(doc)
}

fn reachable_from(schemas: &Map<String, Value>, roots: Vec<String>) -> Result<BTreeSet<String>> {
    let mut seen = BTreeSet::new();
    let mut pending = roots;
    while let Some(name) = pending.pop() {
        let schema = schemas.get(&name).with_context(|| {
            format!("a request body refers to `{name}`, which is not a component")
        })?;
        if seen.insert(name) {
            pending.extend(collect_refs(schema).iter().map(|r| ref_name(r).to_string()));
        }
    }
    Ok(seen)
}

/// Whether `schema` has an object with `additionalProperties: false` (not behind a `$ref`).
fn has_closed_object(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map.iter().any(|(k, v)| match k.as_str() {
            "additionalProperties" => v == &Value::Bool(false) || has_closed_object(v),
            "enum" | "const" | "default" | "example" | "examples" | "required" => false,
            _ => has_closed_object(v),
        }),
        Value::Array(items) => items.iter().any(has_closed_object),
        _ => false,
    }
}

/// `schema` without its `additionalProperties: false`, its references to `open` definitions
/// pointing at their copies.
fn opened(schema: &Value, open: &BTreeSet<String>) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = Map::new();
            // An array whose invalid entries the server sets aside instead of refusing the
            // body (a heartbeat's `vms`: docs/controller.md) takes any entry as read.
            let set_aside = map.get(SET_ASIDE_KEYWORD) == Some(&Value::from("set-aside"));
            for (k, v) in map {
                match k.as_str() {
                    "items" if set_aside => {
                        out.insert(
                            k.clone(),
                            serde_json::json!({
                                "description": "Any entry: one that is not valid as written is set aside and reported, not refused."
                            }),
                        );
                    }
                    "additionalProperties" if v == &Value::Bool(false) => {}
                    "enum" | "const" | "default" | "example" | "examples" | "required" => {
                        out.insert(k.clone(), v.clone());
                    }
                    "$ref" => {
                        let mut r = Value::Object(Map::from_iter([(k.clone(), v.clone())]));
                        redirect(&mut r, open);
                        out.insert(k.clone(), r[k].clone());
                    }
                    _ => {
                        out.insert(k.clone(), opened(v, open));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| opened(v, open)).collect()),
        other => other.clone(),
    }
}

/// Points every `$ref` in `value` at an `open` definition's copy.
fn redirect(value: &mut Value, open: &BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if k == "$ref" {
                    if let Some(target) = v.as_str() {
                        let name = ref_name(target);
                        if open.contains(name) {
                            *v = Value::String(format!(
                                "#/components/schemas/{name}{AS_READ_SUFFIX}"
                            ));
                        }
                    }
                } else {
                    redirect(v, open);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redirect(v, open)),
        _ => {}
    }
}

/// Every operation's `requestBody` object.
fn request_bodies(doc: &mut Value) -> Vec<&mut Value> {
    let mut out = Vec::new();
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return out;
    };
    for item in paths.values_mut().filter_map(Value::as_object_mut) {
        for op in item.values_mut().filter_map(Value::as_object_mut) {
            if let Some(body) = op.get_mut("requestBody") {
                out.push(body);
            }
        }
    }
    out
}

/// The schema of each media type of a request body.
fn body_schemas(body: &mut Value) -> Vec<&mut Value> {
    body.get_mut("content")
        .and_then(Value::as_object_mut)
        .map(|content| {
            content
                .values_mut()
                .filter_map(|media| media.get_mut("schema"))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({
            "openapi": "3.0.3",
            "paths": {"/x": {"post": {
                "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Outer"}}}},
                "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Outer"}}}}}
            }}},
            "components": {"schemas": {
                "Outer": {"type": "object", "properties": {"inner": {"$ref": "#/components/schemas/Inner"}, "id": {"$ref": "#/components/schemas/Id"}}, "additionalProperties": false},
                "Inner": {"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": false},
                "Id": {"type": "string"}
            }}
        })
    }

    fn published() -> Value {
        let mut doc = doc();
        mark_request_bodies(&mut doc).unwrap();
        doc
    }

    #[test]
    fn a_published_document_marks_each_request_body_and_keeps_one_component_per_type() {
        let doc = published();
        let body = &doc["paths"]["/x"]["post"]["requestBody"];
        assert_eq!(body[UNKNOWN_FIELDS_KEYWORD], json!("warn"));
        assert!(body["description"]
            .as_str()
            .unwrap()
            .contains("Warning: 299"));
        assert_eq!(
            body.pointer("/content/application~1json/schema/$ref"),
            Some(&json!("#/components/schemas/Outer"))
        );
        assert_eq!(doc["components"]["schemas"], doc_schemas());
    }

    fn doc_schemas() -> Value {
        doc()["components"]["schemas"].clone()
    }

    #[test]
    fn the_fuzzers_view_needs_a_marked_document() {
        let err = as_read(doc()).unwrap_err().to_string();
        assert!(err.contains(UNKNOWN_FIELDS_KEYWORD), "{err}");
    }

    #[test]
    fn an_array_whose_invalid_entries_are_set_aside_takes_any_entry_as_read() {
        let mut doc = doc();
        doc["components"]["schemas"]["Outer"]["properties"]["list"] = json!({
            "type": "array", "items": {"$ref": "#/components/schemas/Inner"},
            "x-fleetwire-invalid-items": "set-aside"
        });
        mark_request_bodies(&mut doc).unwrap();
        let doc = as_read(doc).unwrap();
        let schemas = &doc["components"]["schemas"];
        let read = &schemas["OuterAsRead"]["properties"]["list"];
        assert!(read["items"].get("$ref").is_none(), "{read}");
        assert_eq!(read["type"], json!("array"));
        assert_eq!(
            schemas["Outer"]["properties"]["list"]["items"]["$ref"],
            json!("#/components/schemas/Inner")
        );
    }

    #[test]
    fn request_bodies_refer_to_open_copies_and_answers_keep_the_closed_definitions() {
        let doc = as_read(published()).unwrap();
        let op = &doc["paths"]["/x"]["post"];
        assert_eq!(
            op.pointer("/requestBody/content/application~1json/schema/$ref"),
            Some(&json!("#/components/schemas/OuterAsRead"))
        );
        assert_eq!(
            op.pointer("/responses/200/content/application~1json/schema/$ref"),
            Some(&json!("#/components/schemas/Outer"))
        );
        let schemas = &doc["components"]["schemas"];
        assert_eq!(schemas["Outer"]["additionalProperties"], json!(false));
        assert!(schemas["OuterAsRead"].get("additionalProperties").is_none());
        assert!(schemas["InnerAsRead"].get("additionalProperties").is_none());
        assert_eq!(
            schemas["OuterAsRead"]["properties"]["inner"]["$ref"],
            json!("#/components/schemas/InnerAsRead")
        );
        // A definition with no closed object anywhere below it needs no copy.
        assert_eq!(
            schemas["OuterAsRead"]["properties"]["id"]["$ref"],
            json!("#/components/schemas/Id")
        );
        assert!(schemas.get("IdAsRead").is_none());
    }
}
