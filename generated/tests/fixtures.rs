//! The fixtures under `schemas/examples/`: every valid document is read, every invalid one is
//! refused with a violation at the pointer and keyword it names.

use std::path::{Path, PathBuf};

use fleetwire_types::{document, read_named, reserialize_named, Rejection};
use serde_json::Value;

pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/examples")
}

/// (document name, fixture path) for every fixture of one kind (`valid` or `invalid`).
fn fixtures(kind: &str) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for doc in std::fs::read_dir(examples_dir()).unwrap() {
        let doc = doc.unwrap().path();
        let name = doc.file_name().unwrap().to_string_lossy().into_owned();
        let Ok(entries) = std::fs::read_dir(doc.join(kind)) else {
            continue;
        };
        for entry in entries {
            out.push((name.clone(), entry.unwrap().path()));
        }
    }
    out.sort();
    out
}

#[test]
fn every_fixture_folder_names_a_root_document_and_every_root_has_a_valid_example() {
    for entry in std::fs::read_dir(examples_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            document(&name).is_some(),
            "schemas/examples/{name} is not a root document"
        );
    }
    for doc in fleetwire_types::DOCUMENTS {
        assert!(
            fixtures("valid").iter().any(|(name, _)| name == doc.name),
            "{} has no valid example under schemas/examples/{}/valid/",
            doc.name,
            doc.name
        );
    }
}

#[test]
fn valid_fixtures_are_read() {
    let all = fixtures("valid");
    assert!(all.len() >= 15);
    for (name, path) in all {
        let bytes = std::fs::read(&path).unwrap();
        if let Err(rejection) = read_named(&name, &bytes).unwrap() {
            panic!("{} refused: {:#?}", path.display(), rejection.violations());
        }
    }
}

#[test]
fn invalid_fixtures_are_refused_where_they_say() {
    let all = fixtures("invalid");
    assert!(all.len() >= 40);
    let mut failures = Vec::new();
    for (name, path) in all {
        let fixture: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let pointer = fixture["instance_path"].as_str().expect("instance_path");
        let keyword = fixture["keyword"].as_str().expect("keyword");
        let bytes = serde_json::to_vec(&fixture["document"]).unwrap();
        // Where the generator says the type enforces the whole schema, the typed parse alone
        // refuses it too: "it parsed" and "it is valid" agree.
        assert!(
            !document(&name).unwrap().exact || reserialize_named(&name, &bytes).unwrap().is_err(),
            "{}: the generated type accepts a document the schema refuses",
            path.display()
        );
        match read_named(&name, &bytes).unwrap() {
            Ok(()) => failures.push(format!("{}: accepted", path.display())),
            Err(Rejection::Malformed(v)) => {
                failures.push(format!("{}: malformed? {v:?}", path.display()))
            }
            Err(Rejection::Invalid(violations)) => {
                let found = violations
                    .iter()
                    .any(|v| v.instance_path.as_str() == pointer && v.keyword == keyword);
                if !found {
                    let got: Vec<String> = violations
                        .iter()
                        .map(|v| format!("{} {}", v.instance_path.as_str(), v.keyword))
                        .collect();
                    failures.push(format!(
                        "{}: expected {pointer} {keyword}, got {got:?}",
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_schema_files_are_embedded_as_written() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas");
    assert!(fleetwire_types::SCHEMA_FILES.len() >= 3);
    for (name, text) in fleetwire_types::SCHEMA_FILES {
        assert_eq!(
            *text,
            std::fs::read_to_string(dir.join(name)).unwrap(),
            "{name}"
        );
    }
    let bundle: Value = serde_json::from_str(fleetwire_types::BUNDLE_SCHEMA).unwrap();
    for doc in fleetwire_types::DOCUMENTS {
        assert!(
            bundle["$defs"][doc.name].is_object(),
            "{} is in the embedded bundle",
            doc.name
        );
    }
}

#[test]
fn a_body_that_is_not_utf8_is_malformed_with_its_position() {
    let text =
        std::fs::read_to_string(examples_dir().join("NodeHeartbeat/valid/full.json")).unwrap();
    let at = text.find("\"node_id\"").unwrap() + "\"node_id\": \"".len();
    for bad in [&b"\xff"[..], b"\xc3\x28", b"\xe2\x82"] {
        let mut bytes = text.as_bytes()[..at].to_vec();
        bytes.extend_from_slice(bad);
        bytes.extend_from_slice(&text.as_bytes()[at..]);
        match fleetwire_types::read::<fleetwire_types::NodeHeartbeat>(&bytes) {
            Err(Rejection::Malformed(v)) => {
                assert_eq!(v.keyword, "json");
                assert!(v.message.contains("line"), "{}", v.message);
            }
            other => panic!("{bad:?} in a string: expected Malformed, got {other:?}"),
        }
    }
}
