//! House rules of `schemas/`: every definition and property is described, and a pattern is
//! written once, in the definition of its kind, never copied into a property.

use std::path::Path;

use fleetwire_codegen::Bundle;
use serde_json::Value;

fn bundle() -> Bundle {
    Bundle::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas")).unwrap()
}

/// Every `properties` member under `schema`, as (pointer, property schema).
fn properties<'a>(schema: &'a Value, here: String, out: &mut Vec<(String, &'a Value)>) {
    match schema {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "properties" {
                    for (name, prop) in v.as_object().into_iter().flatten() {
                        out.push((format!("{here}/properties/{name}"), prop));
                        properties(prop, format!("{here}/properties/{name}"), out);
                    }
                } else {
                    properties(v, format!("{here}/{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                properties(v, format!("{here}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_definition_and_property_has_a_description() {
    let bundle = bundle();
    let mut missing = Vec::new();
    for (name, def) in &bundle.defs {
        if def
            .get("description")
            .and_then(Value::as_str)
            .is_none_or(|d| d.trim().is_empty())
        {
            missing.push(format!("{}: $defs/{name}", bundle.def_files[name]));
        }
        let mut props = Vec::new();
        properties(def, format!("$defs/{name}"), &mut props);
        for (pointer, prop) in props {
            if prop
                .get("description")
                .and_then(Value::as_str)
                .is_none_or(|d| d.trim().is_empty())
            {
                missing.push(format!("{}: {pointer}", bundle.def_files[name]));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "without a description:\n{}",
        missing.join("\n")
    );
}

#[test]
fn patterns_live_in_definitions_never_inline_in_a_property() {
    let bundle = bundle();
    for (name, def) in &bundle.defs {
        let mut props = Vec::new();
        properties(def, format!("$defs/{name}"), &mut props);
        for (pointer, prop) in props {
            assert!(
                prop.get("pattern").is_none(),
                "{}: {pointer} writes a pattern inline; give that kind of value a definition of its own",
                bundle.def_files[name]
            );
        }
    }
}
