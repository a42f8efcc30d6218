//! Field validation as Kubernetes has it (issue 30): `?fieldValidation=Strict|Warn|Ignore` on
//! every request with a body, at the controller and at the agent. The story: `POST /v1/vms`
//! with `"comand": [...]` answered 200 and ran `sleep infinity`, its only trace a `Warning`
//! header that `curl -s` does not show. Strict refuses it naming `/comand`; Warn (the default,
//! for PPN's clients) keeps the header; Ignore says nothing; and since the VM then names no
//! command on a node with no default, it is refused rather than given a placeholder. The
//! operator commands send Strict.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use super::run_cli::{cli, SmallFleet};
use crate::support::agent_harness::spawn_body;
use serde_json::{json, Value};

fn post(url: &str, body: &Value) -> (u16, Vec<String>, Value) {
    crate::support::install_crypto_provider();
    let answer = reqwest::blocking::Client::new()
        .post(url)
        .json(body)
        .send()
        .expect("the server answers");
    let status = answer.status().as_u16();
    let warnings = answer
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let body = answer.json().unwrap_or(Value::Null);
    (status, warnings, body)
}

fn pointers(error: &Value) -> Vec<String> {
    error["violations"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .map(|v| v["instance_path"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_mistyped_field_is_refused_by_name_under_strict_and_never_runs_a_placeholder() {
    let fleet = SmallFleet::start(&["node-a"]);
    let typo = json!({"vm_type": "t", "ram_mb": 64, "vcpu_count": 1, "comand": ["sleep", "600"]});
    let vms = fleet.controller.url("/v1/vms");

    let (status, _, error) = post(&format!("{vms}?fieldValidation=Strict"), &typo);
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["code"], "invalid_document");
    assert_eq!(pointers(&error), ["/comand"], "{error}");

    // Warn, the default: the field is named in a Warning header; the request then has no
    // command, which this node (no VM_DEFAULT_COMMAND) refuses: nothing runs.
    let (status, warnings, error) = post(&vms, &typo);
    assert_ne!(status, 200, "{error}");
    assert!(
        warnings.iter().any(|w| w.contains("/comand")),
        "{warnings:?}"
    );
    assert!(error.to_string().contains("/command"), "{error}");
    let (_, warnings, _) = post(&format!("{vms}?fieldValidation=Ignore"), &typo);
    assert!(warnings.is_empty(), "{warnings:?}");
    let (status, _, error) = post(&format!("{vms}?fieldValidation=strict"), &typo);
    assert_eq!(
        (status, error["code"].as_str()),
        (400, Some("invalid_query"))
    );
    // With the field spelt right, Strict places it.
    let right = json!({"vm_type": "t", "ram_mb": 64, "vcpu_count": 1, "command": ["sleep", "600"]});
    let (status, warnings, vm) = post(&format!("{vms}?fieldValidation=Strict"), &right);
    assert_eq!(status, 200, "{vm}");
    assert!(warnings.is_empty());

    // The agent's own routes with a body take it too.
    let agent = &fleet.agents[0];
    let mut spawn = spawn_body("vm-agent-typo", &["sleep", "600"]);
    spawn["imgae"] = json!("alpine");
    let (status, _, error) = post(&agent.url("/v1/spawn?fieldValidation=Strict"), &spawn);
    assert_eq!(status, 400, "{error}");
    assert_eq!(pointers(&error), ["/imgae"], "{error}");
    let mut desired = serde_json::to_value(agent.get::<Value>("/v1/desired")).unwrap();
    desired["extra"] = json!(1);
    crate::support::install_crypto_provider();
    let put = reqwest::blocking::Client::new()
        .put(agent.url("/v1/desired?fieldValidation=Strict"))
        .json(&desired)
        .send()
        .unwrap();
    assert_eq!(put.status().as_u16(), 400);
}

#[test]
fn the_operator_commands_send_strict() {
    // A listener that records the request line of the one call it gets.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let mut stream = stream;
        let _ = stream.write_all(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
        line
    });
    let home = tempfile::tempdir().unwrap();
    let env = [
        ("FLEETWIRE_URL", url.as_str()),
        ("FLEETWIRE_PLAIN_HTTP", "true"),
    ];
    let _ = cli(
        home.path(),
        &env,
        &[
            "vms",
            "create",
            "--type",
            "t",
            "--memory-mb",
            "64",
            "--vcpus",
            "1",
            "--",
            "true",
        ],
    );
    let line = seen.join().unwrap();
    assert!(
        line.starts_with("POST /v1/vms?fieldValidation=Strict "),
        "{line}"
    );
}
