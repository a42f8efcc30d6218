//! Every keyword the generator does not turn into a type is refused, loudly: the error names
//! the file, the JSON pointer and the keyword (docs/codegen.md, "Refused keywords").

use fleetwire_codegen::bundle::{Bundle, SchemaFile};
use fleetwire_codegen::keywords::{REFUSED, SUPPORTED};
use serde_json::{json, Value};

fn bundle(value: Value) -> anyhow::Result<Bundle> {
    let file = SchemaFile {
        name: "t.schema.json".into(),
        path: "t.schema.json".into(),
        value,
    };
    Bundle::from_files(vec![file], None)
}

/// A document whose property `p` is `schema`, nested inside `oneOf` and `items`.
fn nested(schema: Value) -> Value {
    json!({"$defs": {"Doc": {
        "title": "Doc", "type": "object",
        "properties": {"list": {"type": "array", "items": {"oneOf": [{"type": "null"}, {
            "type": "object", "properties": {"p": schema}
        }]}}}
    }}})
}

#[test]
fn each_refused_keyword_is_named_with_its_pointer() {
    for (keyword, _) in REFUSED {
        let mut schema = json!({"type": "string"});
        schema[keyword] = json!({});
        let err = bundle(nested(schema)).unwrap_err().to_string();
        let pointer = format!(
            "/$defs/Doc/properties/list/items/oneOf/1/properties/p/{}",
            keyword.replace('~', "~0").replace('/', "~1")
        );
        assert!(
            err.starts_with(&format!(
                "t.schema.json: {pointer}: the keyword `{keyword}` is not supported"
            )),
            "{keyword}: {err}"
        );
    }
}

#[test]
fn an_unknown_keyword_is_refused_and_an_extension_is_not() {
    let err = bundle(nested(json!({"type": "string", "maxLenght": 3})))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/properties/p/maxLenght: unknown keyword `maxLenght`"),
        "{err}"
    );
    bundle(nested(json!({"type": "string", "x-anything": {"if": 1}}))).unwrap();
}

#[test]
fn property_names_and_definition_names_are_not_keywords() {
    // A property called `if` and a definition called `not` are names, not keywords.
    bundle(json!({"$defs": {
        "not": {"type": "string"},
        "Doc": {"title": "Doc", "type": "object", "properties": {"if": {"$ref": "#/$defs/not"}}}
    }}))
    .unwrap();
}

#[test]
fn every_supported_keyword_is_accepted() {
    for (keyword, ..) in SUPPORTED {
        let value = match *keyword {
            "$defs" | "properties" => json!({"x": {"type": "string"}}),
            "items" | "additionalProperties" => json!({"type": "string"}),
            "oneOf" | "anyOf" | "allOf" => json!([{"type": "string"}]),
            "required" | "enum" | "examples" => json!(["x"]),
            "$ref" => json!("#/$defs/Other"),
            "title" => json!("Doc"),
            "type" => json!("object"),
            _ => json!(1),
        };
        let mut doc = json!({"title": "Doc"});
        doc[keyword] = value;
        bundle(json!({"$defs": {"Doc": doc, "Other": {"type": "string"}}}))
            .unwrap_or_else(|e| panic!("{keyword}: {e:#}"));
    }
}

#[test]
fn docs_codegen_md_lists_every_keyword_of_both_tables() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/codegen.md"))
        .expect("docs/codegen.md");
    let listed = |keyword: &str| doc.contains(&format!("| `{keyword}` |"));
    for (keyword, ..) in SUPPORTED {
        assert!(
            listed(keyword),
            "docs/codegen.md does not list supported `{keyword}`"
        );
    }
    for (keyword, _) in REFUSED {
        assert!(
            listed(keyword),
            "docs/codegen.md does not list refused `{keyword}`"
        );
    }
}
