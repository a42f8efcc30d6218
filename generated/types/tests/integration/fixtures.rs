//! The fixtures under `schemas/examples/`: every valid document is read, every invalid one is
//! refused with a violation at the pointer and keyword it names.

use std::path::{Path, PathBuf};

use fleetwire_types::{
    document, read_named, read_named_strict, reserialize_named, written_named, Rejection,
};
use serde_json::Value;

pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/examples")
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
        // Valid as written: no unknown fields, so the strict reader takes them too.
        if let Err(rejection) = read_named_strict(&name, &bytes).unwrap() {
            panic!("{} refused: {:#?}", path.display(), rejection.violations());
        }
        let accepted = read_named(&name, &bytes).unwrap().unwrap();
        assert!(accepted.unknown_fields.is_empty(), "{}", path.display());
    }
}

/// `schemas/examples/<Document>/unknown-fields/*.json`: documents from newer writers, valid once
/// their unknown fields are set aside. The default reader accepts them and names every unknown
/// field; the strict reader refuses each at its pointer.
#[test]
fn documents_with_unknown_fields_are_accepted_with_them_reported() {
    let all = fixtures("unknown-fields");
    assert!(!all.is_empty());
    for (name, path) in all {
        let bytes = std::fs::read(&path).unwrap();
        let value: Value = serde_json::from_slice(&bytes).unwrap();
        let accepted = match read_named(&name, &bytes).unwrap() {
            Ok(accepted) => accepted,
            Err(r) => panic!("{} refused: {:#?}", path.display(), r.violations()),
        };
        assert!(accepted.has_unknown_fields(), "{}", path.display());
        let mut reported: Vec<&str> = accepted.unknown_fields.iter().map(|p| p.as_str()).collect();
        reported.sort_unstable();
        // Every pointer names a field that is there, and with them removed the document is
        // valid as written.
        let mut stripped = value.clone();
        for pointer in &reported {
            assert!(
                value.pointer(pointer).is_some(),
                "{pointer} is not in the document"
            );
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            stripped
                .pointer_mut(parent)
                .and_then(Value::as_object_mut)
                .unwrap()
                .shift_remove(&key.replace("~1", "/").replace("~0", "~"));
        }
        let stripped = serde_json::to_vec(&stripped).unwrap();
        assert!(
            read_named_strict(&name, &stripped).unwrap().is_ok(),
            "{}",
            path.display()
        );
        let refused = read_named_strict(&name, &bytes).unwrap().unwrap_err();
        let mut refused_at: Vec<&str> = refused
            .violations()
            .iter()
            .inspect(|v| assert_eq!(v.keyword, "additionalProperties"))
            .map(|v| v.instance_path.as_str())
            .collect();
        refused_at.sort_unstable();
        assert_eq!(refused_at, reported, "{}", path.display());
    }
}

/// A nibrunner `reported.json` from a newer writer than the schema (docs/interop.md): accepted,
/// with exactly its five new fields reported.
#[test]
fn a_newer_nibrunner_reported_json_is_accepted_with_its_new_fields_reported() {
    let bytes = std::fs::read(
        examples_dir().join("HostReportedState/unknown-fields/nibrunner-newer-writer.json"),
    )
    .unwrap();
    let accepted = fleetwire_types::read::<fleetwire_types::HostReportedState>(&bytes).unwrap();
    let mut fields: Vec<&str> = accepted.unknown_fields.iter().map(|p| p.as_str()).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "/acceptedDigest",
            "/acceptedRevision",
            "/instances/0/artifactDigest",
            "/instances/0/extraPublicPort",
            "/instances/0/publicIpv4",
        ]
    );
    // What the schema knows is all there.
    assert_eq!(accepted.value.instances[0].restart_count, 1);
    assert_eq!(accepted.value.host_id.as_str(), "ams3-h12");
    let warnings: Vec<String> = accepted.warnings().collect();
    assert!(warnings.contains(&"unknown field /instances/0/publicIpv4".to_string()));
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
        if keyword == "additionalProperties" {
            // An unknown field: the default reader sets it aside and names it.
            match read_named(&name, &bytes).unwrap() {
                Ok(accepted)
                    if accepted
                        .unknown_fields
                        .iter()
                        .any(|p| p.as_str() == pointer) => {}
                other => failures.push(format!(
                    "{}: the default reader should accept it reporting {pointer}, got {other:?}",
                    path.display()
                )),
            }
        } else if read_named(&name, &bytes).unwrap().is_ok() {
            failures.push(format!("{}: accepted", path.display()));
        }
        match read_named_strict(&name, &bytes).unwrap() {
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
fn the_embedded_bundle_has_every_root_document() {
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

/// What fleetwire writes never carries a field its schema does not define, even when what it
/// writes was read from a peer with unknown fields (the controller forwards a tenant's
/// `CreateVmRequest` to an agent, a heartbeat's VM records become the node's): the typed value
/// serializes to a document the schema takes whole, closed objects included.
#[test]
fn what_fleetwire_writes_never_carries_unknown_fields() {
    let mut checked = 0;
    let mut from_peers_with_unknown_fields = 0;
    for kind in ["valid", "unknown-fields"] {
        for (name, path) in fixtures(kind) {
            let bytes = std::fs::read(&path).unwrap();
            let written = written_named(&name, &bytes).unwrap().unwrap();
            let validator = fleetwire_types::compile_validator(&name);
            let errors: Vec<String> = validator
                .iter_errors(&written)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{}: {errors:?}", path.display());
            checked += 1;
            from_peers_with_unknown_fields += usize::from(kind == "unknown-fields");
        }
    }
    assert!(
        checked >= 40 && from_peers_with_unknown_fields >= 3,
        "{checked}"
    );
}
