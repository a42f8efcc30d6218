//! The load generator (`fleetwire-loadgen`, run in-process as its binary runs it:
//! support/loadgen.rs) against a real controller: it enrolls every simulated node, measures,
//! reports, and the controller then holds exactly those nodes with the heartbeats counted;
//! against nothing it fails with a message, not a report.

use crate::support::controller_harness::*;
use crate::support::loadgen::run_loadgen;

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_enrolls_its_nodes_and_reports_what_the_controller_took() {
    let controller = ControllerProcess::start(&[]);
    let output = tokio::task::spawn_blocking({
        let url = controller.url("");
        move || {
            run_loadgen(&[
                "--url",
                &url,
                "--nodes",
                "60",
                "--connections",
                "4",
                "--duration",
                "1s",
                "--warmup",
                "300ms",
                "--fleet-every",
                "200ms",
                "--fleet-samples",
                "3",
            ])
        }
    })
    .await
    .unwrap();
    let (stdout, stderr) = (&output.stdout, &output.stderr);
    assert!(output.success, "{stdout}\n{stderr}");
    assert!(stderr.contains("enrolled 60 nodes"), "{stderr}");

    // "heartbeats: N ok, 0 failed, R/s (after W in a 300ms warm-up)"
    let line = stdout
        .lines()
        .find(|l| l.starts_with("heartbeats:"))
        .unwrap_or_else(|| panic!("no heartbeat line in\n{stdout}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let ok: u64 = words[1].parse().unwrap();
    assert!(ok > 0, "{line}");
    assert_eq!(words[3], "0", "{line}");
    let warmup: u64 = words[7].parse().unwrap();
    assert!(warmup > 0, "{line}");
    assert!(line.ends_with("in a 300ms warm-up)"), "{line}");
    assert!(stdout.contains("heartbeat latency: p50 "), "{stdout}");
    assert!(
        stdout.contains("GET /v1/fleet (60 nodes") && stdout.contains("idle: p50"),
        "{stdout}"
    );
    assert!(stdout.contains("under load: p50"), "{stdout}");

    // The controller took every heartbeat the report counts (and the enrolling ones): the
    // warm-up's apart from the measured ones.
    let client = client();
    let (status, nodes) = get_json(&client, &controller.url("/v1/nodes")).await;
    assert_eq!(status, 200);
    assert_eq!(nodes.as_array().unwrap().len(), 60);
    let metrics = metrics_text(&client, &controller).await;
    let taken = metric(&metrics, "fleetwire_controller_heartbeats_received_total");
    assert_eq!(taken as u64, ok + warmup + 60, "{line}");
}

#[test]
fn loadgen_without_a_controller_fails_with_a_message() {
    let port = crate::support::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let output = run_loadgen(&["--url", &url, "--nodes", "5", "--duration", "1s"]);
    assert!(!output.success);
    let stderr = &output.stderr;
    assert!(
        stderr.contains(&format!("connecting to 127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "no report without a controller");
}

/// The load generator against a controller in its default mode, mTLS: every simulated node
/// gets a bootstrap token from the admin, registers with its own key's CSR, heartbeats on its
/// own connection with the certificate it was issued, and survives the reconnect storm; the
/// admin token is never printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_over_mtls_enrolls_by_token_and_reconnects_every_node_in_the_storm() {
    use std::os::unix::fs::PermissionsExt;
    let controller = ControllerProcess::start_secure(&[]);
    let admin = controller.dir.join("admin-token");
    std::fs::write(&admin, format!("{ADMIN_TOKEN}\n")).unwrap();
    std::fs::set_permissions(&admin, std::fs::Permissions::from_mode(0o600)).unwrap();
    let output = tokio::task::spawn_blocking({
        let (url, ca) = (controller.url(""), controller.ca_path());
        move || {
            run_loadgen(&[
                "--url",
                &url,
                "--ca-file",
                ca.to_str().unwrap(),
                "--operator-token-file",
                admin.to_str().unwrap(),
                "--nodes",
                "50",
                "--duration",
                "2s",
                "--warmup",
                "1s",
                "--reconnect-storm",
                "--fleet-every",
                "0s",
                "--fleet-samples",
                "0",
            ])
        }
    })
    .await
    .unwrap();
    let (stdout, stderr) = (&output.stdout, &output.stderr);
    assert!(output.success, "{stdout}\n{stderr}");
    assert!(
        !stdout.contains(ADMIN_TOKEN) && !stderr.contains(ADMIN_TOKEN),
        "the admin token was printed"
    );
    assert!(
        stdout.contains("50 nodes, 50 connections (one per node)"),
        "{stdout}"
    );
    assert!(stdout.contains("\ntransport: mTLS\n"), "{stdout}");
    assert!(stdout.contains("\nenrollment: 50 nodes in "), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("heartbeats:"))
        .unwrap_or_else(|| panic!("no heartbeat line in\n{stdout}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let ok: u64 = words[1].parse().unwrap();
    let warmup: u64 = words[7].parse().unwrap();
    assert!(ok > 0 && warmup > 0, "{line}");
    assert_eq!(words[3], "0", "{line}");
    let storm = stdout
        .lines()
        .find(|l| l.starts_with("reconnect storm:"))
        .unwrap_or_else(|| panic!("no storm line in\n{stdout}"));
    assert!(
        storm.starts_with(
            "reconnect storm: 50 of 50 nodes reconnected, 0 failed, the last answered after "
        ),
        "{storm}"
    );

    // The controller holds the 50 nodes, enrolled by registration, and took every heartbeat
    // the report counts plus one per node in the storm (none at enrolment).
    let client = controller.tls_client();
    let nodes: serde_json::Value = client
        .get(controller.url("/v1/nodes"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(nodes.as_array().unwrap().len(), 50, "{nodes}");
    let metrics = client
        .get(controller.url("/metrics"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let taken = metric(&metrics, "fleetwire_controller_heartbeats_received_total");
    assert_eq!(taken as u64, ok + warmup + 50, "{line}\n{storm}");
}

#[test]
fn loadgen_over_https_without_an_operator_token_fails_with_a_message() {
    // The token's other way in, which this test process never sets.
    assert!(std::env::var_os("FLEETWIRE_LOADGEN_OPERATOR_TOKEN").is_none());
    let port = crate::support::free_port();
    let url = format!("https://127.0.0.1:{port}");
    let output = run_loadgen(&[
        "--url",
        &url,
        "--ca-file",
        "/nonexistent/ca.pem",
        "--nodes",
        "5",
    ]);
    assert!(!output.success);
    let stderr = &output.stderr;
    assert!(
        stderr.contains(
            "an https:// URL needs --operator-token-file or FLEETWIRE_LOADGEN_OPERATOR_TOKEN"
        ),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "no report without a token");
}

/// The production binary carries no load generator: it is `fleetwire-loadgen`, a package of
/// its own (tests/loadgen).
#[test]
fn the_fleetwire_binary_has_no_loadgen_command() {
    let output = crate::support::fleetwire()
        .args(["loadgen", "--help"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unrecognized subcommand 'loadgen'"),
        "{stderr}"
    );
}
