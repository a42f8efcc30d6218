//! The embedded schemas: every definition's stand-alone schema and its compiled validator, and
//! the root documents by name.

use crate::document::DocumentInfo;
use crate::facts::{BUNDLE_SCHEMA, DOCUMENTS};

/// The root document called `name`, if there is one.
pub fn document(name: &str) -> Option<&'static DocumentInfo> {
    DOCUMENTS.iter().find(|d| d.name == name)
}

/// The stand-alone schema of one definition: the bundle plus a `$ref` to it.
pub fn schema_for(name: &str) -> serde_json::Value {
    let bundle: serde_json::Value =
        serde_json::from_str(BUNDLE_SCHEMA).expect("the embedded bundle is JSON");
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/$defs/{name}"),
        "$defs": bundle["$defs"],
    })
}

/// The validator for any definition, draft 2020-12 with formats checked.
pub fn compile_validator(name: &str) -> jsonschema::Validator {
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema_for(name))
        .unwrap_or_else(|err| panic!("the embedded schema of `{name}` does not compile: {err}"))
}
