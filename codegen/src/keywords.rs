//! Which JSON Schema keywords the generator supports, and the loud refusal of every other one.
//!
//! typify reads schemas through schemars' draft-07 model: a keyword outside it (`prefixItems`,
//! `unevaluatedProperties`, `$dynamicRef`, a misspelt `maxLenght`) is dropped without a word,
//! and some inside it (`if`/`then`/`else`, `not`, `patternProperties`) are mapped to a looser
//! type or not at all. Either way the Rust type would say less than the schema, so each schema
//! file is walked before anything is generated, and such a keyword is refused with the file,
//! the JSON pointer where it stands and the keyword. Keywords the types carry, or that only
//! make a document inexact (the reader then runs the schema validator, see `exactness`), are
//! supported. docs/codegen.md ("Supported keywords", "Refused keywords") lists both tables; a
//! test keeps it in step.

use anyhow::{bail, Result};
use serde_json::Value;

/// How the children of a keyword's value are walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Children {
    /// The value is not a schema (a number, a list of names, an annotation).
    None,
    /// The value is a schema.
    Schema,
    /// The value is an object whose every member is a schema.
    SchemaMap,
    /// The value is an array of schemas.
    SchemaList,
}

/// `(keyword, what it becomes, how its value is walked)`: every keyword the generator accepts.
pub const SUPPORTED: &[(&str, &str, Children)] = &[
    (
        "$schema",
        "annotation (the bundle is draft 2020-12)",
        Children::None,
    ),
    (
        "$defs",
        "one definition each, in one namespace across files",
        Children::SchemaMap,
    ),
    (
        "$ref",
        "the referenced definition's type (local or sibling-file references only)",
        Children::None,
    ),
    ("$comment", "annotation", Children::None),
    (
        "title",
        "marks a root document (its title is its definition's name)",
        Children::None,
    ),
    ("description", "doc comment, site text", Children::None),
    ("default", "serde default", Children::None),
    ("examples", "annotation", Children::None),
    ("deprecated", "annotation", Children::None),
    ("readOnly", "annotation", Children::None),
    ("writeOnly", "annotation", Children::None),
    (
        "type",
        "the Rust type (a `null` member makes an `Option`)",
        Children::None,
    ),
    (
        "enum",
        "a Rust enum (strings) or a checked value",
        Children::None,
    ),
    (
        "const",
        "a checked value (inexact: the validator checks it)",
        Children::None,
    ),
    (
        "format",
        "integer widths (`uint16` → `u16`), `ipv4` → `Ipv4Addr`, others checked by the validator",
        Children::None,
    ),
    (
        "minimum",
        "a range type, or the integer width",
        Children::None,
    ),
    (
        "maximum",
        "a range type, or the integer width",
        Children::None,
    ),
    (
        "exclusiveMinimum",
        "checked by the validator (inexact)",
        Children::None,
    ),
    (
        "exclusiveMaximum",
        "checked by the validator (inexact)",
        Children::None,
    ),
    (
        "multipleOf",
        "checked by the validator (inexact)",
        Children::None,
    ),
    (
        "minLength",
        "a validating string newtype with `MIN_LENGTH`",
        Children::None,
    ),
    (
        "maxLength",
        "a validating string newtype with `MAX_LENGTH`",
        Children::None,
    ),
    (
        "pattern",
        "a validating string newtype (ECMA 262 regex via regress)",
        Children::None,
    ),
    ("items", "`Vec<T>`", Children::Schema),
    ("minItems", "`BoundedVec<T, MIN, MAX>`", Children::None),
    ("maxItems", "`BoundedVec<T, MIN, MAX>`", Children::None),
    (
        "uniqueItems",
        "checked by the validator (inexact)",
        Children::None,
    ),
    ("properties", "struct fields", Children::SchemaMap),
    ("required", "non-`Option` fields", Children::None),
    (
        "additionalProperties",
        "`false`: a closed struct (unknown fields reported); a schema: a map",
        Children::Schema,
    ),
    (
        "minProperties",
        "checked by the validator (inexact)",
        Children::None,
    ),
    (
        "maxProperties",
        "checked by the validator (inexact)",
        Children::None,
    ),
    (
        "oneOf",
        "an enum with a variant per alternative, or `Option<T>` beside `null`",
        Children::SchemaList,
    ),
    ("anyOf", "as `oneOf`", Children::SchemaList),
    ("allOf", "a merged type", Children::SchemaList),
];

