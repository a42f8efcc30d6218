//! The embedded schemas: every definition's stand-alone schema and its compiled validator, and
//! the root documents by name, in any schema set ([`SchemaSet`]); the functions without a set
//! parameter are fleetwire's own.

use crate::facts::Schemas;
use crate::schema_set::{DocumentInfo, SchemaSet};

/// fleetwire's root document called `name`, if there is one.
pub fn document(name: &str) -> Option<&'static DocumentInfo> {
    document_in::<Schemas>(name)
}

/// The root document called `name` in the schema set `S`, if there is one.
pub fn document_in<S: SchemaSet>(name: &str) -> Option<&'static DocumentInfo> {
    S::DOCUMENTS.iter().find(|d| d.name == name)
}

/// The stand-alone schema of one of fleetwire's definitions: the bundle plus a `$ref` to it.
pub fn schema_for(name: &str) -> serde_json::Value {
    schema_for_in::<Schemas>(name)
}

/// The stand-alone schema of one definition of the schema set `S`.
pub fn schema_for_in<S: SchemaSet>(name: &str) -> serde_json::Value {
    let bundle: serde_json::Value =
        serde_json::from_str(S::BUNDLE_SCHEMA).expect("the embedded bundle is JSON");
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/$defs/{name}"),
        "$defs": bundle["$defs"],
    })
}

/// The validator for any of fleetwire's definitions, draft 2020-12 with formats checked.
pub fn compile_validator(name: &str) -> jsonschema::Validator {
    compile_validator_in::<Schemas>(name)
}

/// The validator for a definition of the schema set `S`, draft 2020-12 with formats checked.
pub fn compile_validator_in<S: SchemaSet>(name: &str) -> jsonschema::Validator {
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema_for_in::<S>(name))
        .unwrap_or_else(|err| panic!("the embedded schema of `{name}` does not compile: {err}"))
}
