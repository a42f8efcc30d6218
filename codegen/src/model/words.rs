//! Schema fragments as a person reads them: a type written as words and links, and every
//! constraint as a short phrase ("1 to 65535", "at most 512 characters", "matches `^…$`").

use serde_json::{Map, Value};

use crate::bundle::ref_name;

/// One piece of a phrase: plain words, a literal shown as code, or a link to a definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    Text(String),
    Code(String),
    /// A definition, by name; the site turns it into a link to the definition's section.
    Type(String),
}

/// A phrase, such as one constraint or a type written out.
pub type Phrase = Vec<Token>;

fn text(s: impl Into<String>) -> Token {
    Token::Text(s.into())
}

fn code(s: impl Into<String>) -> Token {
    Token::Code(s.into())
}

/// A schema without its "or null": `(core, nullable)`. Handles `type: [T, "null"]`,
/// `oneOf`/`anyOf` with a `{"type": "null"}` member, and `enum`s that list `null`.
pub fn strip_nullable(schema: &Value) -> (Value, bool) {
    let Some(obj) = schema.as_object() else {
        return (schema.clone(), false);
    };
    let mut core = obj.clone();
    let mut nullable = false;
    if let Some(Value::Array(types)) = obj.get("type") {
        let kept: Vec<Value> = types
            .iter()
            .filter(|t| t.as_str() != Some("null"))
            .cloned()
            .collect();
        if kept.len() < types.len() {
            nullable = true;
            core.insert(
                "type".into(),
                match kept.as_slice() {
                    [one] => one.clone(),
                    _ => Value::Array(kept),
                },
            );
        }
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(members)) = obj.get(key) {
            let kept: Vec<&Value> = members.iter().filter(|m| !is_null_schema(m)).collect();
            if kept.len() < members.len() {
                nullable = true;
                core.remove(key);
                match kept.as_slice() {
                    // `oneOf: [X, null]`: the core is X, under the outer keywords.
                    [one] => {
                        if let Some(inner) = one.as_object() {
                            for (k, v) in inner {
                                core.entry(k.clone()).or_insert_with(|| v.clone());
                            }
                        }
                    }
                    _ => {
                        core.insert(
                            key.into(),
                            Value::Array(kept.into_iter().cloned().collect()),
                        );
                    }
                }
            }
        }
    }
    if let Some(Value::Array(values)) = obj.get("enum") {
        if values.iter().any(Value::is_null) {
            nullable = true;
            core.insert(
                "enum".into(),
                Value::Array(values.iter().filter(|v| !v.is_null()).cloned().collect()),
            );
        }
    }
    (Value::Object(core), nullable)
}

fn is_null_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

/// The `oneOf`/`anyOf` members of a schema that are real alternatives (not the "or null").
pub fn variants(core: &Value) -> Option<(&'static str, &Vec<Value>)> {
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(members)) = core.get(key) {
            if !members.is_empty() {
                return Some((
                    if key == "oneOf" {
                        "exactly one"
                    } else {
                        "at least one"
                    },
                    members,
                ));
            }
        }
    }
    None
}

/// `allOf` with a single member is that member (a common way to attach a description to a
/// `$ref`); anything else is returned as is.
pub fn unwrap_all_of(core: &Value) -> Value {
    if let Some(Value::Array(members)) = core.get("allOf") {
        if let [one] = members.as_slice() {
            let mut merged = one.as_object().cloned().unwrap_or_default();
            if let Some(obj) = core.as_object() {
                for (k, v) in obj {
                    if k != "allOf" {
                        merged.insert(k.clone(), v.clone());
                    }
                }
            }
            return Value::Object(merged);
        }
    }
    core.clone()
}

/// Whether a schema describes an object with fields of its own (it gets rows of fields).
pub fn has_fields(core: &Value) -> bool {
    core.get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty())
}

