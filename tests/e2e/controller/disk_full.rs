//! The controller's disk fills: on a small tmpfs made for the test, with the store on it and
//! the rest of the space taken by a filler file, every request that must be stored before it
//! is answered fails with `503 store_unavailable` saying why, heartbeats (written behind) are
//! still answered and the controller keeps running, `/readyz` says the store cannot write;
//! once space returns the service resumes by itself, and after a restart everything that was
//! acknowledged is there and SQLite's `integrity_check` is `ok` (docs/reliability/outage.md).
//!
//! Needs root (to mount): skips, saying so, when not root. CI runs as root.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::controller_harness::*;
use fleetwire_types::{CreateVmRequest, NodeId, NodeStatusFilter};
use serde_json::json;

/// A tmpfs of `size` mounted at `at` for the test, unmounted when dropped, even when the test
/// fails (lazily, should a process still hold a file on it).
struct SmallFilesystem {
    at: PathBuf,
}

impl SmallFilesystem {
    fn mount(at: &Path, size: &str) -> SmallFilesystem {
        std::fs::create_dir_all(at).unwrap();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .expect("running mount");
        assert!(
            status.success(),
            "mount -t tmpfs on {} failed",
            at.display()
        );
        SmallFilesystem {
            at: at.to_path_buf(),
        }
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(&self.at).status();
        if !unmounted.is_ok_and(|s| s.success()) {
            let _ = Command::new("umount").arg("-l").arg(&self.at).status();
        }
    }
}

/// Writes `path` until the filesystem has no room left; returns how many bytes it took.
fn fill(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0xa5u8; 64 * 1024];
    let mut written = 0u64;
    let mut size = chunk.len();
    // Whole chunks, then ever smaller ones down to a byte: every last block is taken.
    while size > 0 {
        match file.write(&chunk[..size]) {
            Ok(0) => size /= 2,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error()) => {
                size /= 2
            }
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    let _ = file.sync_all();
    written
}

