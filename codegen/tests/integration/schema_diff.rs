//! `fleetwire-codegen diff` through its binary (docs/versioning.md): one fixture pair per rule
//! under `tests/diff_fixtures/<case>/{base,head}/` with the classification it must get
//! (`expected.json`), and the git-revision mode on a temporary repository of two commits.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_fleetwire-codegen");

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/diff_fixtures")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn run(args: &[&str], workspace: &Path) -> Output {
    Command::new(BIN)
        .arg("--workspace")
        .arg(workspace)
        .args(args)
        .output()
        .expect("running fleetwire-codegen")
}

/// What a fixture's `expected.json` states of each change.
fn projection(report: &Value) -> Value {
    let changes: Vec<Value> = report["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            let directions: serde_json::Map<String, Value> = c["directions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    (
                        format!(
                            "{} → {}",
                            d["writer"].as_str().unwrap(),
                            d["reader"].as_str().unwrap()
                        ),
                        json!(if d["breaking"] == json!(true) {
                            "breaking"
                        } else {
                            "compatible"
                        }),
                    )
                })
                .collect();
            json!({
                "rule": c["rule"],
                "breaking": c["breaking"],
                "pointer": c["pointer"],
                "directions": directions,
            })
        })
        .collect();
    json!(changes)
}

/// A fixture without its own manifests is compared as 1.0.0 → 1.1.0: not a major bump, so a
/// breaking change fails.
fn with_manifest(dir: &Path, version: &str) {
    let path = dir.join("schema-set.json");
    if !path.exists() {
        std::fs::write(
            path,
            json!({"name": "fixture", "version": version}).to_string(),
        )
        .unwrap();
    }
}

#[test]
fn every_rule_classifies_its_fixture_pair() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() > 40, "{} fixtures", cases.len());
    let mut rules_seen = BTreeSet::new();
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let expected: Value =
            serde_json::from_str(&std::fs::read_to_string(case.join("expected.json")).unwrap())
                .unwrap_or_else(|e| panic!("{name}/expected.json: {e}"));
        let tmp = tempfile::tempdir().unwrap();
        let (base, head) = (tmp.path().join("base"), tmp.path().join("head"));
        copy_dir(&case.join("base"), &base);
        copy_dir(&case.join("head"), &head);
        with_manifest(&base, "1.0.0");
        with_manifest(&head, "1.1.0");
        let out = run(
            &[
                "diff",
                "--format",
                "json",
                "--base-dir",
                base.to_str().unwrap(),
                "--head-dir",
                head.to_str().unwrap(),
            ],
            tmp.path(),
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{name}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let got = projection(&report);
        if got != expected["changes"] {
            failures.push(format!(
                "{name}: expected {:#}\ngot {got:#}",
                expected["changes"]
            ));
        }
        if out.status.code() != expected["exit"].as_i64().map(|c| c as i32) {
            failures.push(format!(
                "{name}: exit {:?}, expected {}; {}",
                out.status.code(),
                expected["exit"],
                report["verdict"]["message"]
            ));
        }
        for c in report["changes"].as_array().unwrap() {
            rules_seen.insert(c["rule"].as_str().unwrap().to_string());
            // Every change says where, for whom and what, in a sentence.
            assert!(c["message"].as_str().unwrap().ends_with('.'), "{name}: {c}");
            assert!(!c["subject"].as_str().unwrap().is_empty(), "{name}: {c}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let missing: Vec<String> = fleetwire_codegen::schema_diff::Rule::ALL
        .iter()
        .map(|r| r.as_str())
        .filter(|r| !rules_seen.contains(r))
        .collect();
    assert!(missing.is_empty(), "rules without a fixture: {missing:?}");
}

fn git(repo: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "-c",
            "user.name=fixture",
            "-c",
            "user.email=fixture@example.invalid",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn write_set(repo: &Path, version: &str, fields: Value) {
    let schemas = repo.join("schemas");
    std::fs::create_dir_all(&schemas).unwrap();
    std::fs::write(
        schemas.join("schema-set.json"),
        json!({"name": "fixture", "version": version}).to_string(),
    )
    .unwrap();
    std::fs::write(
        schemas.join("doc.schema.json"),
        serde_json::to_string_pretty(&json!({
            "title": "Doc",
            "x-fleetwire-wire": {"writers": {"agent": "the agent"}, "readers": {"controller": "agents"}},
            "type": "object",
            "properties": fields,
        }))
        .unwrap(),
    )
    .unwrap();
}

#[test]
fn diff_against_git_revisions_fails_a_breaking_change_without_a_major_bump() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path();
    git(repo, &["init", "-q"]);
    write_set(
        repo,
        "0.1.0",
        json!({"a": {"type": "string"}, "b": {"type": "string"}}),
    );
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "first"]);

    // The first commit has no parent: the revision is refused with a clear error.
    let out = run(&["diff", "--base", "HEAD~1"], repo);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`HEAD~1` is not a commit"), "{err}");

    // Against itself: nothing changed.
    let out = run(&["diff", "--base", "HEAD"], repo);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("no changes"));

    write_set(repo, "0.1.1", json!({"a": {"type": "string"}}));
    git(repo, &["commit", "-q", "-am", "drop b"]);
    git(repo, &["tag", "schemas-v0.1.0", "HEAD~1"]);

    // A field removed with only a patch bump: breaking, exit 1, said in words.
    let out = run(&["diff", "--base", "schemas-v0.1.0"], repo);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("BREAKING field-removed: Doc: `b` was removed."),
        "{text}"
    );
    assert!(text.contains("at doc.schema.json#/properties/b"), "{text}");
    assert!(text.contains("breaks agent → controller"), "{text}");
    assert!(
        text.contains("raise schemas/schema-set.json's version to 0.2.0"),
        "{text}"
    );

    // Between two revisions, as JSON.
    let out = run(
        &[
            "diff", "--base", "HEAD~1", "--head", "HEAD", "--format", "json",
        ],
        repo,
    );
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["base"]["version"], "0.1.0");
    assert_eq!(report["head"]["version"], "0.1.1");
    // A revision is labelled with the commit it names.
    let label = report["head"]["label"].as_str().unwrap();
    assert!(
        label.starts_with("HEAD (") && label.len() == "HEAD ()".len() + 12,
        "{label}"
    );
    assert_eq!(report["verdict"]["breaking"], 1);
    assert_eq!(report["changes"][0]["rule"], "field-removed");

    // The working tree raises the version by a minor step, which below 1.0.0 is major.
    write_set(repo, "0.2.0", json!({"a": {"type": "string"}}));
    let out = run(&["diff", "--base", "schemas-v0.1.0"], repo);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("released as a major version (0.1.0 → 0.2.0)"),
        "{text}"
    );

    // A root document without its wire annotation is refused, naming it.
    std::fs::write(
        repo.join("schemas/doc.schema.json"),
        json!({"title": "Doc", "type": "object"}).to_string(),
    )
    .unwrap();
    let out = run(&["diff", "--base", "HEAD"], repo);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("root documents without `x-fleetwire-wire`")
            && err.contains("Doc (doc.schema.json)"),
        "{err}"
    );
}