/// `(keyword, why it is refused)`: what the generator will not turn into a type.
pub const REFUSED: &[(&str, &str)] = &[
    (
        "if",
        "conditional schemas have no Rust type; use `oneOf` with named variants",
    ),
    (
        "then",
        "conditional schemas have no Rust type; use `oneOf` with named variants",
    ),
    (
        "else",
        "conditional schemas have no Rust type; use `oneOf` with named variants",
    ),
    (
        "not",
        "typify maps only some negations, and none to an exact type",
    ),
    (
        "dependentSchemas",
        "not in typify's model: the type would ignore it",
    ),
    (
        "dependentRequired",
        "not in typify's model: the type would ignore it",
    ),
    (
        "dependencies",
        "draft-07's form of dependentRequired/dependentSchemas: the type would ignore it",
    ),
    (
        "patternProperties",
        "typify maps it only to a loose map; name the properties",
    ),
    (
        "propertyNames",
        "typify maps it only to a loose map; name the properties",
    ),
    (
        "unevaluatedProperties",
        "not in typify's model: use `additionalProperties: false`",
    ),
    (
        "unevaluatedItems",
        "not in typify's model: the type would ignore it",
    ),
    (
        "prefixItems",
        "not in typify's model: tuples are not supported",
    ),
    ("additionalItems", "draft-07 tuples are not supported"),
    (
        "contains",
        "not in typify's model: the type would ignore it",
    ),
    (
        "minContains",
        "not in typify's model: the type would ignore it",
    ),
    (
        "maxContains",
        "not in typify's model: the type would ignore it",
    ),
    (
        "$dynamicRef",
        "dynamic references are not supported; use `$ref`",
    ),
    (
        "$dynamicAnchor",
        "dynamic references are not supported; use `$ref`",
    ),
    (
        "$recursiveRef",
        "recursive references are not supported; use `$ref`",
    ),
    (
        "$recursiveAnchor",
        "recursive references are not supported; use `$ref`",
    ),
    (
        "$anchor",
        "references go to definitions by name (`#/$defs/Name`)",
    ),
    (
        "$id",
        "one namespace: a schema file is named by its file name, not an `$id`",
    ),
    ("$vocabulary", "meta-schemas are not supported"),
    ("definitions", "draft-07's name: write `$defs`"),
];

/// Walks every schema of the schema file `file` (its JSON text `value`); the first keyword
/// that is refused, or that no table lists (extensions, `x-…`, are annotations), is an error
/// naming the file, the JSON pointer and the keyword.
pub fn check_file(file: &str, value: &Value) -> Result<()> {
    check(file, value, "")
}

fn check(file: &str, schema: &Value, pointer: &str) -> Result<()> {
    let Value::Object(members) = schema else {
        // `true`/`false` schemas: typify reads them, exactness treats them as inexact.
        return Ok(());
    };
    for (keyword, value) in members {
        let here = format!("{pointer}/{}", escape(keyword));
        if keyword.starts_with("x-") {
            continue;
        }
        if let Some((_, why)) = REFUSED.iter().find(|(k, _)| k == keyword) {
            bail!("{file}: {here}: the keyword `{keyword}` is not supported: {why} (docs/codegen.md, \"Refused keywords\")");
        }
        let Some((_, _, children)) = SUPPORTED.iter().find(|(k, ..)| k == keyword) else {
            bail!("{file}: {here}: unknown keyword `{keyword}`: the generator would ignore it (extensions start with `x-`; docs/codegen.md, \"Supported keywords\")");
        };
        match (children, value) {
            (Children::Schema, value) => check(file, value, &here)?,
            (Children::SchemaMap, Value::Object(map)) => {
                for (name, sub) in map {
                    check(file, sub, &format!("{here}/{}", escape(name)))?;
                }
            }
            (Children::SchemaList, Value::Array(list)) => {
                for (i, sub) in list.iter().enumerate() {
                    check(file, sub, &format!("{here}/{i}"))?;
                }
            }
            (Children::None, _) => {}
            (_, _) => bail!("{file}: {here}: `{keyword}` must hold schemas"),
        }
    }
    Ok(())
}

/// A JSON pointer token (RFC 6901: `~` → `~0`, `/` → `~1`).
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}
