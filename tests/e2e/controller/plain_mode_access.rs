//! `--plain-http` keeps PPN's wire for nodes and readers, but what changes the fleet (placing
//! and deleting VMs, cordons, unenrolling, minting bootstrap tokens) answers only clients on the
//! controller's own host, unless the controller has an operator token file: then an admin token
//! from anywhere (issue 28, docs/security.md).

use std::os::unix::fs::PermissionsExt;

use crate::support::controller_harness::*;
use crate::support::free_port;
use serde_json::{json, Value};

/// This host's address on a non-loopback interface: the source address of a connection to it
/// is not loopback, as a client's on another host would not be.
fn outside_address() -> std::net::IpAddr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    // No packet is sent: connecting a UDP socket only picks the route and source address.
    socket
        .connect("192.0.2.255:9")
        .or_else(|_| socket.connect("8.8.8.8:53"))
        .expect("a route off this host");
    let ip = socket.local_addr().unwrap().ip();
    assert!(
        !ip.is_loopback() && !ip.is_unspecified(),
        "this test needs a non-loopback interface, found {ip}"
    );
    ip
}

async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let answer = request.send().await.expect("an answer");
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_file_only_loopback_clients_change_the_fleet() {
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let controller = ControllerProcess::start(&["--listen", &listen]);
    let http = client();
    let outside = format!("http://{}:{port}", outside_address());
    let token = json!({"node_id": "n1"});
    let vm = json!({"vm_type": "t", "ram_mb": 64, "vcpu_count": 1});

    // From another address: reads and node routes as PPN has them; no change of the fleet.
    heartbeat_ok(&http, &controller, &ppn_heartbeat("n1", "10.0.0.1", 9)).await;
    let (status, answer) = post_json(
        &http,
        &format!("{outside}/v1/nodes/heartbeat"),
        &ppn_body("n1", "10.0.0.1"),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let (status, nodes) = get_json(&http, &format!("{outside}/v1/nodes")).await;
    assert_eq!(status, 200);
    assert_eq!(nodes[0]["node_id"], "n1");
    for (status, answer) in [
        post_json(&http, &format!("{outside}/v1/tokens"), &token).await,
        post_json(&http, &format!("{outside}/v1/vms"), &vm).await,
        post_json(&http, &format!("{outside}/v1/nodes/n1/cordon"), &json!({})).await,
        delete_url(&http, &format!("{outside}/v1/nodes/n1")).await,
    ] {
        assert_eq!(status, 403, "{answer}");
        assert_eq!(answer["code"], "forbidden", "{answer}");
        assert!(
            answer["message"]
                .as_str()
                .is_some_and(|m| m.contains("loopback")),
            "{answer}"
        );
    }
    let (status, nodes) = get_json(&http, &format!("{outside}/v1/nodes")).await;
    assert_eq!((status, nodes[0]["node_id"].clone()), (200, json!("n1")));

    // From this host: as before.
    let (status, answer) = post_json(&http, &controller.url("/v1/tokens"), &token).await;
    assert_eq!(status, 201, "{answer}");
    let (status, _) = delete_url(&http, &controller.url("/v1/nodes/n1")).await;
    assert_eq!(status, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_file_an_admin_token_changes_the_fleet_from_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("operator-tokens");
    std::fs::write(
        &tokens,
        format!("{ADMIN_TOKEN},ops-admin,admin\n{VIEWER_TOKEN},ops-viewer,read-only\n"),
    )
    .unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let controller = ControllerProcess::start(&[
        "--listen",
        &listen,
        "--operator-token-file",
        tokens.to_str().unwrap(),
    ]);
    let http = client();
    let token = json!({"node_id": "n1"});
    for base in [
        format!("http://{}:{port}", outside_address()),
        controller.url(""),
    ] {
        let url = format!("{base}/v1/tokens");
        let (status, answer) = send(http.post(&url).json(&token)).await;
        assert_eq!(status, 401, "{answer}");
        let (status, answer) = send(http.post(&url).bearer_auth(VIEWER_TOKEN).json(&token)).await;
        assert_eq!(status, 403, "{answer}");
        let (status, answer) = send(http.post(&url).bearer_auth(ADMIN_TOKEN).json(&token)).await;
        assert_eq!(status, 201, "{answer}");
    }
}

/// Mints a token with the real CLI on the controller's data directory (authenticated by the
/// host: it takes access to the database).
fn cli_token(dir: &std::path::Path, node_id: &str) -> String {
    let output = crate::support::fleetwire()
        .args(["token", "create", "--node-id", node_id, "--ttl", "10m"])
        .arg("--data-dir")
        .arg(dir)
        .arg("--db")
        .arg(dir.join("controller.sqlite3"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_a_plain_controller_minted_are_retired_when_the_store_starts_in_mtls_mode() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let plain = ControllerProcess::start_in(dir, &[]);
    let http = client();
    let (status, issued) =
        post_json(&http, &plain.url("/v1/tokens"), &json!({"node_id": "n1"})).await;
    assert_eq!(status, 201, "{issued}");
    let plain_token = issued["token"].as_str().unwrap().to_string();
    let host_token = cli_token(dir, "n2");
    drop(plain);

    let secure = ControllerProcess::start_secure_in(dir, &[]);
    let log = secure.log();
    assert!(
        log.contains("retired=1")
            && log.contains("retired the unused bootstrap tokens a --plain-http controller minted"),
        "{log}"
    );
    // The plain-minted token enrolls nobody; the host's own still does.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut body = registration("n1", 9, 100);
    body["csr_pem"] = plain_csr(&key, "n1").into();
    let (status, answer) = send(
        secure
            .tls_client()
            .post(secure.url("/v1/nodes/register"))
            .bearer_auth(&plain_token)
            .json(&body),
    )
    .await;
    assert_eq!(status, 401, "{answer}");
    let mut body = registration("n2", 9, 100);
    body["csr_pem"] = plain_csr(&key, "n2").into();
    let (status, answer) = send(
        secure
            .tls_client()
            .post(secure.url("/v1/nodes/register"))
            .bearer_auth(&host_token)
            .json(&body),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
}
