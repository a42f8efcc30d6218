//! Which properties of an object schema are required, and which admit `null`.
//!
//! serde reads `null` into an `Option` as "absent", so the strict deserializer refuses `null`
//! for the optional properties that do not admit it: [`crate::rust`] writes them into its
//! per-struct table, and [`crate::exactness`] requires such objects to be definitions (the
//! table is looked up by the struct's name).

use std::collections::BTreeSet;

use serde_json::Value;

/// The names an object schema lists under `required`.
pub fn required(schema: &Value) -> BTreeSet<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The properties of an object schema that are optional and do not admit `null`.
pub fn non_nullable_optional(schema: &Value) -> Vec<String> {
    let required = required(schema);
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    props
        .iter()
        .filter(|(name, prop)| !required.contains(name.as_str()) && !admits_null(prop))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Whether a property schema lets `null` through at its top level.
fn admits_null(schema: &Value) -> bool {
    let is_null_type = |t: &Value| t.as_str() == Some("null");
    match schema.get("type") {
        Some(Value::String(t)) if t == "null" => return true,
        Some(Value::Array(types)) if types.iter().any(is_null_type) => return true,
        _ => {}
    }
    ["oneOf", "anyOf"].iter().any(|k| {
        schema
            .get(*k)
            .and_then(Value::as_array)
            .is_some_and(|vs| vs.iter().any(admits_null))
    })
}
