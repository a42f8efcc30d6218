//! House rules of `schemas/`: every definition and property is described, a pattern is
//! written once, in the definition of its kind, never copied into a property, and no pattern
//! gives the validators' backtracking matcher (regress) a choice of where a run ends.

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

/// One atom of a pattern (a character, an escape, a class, `.`) and whether its quantifier lets
/// it match a varying number of times; `None` for what is not an atom (groups, `|`, anchors).
struct Atom {
    source: String,
    varying: bool,
}

fn atoms(pattern: &str) -> Vec<Option<Atom>> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let start = i;
        let atom = match chars[i] {
            '(' => {
                i += 1;
                if chars.get(i) == Some(&'?') {
                    i += 2; // `?:`, `?=`, `?!`
                }
                out.push(None);
                continue;
            }
            ')' | '|' | '^' | '$' => {
                i += 1;
                false
            }
            '\\' => {
                i += match chars.get(i + 1) {
                    Some('u') => 6,
                    Some('x') => 4,
                    _ => 2,
                };
                true
            }
            '[' => {
                i += 1;
                while chars[i] != ']' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                true
            }
            _ => {
                i += 1;
                true
            }
        };
        let source: String = chars[start..i].iter().collect();
        let varying = match chars.get(i) {
            Some('*' | '+' | '?') => {
                i += 1;
                true
            }
            Some('{') => {
                let close = i + chars[i..].iter().position(|&c| c == '}').unwrap();
                let bounds: String = chars[i + 1..close].iter().collect();
                i = close + 1;
                bounds
                    .split_once(',')
                    .is_some_and(|(low, high)| low != high)
            }
            _ => false,
        };
        if chars.get(i) == Some(&'?') {
            i += 1; // lazy
        }
        out.push(atom.then_some(Atom { source, varying }));
    }
    out
}

/// Whether two atoms match a common character (all of ASCII and a few others tried).
fn overlap(a: &str, b: &str) -> bool {
    let one = |atom: &str| regress::Regex::new(&format!("^(?:{atom})$")).unwrap();
    let (a, b) = (one(a), one(b));
    (0u32..0x80)
        .chain([0xe9, 0x2028, 0x1f600])
        .filter_map(char::from_u32)
        .any(|c| {
            let s = c.to_string();
            a.find(&s).is_some() && b.find(&s).is_some()
        })
}

/// Where `pattern` lets a run of varying length be followed by an atom that could take its
/// last character (`[a-z0-9._-]*[a-z0-9]`): on a string that fails later, regress tries
/// every place the run could end, and in a repeated group every combination of them.
fn ambiguous_runs(pattern: &str) -> Vec<String> {
    atoms(pattern)
        .windows(2)
        .filter_map(|pair| match pair {
            [Some(a), Some(b)] if a.varying && overlap(&a.source, &b.source) => {
                Some(format!("{} then {}", a.source, b.source))
            }
            _ => None,
        })
        .collect()
}

/// The image reference's pattern as it was took regress over 30 s on a 33-letter name
/// component the fuzzer found (tests/fuzz/crashes/desired_intake/image-name-backtracking):
/// anything that validates a document holding one would hang on it. Each run must end where
/// the next atom cannot continue it, as `[a-z0-9]+(?:[._-]+[a-z0-9]+)*` does.
#[test]
fn no_pattern_lets_a_run_end_in_more_than_one_place() {
    let was = "^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*$";
    assert_eq!(
        ambiguous_runs(was),
        ["[a-z0-9._-] then [a-z0-9]", "[a-z0-9._-] then [a-z0-9]"],
        "the rule sees the shape it is about"
    );
    let bundle = bundle();
    let mut found = Vec::new();
    for (name, def) in &bundle.defs {
        if let Some(pattern) = def.get("pattern").and_then(Value::as_str) {
            for run in ambiguous_runs(pattern) {
                found.push(format!(
                    "{}: $defs/{name}/pattern: {run}",
                    bundle.def_files[name]
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "runs that can end in more than one place:\n{}",
        found.join("\n")
    );
}