/// The definition a schema is a plain reference to, if it is one.
pub fn ref_target(core: &Value) -> Option<&str> {
    core.get("$ref").and_then(Value::as_str).map(ref_name)
}

/// The type of a (non-null) schema, written out: `string`, `array of` [ReportedInstance],
/// `map of string to string`, `integer (uint64)`.
pub fn type_phrase(core: &Value) -> Phrase {
    let core = unwrap_all_of(core);
    if let Some(target) = ref_target(&core) {
        return vec![Token::Type(target.to_string())];
    }
    if let Some(Value::Array(members)) = core.get("allOf") {
        // Several schemas that must all hold (one alone was unwrapped above).
        let mut out = Vec::new();
        for (i, member) in members.iter().enumerate() {
            out.push(text(if i == 0 { "all of: " } else { " and " }));
            out.extend(type_phrase(member));
        }
        return out;
    }
    if let Some((_, members)) = variants(&core) {
        let mut out = Vec::new();
        for (i, member) in members.iter().enumerate() {
            if i > 0 {
                out.push(text(" or "));
            }
            let (member, nullable) = strip_nullable(member);
            match member.get("title").and_then(Value::as_str) {
                Some(title) if ref_target(&member).is_none() => out.push(code(title)),
                _ => out.extend(type_phrase(&member)),
            }
            if nullable {
                out.push(text(" or null"));
            }
        }
        return out;
    }
    let types: Vec<String> = match core.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    };
    if types.is_empty() {
        if let Some(c) = core.get("const") {
            return vec![text(json_type_name(c))];
        }
        if let Some(Value::Array(values)) = core.get("enum") {
            if let Some(first) = values.first() {
                return vec![text(json_type_name(first))];
            }
        }
        if core.get("properties").is_some() {
            return vec![text("object")];
        }
        return vec![text("any JSON value")];
    }
    let mut out = Vec::new();
    for (i, t) in types.iter().enumerate() {
        if i > 0 {
            out.push(text(" or "));
        }
        match t.as_str() {
            "array" => match core.get("items") {
                Some(items) if items.is_object() => {
                    out.push(text("array of "));
                    let (items, nullable) = strip_nullable(items);
                    out.extend(type_phrase(&items));
                    if nullable {
                        out.push(text(" or null"));
                    }
                }
                _ => out.push(text("array")),
            },
            "object" => match core.get("additionalProperties") {
                Some(values) if values.is_object() && !has_fields(&core) => {
                    out.push(text("map of string to "));
                    let (values, nullable) = strip_nullable(values);
                    out.extend(type_phrase(&values));
                    if nullable {
                        out.push(text(" or null"));
                    }
                }
                _ => out.push(text("object")),
            },
            "integer" | "number" => match core.get("format").and_then(Value::as_str) {
                Some(format) => out.push(text(format!("{t} ({format})"))),
                None => out.push(text(t.clone())),
            },
            other => out.push(text(other)),
        }
    }
    out
}

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A literal value as it is shown: strings bare, everything else as JSON.
pub fn literal(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Every constraint of a (non-null) schema, one phrase each, in a fixed order.
pub fn constraints(core: &Value) -> Vec<Phrase> {
    let core = unwrap_all_of(core);
    let Some(obj) = core.as_object() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(Value::Array(values)) = obj.get("enum") {
        let mut phrase = vec![text("one of: ")];
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                phrase.push(text(", "));
            }
            phrase.push(code(literal(v)));
        }
        out.push(phrase);
    }
    if let Some(value) = obj.get("const") {
        out.push(vec![text("exactly "), code(literal(value))]);
    }
    if let Some(words) = length_words(obj, "minLength", "maxLength", "character") {
        out.push(vec![text(words)]);
    }
    if let Some(pattern) = obj.get("pattern").and_then(Value::as_str) {
        out.push(vec![text("matches "), code(pattern)]);
    }
    if let Some(format) = obj.get("format").and_then(Value::as_str) {
        if let Some(gloss) = format_gloss(format) {
            out.push(vec![
                text(gloss),
                text(" (format "),
                code(format),
                text(")"),
            ]);
        }
    }
    if let Some(words) = range_words(obj) {
        out.push(vec![text(words)]);
    }
    if let Some(step) = obj.get("multipleOf") {
        out.push(vec![text(format!("a multiple of {step}"))]);
    }
    if let Some(words) = length_words(obj, "minItems", "maxItems", "item") {
        out.push(vec![text(words)]);
    }
    if obj.get("uniqueItems").and_then(Value::as_bool) == Some(true) {
        out.push(vec![text("no two items equal")]);
    }
    if let Some(words) = length_words(obj, "minProperties", "maxProperties", "field") {
        out.push(vec![text(words)]);
    }
    // What an array's items or a map's values must be, when that is written inline.
    for (key, lead) in [
        ("items", "each item "),
        ("additionalProperties", "each value "),
    ] {
        if let Some(inner) = obj.get(key).filter(|v| v.is_object()) {
            if key == "additionalProperties" && has_fields(&core) {
                continue;
            }
            let (inner, _) = strip_nullable(inner);
            if ref_target(&inner).is_none() && !has_fields(&inner) {
                for phrase in constraints(&inner) {
                    let mut led = vec![text(lead)];
                    led.extend(phrase);
                    out.push(led);
                }
            }
        }
    }
    if obj.get("readOnly").and_then(Value::as_bool) == Some(true) {
        out.push(vec![text(
            "read-only: set by the server, ignored in requests",
        )]);
    }
    if obj.get("writeOnly").and_then(Value::as_bool) == Some(true) {
        out.push(vec![text("write-only: never sent back")]);
    }
    if obj.get("deprecated").and_then(Value::as_bool) == Some(true) {
        out.push(vec![text("deprecated")]);
    }
    out
}

