//! The bundled OpenAPI documents: the paths of `schemas/fleet-api.openapi.json` with every body
//! schema it reaches resolved into `components.schemas`, once converted to the OpenAPI 3.0.3
//! dialect (`fleet-api.json`) and once as the draft 2020-12 schemas are, in OpenAPI 3.1.0
//! (`fleet-api.3.1.json`). docs/interop.md ("OpenAPI consumers") says how the two differ.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter};
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
    let schemas = for_generators(schemas)?;
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
    let schemas = for_generators(schemas)?;
    assemble(&mut doc, OPENAPI_31, schemas)?;
    crate::openapi_as_read::mark_request_bodies(&mut doc)?;
    name_node_certificates(&mut doc)?;
    Ok(Some(doc))
}

/// Gives every request and response body whose schema is a definition with fixtures
/// (`schemas/examples/<Type>/valid/*.json`) those fixtures as its `examples`, by file name: the
/// fixtures the tests validate, so a client generator or a mock server gets bodies known to be
/// accepted. Each fixture is written once, as `components.examples.<Type>.<name>`, and each
/// body refers to it there: openapi-generator reads a response's examples as references and
/// warns ("Failed to get the schema name: null") for each one written inline
/// (docs/interop.md, "OpenAPI consumers"). Both OpenAPI versions spell media-type examples the
/// same way.
pub fn with_examples(mut doc: Value, examples_dir: &Path) -> Result<Value> {
    let mut components: BTreeMap<String, Value> = BTreeMap::new();
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
                    let key = example_component(&name, &e.name);
                    if !components.contains_key(&key) {
                        let value: Value = serde_json::from_str(&e.text)
                            .with_context(|| format!("example {}", e.site_path()))?;
                        components.insert(
                            key.clone(),
                            json!({"summary": format!("schemas/{}/{name}/valid/{}", crate::examples::EXAMPLES_DIR, e.file), "value": value}),
                        );
                    }
                    examples.insert(
                        e.name.clone(),
                        json!({"$ref": format!("#/components/examples/{key}")}),
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
    if !components.is_empty() {
        doc.as_object_mut()
            .context("the document must be an object")?
            .entry("components")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .context("`components` must be an object")?
            .insert(
                "examples".into(),
                Value::Object(components.into_iter().collect()),
            );
    }
    Ok(doc)
}

/// The key of fixture `example` of `type_name` in `components.examples`: `<Type>.<name>`,
/// e.g. `ApiError.invalid-document` (fixture names are file names: letters, digits, `.`, `-`
/// and `_`, all a component key may hold).
pub fn example_component(type_name: &str, example: &str) -> String {
    format!("{type_name}.{example}")
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

/// What openapi-generator 7.26.0 needs of the component schemas, beyond their being valid, to
/// take a document without "Failed to get the schema name: null" (docs/interop.md, "OpenAPI
/// consumers"); neither changes what a schema accepts:
/// - no inline schema where its normalizer looks for a reference from a component to itself
///   (`OpenAPINormalizer.fixSelfReferenceSchema` reads the reference of an array's `items`,
///   of each `oneOf` and `anyOf` variant and of a schema `additionalProperties`, and warns when
///   there is none): each becomes a component of its own ([`hoist_members`]);
/// - no whole number written with a fraction or an exponent in a schema
///   ([`whole_numbers_as_integers`]; [`to_text`] for those beyond 64 bits): the 3.1 parser's
///   reference resolution (swagger-parser) then leaves a closed object's
///   `additionalProperties: false` as a schema object, which the same normalizer inspects
///   (measured: `"default": 2.0` on `RestartPolicy.backoffFactor`, the `float` bound
///   `3.4028234663852886e+38` on `NodeHeartbeat.cpu_load_pct`; as integers, neither).
fn for_generators(schemas: Map<String, Value>) -> Result<Map<String, Value>> {
    let mut schemas = hoist_members(schemas)?;
    schemas.values_mut().for_each(whole_numbers_as_integers);
    Ok(schemas)
}

/// Moves each inline schema at the top of a component that openapi-generator reads as a
/// possible reference (an array's `items`, each `oneOf` and `anyOf` variant, a schema
/// `additionalProperties`) into a component of its own, placed after it, and refers to it
/// there: `<Name>Item`, `<Name><Title>` for a variant (by its `title`, else `Variant<n>`, from
/// 1), `<Name>Value`. A reference validates as its target does, so every document accepts what
/// it accepted; a name already taken is an error.
pub fn hoist_members(schemas: Map<String, Value>) -> Result<Map<String, Value>> {
    let defined: BTreeSet<String> = schemas.keys().cloned().collect();
    let mut out = Map::new();
    for (name, schema) in schemas {
        hoist_into(&mut out, &defined, name, schema)?;
    }
    Ok(out)
}

fn hoist_into(
    out: &mut Map<String, Value>,
    defined: &BTreeSet<String>,
    name: String,
    mut schema: Value,
) -> Result<()> {
    let mut members: Vec<(String, Value)> = Vec::new();
    let mut take = |slot: &mut Value, member: String| {
        if slot.is_object() && slot.get("$ref").is_none() {
            let reference = json!({ "$ref": format!("#/components/schemas/{member}") });
            members.push((member, std::mem::replace(slot, reference)));
        }
    };
    if let Some(map) = schema.as_object_mut() {
        if let Some(items) = map.get_mut("items") {
            take(items, format!("{name}Item"));
        }
        for keyword in ["oneOf", "anyOf"] {
            if let Some(variants) = map.get_mut(keyword).and_then(Value::as_array_mut) {
                for (i, variant) in variants.iter_mut().enumerate() {
                    let suffix = variant
                        .get("title")
                        .and_then(Value::as_str)
                        .map(pascal_case)
                        .filter(|t| !t.is_empty())
                        .unwrap_or_else(|| format!("Variant{}", i + 1));
                    take(variant, format!("{name}{suffix}"));
                }
            }
        }
        if let Some(values) = map.get_mut("additionalProperties") {
            take(values, format!("{name}Value"));
        }
    }
    out.insert(name.clone(), schema);
    for (member, schema) in members {
        if defined.contains(&member) || out.contains_key(&member) {
            bail!("`{name}` has an inline schema that must become the component `{member}`, a name already taken");
        }
        hoist_into(out, defined, member, schema)?;
    }
    Ok(())
}

/// `exit code` → `ExitCode`: a title's letters and digits, each word capitalised.
fn pascal_case(title: &str) -> String {
    title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Writes every whole number a schema keyword holds (a bound, `multipleOf`, a `default`,
/// `const` or `enum` value that is a number) as an integer where one holds it: `2.0` as `2`,
/// the same number to JSON Schema. Beyond 64 bits [`to_text`] writes its digits. Examples and
/// extensions (`x-…`) are values, left as written.
pub fn whole_numbers_as_integers(schema: &mut Value) {
    fn integer(value: &mut Value) {
        let Some(number) = value.as_f64().filter(|_| value.is_f64()) else {
            return;
        };
        if number.fract() != 0.0 || !number.is_finite() {
            return;
        }
        // 2^64 and -2^63: the range of the integers a JSON number holds here.
        if (0.0..18_446_744_073_709_551_616.0).contains(&number) {
            *value = Value::from(number as u64);
        } else if (-9_223_372_036_854_775_808.0..0.0).contains(&number) {
            *value = Value::from(number as i64);
        }
    }
    match schema {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match key.as_str() {
                    "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum"
                    | "multipleOf" | "default" | "const" => integer(value),
                    "enum" => value.as_array_mut().into_iter().flatten().for_each(integer),
                    "examples" | "example" => {}
                    // Property names are data, not keywords.
                    "properties" | "patternProperties" | "dependentSchemas" | "$defs" => value
                        .as_object_mut()
                        .into_iter()
                        .flat_map(|m| m.values_mut())
                        .for_each(whole_numbers_as_integers),
                    k if k.starts_with("x-") => {}
                    _ => whole_numbers_as_integers(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers_as_integers),
        _ => {}
    }
}

/// A document's text: serde_json's pretty form with a final newline, except that a whole
/// number too large for a 64-bit integer is written as its exact digits, not with an
/// exponent: the `float` bound `f32::MAX` as `340282346638528859811704183484516925440`, not
/// `3.4028234663852886e+38` (the same number; see [`for_generators`]).
pub fn to_text(doc: &Value) -> Result<String> {
    let mut out = Vec::new();
    let mut writer =
        serde_json::Serializer::with_formatter(&mut out, WholeDigits(PrettyFormatter::new()));
    doc.serialize(&mut writer)?;
    let mut text = String::from_utf8(out).context("serde_json wrote UTF-8")?;
    text.push('\n');
    Ok(text)
}

/// serde_json's pretty formatter, writing a whole `f64` outside the 64-bit integers as digits.
struct WholeDigits<'a>(PrettyFormatter<'a>);

impl Formatter for WholeDigits<'_> {
    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        let integral =
            (-9_223_372_036_854_775_808.0..18_446_744_073_709_551_616.0).contains(&value);
        if value.is_finite() && value.fract() == 0.0 && !integral {
            // `{:.0}` writes an f64's exact decimal value.
            write!(writer, "{value:.0}")
        } else {
            self.0.write_f64(writer, value)
        }
    }
    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_array(writer)
    }
    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array(writer)
    }
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(writer, first)
    }
    fn end_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array_value(writer)
    }
    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object(writer)
    }
    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object(writer)
    }
    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(writer, first)
    }
    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object_value(writer)
    }
    fn end_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_value(writer)
    }
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
