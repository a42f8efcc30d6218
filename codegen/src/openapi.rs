//! The bundled OpenAPI documents: the paths of `schemas/fleet-api.openapi.json` with every body
//! schema it reaches resolved into `components.schemas`, once converted to the OpenAPI 3.0.3
//! dialect (`fleet-api.json`) and once as the draft 2020-12 schemas are, in OpenAPI 3.1.0
//! (`fleet-api.3.1.json`). docs/interop.md ("OpenAPI consumers") says how the two differ.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};

use crate::bundle::{collect_refs, ref_name, Bundle, API_FILE};

/// The `openapi` version of each document.
pub const OPENAPI_30: &str = "3.0.3";
pub const OPENAPI_31: &str = "3.1.0";

/// Builds the bundled OpenAPI 3.0.3 document; `None` when `schemas/` has no API description.
pub fn document(bundle: &Bundle) -> Result<Option<Value>> {
    let Some((mut doc, reachable)) = paths_and_reachable(bundle)? else {
        return Ok(None);
    };
    let mut schemas = Map::new();
    for (name, def) in &bundle.defs {
        if reachable.contains(name) {
            let converted = to_openapi_30(def)
                .with_context(|| format!("converting `{name}` to OpenAPI 3.0"))?;
            schemas.insert(name.clone(), converted);
        }
    }
    assemble(&mut doc, OPENAPI_30, schemas)?;
    crate::openapi_as_read::mark_request_bodies(&mut doc)?;
    // The result must still be a valid 3.0 document, now with its schemas.
    let _: openapiv3::OpenAPI = serde_json::from_value(doc.clone())
        .context("the bundled document is not valid OpenAPI 3.0")?;
    Ok(Some(doc))
}

/// Builds the bundled OpenAPI 3.1.0 document: the same paths, and the same definitions as the
/// 3.0 one, taken as they are (3.1's schema dialect is draft 2020-12) with only their
/// references moved to `#/components/schemas/`. `None` without an API description.
pub fn document_31(bundle: &Bundle) -> Result<Option<Value>> {
    let Some((mut doc, reachable)) = paths_and_reachable(bundle)? else {
        return Ok(None);
    };
    // The paths are written in 3.0 syntax; what they hold inline must mean the same in 3.1.
    refuse_30_only_keywords(&doc["paths"], "paths")?;
    let mut schemas = Map::new();
    for (name, def) in &bundle.defs {
        if reachable.contains(name) {
            let converted = to_openapi_31(def)
                .with_context(|| format!("converting `{name}` to OpenAPI 3.1"))?;
            schemas.insert(name.clone(), converted);
        }
    }
    assemble(&mut doc, OPENAPI_31, schemas)?;
    crate::openapi_as_read::mark_request_bodies(&mut doc)?;
    name_node_certificates(&mut doc)?;
    Ok(Some(doc))
}

/// Gives every request and response body whose schema is a definition with fixtures
/// (`schemas/examples/<Type>/valid/*.json`) those fixtures as its `examples`, by file name: the
/// fixtures the tests validate, so a client generator or a mock server gets bodies known to be
/// accepted. Both OpenAPI versions spell media-type examples the same way.
pub fn with_examples(mut doc: Value, examples_dir: &Path) -> Result<Value> {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return Ok(doc);
    };
    for item in paths.values_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for op in item.values_mut().filter_map(Value::as_object_mut) {
            let mut media: Vec<&mut Value> = Vec::new();
            for (key, part) in op.iter_mut() {
                let bodies: Vec<&mut Value> = match key.as_str() {
                    "requestBody" => vec![part],
                    "responses" => part
                        .as_object_mut()
                        .map(|r| r.values_mut().collect())
                        .unwrap_or_default(),
                    _ => Vec::new(),
                };
                for body in bodies {
                    if let Some(content) = body.get_mut("content").and_then(Value::as_object_mut) {
                        media.extend(content.values_mut());
                    }
                }
            }
            for m in media {
                let Some(name) = m
                    .pointer("/schema/$ref")
                    .and_then(Value::as_str)
                    .map(ref_name)
                    .map(str::to_string)
                else {
                    continue;
                };
                let mut examples = Map::new();
                for e in crate::examples::load(examples_dir, &name)? {
                    let value: Value = serde_json::from_str(&e.text)
                        .with_context(|| format!("example {}", e.site_path()))?;
                    examples.insert(
                        e.name.clone(),
                        json!({"summary": format!("schemas/{}/{name}/valid/{}", crate::examples::EXAMPLES_DIR, e.file), "value": value}),
                    );
                }
                if !examples.is_empty() {
                    m.as_object_mut()
                        .context("a media type must be an object")?
                        .insert("examples".into(), Value::Object(examples));
                }
            }
        }
    }
    Ok(doc)
}

