//! The backup and restore procedures of docs/operations.md, run as written for each backend
//! (SQLite's `.backup`, PostgreSQL's `pg_dump` and `pg_restore`): an online backup of a
//! serving controller's store, a later change that the backup must not hold, and a new
//! controller started on the restored copy that serves everything the backup held — nodes,
//! VMs, the disk ledger and cordons.

use std::path::Path;
use std::process::Command;

use crate::support::controller_harness::*;
use crate::support::have_program;
use fleetwire_types::{CreateVmRequest, NodeId, NodeStatusFilter, StateMessage};
use serde_json::json;

/// Registers `reg-1` (its agent the stand-in), places a VM on it, enrolls `ppn-1` by
/// heartbeat and cordons it: what a backup must carry.
async fn a_small_fleet(controller: &ControllerProcess, agent: &AgentStandIn) -> String {
    let client = client();
    register_ok(&client, controller, &registration("reg-1", agent.port, 500)).await;
    heartbeat_ok(
        &client,
        controller,
        &ppn_heartbeat("reg-1", "127.0.0.1", agent.port),
    )
    .await;
    heartbeat_ok(
        &client,
        controller,
        &ppn_heartbeat("ppn-1", "127.0.0.1", 9204),
    )
    .await;
    let api = api_on(&client, controller);
    // Cordoned first, so the VM goes to reg-1 (ppn-1 runs no agent).
    let reason: StateMessage = "maintenance".parse().unwrap();
    let ppn_1: NodeId = "ppn-1".parse().unwrap();
    api.cordon_node(&ppn_1, Some(&reason)).await.unwrap();
    let request: CreateVmRequest = typed(
        &json!({"vm_type": "small", "ram_mb": 1024, "vcpu_count": 1, "tenant_id": "t-a", "disk_gb": 40}),
    );
    let vm = api.create_vm(&request).await.unwrap();
    vm.vm_id.as_str().to_string()
}

/// What the restored controller must serve: the fleet of [`a_small_fleet`], without the node
/// enrolled after the backup.
async fn serves_the_backed_up_fleet(controller: &ControllerProcess, vm_id: &str) {
    let client = client();
    let api = api_on(&client, controller);
    let all = api.list_nodes(Some(&NodeStatusFilter::All)).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|n| n.node_id.as_str()).collect();
    assert_eq!(
        ids,
        ["ppn-1", "reg-1"],
        "the node enrolled after the backup is not in it"
    );
    let node = node_record(&client, controller, "reg-1").await;
    assert_eq!(node["reserved_disk_gb"], 40, "the ledger: {node}");
    assert_eq!(node["vm_count"], 1);
    let cordoned = node_record(&client, controller, "ppn-1").await;
    assert_eq!(cordoned["cordon_reason"], "maintenance");
    let vm = api.get_vm(&vm_id.parse().unwrap()).await.unwrap();
    assert_eq!(vm.node_id.as_ref().map(|n| n.as_str()), Some("reg-1"));
}

fn run(command: &mut Command) {
    let shown = format!("{command:?}");
    let out = command.output().unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_backed_up_online_restores_into_a_new_controller() {
    if !have_program("sqlite3", "apt-get install -y sqlite3 (Debian)") {
        return;
    }
    let agent = AgentStandIn::start().await;
    let live = tempfile::tempdir().unwrap();
    let mut controller = ControllerProcess::start_in(live.path(), &[]);
    let vm_id = a_small_fleet(&controller, &agent).await;

    // docs/operations.md, "Backup and restore": SQLite's online backup, while it serves.
    let backup = tempfile::tempdir().unwrap();
    let copy = backup.path().join("controller.sqlite3");
    run(Command::new("sqlite3")
        .arg(live.path().join("controller.sqlite3"))
        .arg(format!(".backup '{}'", copy.display())));
    // A change after the backup: not in it.
    heartbeat_ok(
        &client(),
        &controller,
        &ppn_heartbeat("late-1", "127.0.0.1", 9204),
    )
    .await;
    controller.kill_9();

    // Restore: the copy becomes a data directory's store (nothing beside it: no -wal file).
    let restored = tempfile::tempdir().unwrap();
    std::fs::copy(&copy, restored.path().join("controller.sqlite3")).unwrap();
    assert_only_the_store_file(restored.path());
    let controller = ControllerProcess::start_in(restored.path(), &[]);
    serves_the_backed_up_fleet(&controller, &vm_id).await;
}

fn assert_only_the_store_file(dir: &Path) {
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["controller.sqlite3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_dumped_online_restores_into_a_new_database() {
    use fleetwire::store::postgres::test_schema::{test_schema, DEFAULT_URL};
    if ["pg_dump", "pg_restore", "psql"]
        .iter()
        .any(|program| !have_program(program, "apt-get install -y postgresql-client (Debian)"))
    {
        return;
    }
    let Some(schema) = test_schema() else { return };
    let server = std::env::var("FLEETWIRE_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_URL.into());
    let agent = AgentStandIn::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut controller = ControllerProcess::start_in(dir.path(), &["--db", schema.url.as_str()]);
    let vm_id = a_small_fleet(&controller, &agent).await;

    // docs/operations.md, "Backup and restore": pg_dump while the controller serves.
    let dump = dir.path().join("fleet.dump");
    run(Command::new("pg_dump")
        .args(["--format=custom", "--schema", &schema.name, "--file"])
        .arg(&dump)
        .arg(&server));
    heartbeat_ok(
        &client(),
        &controller,
        &ppn_heartbeat("late-1", "127.0.0.1", 9204),
    )
    .await;
    controller.kill_9();

    // Restore into an empty database of its own, and a controller there.
    let restored = RestoredDatabase::create(&server);
    run(Command::new("pg_restore")
        .arg("--dbname")
        .arg(&restored.url)
        .arg(&dump));
    let url = format!("{}?options=-csearch_path%3D{}", restored.url, schema.name);
    let elsewhere = tempfile::tempdir().unwrap();
    let controller = ControllerProcess::start_in(elsewhere.path(), &["--db", url.as_str()]);
    serves_the_backed_up_fleet(&controller, &vm_id).await;
}

/// A new, empty database on the test server, dropped at the end.
struct RestoredDatabase {
    admin: String,
    name: String,
    url: String,
}

impl RestoredDatabase {
    fn create(server: &str) -> RestoredDatabase {
        let name = format!("fw_restore_{:016x}", rand::random::<u64>());
        // The server's URL with the database part replaced.
        let base = server
            .split_once('?')
            .map_or(server, |(base, _)| base)
            .rsplit_once('/')
            .map(|(host, _)| host.to_string())
            .expect("a URL with a database");
        let admin = server.to_string();
        run(Command::new("psql").arg(&admin).args([
            "-q",
            "-c",
            &format!("CREATE DATABASE {name}"),
        ]));
        RestoredDatabase {
            url: format!("{base}/{name}"),
            admin,
            name,
        }
    }
}

impl Drop for RestoredDatabase {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .arg(&self.admin)
            .args([
                "-q",
                "-c",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            ])
            .output();
    }
}
