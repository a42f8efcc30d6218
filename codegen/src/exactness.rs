//! Which root documents the generated types enforce completely.
//!
//! typify turns most constraints into types (patterns and lengths into validating newtypes,
//! `uint32` into `u32`, `additionalProperties: false` into a closed struct whose unknown keys
//! the strict deserializer counts and the reader reports or refuses), but not all
//! of them (a float's minimum, `minItems`, string formats). For a document whose every
//! constraint is of the first kind, "it deserialized" already means "it is valid", and the
//! validated reader can skip the schema pass on success. Anything this module does not
//! recognise makes a document inexact, so a new keyword can only cost speed, never correctness.
//! The property tests in `fleetwire-types` check the claim on random documents.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::bounded::is_annotation;
use crate::bundle::{ref_name, Bundle};
use crate::nullability::non_nullable_optional;
use crate::target::Target;

/// Why a root document is not enforced by its generated type alone: the first constraint found
/// that only the schema checks, with the definition it was found in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Inexact(String);

impl From<String> for Inexact {
    fn from(reason: String) -> Inexact {
        Inexact(reason)
    }
}

impl From<&str> for Inexact {
    fn from(reason: &str) -> Inexact {
        Inexact(reason.to_string())
    }
}

/// `Ok` when every constraint reachable from `root` is enforced by fleetwire's generated
/// types; otherwise the first reason it is not.
pub fn analyse(bundle: &Bundle, root: &str) -> Result<(), Inexact> {
    analyse_for(bundle, root, &Target::fleetwire())
}

/// [`analyse`] for the types generated for `target`: its replaced definitions are
/// hand-written types that enforce their definition in full (see `replacements`).
pub fn analyse_for(bundle: &Bundle, root: &str, target: &Target) -> Result<(), Inexact> {
    // A replaced definition counts as already checked: nothing below it is looked at.
    let mut seen: BTreeSet<String> = target
        .replacements
        .iter()
        .map(|(name, _)| name.clone())
        .filter(|name| name != root)
        .collect();
    if target.is_replaced(root) {
        return Ok(());
    }
    check_def(bundle, root, &mut seen)
}

fn check_def(bundle: &Bundle, name: &str, seen: &mut BTreeSet<String>) -> Result<(), Inexact> {
    if !seen.insert(name.to_string()) {
        return Ok(());
    }
    let schema = bundle
        .defs
        .get(name)
        .ok_or_else(|| format!("`{name}` is not defined"))?;
    check_object_node(schema, true)
        .and_then(|()| check(bundle, schema, seen, true))
        .map_err(|why| Inexact(format!("{name}: {why}")))
}

/// An object with optional properties that may not be `null` must be a definition: the strict
/// deserializer finds those properties by the struct's name (see `nullability`).
fn check_object_node(schema: &Value, named: bool) -> Result<(), Inexact> {
    if !named && !non_nullable_optional(schema).is_empty() {
        return Err(
            "an inline object with optional non-nullable properties is checked by the schema only"
                .into(),
        );
    }
    Ok(())
}

/// `named`: `schema` is a definition itself (its Rust type has the definition's name).
fn check(
    bundle: &Bundle,
    schema: &Value,
    seen: &mut BTreeSet<String>,
    named: bool,
) -> Result<(), Inexact> {
    let Some(obj) = schema.as_object() else {
        return Err("boolean schemas are not enforced by the types".into());
    };
    if let Some(target) = obj.get("$ref").and_then(Value::as_str) {
        check_def(bundle, ref_name(target), seen)?;
    }
    if crate::bounded::number_range(obj).is_some() {
        // A generated range type (see `bounded`).
        return Ok(());
    }
    if crate::bounded::array_length(obj).is_some() {
        // `BoundedVec`: the length is checked; the items still need their own check.
        return check(bundle, &obj["items"], seen, false);
    }
    let types = type_set(obj);
    for (key, value) in obj {
        let key = key.as_str();
        if is_annotation(key) || key == "$ref" || key == "type" {
            continue;
        }
        match key {
            "properties" => {
                for prop in value.as_object().into_iter().flat_map(|m| m.values()) {
                    check_object_node(prop, false)?;
                    check(bundle, prop, seen, false)?;
                }
            }
            "required" => {}
            "additionalProperties" => match value {
                Value::Bool(_) => {}
                other => check(bundle, other, seen, false)?,
            },
            "items" => check(bundle, value, seen, false)?,
            // A string enum is read from a string only when the strict deserializer can find it by
            // name (see `rust::string_enums`), so it must be a definition.
            "enum"
                if named
                    && value
                        .as_array()
                        .is_some_and(|v| v.iter().all(Value::is_string)) => {}
            "pattern" | "minLength" | "maxLength"
                if types.iter().all(|t| t == "string" || t == "null") => {}
            "format" if types.iter().any(|t| t == "integer") && !obj.contains_key("minimum") => {
                return Err("an integer whose range the schema does not state is checked by the schema only".into())
            }
            "format" => check_format(value.as_str().unwrap_or_default(), &types)?,
            "minimum" | "maximum" => check_integer_bounds(obj)?,
            "oneOf" | "anyOf" => check_alternatives(bundle, value, seen)?,
            other => return Err(format!("`{other}` is checked by the schema only").into()),
        }
    }
    Ok(())
}

