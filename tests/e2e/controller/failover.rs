//! Two real `fleetwire controller` processes on one PostgreSQL schema (docs/controller.md,
//! "Several controllers"): one leads, the other stands by and redirects; `kill -9` of the
//! leader while stand-in PPN agents heartbeat and placements arrive through the standby; the
//! standby leads within a stated bound, nothing acknowledged is lost (machines and ledgers
//! included), placements resume, no node becomes unreachable, and the killed one,
//! restarted, stands by. Skipped with a message when PostgreSQL is unreachable (fails under
//! CI=true: `store::postgres::test_schema`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::controller_harness::{
    client, get_json, post_json, ppn_heartbeat, registration, AgentStandIn,
};
use crate::support::{fleetwire, free_port, Running};
use fleetwire::store::postgres::test_schema::{test_schema, TestSchema};
use serde_json::Value;

/// The bound the test asserts on kill → the standby's /readyz says leader (target under 10 s).
const TAKEOVER_BOUND: Duration = Duration::from_secs(10);
const NODES: usize = 20;

/// A plain-HTTP controller on `url`, advertising its own address, with a short lease.
fn controller(db: &str, port: u16, dir: &std::path::Path) -> Running {
    let log = std::fs::File::create(dir.join(format!("controller-{port}.log"))).unwrap();
    Running::spawn(
        fleetwire()
            .arg("controller")
            .arg("--plain-http")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--advertise-url")
            .arg(format!("http://127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(dir)
            .arg("--db")
            .arg(db)
            .arg("--lease-ttl")
            .arg("3s")
            .arg("--stale-after")
            .arg("8s")
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(log),
    )
}

fn url(port: u16, path: &str) -> String {
    format!("http://127.0.0.1:{port}{path}")
}

/// `/readyz` of the controller on `port`: (status, role, leader_url), or `None` while it does
/// not answer.
async fn readiness(http: &reqwest::Client, port: u16) -> Option<(u16, String, Option<String>)> {
    let answer = http.get(url(port, "/readyz")).send().await.ok()?;
    let status = answer.status().as_u16();
    let body: Value = answer.json().await.ok()?;
    Some((
        status,
        body["role"].as_str()?.to_string(),
        body["leader_url"].as_str().map(str::to_string),
    ))
}

async fn until_role(http: &reqwest::Client, port: u16, role: &str, within: Duration) -> Duration {
    let began = Instant::now();
    loop {
        if let Some((status, found, _)) = readiness(http, port).await {
            if found == role && (status == 200) == (role == "leader") {
                return began.elapsed();
            }
        }
        assert!(
            began.elapsed() < within,
            "the controller on {port} was not {role} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The leader a standby names at /readyz, once its lease thread has read the row.
async fn named_leader(http: &reqwest::Client, port: u16) -> String {
    let began = Instant::now();
    loop {
        if let Some((503, role, Some(leader))) = readiness(http, port).await {
            assert_eq!(role, "standby");
            return leader;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "no leader named by {port}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two controllers on a fresh schema: `a` leads, `b` stands by naming it.
struct Pair {
    schema: TestSchema,
    dir: tempfile::TempDir,
    a_port: u16,
    b_port: u16,
    a: Running,
    b: Running,
}

/// A [`Pair`], or `None` when PostgreSQL is unreachable (outside CI: `test_schema`).
async fn leader_and_standby() -> Option<Pair> {
    // On a thread of its own: the sync client cannot start inside the test's runtime.
    let schema = std::thread::spawn(test_schema).join().unwrap()?;
    let dir = tempfile::tempdir().unwrap();
    let (a_port, b_port) = (free_port(), free_port());
    let http = client();
    let a = controller(&schema.url, a_port, dir.path());
    until_role(&http, a_port, "leader", Duration::from_secs(20)).await;
    let b = controller(&schema.url, b_port, dir.path());
    assert_eq!(named_leader(&http, b_port).await, url(a_port, ""));
    Some(Pair {
        schema,
        dir,
        a_port,
        b_port,
        a,
        b,
    })
}

/// Registers each of `ids` at the controller on `port` as a node of 100 GB whose agent is on
/// `agent_port`.
async fn register_100_gb(http: &reqwest::Client, port: u16, ids: &[&str], agent_port: u16) {
    for id in ids {
        let (status, body) = post_json(
            http,
            &url(port, "/v1/nodes/register"),
            &registration(id, agent_port, 100),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
}

/// POSTs `body` to `url` within `timeout_s`: the answer when it is 200, `None` for any other
/// status or a failed connection (a takeover in progress).
async fn taken_post(
    http: &reqwest::Client,
    url: String,
    body: &Value,
    timeout_s: u64,
) -> Option<reqwest::Response> {
    let answer = http
        .post(url)
        .json(body)
        .timeout(Duration::from_secs(timeout_s))
        .send()
        .await
        .ok()?;
    (answer.status() == 200).then_some(answer)
}

/// The staleness sweep's pass count in the `/metrics` of the controller on `port`.
async fn sweeps_of(http: &reqwest::Client, port: u16) -> u64 {
    let answer = http.get(url(port, "/metrics")).send().await.unwrap();
    let metrics = answer.text().await.unwrap();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("fleetwire_controller_staleness_sweeps_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the sweep counter is in /metrics")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_standby_takes_over_a_killed_leader_without_losing_or_flapping_a_node() {
    let Some(mut pair) = leader_and_standby().await else {
        return;
    };
    let (a_port, b_port) = (pair.a_port, pair.b_port);
    let http = client();
    // Every node's spawns go to one stand-in agent; two are registered nodes of 100 GB (room
    // for 80 VMs of 5 GB at the default ratio), whose disk ledgers are checked.
    let agent = AgentStandIn::start().await;
    const PLACERS: [&str; 2] = ["placer-a", "placer-b"];
    register_100_gb(&http, a_port, &PLACERS, agent.port).await;
    let mut ids: Vec<String> = (0..NODES)
        .map(|i| format!("failover-node-{i:02}"))
        .collect();
    ids.extend(PLACERS.iter().map(|id| id.to_string()));
    let all = ids.len();

    // Stand-in PPN agents heartbeat every 500 ms through the standby: its 307 takes them to
    // the leader (reqwest repeats the POST with its body).
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let taken = Arc::new(AtomicU64::new(0));
    let mut loops = Vec::new();
    for id in ids {
        let (stop, failed, taken, http) =
            (stop.clone(), failed.clone(), taken.clone(), http.clone());
        let spawn_port = agent.port;
        loops.push(tokio::spawn(async move {
            let body = ppn_heartbeat(&id, "127.0.0.1", spawn_port);
            while !stop.load(Ordering::Relaxed) {
                match taken_post(&http, url(b_port, "/v1/nodes/heartbeat"), &body, 2).await {
                    Some(_) => taken.fetch_add(1, Ordering::Relaxed),
                    None => failed.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }));
    }
    let began = Instant::now();
    loop {
        let (status, nodes) = get_json(&http, &url(a_port, "/v1/nodes")).await;
        if status == 200 && nodes.as_array().unwrap().len() == all {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "nodes did not enroll: {nodes}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "heartbeats through the standby failed"
    );
    // An acknowledged cordon, sent to the standby and redirected.
    let (status, cordoned) = post_json(
        &http,
        &url(b_port, "/v1/nodes/failover-node-03/cordon"),
        &serde_json::json!({"reason": "before the failover"}),
    )
    .await;
    assert_eq!(status, 200, "{cordoned}");
    // Only the leader sweeps.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sweeps_of(&http, b_port).await, 0, "a standby ran the sweep");
    assert!(sweeps_of(&http, a_port).await > 0, "the leader never swept");

    // Placements through the standby, one every 400 ms, from 1.5 s before the kill to 2 s after
    // the takeover: the ids of those answered 200 (acknowledged) and when each was answered.
    // (Checked before --stale-after has passed since the first: the stand-in heartbeats report
    // no VMs, and a placed VM a heartbeat has not reported by then is dropped.)
    let stop_placing = Arc::new(AtomicBool::new(false));
    let placements = {
        let (stop, http) = (stop_placing.clone(), http.clone());
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            let body = serde_json::json!({"vm_type": "small", "ram_mb": 256, "vcpu_count": 1, "disk_gb": 5});
            while !stop.load(Ordering::Relaxed) {
                // Refused connections (redirected to the killed leader) and 503s are not
                // acknowledged; only a 200 is.
                if let Some(answer) = taken_post(&http, url(b_port, "/v1/vms"), &body, 5).await {
                    let vm: Value = answer.json().await.unwrap();
                    let id = vm["vm_id"].as_str().unwrap().to_string();
                    acknowledged.push((id, Instant::now()));
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
            acknowledged
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let killed = Instant::now();
    pair.a.kill();
    let takeover = until_role(&http, b_port, "leader", TAKEOVER_BOUND).await;
    eprintln!("MEASURED: kill -9 → the standby's /readyz says leader in {takeover:?}");
    let log =
        std::fs::read_to_string(pair.dir.path().join(format!("controller-{b_port}.log"))).unwrap();
    if let Some(line) = log.lines().find(|l| l.contains("LEADING")) {
        eprintln!("MEASURED: {line}");
    }

    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_placing.store(true, Ordering::Relaxed);
    // Every acknowledged placement is on the new leader, placements resumed after the
    // takeover, and each node's disk ledger is the sum of its machines' footprints.
    let acknowledged = placements.await.unwrap();
    let (status, vms) = get_json(&http, &url(b_port, "/v1/vms")).await;
    assert_eq!(status, 200, "{vms}");
    let vms = vms.as_array().unwrap();
    for (vm_id, _) in &acknowledged {
        assert!(
            vms.iter().any(|vm| vm["vm_id"] == vm_id.as_str()),
            "the acknowledged placement {vm_id} was lost"
        );
    }
    let before = acknowledged.iter().filter(|(_, at)| *at < killed).count();
    let after_takeover = acknowledged
        .iter()
        .filter(|(_, at)| *at > killed + takeover)
        .count();
    assert!(
        before > 0 && after_takeover > 0,
        "placements before the kill {before}, after the takeover {after_takeover}"
    );
    let (_, nodes) = get_json(&http, &url(b_port, "/v1/nodes?status=all")).await;
    for node in nodes.as_array().unwrap() {
        let on_node = vms
            .iter()
            .filter(|vm| vm["node_id"] == node["node_id"])
            .count() as u64;
        assert_eq!(node["vm_count"], on_node, "{node}");
        if PLACERS.contains(&node["node_id"].as_str().unwrap()) {
            assert_eq!(node["reserved_disk_gb"], 5 * on_node, "{node}");
        }
    }
    eprintln!(
        "placements acknowledged {} ({before} before the kill, {after_takeover} after the takeover), {} machines on the new leader",
        acknowledged.len(),
        vms.len()
    );

    // For longer than --stale-after: every node stays, none is ever unreachable, the cordon
    // holds, heartbeats are taken by the new leader.
    let taken_at_takeover = taken.load(Ordering::Relaxed);
    while killed.elapsed() < Duration::from_secs(12) {
        let (status, nodes) = get_json(&http, &url(b_port, "/v1/nodes")).await;
        assert_eq!(status, 200, "{nodes}");
        let nodes = nodes.as_array().unwrap();
        assert_eq!(nodes.len(), all, "a node was lost: {nodes:?}");
        for node in nodes {
            assert_ne!(node["status"], "unreachable", "a node flapped: {node}");
            if node["node_id"] == "failover-node-03" {
                assert!(
                    node["cordoned_at"].is_string(),
                    "the acknowledged cordon was lost: {node}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(taken.load(Ordering::Relaxed) > taken_at_takeover + all as u64);
    assert!(
        sweeps_of(&http, b_port).await > 0,
        "the new leader does not sweep"
    );

    // The killed one, restarted, stands by and points at the new leader.
    pair.a = controller(&pair.schema.url, a_port, pair.dir.path());
    until_role(&http, a_port, "standby", Duration::from_secs(20)).await;
    assert_eq!(named_leader(&http, a_port).await, url(b_port, ""));
    stop.store(true, Ordering::Relaxed);
    for task in loops {
        task.await.unwrap();
    }
    eprintln!(
        "heartbeats taken {}, failed {} (during the takeover)",
        taken.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    pair.a.kill();
    pair.b.kill();
}

/// A paused leader (SIGSTOP past its lease, then SIGCONT): the standby takes over by expiry
/// (the paused one keeps its connection and advisory lock), and the resumed one finds its
/// renewal refused, steps down and redirects to the new leader; its writer's writes were
/// fenced meanwhile (the fence itself is `store::postgres`'s, tested there).
/// Every operation of the API document but the health routes and `/metrics`, sent to the
/// standby without following redirects: a `307` to the same path and query at the leader, as
/// the document declares for each (with its `Location` header).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_standby_redirects_every_operation_as_the_api_document_declares() {
    let Some(pair) = leader_and_standby().await else {
        return;
    };
    let document: Value = serde_json::from_str(
        &std::fs::read_to_string(
            crate::support::workspace().join("schemas/fleet-api.openapi.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let not_following = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut redirected = 0;
    for (path, operations) in document["paths"].as_object().unwrap() {
        if ["/healthz", "/readyz", "/metrics"].contains(&path.as_str()) {
            continue;
        }
        for (method, operation) in operations.as_object().unwrap() {
            let concrete = path
                .replace("{node_id}", "node-1")
                .replace("{vm_id}", "vm-1");
            let target = format!("{concrete}?probe=1");
            let request = not_following.request(
                method.to_uppercase().parse().unwrap(),
                url(pair.b_port, &target),
            );
            let answer = request.body("{}").send().await.unwrap();
            let id = operation["operationId"].as_str().unwrap();
            assert_eq!(answer.status().as_u16(), 307, "{id}");
            assert_eq!(
                answer.headers()["location"].to_str().unwrap(),
                url(pair.a_port, &target),
                "{id}"
            );
            let declared = &operation["responses"]["307"];
            assert!(
                declared["headers"]["Location"].is_object(),
                "{id}: the document does not declare the standby's 307 with its Location"
            );
            redirected += 1;
        }
    }
    assert!(redirected >= 14, "only {redirected} operations");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_leader_loses_the_lease_and_steps_down_when_it_resumes() {
    let Some(mut pair) = leader_and_standby().await else {
        return;
    };
    let (a_port, b_port) = (pair.a_port, pair.b_port);
    let http = client();
    let pid = pair.a.child.id().to_string();
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([name, &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill {name} {pid}");
    };
    signal("-STOP");
    let paused = Instant::now();
    // No fast path: the lease (3 s) must run out first.
    let takeover = until_role(&http, b_port, "leader", TAKEOVER_BOUND).await;
    eprintln!("MEASURED: SIGSTOP → the standby leads in {takeover:?} (lease 3 s)");
    assert!(
        paused.elapsed() >= Duration::from_secs(2),
        "the standby took over a live leader's unexpired lease after {:?}",
        paused.elapsed()
    );
    signal("-CONT");
    until_role(&http, a_port, "standby", Duration::from_secs(10)).await;
    assert_eq!(named_leader(&http, a_port).await, url(b_port, ""));
    let log =
        std::fs::read_to_string(pair.dir.path().join(format!("controller-{a_port}.log"))).unwrap();
    assert!(log.contains("LEADERSHIP LOST"), "{log}");
    assert!(log.contains("STEPPED DOWN"), "{log}");
    // A write sent to the old leader now reaches the new one.
    let (status, node) = post_json(
        &http,
        &url(a_port, "/v1/nodes/heartbeat"),
        &ppn_heartbeat("paused-node", "127.0.0.1", 9),
    )
    .await;
    assert_eq!(status, 200, "{node}");
    let (status, nodes) = get_json(&http, &url(b_port, "/v1/nodes")).await;
    assert_eq!(status, 200);
    assert_eq!(nodes.as_array().unwrap().len(), 1, "{nodes}");
    pair.a.kill();
    pair.b.kill();
}

/// Placements sent to both controllers at once (the standby's are redirected to the leader,
/// whose node locks check and reserve) never overbook a node's disk ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_placements_through_both_controllers_never_overbook_a_node() {
    let Some(mut pair) = leader_and_standby().await else {
        return;
    };
    let (a_port, b_port) = (pair.a_port, pair.b_port);
    let http = client();
    let agent = AgentStandIn::start().await;
    // Two nodes of 100 GB at the default ratio 2.0: 200 GB of reservations each, 20 VMs of 10 GB.
    register_100_gb(&http, a_port, &["pg-disk-a", "pg-disk-b"], agent.port).await;
    for id in ["pg-disk-a", "pg-disk-b"] {
        let (status, body) = post_json(
            &http,
            &url(b_port, "/v1/nodes/heartbeat"),
            &ppn_heartbeat(id, "127.0.0.1", agent.port),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let attempts = 60;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..attempts {
        let http = http.clone();
        let port = if i % 2 == 0 { a_port } else { b_port };
        tasks.spawn(async move {
            let body = serde_json::json!({"vm_type": "small", "ram_mb": 256, "vcpu_count": 1, "disk_gb": 10});
            post_json(&http, &url(port, "/v1/vms"), &body).await
        });
    }
    let (mut placed, mut refused) = (0, 0);
    while let Some(result) = tasks.join_next().await {
        let (status, body) = result.unwrap();
        match status {
            200 => placed += 1,
            503 if body["code"] == "no_capacity" => refused += 1,
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(placed, 40, "exactly the ledgers' room is placed");
    assert_eq!(refused, attempts - 40);
    for id in ["pg-disk-a", "pg-disk-b"] {
        let (_, node) = get_json(&http, &url(b_port, &format!("/v1/nodes/{id}"))).await;
        assert_eq!(node["reserved_disk_gb"], 200, "{node}");
    }
    assert_eq!(agent.spawned().len(), 40);
    pair.a.kill();
    pair.b.kill();
}

/// The lease flags are checked before anything starts, the message naming the flag.
#[test]
fn bad_lease_flags_are_refused_naming_the_flag() {
    for (flags, says) in [
        (
            &["--lease-ttl", "200ms"][..],
            "--lease-ttl must be at least 1s",
        ),
        (
            &["--advertise-url", "http://leader.example:9203"][..],
            "the controller serves https://",
        ),
        (
            &[
                "--plain-http",
                "--advertise-url",
                "http://u:pw@leader.example:9203",
            ][..],
            "may not have a query, a fragment or credentials",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = fleetwire()
            .arg("controller")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--data-dir")
            .arg(dir.path())
            .args(flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
        assert!(!stderr.contains(":pw@"), "{stderr}");
    }
}