fn create_request(tenant: &str) -> CreateVmRequest {
    typed(
        &json!({"vm_type": "small", "ram_mb": 512, "vcpu_count": 1, "tenant_id": tenant, "disk_gb": 10}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_what_must_be_stored_and_the_store_resumes_when_space_returns() {
    if !rustix::process::geteuid().is_root() {
        println!(
            "SKIPPED: a_full_disk_refuses_what_must_be_stored… needs root to mount the small \
             filesystem it fills (CI runs as root)"
        );
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let small = SmallFilesystem::mount(&temp.path().join("store"), "6m");
    let dir = small.at.clone();
    let agent = AgentStandIn::start().await;
    let client = client();
    let mut controller = ControllerProcess::start_in(&dir, &[]);
    let api = api_on(&client, &controller);

    // Acknowledged before the disk fills: registrations, heartbeats, placements, a cordon.
    let mut acknowledged: Vec<String> = Vec::new();
    for i in 0..3 {
        let id = format!("before-{i}");
        register_ok(&client, &controller, &registration(&id, agent.port, 500)).await;
        heartbeat_ok(
            &client,
            &controller,
            &ppn_heartbeat(&id, "127.0.0.1", agent.port),
        )
        .await;
        acknowledged.push(id);
    }
    let mut placed = Vec::new();
    for tenant in ["t-a", "t-b"] {
        let vm = api.create_vm(&create_request(tenant)).await.unwrap();
        placed.push(vm.vm_id.as_str().to_string());
    }
    let cordoned: NodeId = "before-2".parse().unwrap();
    api.cordon_node(&cordoned, None).await.unwrap();
    let ledger: u64 = {
        let mut total = 0;
        for id in &acknowledged {
            total += node_record(&client, &controller, id).await["reserved_disk_gb"]
                .as_u64()
                .unwrap();
        }
        total
    };
    assert_eq!(ledger, 20, "two placed VMs of 10 GB");

    // The disk fills.
    let filler = dir.join("filler");
    let took = fill(&filler);
    println!("the filler took {took} bytes");

    // Registrations: each one is stored before it is answered, so once the store's files
    // cannot grow they fail. A few may still fit in space SQLite's files already hold.
    let mut refused = None;
    for i in 0..50 {
        let id = format!("full-{i}");
        let request: fleetwire_types::RegisterNodeRequest =
            typed(&registration(&id, agent.port, 500));
        match api.register_node(&request).await {
            Ok(_) => acknowledged.push(id),
            Err(fleetwire_client::Error::Api { status, error, .. }) => {
                refused = Some((status.as_u16(), *error));
                break;
            }
            Err(e) => panic!("registering {id}: {e}"),
        }
    }
    let (status, error) = refused.expect("a registration on a full disk was refused");
    assert_eq!(status, 503, "{error:?}");
    assert_eq!(error.code.to_string(), "store_unavailable", "{error:?}");
    assert!(
        error.message.as_str().contains("disk is full"),
        "the message says why: {}",
        error.message.as_str()
    );
    println!(
        "registration on a full disk: {status} {}",
        error.message.as_str()
    );
    // A placement is refused before any node starts a VM nobody would know of.
    let spawned = agent.spawned().len();
    match api.create_vm(&create_request("t-full")).await {
        Err(fleetwire_client::Error::Api { status, error, .. }) => {
            assert_eq!(status.as_u16(), 503, "{error:?}");
            assert_eq!(error.code.to_string(), "store_unavailable");
        }
        other => panic!("a placement on a full disk: {other:?}"),
    }
    assert_eq!(agent.spawned().len(), spawned, "no VM was started");
    // A cordon is refused too.
    let node: NodeId = "before-0".parse().unwrap();
    match api.cordon_node(&node, None).await {
        Err(fleetwire_client::Error::Api { status, .. }) => assert_eq!(status.as_u16(), 503),
        other => panic!("a cordon on a full disk: {other:?}"),
    }
    // Heartbeats are written behind: still answered, the node still ready in memory.
    for _ in 0..3 {
        heartbeat_ok(
            &client,
            &controller,
            &ppn_heartbeat("before-0", "127.0.0.1", agent.port),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    assert_eq!(
        node_record(&client, &controller, "before-0").await["status"],
        "ready"
    );
    // The controller runs on, and says its store cannot write.
    assert!(controller.process.child.try_wait().unwrap().is_none());
    let (ready, health) = get_json(&client, &controller.url("/readyz")).await;
    assert_eq!(ready, 503, "{health}");
    assert!(
        health["store"].as_str().unwrap().contains("disk is full"),
        "{health}"
    );

    // Space returns: the service resumes by itself, without a restart.
    std::fs::remove_file(&filler).unwrap();
    eventually(
        "/readyz to answer 200 again",
        Duration::from_secs(20),
        || async { (get_json(&client, &controller.url("/readyz")).await.0 == 200).then_some(()) },
    )
    .await;
    for i in 0..3 {
        let id = format!("after-{i}");
        register_ok(&client, &controller, &registration(&id, agent.port, 500)).await;
        acknowledged.push(id);
    }
    let vm = api.create_vm(&create_request("t-after")).await.unwrap();
    placed.push(vm.vm_id.as_str().to_string());

    // Nothing stored is damaged, and everything acknowledged survives a kill -9.
    controller.kill_9();
    let db = dir.join("controller.sqlite3");
    let check: String = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let controller = ControllerProcess::start_in(&dir, &[]);
    let listed = node_ids(&client, &controller, Some(NodeStatusFilter::All)).await;
    for id in &acknowledged {
        assert!(
            listed.contains(id),
            "{id} was acknowledged but is gone: {listed:?}"
        );
    }
    let api = api_on(&client, &controller);
    let mut vm_ids: Vec<String> = api
        .list_vms(None)
        .await
        .unwrap()
        .iter()
        .map(|v| v.vm_id.as_str().to_string())
        .collect();
    vm_ids.sort();
    placed.sort();
    assert_eq!(vm_ids, placed);
    let mut reserved = 0;
    for id in &listed {
        reserved += node_record(&client, &controller, id).await["reserved_disk_gb"]
            .as_u64()
            .unwrap();
    }
    assert_eq!(
        reserved,
        10 * placed.len() as u64,
        "the ledger is the placed VMs' disks"
    );
    let cordon = node_record(&client, &controller, "before-2").await;
    assert!(cordon["cordoned_at"].is_string(), "{cordon}");
    println!(
        "acknowledged {} nodes and {} VMs, all back after the restart",
        acknowledged.len(),
        placed.len()
    );
    drop(controller);
    drop(small);
}