/// OpenAPI 3.1 can say what 3.0 cannot: that the node routes (`x-fleetwire-access: node`) take
/// the node's client certificate (mutual TLS, docs/security.md). Adds the `nodeCertificate`
/// scheme and offers it, as an alternative, on each such operation beside what its `security`
/// already lists (registration's bootstrap token).
fn name_node_certificates(doc: &mut Value) -> Result<()> {
    let mut uses = false;
    let paths = doc
        .get_mut("paths")
        .and_then(Value::as_object_mut)
        .context("the API description has no paths")?;
    for item in paths.values_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for operation in item.values_mut() {
            if operation.get("x-fleetwire-access").and_then(Value::as_str) != Some("node") {
                continue;
            }
            uses = true;
            let mut security = vec![serde_json::json!({"nodeCertificate": []})];
            let listed = operation
                .get("security")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            // An empty requirement (`{}`: anyone) is --plain-http's; the certificate replaces it.
            security.extend(
                listed
                    .into_iter()
                    .filter(|r| r.as_object().is_some_and(|o| !o.is_empty())),
            );
            operation["security"] = Value::Array(security);
        }
    }
    if uses {
        let schemes = doc["components"]
            .as_object_mut()
            .context("`components` must be an object")?
            .entry("securitySchemes")
            .or_insert_with(|| Value::Object(Map::new()));
        schemes
            .as_object_mut()
            .context("`components.securitySchemes` must be an object")?
            .insert(
                "nodeCertificate".into(),
                serde_json::json!({
                    "type": "mutualTLS",
                    "description": "The node's client certificate, issued by the fleet CA from its CSR at registration: its one DNS name must be the body's node_id, and it must be the node's current certificate. Not asked for with --plain-http."
                }),
            );
    }
    Ok(())
}

/// The API description with its references rewritten, and every definition its paths reach.
fn paths_and_reachable(bundle: &Bundle) -> Result<Option<(Value, BTreeSet<String>)>> {
    let Some(api) = &bundle.api else {
        return Ok(None);
    };
    // The description itself must be a well-formed OpenAPI 3.0 document.
    let _: openapiv3::OpenAPI = serde_json::from_value(api.clone())
        .with_context(|| format!("{API_FILE} is not an OpenAPI 3.0 document"))?;
    if api.pointer("/components/schemas").is_some() {
        bail!("{API_FILE}: body schemas belong in the *.schema.json files; reference them instead of writing components.schemas");
    }
    let mut doc = api.clone();
    rewrite_component_refs(&mut doc)?;

    // Every definition the paths reach, transitively.
    let mut reachable = BTreeSet::new();
    let mut pending: Vec<String> = collect_refs(&doc)
        .iter()
        .map(|r| ref_name(r).to_string())
        .collect();
    while let Some(name) = pending.pop() {
        let def = bundle
            .defs
            .get(&name)
            .with_context(|| format!("{API_FILE} refers to `{name}`, which no schema defines"))?;
        if reachable.insert(name) {
            pending.extend(collect_refs(def).iter().map(|r| ref_name(r).to_string()));
        }
    }
    Ok(Some((doc, reachable)))
}

/// Sets the version, the component schemas (in schema order) and the generator mark.
fn assemble(doc: &mut Value, version: &str, schemas: Map<String, Value>) -> Result<()> {
    let root = doc
        .as_object_mut()
        .context("the API description must be an object")?;
    root.insert("openapi".into(), Value::String(version.into()));
    let components = root
        .entry("components")
        .or_insert_with(|| Value::Object(Map::new()));
    components
        .as_object_mut()
        .context("`components` must be an object")?
        .insert("schemas".into(), Value::Object(schemas));
    root.insert(
        "x-generated-by".into(),
        Value::String("fleetwire-codegen from schemas/ (do not edit; run `cargo run -p fleetwire-codegen -- generate`)".into()),
    );
    Ok(())
}

/// `node.schema.json#/$defs/X` → `#/components/schemas/X` everywhere in the paths.
fn rewrite_component_refs(value: &mut Value) -> Result<()> {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if k == "$ref" {
                    let target = v.as_str().context("`$ref` must be a string")?;
                    let (_, fragment) = target.split_once('#').unwrap_or(("", target));
                    let Some(name) = fragment.strip_prefix("/$defs/") else {
                        bail!("`{target}`: references in {API_FILE} must point at a schema definition");
                    };
                    *v = Value::String(format!("#/components/schemas/{name}"));
                } else {
                    rewrite_component_refs(v)?;
                }
            }
        }
        Value::Array(items) => items.iter_mut().try_for_each(rewrite_component_refs)?,
        _ => {}
    }
    Ok(())
}