/// "1 to 1024 characters", "at most 512 characters", "at least 1 item", "exactly 64 characters".
fn length_words(obj: &Map<String, Value>, min: &str, max: &str, unit: &str) -> Option<String> {
    let min = obj.get(min).and_then(Value::as_u64);
    let max = obj.get(max).and_then(Value::as_u64);
    let units = |n: u64| {
        if n == 1 {
            unit.to_string()
        } else {
            format!("{unit}s")
        }
    };
    match (min, max) {
        (Some(lo), Some(hi)) if lo == hi => Some(format!("exactly {lo} {}", units(lo))),
        (Some(lo), Some(hi)) => Some(format!("{lo} to {hi} {}", units(hi))),
        (Some(0), None) | (None, None) => None,
        (Some(lo), None) => Some(format!("at least {lo} {}", units(lo))),
        (None, Some(hi)) => Some(format!("at most {hi} {}", units(hi))),
    }
}

/// "1 to 65535", "at least 0", "greater than 0 and at most 100".
fn range_words(obj: &Map<String, Value>) -> Option<String> {
    let num = |k: &str| obj.get(k).filter(|v| v.is_number()).map(Value::to_string);
    let lower = num("minimum")
        .map(|n| (n, true))
        .or_else(|| num("exclusiveMinimum").map(|n| (n, false)));
    let upper = num("maximum")
        .map(|n| (n, true))
        .or_else(|| num("exclusiveMaximum").map(|n| (n, false)));
    match (lower, upper) {
        (Some((lo, true)), Some((hi, true))) => Some(format!("{lo} to {hi}")),
        (Some(lo), Some(hi)) => Some(format!("{} and {}", lower_words(&lo), upper_words(&hi))),
        (Some(lo), None) => Some(lower_words(&lo)),
        (None, Some(hi)) => Some(upper_words(&hi)),
        (None, None) => None,
    }
}

fn lower_words((n, inclusive): &(String, bool)) -> String {
    if *inclusive {
        format!("at least {n}")
    } else {
        format!("greater than {n}")
    }
}

