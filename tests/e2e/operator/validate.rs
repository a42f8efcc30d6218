//! `fleetwire validate` from the shell: exit codes and `pointer: message (keyword)` lines.

use std::io::Write;
use std::process::Stdio;

use crate::support::{fleetwire, workspace};

fn run(args: &[&str], stdin: Option<&[u8]>) -> (i32, String, String) {
    let mut child = fleetwire()
        .arg("validate")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fleetwire validate");
    if let Some(bytes) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(bytes)
            .expect("write stdin");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_valid_document_exits_0() {
    let file = workspace().join("schemas/examples/HostReportedState/valid/full.json");
    let (code, stdout, _) = run(
        &[file.to_str().unwrap(), "--type", "HostReportedState"],
        None,
    );
    assert_eq!(code, 0, "{stdout}");
}

#[test]
fn an_invalid_document_exits_1_with_each_pointer() {
    let doc = br#"{"node_id": "bad id!", "wg_ip": "10.0.0.300"}"#;
    let (code, stdout, _) = run(&["-", "--type", "NodeHeartbeat"], Some(doc));
    assert_eq!(code, 1);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("/node_id: ") && l.ends_with("(pattern)")),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("/: ")
            && l.contains("\"hostname\"")
            && l.ends_with("(required)")),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("/wg_ip: ")),
        "{stdout}"
    );
}

#[test]
fn not_json_or_unreadable_exits_2() {
    let (code, _, stderr) = run(&["-", "--type", "NodeHeartbeat"], Some(b"{not json"));
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = run(&["/nonexistent/reported.json"], None);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = run(&["-", "--type", "NoSuchDocument"], Some(b"{}"));
    assert_eq!(code, 2);
    assert!(
        stderr.contains("NodeHeartbeat"),
        "lists the known types: {stderr}"
    );
}

#[test]
fn reported_json_is_recognised_by_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reported.json");
    std::fs::copy(
        workspace().join("schemas/examples/HostReportedState/valid/minimal.json"),
        &path,
    )
    .unwrap();
    let (code, stdout, stderr) = run(&[path.to_str().unwrap()], None);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("valid HostReportedState"));
}

/// A `reported.json` written by a newer nibrunner (schemas/examples/HostReportedState/
/// unknown-fields/): valid once its new fields are set aside, each printed as a warning; with
/// `--strict` each is a violation at its own pointer.
#[test]
fn a_newer_nibrunner_reported_json_is_valid_with_warnings_and_refused_with_strict() {
    let fixture = workspace()
        .join("schemas/examples/HostReportedState/unknown-fields/nibrunner-newer-writer.json");
    let dir = tempfile::tempdir().unwrap();
    let reported = dir.path().join("reported.json");
    std::fs::copy(&fixture, &reported).unwrap();
    let fields = [
        "/acceptedDigest",
        "/acceptedRevision",
        "/instances/0/artifactDigest",
        "/instances/0/publicIpv4",
        "/instances/0/extraPublicPort",
    ];

    let (code, stdout, stderr) = run(&[reported.to_str().unwrap()], None);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("valid HostReportedState once 5 unknown fields are set aside"),
        "{stdout}"
    );
    let mut warned: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("warning: unknown field "))
        .collect();
    warned.sort_unstable();
    let mut expected = fields.to_vec();
    expected.sort_unstable();
    assert_eq!(warned, expected, "{stderr}");

    let (code, stdout, stderr) = run(&[reported.to_str().unwrap(), "--strict"], None);
    assert_eq!(code, 1, "{stdout}{stderr}");
    for field in fields {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("{field}: "))
                    && l.ends_with("(additionalProperties)")),
            "{field} in {stdout}"
        );
    }
    assert!(stderr.contains("5 violations"), "{stderr}");
}

#[test]
fn strict_accepts_a_document_without_unknown_fields() {
    let file = workspace().join("schemas/examples/HostReportedState/valid/full.json");
    let (code, stdout, stderr) = run(
        &[
            file.to_str().unwrap(),
            "--type",
            "HostReportedState",
            "--strict",
        ],
        None,
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}