/// Schemas written inline in the paths must mean the same in 3.0 and 3.1: refuse the 3.0-only
/// spellings (`nullable`, boolean exclusive bounds), which belong in a definition.
fn refuse_30_only_keywords(value: &Value, at: &str) -> Result<()> {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let here = format!("{at}/{k}");
                match (k.as_str(), v) {
                    ("nullable", _) | ("exclusiveMinimum" | "exclusiveMaximum", Value::Bool(_)) => {
                        bail!("{API_FILE}: `{here}` has no OpenAPI 3.1 form; reference a definition instead")
                    }
                    _ => refuse_30_only_keywords(v, &here)?,
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                refuse_30_only_keywords(v, &format!("{at}/{i}"))?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Converts one draft 2020-12 schema to OpenAPI 3.1: the same schema, with its local
/// references (`#/$defs/X`) pointing at `#/components/schemas/X` and without `$schema`, which
/// the document's dialect replaces. Keywords that would move references elsewhere are refused.
pub fn to_openapi_31(schema: &Value) -> Result<Value> {
    fn walk(value: &Value, top: bool) -> Result<Value> {
        Ok(match value {
            Value::Object(map) => {
                let mut out = Map::new();
                for (key, v) in map {
                    match key.as_str() {
                        "$schema" if top => {}
                        "$ref" if v.is_string() => {
                            let name = ref_name(v.as_str().unwrap_or_default());
                            out.insert(
                                key.clone(),
                                Value::String(format!("#/components/schemas/{name}")),
                            );
                        }
                        "$id" | "$anchor" | "$dynamicAnchor" | "$dynamicRef" | "$defs" => {
                            bail!(
                                "`{key}` would change how references resolve in components.schemas"
                            )
                        }
                        // Property names are data, not keywords: keep them, convert their schemas.
                        "properties" | "patternProperties" | "dependentSchemas" => {
                            let props = v
                                .as_object()
                                .with_context(|| format!("`{key}` must be an object"))?;
                            let mut converted = Map::new();
                            for (name, s) in props {
                                converted.insert(name.clone(), walk(s, false)?);
                            }
                            out.insert(key.clone(), Value::Object(converted));
                        }
                        // Values, not schemas.
                        "enum" | "const" | "default" | "examples" | "required"
                        | "dependentRequired" => {
                            out.insert(key.clone(), v.clone());
                        }
                        _ => {
                            out.insert(key.clone(), walk(v, false)?);
                        }
                    }
                }
                format_range(&mut out);
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|v| walk(v, false))
                    .collect::<Result<Vec<_>>>()?,
            ),
            other => other.clone(),
        })
    }
    walk(schema, true)
}

/// A number's `format` names the machine type it is read into (`float` an `f32`, `uint64` a
/// `u64`, ...), which refuses a larger magnitude as out of range (the wire reader's exactness,
/// docs/interop.md): where the schema gives no bound, the documents state the one that type
/// holds, so that a client (or an API fuzzer) knows.
fn format_range(schema: &mut Map<String, Value>) {
    let format = schema.get("format").and_then(Value::as_str);
    let (lowest, highest): (Value, Value) =
        match (schema.get("type").and_then(Value::as_str), format) {
            (Some("number"), Some("float")) => {
                let largest = f64::from(f32::MAX);
                (json!(-largest), json!(largest))
            }
            (Some("integer"), Some("uint8")) => (json!(0), json!(u8::MAX)),
            (Some("integer"), Some("uint16")) => (json!(0), json!(u16::MAX)),
            (Some("integer"), Some("uint32")) => (json!(0), json!(u32::MAX)),
            (Some("integer"), Some("uint64")) => (json!(0), json!(u64::MAX)),
            (Some("integer"), Some("int8")) => (json!(i8::MIN), json!(i8::MAX)),
            (Some("integer"), Some("int16")) => (json!(i16::MIN), json!(i16::MAX)),
            (Some("integer"), Some("int32")) => (json!(i32::MIN), json!(i32::MAX)),
            (Some("integer"), Some("int64")) => (json!(i64::MIN), json!(i64::MAX)),
            _ => return,
        };
    for (bound, exclusive, value) in [
        ("maximum", "exclusiveMaximum", highest),
        ("minimum", "exclusiveMinimum", lowest),
    ] {
        if !schema.contains_key(bound) && !schema.contains_key(exclusive) {
            schema.insert(bound.into(), value);
        }
    }
}

/// The OpenAPI 3.0.3 schema that accepts `null` and nothing else. 3.0 has no null type; a
/// schema without `type` admits null (the 3.0.3 clarification of `nullable`), and `enum` keeps
/// only null. `nullable: true` has no effect there but tells generators that look for it
/// (datamodel-code-generator reads this as a null model, not as "any object").
fn null_only() -> Value {
    json!({ "nullable": true, "enum": [null] })
}

/// Converts one draft 2020-12 schema to the OpenAPI 3.0.3 schema dialect.
pub fn to_openapi_30(schema: &Value) -> Result<Value> {
    let Some(obj) = schema.as_object() else {
        bail!("boolean schemas have no OpenAPI 3.0 form");
    };
    let mut out = Map::new();
    let mut nullable = false;
    for (key, value) in obj {
        match key.as_str() {
            "$schema" | "$comment" | "$id" => {}
            "$ref" => {
                let name = ref_name(value.as_str().context("`$ref` must be a string")?);
                out.insert(
                    "$ref".into(),
                    Value::String(format!("#/components/schemas/{name}")),
                );
            }
            "type" => match value {
                Value::Array(types) => {
                    let kept: Vec<&Value> = types
                        .iter()
                        .filter(|t| t.as_str() != Some("null"))
                        .collect();
                    nullable = kept.len() < types.len();
                    match kept.as_slice() {
                        [one] => {
                            out.insert("type".into(), (*one).clone());
                        }
                        [] => bail!("a schema of type null alone has no OpenAPI 3.0 form"),
                        _ => bail!("several non-null types have no OpenAPI 3.0 form"),
                    }
                }
                Value::String(t) if t == "null" => {
                    bail!("a schema of type null alone has no OpenAPI 3.0 form")
                }
                other => {
                    out.insert("type".into(), other.clone());
                }
            },
            "oneOf" | "anyOf" => {
                let variants = value.as_array().context("`oneOf` must be an array")?;
                let is_null = |v: &Value| v.get("type").and_then(Value::as_str) == Some("null");
                let kept: Vec<&Value> = variants.iter().filter(|v| !is_null(v)).collect();
                let mut converted = kept
                    .iter()
                    .map(|v| to_openapi_30(v))
                    .collect::<Result<Vec<_>>>()?;
                if kept.len() < variants.len() {
                    // `X | null`: a `nullable` beside `oneOf` has no effect (no `type` beside
                    // it) and the variants refuse null, so null is a variant of its own.
                    converted.push(null_only());
                    // `anyOf`: a nullable variant would also match null, which `oneOf` refuses.
                    let keyword = if kept.len() == 1 { "anyOf" } else { key };
                    out.insert(keyword.into(), Value::Array(converted));
                } else {
                    out.insert(key.clone(), Value::Array(converted));
                }
            }
            "const" => {
                out.insert("enum".into(), Value::Array(vec![value.clone()]));
            }
            "examples" => {
                if let Some(first) = value.as_array().and_then(|a| a.first()) {
                    out.insert("example".into(), first.clone());
                }
            }
            "exclusiveMinimum" | "exclusiveMaximum" => {
                let bound = if key == "exclusiveMinimum" {
                    "minimum"
                } else {
                    "maximum"
                };
                out.insert(bound.into(), value.clone());
                out.insert(key.clone(), Value::Bool(true));
            }
            "properties" => {
                let mut props = Map::new();
                for (name, prop) in value
                    .as_object()
                    .context("`properties` must be an object")?
                {
                    props.insert(
                        name.clone(),
                        to_openapi_30(prop).with_context(|| format!("property `{name}`"))?,
                    );
                }
                out.insert(key.clone(), Value::Object(props));
            }
            "items" | "additionalProperties" | "not" if value.is_object() => {
                out.insert(key.clone(), to_openapi_30(value)?);
            }
            "allOf" => {
                let converted = value
                    .as_array()
                    .context("`allOf` must be an array")?
                    .iter()
                    .map(to_openapi_30)
                    .collect::<Result<Vec<_>>>()?;
                out.insert(key.clone(), Value::Array(converted));
            }
            "prefixItems"
            | "dependentRequired"
            | "dependentSchemas"
            | "unevaluatedProperties"
            | "unevaluatedItems"
            | "patternProperties"
            | "propertyNames"
            | "if"
            | "then"
            | "else"
            | "contains"
            | "$defs" => bail!("`{key}` has no OpenAPI 3.0 form"),
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    if out.contains_key("$ref") && out.len() > 1 {
        // 3.0 ignores every sibling of `$ref`: keep them by moving the reference into `allOf`.
        let target = out.shift_remove("$ref").expect("checked above");
        out.insert(
            "allOf".into(),
            Value::Array(vec![serde_json::json!({ "$ref": target })]),
        );
    }
    format_range(&mut out);
    if nullable {
        // Reached only with a `type` beside it (from `type: [T, "null"]`), where it works.
        out.insert("nullable".into(), Value::Bool(true));
    }
    Ok(Value::Object(out))
}