fn upper_words((n, inclusive): &(String, bool)) -> String {
    if *inclusive {
        format!("at most {n}")
    } else {
        format!("less than {n}")
    }
}

/// What a string `format` means, for the formats the validators check. Numeric formats
/// (`uint64`, `double`, …) only choose the Rust type and are shown with the type instead.
fn format_gloss(format: &str) -> Option<&'static str> {
    Some(match format {
        "date-time" => "an RFC 3339 date and time",
        "date" => "an RFC 3339 full date",
        "time" => "an RFC 3339 time",
        "duration" => "an ISO 8601 duration",
        "ipv4" => "an IPv4 address in dotted-decimal form",
        "ipv6" => "an IPv6 address",
        "hostname" => "a DNS host name",
        "email" => "an email address",
        "uri" => "an absolute URI",
        "uri-reference" => "a URI reference",
        "uuid" => "a UUID",
        "regex" => "a regular expression",
        "json-pointer" => "a JSON pointer",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn words(schema: Value) -> Vec<String> {
        constraints(&schema)
            .into_iter()
            .map(|p| {
                p.into_iter()
                    .map(|t| match t {
                        Token::Text(s) => s,
                        Token::Code(s) => format!("`{s}`"),
                        Token::Type(s) => format!("[{s}]"),
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn constraints_read_as_words() {
        assert_eq!(
            words(json!({"type": "integer", "minimum": 1, "maximum": 65535})),
            ["1 to 65535"]
        );
        assert_eq!(
            words(json!({"type": "integer", "minimum": 0})),
            ["at least 0"]
        );
        assert_eq!(
            words(json!({"type": "number", "exclusiveMinimum": 0, "maximum": 1})),
            ["greater than 0 and at most 1"]
        );
        assert_eq!(
            words(json!({"type": "string", "maxLength": 512})),
            ["at most 512 characters"]
        );
        assert_eq!(
            words(json!({"type": "string", "minLength": 1, "maxLength": 1024})),
            ["1 to 1024 characters"]
        );
        assert_eq!(
            words(json!({"type": "string", "pattern": "^[a-z]$"})),
            ["matches `^[a-z]$`"]
        );
        assert_eq!(
            words(json!({"enum": ["pending", "ready"]})),
            ["one of: `pending`, `ready`"]
        );
        assert_eq!(
            words(
                json!({"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": 256})
            ),
            ["1 to 256 items", "each item at least 1 character"]
        );
        assert_eq!(
            words(json!({"type": "string", "format": "ipv4"})),
            ["an IPv4 address in dotted-decimal form (format `ipv4`)"]
        );
    }

    #[test]
    fn nullable_forms_are_recognised() {
        let (core, nullable) = strip_nullable(&json!({"type": ["string", "null"]}));
        assert!(nullable);
        assert_eq!(core, json!({"type": "string"}));
        let (core, nullable) = strip_nullable(
            &json!({"oneOf": [{"$ref": "#/$defs/HostPort"}, {"type": "null"}], "description": "d"}),
        );
        assert!(nullable);
        assert_eq!(ref_target(&core), Some("HostPort"));
        assert_eq!(core["description"], "d");
    }

    #[test]
    fn types_read_as_words_and_links() {
        assert_eq!(
            type_phrase(&json!({"type": "array", "items": {"$ref": "#/$defs/VmRecord"}})),
            vec![text("array of "), Token::Type("VmRecord".into())]
        );
        assert_eq!(
            type_phrase(&json!({"type": "object", "additionalProperties": {"type": "string"}})),
            vec![text("map of string to "), text("string")]
        );
        assert_eq!(
            type_phrase(&json!({"type": "integer", "format": "uint64"})),
            vec![text("integer (uint64)")]
        );
        assert_eq!(
            type_phrase(&json!({"allOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]})),
            vec![
                text("all of: "),
                Token::Type("A".into()),
                text(" and "),
                Token::Type("B".into())
            ]
        );
    }
}
