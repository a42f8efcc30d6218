//! Policy sentences come from their one home (`fleetwire_codegen::policy_sentences`, issue 31):
//! no description or summary typed into `schemas/` states who may call a route, what a mode
//! changes or what happens to an unknown field, and every operation of the published documents
//! carries the generated sentence of its `x-fleetwire-access`.

use std::path::PathBuf;

use fleetwire_codegen::policy_sentences::{access, hand_written, ACCESS_KEYWORD};
use serde_json::Value;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn no_description_in_the_schemas_states_a_policy_by_hand() {
    let mut found = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(workspace().join("schemas"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    for file in files {
        for (at, phrase) in hand_written(&read(file.clone())) {
            found.push(format!(
                "{}#{at}: \"{phrase}\"",
                file.file_name().unwrap().to_string_lossy()
            ));
        }
    }
    assert!(
        found.is_empty(),
        "descriptions that state a policy by hand (say it through the annotation instead: \
         codegen/src/policy_sentences.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_published_operation_says_its_access_from_the_annotation() {
    for name in [
        "fleet-api.json",
        "fleet-api.3.1.json",
        "agent-api.json",
        "agent-api.3.1.json",
    ] {
        let doc = read(workspace().join("generated/openapi").join(name));
        let mut operations = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let Some(level) = op.get(ACCESS_KEYWORD).and_then(Value::as_str) else {
                    panic!("{name}: {method} {path} has no {ACCESS_KEYWORD}");
                };
                let bootstrap = op["security"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|r| r.get("bootstrapToken").is_some()));
                let sentence = access(level, bootstrap).unwrap();
                let description = op["description"].as_str().unwrap_or_default();
                assert!(
                    description.ends_with(&sentence),
                    "{name}: {method} {path} does not end with its access sentence:\n{description}"
                );
                assert_eq!(
                    description.matches("Access: ").count(),
                    1,
                    "{name}: {method} {path}"
                );
                operations += 1;
            }
        }
        assert!(operations >= 8, "{name}: {operations} operations");
    }
}
