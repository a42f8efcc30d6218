//! "It parsed" and "it is valid" mean the same thing: random mutations of every valid fixture
//! are accepted by the plain typed parse (serde into the generated type, no schema pass) if and
//! only if the schema validator accepts them, and the validated reader agrees with both.
//!
//! Mutations stay within what JSON carries losslessly here: no integers beyond 64 bits (the
//! validator sees those as floats) and no integral floats such as `1.0` for integer fields (the
//! schema calls them integers, serde does not); the validated reader refuses both with a `type`
//! violation rather than accepting them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use fleetwire_types::{compile_validator, read_named, reserialize_named};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Value};

fn valid_fixtures() -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/examples");
    let mut out = Vec::new();
    for doc in std::fs::read_dir(dir).unwrap() {
        let doc = doc.unwrap().path();
        let name = doc.file_name().unwrap().to_string_lossy().into_owned();
        for entry in std::fs::read_dir(doc.join("valid")).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            out.push((name.clone(), serde_json::from_slice(&bytes).unwrap()));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn schema_accepts(name: &str, value: &Value) -> bool {
    static VALIDATORS: OnceLock<Mutex<HashMap<String, &'static jsonschema::Validator>>> =
        OnceLock::new();
    let validator = *VALIDATORS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(name.to_string())
        .or_insert_with(|| Box::leak(Box::new(compile_validator(name))));
    validator.is_valid(value)
}

/// Every JSON pointer in `value`, the root included.
fn pointers(value: &Value, here: String, out: &mut Vec<String>) {
    out.push(here.clone());
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                pointers(
                    v,
                    format!("{here}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                pointers(v, format!("{here}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Replacement values that probe each kind of constraint.
fn replacements() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(0),
        json!(1),
        json!(-1),
        json!(100),
        json!(101),
        json!(255),
        json!(65535),
        json!(65536),
        json!(4294967295u64),
        json!(4294967296u64),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(0.5),
        json!(-2.5),
        json!(""),
        json!("x"),
        json!("ok-id_1"),
        json!("bad id"),
        json!("-leading-dash"),
        json!("a".repeat(63)),
        json!("a".repeat(64)),
        json!("é".repeat(512)),
        json!("é".repeat(513)),
        json!("2026-11-30T09:30:00Z"),
        json!("2026-11-30T09:30:00.123456789+02:00"),
        json!("2026-02-30T09:30:00Z"),
        json!("2026-11-30 09:30:00Z"),
        json!("10.0.0.1"),
        json!("10.0.0.256"),
        json!("010.0.0.1"),
        json!("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
        json!("0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"),
        json!("running"),
        json!("Running"),
        json!("tcp"),
        json!("1.2.3"),
        json!("http://127.0.0.1:9"),
        json!("-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"),
        json!([]),
        json!(["/bin/true"]),
        json!([""]),
        json!({}),
        json!({"code": 3}),
        json!({"signal": 9}),
        json!({"code": 3, "signal": 9}),
        json!({"code": null}),
        json!({"Running": null}),
        json!({"running": null}),
        json!({"tcp": null}),
        json!(["a", 1]),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the value at a pointer.
    Replace(Index, Index),
    /// Remove the member at a pointer (when it is an object member or array item).
    Remove(Index),
    /// Add a member to the object at a pointer.
    AddMember(Index, Index),
    /// Duplicate the last item of the array at a pointer, or drop all its items.
    Resize(Index, bool),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<Index>(), any::<Index>()).prop_map(|(p, r)| Mutation::Replace(p, r)),
        2 => any::<Index>().prop_map(Mutation::Remove),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(p, r)| Mutation::AddMember(p, r)),
        1 => (any::<Index>(), any::<bool>()).prop_map(|(p, grow)| Mutation::Resize(p, grow)),
    ]
}

fn apply(doc: &mut Value, mutation: &Mutation) {
    let mut all = Vec::new();
    pointers(doc, String::new(), &mut all);
    let values = replacements();
    match mutation {
        Mutation::Replace(p, r) => {
            *doc.pointer_mut(p.get(&all).as_str()).unwrap() = r.get(&values).clone();
        }
        Mutation::Remove(p) => {
            let pointer = p.get(&all).as_str();
            if let Some((parent, last)) = pointer.rsplit_once('/') {
                match doc.pointer_mut(parent).unwrap() {
                    Value::Object(map) => {
                        map.shift_remove(&last.replace("~1", "/").replace("~0", "~"));
                    }
                    Value::Array(items) => {
                        items.remove(last.parse::<usize>().unwrap());
                    }
                    _ => unreachable!("a parent is a container"),
                }
            }
        }
        Mutation::AddMember(p, r) => {
            if let Value::Object(map) = doc.pointer_mut(p.get(&all).as_str()).unwrap() {
                map.insert("unexpectedField".into(), r.get(&values).clone());
            }
        }
        Mutation::Resize(p, grow) => {
            if let Value::Array(items) = doc.pointer_mut(p.get(&all).as_str()).unwrap() {
                match (grow, items.last().cloned()) {
                    (true, Some(last)) => items.push(last),
                    _ => items.clear(),
                }
            }
        }
    }
}

fn check(name: &str, doc: &Value) -> Result<(), TestCaseError> {
    let bytes = serde_json::to_vec(doc).unwrap();
    let schema = schema_accepts(name, doc);
    let typed = reserialize_named(name, &bytes).unwrap();
    prop_assert_eq!(
        typed.is_ok(),
        schema,
        "{}: typed parse {:?} but schema says {} for {}",
        name,
        typed.as_ref().err().map(|e| e.to_string()),
        schema,
        doc
    );
    prop_assert_eq!(read_named(name, &bytes).unwrap().is_ok(), schema);
    if let Ok(reserialized) = typed {
        // What the type writes back is valid too, and reads back to the same value.
        prop_assert!(
            schema_accepts(name, &reserialized),
            "{name}: reserialized form is invalid: {reserialized}"
        );
        let again = reserialize_named(name, &serde_json::to_vec(&reserialized).unwrap())
            .unwrap()
            .unwrap();
        prop_assert_eq!(again, reserialized);
    }
    Ok(())
}

/// `PROPTEST_CASES` raises the count for a longer run.
fn env_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: env_cases(2000), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn one_mutation(fixture in any::<Index>(), m in mutation()) {
        let fixtures = valid_fixtures();
        let (name, mut doc) = fixture.get(&fixtures).clone();
        apply(&mut doc, &m);
        check(&name, &doc)?;
    }

    #[test]
    fn three_mutations(fixture in any::<Index>(), ms in proptest::collection::vec(mutation(), 3)) {
        let fixtures = valid_fixtures();
        let (name, mut doc) = fixture.get(&fixtures).clone();
        for m in &ms {
            apply(&mut doc, m);
        }
        check(&name, &doc)?;
    }
}

#[test]
fn every_valid_fixture_round_trips() {
    for (name, doc) in valid_fixtures() {
        check(&name, &doc).unwrap();
    }
}
