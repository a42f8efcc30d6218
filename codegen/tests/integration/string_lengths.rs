//! The length constants and truncating constructors generated on typify's string newtypes
//! (`string_lengths`): present where the schema bounds a string's length, with the schema's
//! numbers, and `truncated` only where the length is all the type checks.

use fleetwire_codegen::bundle::{Bundle, SchemaFile};
use fleetwire_codegen::rust;
use serde_json::json;

fn types_rs(defs: serde_json::Value) -> String {
    let bundle = Bundle::from_files(
        vec![SchemaFile {
            name: "a.schema.json".into(),
            path: "a.schema.json".into(),
            value: json!({ "$defs": defs }),
        }],
        None,
    )
    .unwrap();
    rust::types(&rust::type_space(&bundle).unwrap()).unwrap()
}

/// The arguments of the `length_bounds!` invocation the generator wrote for `name`.
fn bounds(types: &str, name: &str) -> Option<String> {
    let start = types.find(&format!("length_bounds!({name}"))? + "length_bounds!(".len();
    let end = start + types[start..].find(')')?;
    Some(
        types[start..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    )
}

#[test]
fn a_length_only_string_gets_its_bound_and_a_truncating_constructor() {
    let types = types_rs(json!({
        "Note": {"type": "string", "maxLength": 7},
    }));
    assert_eq!(
        bounds(&types, "Note").as_deref(),
        Some("Note, max = 7, fn truncated")
    );
}

#[test]
fn a_string_with_more_checks_gets_its_bounds_only() {
    let types = types_rs(json!({
        "Id": {"type": "string", "minLength": 2, "maxLength": 9},
        "Code": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
        "Free": {"type": "string", "pattern": "^x"},
    }));
    // A cut may leave too few characters, or break the pattern: no `truncated`.
    assert_eq!(
        bounds(&types, "Id").as_deref(),
        Some("Id, min = 2, max = 9")
    );
    assert_eq!(bounds(&types, "Code").as_deref(), Some("Code, max = 5"));
    assert_eq!(bounds(&types, "Free"), None, "no bound, no constants");
}
