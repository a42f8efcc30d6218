//! `fleetwire controller --db postgres://…`: the real binary on the real PostgreSQL of
//! `.ci/run` (a schema of its own per test, `fleetwire::store::postgres::test_schema`). What
//! was acknowledged survives `kill -9`, write-behind contact times reach the database within
//! the one-second bound, and a bad or unreachable `--db` is refused with a clear message
//! (docs/controller.md, "The database").

use std::time::{Duration, Instant};

use crate::support::controller_harness::*;
use crate::support::fleetwire;
use fleetwire::store::postgres::connect_client;
use fleetwire::store::postgres::test_schema::test_schema;
use fleetwire_types::{CreateVmRequest, NodeId, NodeStatusFilter, StateMessage};
use serde_json::json;

/// The newest contact-log batch in the schema `url` names (0: none), read on a thread of its
/// own (the sync client runs a runtime, which cannot run inside the test's).
async fn newest_batch(url: &str) -> i64 {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let mut client = connect_client(&url).unwrap();
        client
            .query_one("SELECT coalesce(max(batch), 0) FROM contact_log", &[])
            .unwrap()
            .get(0)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_state_survives_kill_9_and_contacts_reach_postgres_within_a_second() {
    let Some(schema) = test_schema() else { return };
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentStandIn::start().await;
    let client = client();
    let args = ["--db", schema.url.as_str()];
    let mut controller = ControllerProcess::start_in(dir.path(), &args);

    register_ok(
        &client,
        &controller,
        &registration("reg-1", agent.port, 500),
    )
    .await;
    heartbeat_ok(
        &client,
        &controller,
        &ppn_heartbeat("reg-1", "127.0.0.1", agent.port),
    )
    .await;
    let api = api_on(&client, &controller);
    let request: CreateVmRequest = typed(
        &json!({"vm_type": "small", "ram_mb": 1024, "vcpu_count": 1, "tenant_id": "t-a", "disk_gb": 40}),
    );
    let placed = api.create_vm(&request).await.unwrap();
    for id in ["ppn-1", "ppn-2"] {
        heartbeat_ok(&client, &controller, &ppn_heartbeat(id, "127.0.0.1", 9204)).await;
    }
    let reason: StateMessage = "maintenance".parse().unwrap();
    let ppn_2: NodeId = "ppn-2".parse().unwrap();
    api.cordon_node(&ppn_2, Some(&reason)).await.unwrap();

    // A heartbeat that changes only the contact time: written behind, in the database within
    // a second (one contact-log row per batch).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let logged_before = newest_batch(&schema.url).await;
    let sent = Instant::now();
    heartbeat_ok(
        &client,
        &controller,
        &ppn_heartbeat("ppn-1", "127.0.0.1", 9204),
    )
    .await;
    let mut took = None;
    while sent.elapsed() < Duration::from_secs(3) {
        if newest_batch(&schema.url).await > logged_before {
            took = Some(sent.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = took.expect("the contact time never reached PostgreSQL");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    eprintln!("write-behind contact time in PostgreSQL after {took:?}");
    let before = node_record(&client, &controller, "ppn-1").await;

    controller.kill_9();
    let controller = ControllerProcess::start_in(dir.path(), &args);

    let api = api_on(&client, &controller);
    let all = api.list_nodes(Some(&NodeStatusFilter::All)).await.unwrap();
    let listed: Vec<&str> = all.iter().map(|n| n.node_id.as_str()).collect();
    assert_eq!(listed, ["ppn-1", "ppn-2", "reg-1"]);
    let after = node_record(&client, &controller, "ppn-1").await;
    assert_eq!(after["last_heartbeat"], before["last_heartbeat"]);
    let cordoned = node_record(&client, &controller, "ppn-2").await;
    assert_eq!(cordoned["cordon_reason"], "maintenance");
    let node = node_record(&client, &controller, "reg-1").await;
    assert_eq!(node["reserved_disk_gb"], 40, "the ledger survived: {node}");
    assert_eq!(node["vm_count"], 1);
    let vm = api.get_vm(&placed.vm_id).await.unwrap();
    assert_eq!(vm.node_id.as_ref().map(|n| n.as_str()), Some("reg-1"));
    // The schema is the one the migrations made, at this build's version.
    let url = schema.url.clone();
    let version: i32 = tokio::task::spawn_blocking(move || {
        connect_client(&url)
            .unwrap()
            .query_one("SELECT max(version) FROM fleetwire_schema", &[])
            .unwrap()
            .get(0)
    })
    .await
    .unwrap();
    assert_eq!(version as u32, fleetwire::store::sqlite::SCHEMA_VERSION);
}

/// `fleetwire controller --db DB` (plain HTTP, a scratch data directory) run to its exit.
fn controller_exit_on(db: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--plain-http",
        "--listen",
        "127.0.0.1:0",
        "--db",
        db,
        "--data-dir",
    ];
    let mut args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    args.push(dir.path().as_os_str());
    controller_exit(&args)
}

#[test]
fn a_bad_or_unreachable_database_is_refused_with_a_clear_message() {
    let (code, stderr) = controller_exit_on("mysql://fw:hunter2@127.0.0.1/fleet");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("mysql://"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");

    let (code, stderr) =
        controller_exit_on("postgres://fw:hunter2@127.0.0.1/fleet?sslmode=sometimes");
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("sslmode=sometimes"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");

    // Port 1 on loopback: nothing listens there.
    let (code, stderr) = controller_exit_on("postgresql://fw:hunter2@127.0.0.1:1/fleet");
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("cannot connect to PostgreSQL at 127.0.0.1:1"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// `fleetwire token ARGS --db URL`: (code, stdout, stderr).
fn token(args: &[&str], db: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let output = fleetwire()
        .arg("token")
        .args(args)
        .args(["--db", db])
        .env("FLEETWIRE_DATA_DIR", dir.path())
        .env_remove("FLEETWIRE_DB")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_token_commands_work_on_the_postgres_database() {
    let Some(schema) = test_schema() else { return };
    // Before any controller made the table, the command makes it (under the schema lock).
    let (code, stdout, stderr) = token(&["create", "--node-id", "gpu-07"], &schema.url);
    assert_eq!(code, 0, "{stderr}");
    let secret = stdout.trim();
    let token_id = secret.split('.').next().unwrap();
    let (code, listed, stderr) = token(&["list"], &schema.url);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        listed.contains(token_id) && listed.contains("gpu-07") && listed.contains("unused"),
        "{listed}"
    );
    assert!(!listed.contains(secret), "{listed}");
    let (code, _, stderr) = token(&["delete", token_id], &schema.url);
    assert_eq!(code, 0, "{stderr}");
    let (_, listed, _) = token(&["list"], &schema.url);
    assert!(!listed.contains(token_id), "{listed}");
    // A URL clap cannot take is refused without echoing its password.
    let (code, _, stderr) = token(&["list"], "mysql://fw:hunter2@127.0.0.1/x");
    assert_eq!(code, 2, "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
