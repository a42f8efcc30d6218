//! The bundled OpenAPI 3.0.3 document: the paths of `schemas/fleet-api.openapi.json` with every
//! body schema resolved into `components.schemas`, converted to the 3.0 dialect.

use std::collections::BTreeSet;

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

use crate::bundle::{collect_refs, ref_name, Bundle, API_FILE};

/// Builds the bundled document; `None` when `schemas/` has no API description.
pub fn document(bundle: &Bundle) -> Result<Option<Value>> {
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

    // Every definition the paths reach, transitively, in schema order.
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
    let mut schemas = Map::new();
    for (name, def) in &bundle.defs {
        if reachable.contains(name) {
            let converted = to_openapi_30(def)
                .with_context(|| format!("converting `{name}` to OpenAPI 3.0"))?;
            schemas.insert(name.clone(), converted);
        }
    }
    let root = doc
        .as_object_mut()
        .context("the API description must be an object")?;
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

    // The result must still be a valid 3.0 document, now with its schemas.
    let _: openapiv3::OpenAPI = serde_json::from_value(doc.clone())
        .context("the bundled document is not valid OpenAPI 3.0")?;
    Ok(Some(doc))
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

/// Converts one draft 2020-12 schema to the OpenAPI 3.0 schema dialect.
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
                nullable |= kept.len() < variants.len();
                if kept.len() == 1 {
                    // `X | null`: 3.0 ignores siblings of `$ref`, so wrap it.
                    out.insert("allOf".into(), Value::Array(vec![to_openapi_30(kept[0])?]));
                } else {
                    let converted = kept
                        .into_iter()
                        .map(to_openapi_30)
                        .collect::<Result<Vec<_>>>()?;
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
    if nullable {
        out.insert("nullable".into(), Value::Bool(true));
    }
    Ok(Value::Object(out))
}
