//! A store file that is damaged, another program's, or a newer build's: `fleetwire controller`
//! refuses to start, says which file and what is wrong with it, and leaves it byte for byte
//! as it was (docs/reliability/outage.md).

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::controller_harness::*;
use crate::support::{fleetwire, free_port};
use rusqlite::Connection;

/// A store written by a real controller: five nodes enrolled by heartbeat, one cordoned, the
/// process stopped the clean way and the WAL checkpointed into the file, so the file alone is
/// the store.
async fn real_store(dir: &Path) -> Vec<u8> {
    let client = client();
    let mut controller = ControllerProcess::start_in(dir, &[]);
    for i in 0..5 {
        let id = format!("node-{i}");
        heartbeat_ok(&client, &controller, &ppn_heartbeat(&id, "127.0.0.1", 9204)).await;
    }
    let node: fleetwire_types::NodeId = "node-1".parse().unwrap();
    api_on(&client, &controller)
        .cordon_node(&node, None)
        .await
        .unwrap();
    // The contact times reach the store's log within a flush interval.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    crate::support::send_signal(controller.process.pid(), rustix::process::Signal::TERM);
    let _ = controller.process.child.wait();
    // The last connection to close checkpoints the WAL and removes it.
    drop(Connection::open(db(dir)).unwrap());
    assert!(!sidecar(dir, "-wal").exists());
    std::fs::read(db(dir)).unwrap()
}

fn db(dir: &Path) -> PathBuf {
    dir.join("controller.sqlite3")
}

fn sidecar(dir: &Path, suffix: &str) -> PathBuf {
    dir.join(format!("controller.sqlite3{suffix}"))
}

/// Puts `bytes` in place as the store (and nothing beside it).
fn place(dir: &Path, bytes: &[u8]) {
    for suffix in ["-wal", "-shm", "-journal"] {
        let _ = std::fs::remove_file(sidecar(dir, suffix));
    }
    std::fs::write(db(dir), bytes).unwrap();
}

/// Starts a controller on the store in `dir` and waits for it to exit: it must not serve.
fn refused_start(dir: &Path) -> Output {
    let mut child = fleetwire()
        .arg("controller")
        .arg("--plain-http")
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--db")
        .arg(db(dir))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "the controller started on a store it should refuse:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// The refusal of the store `bytes`: the controller exits with an error that names the file
/// and says `problem`, and the file is unchanged, with no journal left beside it.
fn assert_refused(dir: &Path, case: &str, bytes: &[u8], problem: &str) -> String {
    place(dir, bytes);
    let output = refused_start(dir);
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(!output.status.success(), "{case}: exited {}", output.status);
    let path = db(dir).display().to_string();
    assert!(
        stderr.contains(&path),
        "{case}: the error names the file {path}:\n{stderr}"
    );
    assert!(
        stderr.contains(problem),
        "{case}: the error says {problem:?}:\n{stderr}"
    );
    assert!(
        std::fs::read(db(dir)).unwrap() == bytes,
        "{case}: the refused file was changed"
    );
    assert!(
        !sidecar(dir, "-journal").exists(),
        "{case}: a rollback journal was left"
    );
    // A WAL beside a refused file would be applied to it by the next open: none may hold
    // anything.
    let wal = std::fs::metadata(sidecar(dir, "-wal")).map_or(0, |m| m.len());
    assert_eq!(wal, 0, "{case}: {wal} bytes of WAL beside the refused file");
    stderr
}

/// Overwrites `at..at + with.len()` of a copy of `bytes`.
fn patched(bytes: &[u8], at: usize, with: &[u8]) -> Vec<u8> {
    let mut copy = bytes.to_vec();
    copy[at..at + with.len()].copy_from_slice(with);
    copy
}

/// The bytes of a store made from `good` by `change` on a connection of the test's own.
fn edited(dir: &Path, good: &[u8], change: &str) -> Vec<u8> {
    place(dir, good);
    let conn = Connection::open(db(dir)).unwrap();
    conn.execute_batch(change).unwrap();
    drop(conn);
    std::fs::read(db(dir)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_foreign_or_newer_store_is_refused_by_name_and_left_unchanged() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let good = real_store(dir).await;
    let page = u16::from_be_bytes([good[16], good[17]]) as usize;
    let pages = good.len() / page;
    assert!(pages >= 4, "a store of {pages} pages");

    // Truncated: the last pages gone (a copy cut short).
    let truncated = &good[..good.len() - page - page / 2];
    let said = assert_refused(dir, "truncated", truncated, "it is damaged");
    println!("truncated: {said}");
    // Not a database: the header and first page overwritten.
    let garbage: Vec<u8> = (0..good.len()).map(|i| (i * 7919 % 251) as u8).collect();
    let said = assert_refused(dir, "garbage", &garbage, "it is not a SQLite database");
    println!("garbage: {said}");
    // Another program's SQLite database (rollback-journal mode, as most are: opening it in
    // WAL mode would rewrite its header).
    let _ = std::fs::remove_file(db(dir));
    let other = Connection::open(db(dir)).unwrap();
    other
        .execute_batch("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO photos (name) VALUES ('cat');")
        .unwrap();
    drop(other);
    let foreign = std::fs::read(db(dir)).unwrap();
    let said = assert_refused(
        dir,
        "foreign",
        &foreign,
        "it is a SQLite database of something else (tables: photos; schema version 0)",
    );
    println!("foreign: {said}");
    // A page in the middle damaged: its b-tree header overwritten.
    let middle = pages / 2 * page;
    let damaged = patched(&good, middle, &[0x0d, 0xff, 0xff, 0xff, 0xff, 0, 0, 0]);
    let said = assert_refused(dir, "damaged page", &damaged, "it is damaged");
    println!("damaged page: {said}");
    // From a newer build: its schema version past this one's.
    let version = u32::from_be_bytes([good[60], good[61], good[62], good[63]]);
    let newer = patched(&good, 60, &(version + 1).to_be_bytes());
    let said = assert_refused(
        dir,
        "newer",
        &newer,
        &format!(
            "its schema version {} is newer than this build's {version}",
            version + 1
        ),
    );
    println!("newer: {said}");
    // Rows a sound file holds that this build cannot read: the start fails naming the row.
    let log = edited(
        dir,
        &good,
        "INSERT INTO contact_log (contacts) VALUES (x'0107')",
    );
    let said = assert_refused(dir, "row: contact log", &log, "contact log batch");
    println!("contact log: {said}");
    let record = edited(
        dir,
        &good,
        "UPDATE nodes SET record = '{\"node_id\": 7}' WHERE node_id = 'node-3'",
    );
    let said = assert_refused(
        dir,
        "row: node record",
        &record,
        "the stored row of node \"node-3\" is not readable",
    );
    println!("node record: {said}");

    // The store itself still opens, with everything in it.
    place(dir, &good);
    let controller = ControllerProcess::start_in(dir, &[]);
    let ids = node_ids(
        &client(),
        &controller,
        Some(fleetwire_types::NodeStatusFilter::All),
    )
    .await;
    assert_eq!(ids, ["node-0", "node-1", "node-2", "node-3", "node-4"]);
}