fn type_set(obj: &Map<String, Value>) -> Vec<String> {
    match obj.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    }
}

/// The integer widths typify maps `format` to, with their ranges.
fn integer_range(format: &str) -> Option<(i128, i128)> {
    Some(match format {
        "uint8" => (0, u8::MAX as i128),
        "uint16" => (0, u16::MAX as i128),
        "uint32" => (0, u32::MAX as i128),
        "uint64" => (0, u64::MAX as i128),
        "int8" => (i8::MIN as i128, i8::MAX as i128),
        "int16" => (i16::MIN as i128, i16::MAX as i128),
        "int32" => (i32::MIN as i128, i32::MAX as i128),
        "int64" => (i64::MIN as i128, i64::MAX as i128),
        _ => return None,
    })
}

fn check_format(format: &str, types: &[String]) -> Result<(), Inexact> {
    let is = |t: &str| types.iter().any(|x| x == t);
    if is("integer") && integer_range(format).is_some() {
        // The bounds are checked with `minimum`/`maximum` (see `check_integer_bounds`).
        return Ok(());
    }
    if is("number") && (format == "float" || format == "double") {
        return Ok(());
    }
    // typify maps `ipv4` to `std::net::Ipv4Addr`, whose parser accepts exactly dotted quads
    // without leading zeros, as the `ipv4` format does.
    if is("string") && format == "ipv4" {
        return Ok(());
    }
    Err(format!("format `{format}` is checked by the schema only").into())
}

/// Integer bounds are enforced when they are exactly the range of the `format`'s Rust type,
/// or a minimum of 1 on an unsigned type (typify then picks a `NonZero` integer).
fn check_integer_bounds(obj: &Map<String, Value>) -> Result<(), Inexact> {
    let format = obj.get("format").and_then(Value::as_str).unwrap_or("int64");
    let Some((lo, hi)) = integer_range(format) else {
        return Err(format!("bounds on format `{format}` are checked by the schema only").into());
    };
    let bound = |k: &str| {
        obj.get(k)
            .and_then(|v| v.as_i64().map(i128::from).or(v.as_u64().map(i128::from)))
    };
    // The schema must state the type's range: an unbounded JSON integer that fits no Rust
    // integer would be valid yet refused. `uint64` may leave its maximum implicit (the type
    // refuses nothing the schema refuses), but then an integer past 2^64, which JSON Schema
    // counts as an integer however it is spelled (`1e20`), is valid and refused by the type:
    // fleetwire's own schemas state it (README "It parsed" means "it is valid").
    let min_ok = match bound("minimum") {
        None => false,
        Some(m) => m == lo || (lo == 0 && m == 1),
    };
    let max_ok = match bound("maximum") {
        None => format == "uint64",
        Some(m) => m == hi,
    };
    if min_ok
        && max_ok
        && !obj.contains_key("exclusiveMinimum")
        && !obj.contains_key("exclusiveMaximum")
    {
        Ok(())
    } else {
        Err(format!(
            "integer bounds other than the range of `{format}` are checked by the schema only"
        )
        .into())
    }
}

/// `oneOf`/`anyOf` are enforced as `Option<T>` (`[T, null]`) or as an enum of closed objects
/// that no single document can satisfy twice (each variant requires a property the others lack).
fn check_alternatives(
    bundle: &Bundle,
    value: &Value,
    seen: &mut BTreeSet<String>,
) -> Result<(), Inexact> {
    let variants = value.as_array().ok_or("`oneOf` must be an array")?;
    let is_null = |v: &Value| v.get("type").and_then(Value::as_str) == Some("null");
    let non_null: Vec<&Value> = variants.iter().filter(|v| !is_null(v)).collect();
    if non_null.len() == 1 {
        return check(bundle, non_null[0], seen, false);
    }
    let mut property_sets = Vec::new();
    for variant in &non_null {
        let resolved = match variant.get("$ref").and_then(Value::as_str) {
            Some(target) => bundle.defs.get(ref_name(target)).unwrap_or(variant),
            None => variant,
        };
        if resolved.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Err(
                "alternatives that are not closed objects are checked by the schema only".into(),
            );
        }
        let props: BTreeSet<String> = resolved
            .get("properties")
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let required: BTreeSet<String> = resolved
            .get("required")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        property_sets.push((props, required));
        check(bundle, variant, seen, false)?;
    }
    for (i, (_, required)) in property_sets.iter().enumerate() {
        let distinct = required.iter().any(|r| {
            property_sets
                .iter()
                .enumerate()
                .all(|(j, (props, _))| i == j || !props.contains(r))
        });
        if !distinct {
            return Err("alternatives that can overlap are checked by the schema only".into());
        }
    }
    Ok(())
}
