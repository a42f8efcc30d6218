//! `fleetwire loadgen` against a real controller: it enrolls every simulated node, measures,
//! reports, and the controller then holds exactly those nodes with the heartbeats counted;
//! against nothing it fails with a message, not a report.

mod controller_support;

use std::process::Stdio;

use controller_support::*;
use fleetwire_e2e::fleetwire;

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
            fleetwire()
                .args([
                    "loadgen",
                    "--url",
                    &url,
                    "--nodes",
                    "60",
                    "--connections",
                    "4",
                ])
                .args([
                    "--duration",
                    "1s",
                    "--warmup",
                    "300ms",
                    "--fleet-every",
                    "200ms",
                    "--fleet-samples",
                    "3",
                ])
                .stdin(Stdio::null())
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
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
    let port = fleetwire_e2e::free_port();
    let output = fleetwire()
        .args(["loadgen", "--url", &format!("http://127.0.0.1:{port}")])
        .args(["--nodes", "5", "--duration", "1s"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("connecting to 127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "no report without a controller");
}
