//! `kill -9` the controller under load, several times, at random moments: the load generator
//! (`fleetwire-loadgen`, in-process: support/loadgen.rs) heartbeating a few hundred simulated nodes, registrations and VM placements (and deletions)
//! in flight on nodes whose agent is a stand-in. After each restart on the same store, every
//! acknowledged (2xx) registration, placement and deletion is as it was answered, each node's
//! disk ledger is the sum of its VMs' footprints (never a VM without its reservation), and no
//! node is unreachable merely because the controller was down: nodes heard from until the kill
//! are "ready" (or "registering") right after the restart, and only nodes that stay silent past
//! the start-up grace go "unreachable" (docs/controller.md, "Statuses after a restart").

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::support::controller_harness::*;
use crate::support::loadgen::spawn_loadgen;
use fleetwire_types::{CreateVmRequest, NodeStatusFilter, VmId};
use rand::RngExt;
use serde_json::json;

/// `--stale-after` of the controller under test: long enough for the checks right after a
/// restart to run well inside the grace on a loaded machine, short enough to see it end.
const STALE_AFTER_S: u64 = 8;
const KILLS: usize = 4;
const STAND_INS: usize = 3;
const LOAD_NODES: usize = 300;

/// What the controller answered 2xx, recorded client side.
#[derive(Default, Clone)]
struct Acknowledged {
    /// Registered node → when the answer came.
    registrations: BTreeMap<String, Instant>,
    /// Placed VM → (node, disk GB).
    placed: BTreeMap<String, (String, u64)>,
    deleted: BTreeSet<String>,
    /// Deletions sent but not answered 2xx: the VM may be there or not.
    delete_unanswered: BTreeSet<String>,
    /// Whether some life of the load generator enrolled all its nodes.
    loadgen_enrolled: bool,
}

/// The controller of the current life, or `None` while it is down and being checked.
type Current = Arc<RwLock<Option<fleetwire_client::Client>>>;

fn current(of: &Current) -> Option<fleetwire_client::Client> {
    of.read().unwrap().clone()
}

fn stand_in_id(i: usize) -> String {
    format!("agent-{i}")
}

/// A stand-in node's heartbeat, reporting the VMs its agent runs, as a real agent's does.
fn stand_in_heartbeat(
    node: &str,
    port: u16,
    agent: &AgentStandIn,
) -> fleetwire_types::NodeHeartbeat {
    let deleted: BTreeSet<String> = agent.deleted().into_iter().collect();
    let vms: Vec<serde_json::Value> = agent
        .spawned()
        .iter()
        .filter(|s| !deleted.contains(s["vm_id"].as_str().unwrap()))
        .map(|s| {
            json!({"vm_id": s["vm_id"], "vm_type": s["vm_type"], "state": "Running",
                   "ram_alloc_mb": s["ram_mb"], "vcpu_count": s["vcpu_count"]})
        })
        .collect();
    let mut body = ppn_heartbeat(node, "127.0.0.1", port);
    body["ram_total_mb"] = 262_144.into();
    body["vms"] = vms.into();
    typed(&body)
}

/// Starts the load generator against `url`, its log in `log`: it runs until the controller it
/// loads is killed, and then fails, as it should: it measures one controller's life.
fn start_loadgen(url: &str, log: &std::path::Path) -> std::thread::JoinHandle<bool> {
    let flags = [
        "--url",
        url,
        "--nodes",
        &LOAD_NODES.to_string(),
        "--connections",
        "4",
        "--rate",
        "1500",
        "--warmup",
        "0s",
        "--duration",
        "10m",
        "--fleet-every",
        "300ms",
        "--fleet-samples",
        "1",
    ];
    let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
    spawn_loadgen(&flags, std::fs::File::create(log).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_work_survives_kill_9_under_load_and_no_node_is_unreachable_for_the_outage() {
    let dir = tempfile::tempdir().unwrap();
    let stale = format!("{STALE_AFTER_S}s");
    // A self-heal every second: heartbeats never touch the ledger, so a VM pruned by one (its
    // deletion reached the agent, not the store, before a kill) leaves its reservation until
    // the self-heal releases it (docs/controller.md, "Disk-overcommit ledger").
    let args = [
        "--stale-after",
        stale.as_str(),
        "--sweep-interval",
        "200ms",
        "--self-heal-interval",
        "1s",
    ];
    let http = client();
    let mut agents = Vec::new();
    for _ in 0..STAND_INS {
        agents.push(Arc::new(AgentStandIn::start().await));
    }
    // One lock per stand-in node: a heartbeat (built from what its agent runs) and a deletion
    // never overlap, so no heartbeat built before a deletion arrives after its answer.
    let node_locks: Arc<Vec<tokio::sync::Mutex<()>>> = Arc::new(
        (0..STAND_INS)
            .map(|_| tokio::sync::Mutex::new(()))
            .collect(),
    );

    let mut controller = ControllerProcess::start_in(dir.path(), &args);
    let api = api_on(&http, &controller);
    for (i, agent) in agents.iter().enumerate() {
        let node = stand_in_id(i);
        let request: fleetwire_types::RegisterNodeRequest =
            typed(&registration(&node, agent.port, 100_000));
        api.register_node(&request).await.unwrap();
        api.post_heartbeat(&stand_in_heartbeat(&node, agent.port, agent))
            .await
            .unwrap();
    }
    let live: Current = Arc::new(RwLock::new(Some(api)));
    let acked = Arc::new(Mutex::new(Acknowledged::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = {
        let stop = stop.clone();
        move || stop.load(std::sync::atomic::Ordering::Relaxed)
    };
    let mut tasks = Vec::new();

    // The stand-in nodes heartbeat every 300 ms, whatever else happens.
    {
        let (live, agents, locks, stopped) = (
            live.clone(),
            agents.clone(),
            node_locks.clone(),
            stopped.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stopped() {
                if let Some(api) = current(&live) {
                    for (i, agent) in agents.iter().enumerate() {
                        let _held = locks[i].lock().await;
                        let heartbeat = stand_in_heartbeat(&stand_in_id(i), agent.port, agent);
                        let _ = api.post_heartbeat(&heartbeat).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }));
    }
    // Registrations, back to back.
    {
        let (live, acked, stopped) = (live.clone(), acked.clone(), stopped.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while !stopped() {
                let Some(api) = current(&live) else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                n += 1;
                let node = format!("reg-{n:05}");
                let request: fleetwire_types::RegisterNodeRequest =
                    typed(&registration(&node, 9, 500));
                match api.register_node(&request).await {
                    Ok(_) => {
                        acked
                            .lock()
                            .unwrap()
                            .registrations
                            .insert(node, Instant::now());
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
                tokio::time::sleep(Duration::from_millis(80)).await;
            }
        }));
    }
    // Placements on the stand-in nodes, three at a time, and deletions of placed VMs.
    for worker in 0..3 {
        let (live, acked, locks, stopped) = (
            live.clone(),
            acked.clone(),
            node_locks.clone(),
            stopped.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while !stopped() {
                let Some(api) = current(&live) else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                let (node_index, disk_gb, delete_one) = {
                    let mut rng = rand::rng();
                    (
                        rng.random_range(0..STAND_INS),
                        rng.random_range(1..=50u64),
                        rng.random_range(0..4) == 0,
                    )
                };
                let node = stand_in_id(node_index);
                if delete_one {
                    let victim = {
                        let a = acked.lock().unwrap();
                        a.placed
                            .iter()
                            .find(|(id, (on, _))| {
                                *on == node
                                    && !a.deleted.contains(*id)
                                    && !a.delete_unanswered.contains(*id)
                            })
                            .map(|(id, _)| id.clone())
                    };
                    if let Some(vm_id) = victim {
                        let _held = locks[node_index].lock().await;
                        let id: VmId = vm_id.parse().unwrap();
                        let deleted = api.delete_vm(&id).await.is_ok();
                        let mut a = acked.lock().unwrap();
                        if deleted {
                            a.deleted.insert(vm_id);
                        } else {
                            a.delete_unanswered.insert(vm_id);
                        }
                        continue;
                    }
                }
                n += 1;
                let vm_id = format!("vm-w{worker}-{n:05}");
                let request: CreateVmRequest = typed(&json!({
                    "vm_id": vm_id, "vm_type": "small", "ram_mb": 64, "vcpu_count": 1,
                    "disk_gb": disk_gb, "tenant_id": "t-load", "preferred_node": node
                }));
                match api.create_vm(&request).await {
                    Ok(vm) => {
                        assert_eq!(vm.vm_id.as_str(), vm_id);
                        acked.lock().unwrap().placed.insert(vm_id, (node, disk_gb));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }));
    }

    let mut loadgen_log = dir.path().join("loadgen-0.log");
    let mut loadgen = start_loadgen(&controller.url(""), &loadgen_log);
    let mut started = Instant::now();
    for kill in 1..=KILLS {
        // The load generator enrolled its nodes: from then on they heartbeat back to back.
        eventually(
            "the load generator to enroll its nodes",
            Duration::from_secs(60),
            || {
                let log = loadgen_log.clone();
                async move {
                    std::fs::read_to_string(&log)
                        .unwrap_or_default()
                        .contains(&format!("enrolled {LOAD_NODES} nodes"))
                        .then_some(())
                }
            },
        )
        .await;
        acked.lock().unwrap().loadgen_enrolled = true;
        let load_for = Duration::from_millis(rand::rng().random_range(1500..4000));
        tokio::time::sleep(load_for).await;

        controller.kill_9();
        let killed_at = Instant::now();
        *live.write().unwrap() = None;
        // Its connections die with the controller: it stops on its own, failed, before the
        // next controller starts (no heartbeat of its outlives the controller it loaded).
        let succeeded = tokio::task::spawn_blocking(move || loadgen.join().unwrap())
            .await
            .unwrap();
        assert!(
            !succeeded,
            "kill {kill}: the load generator outlived its controller"
        );
        let down_for = started.elapsed();
        // Requests in flight at the kill fail on their own; give them a moment to record.
        tokio::time::sleep(Duration::from_millis(300)).await;

        controller = ControllerProcess::start_in(dir.path(), &args);
        started = Instant::now();
        let api = api_on(&http, &controller);
        let acknowledged = acked.lock().unwrap().clone();
        check_after_restart(&api, &acknowledged, killed_at, kill, started).await;
        let (registrations, placed, deleted) = {
            let a = acked.lock().unwrap();
            (a.registrations.len(), a.placed.len(), a.deleted.len())
        };
        eprintln!(
            "kill {kill}: after {down_for:.1?} of life, {registrations} registrations, {placed} placements, {deleted} deletions acknowledged so far"
        );
        *live.write().unwrap() = Some(api);
        if kill < KILLS {
            loadgen_log = dir.path().join(format!("loadgen-{kill}.log"));
            loadgen = start_loadgen(&controller.url(""), &loadgen_log);
        } else {
            break;
        }
    }

    // Only the stand-in nodes keep heartbeating: the load generator's nodes stay silent past
    // the grace and go unreachable then; the heartbeating ones stay ready.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let api = api_on(&http, &controller);
    let beating = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let beat = {
        let (agents, api, beating) = (agents.clone(), api.clone(), beating.clone());
        tokio::spawn(async move {
            while beating.load(std::sync::atomic::Ordering::Relaxed) {
                for (i, agent) in agents.iter().enumerate() {
                    let heartbeat = stand_in_heartbeat(&stand_in_id(i), agent.port, agent);
                    if let Err(e) = api.post_heartbeat(&heartbeat).await {
                        return Err(format!("{}: {e}", stand_in_id(i)));
                    }
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Ok(())
        })
    };
    let silent_node: fleetwire_types::NodeId = "load-0000000".parse().unwrap();
    let (api_ref, silent_ref) = (&api, &silent_node);
    eventually(
        "a load generator node silent past the grace to go unreachable",
        Duration::from_secs(STALE_AFTER_S + 20),
        move || async move {
            let record = api_ref.get_node(silent_ref).await.unwrap().into_inner();
            (record.status.as_str() == "unreachable").then_some(())
        },
    )
    .await;
    let went_unreachable_after = started.elapsed();
    assert!(
        went_unreachable_after >= Duration::from_secs(STALE_AFTER_S),
        "unreachable {went_unreachable_after:?} after the start, before the grace ended"
    );
    let nodes = api.list_nodes(Some(&NodeStatusFilter::All)).await.unwrap();
    for node in nodes.iter() {
        let id = node.node_id.as_str();
        if id.starts_with("agent-") {
            assert_eq!(node.status.as_str(), "ready", "{id} heartbeats: {node:?}");
        }
    }
    beating.store(false, std::sync::atomic::Ordering::Relaxed);
    beat.await
        .unwrap()
        .expect("the stand-in nodes' heartbeats are taken");
}

/// What must hold right after a restart.
async fn check_after_restart(
    api: &fleetwire_client::Client,
    acked: &Acknowledged,
    killed_at: Instant,
    kill: usize,
    started: Instant,
) {
    let nodes = api.list_nodes(Some(&NodeStatusFilter::All)).await.unwrap();
    let status: BTreeMap<String, String> = nodes
        .iter()
        .map(|n| {
            (
                n.node_id.as_str().to_string(),
                n.status.as_str().to_string(),
            )
        })
        .collect();
    let vms = api.list_vms(None).await.unwrap();

    // Every acknowledged registration is there; those heard from shortly before the kill are
    // not unreachable (the grace), those silent since long before it are.
    let stale = Duration::from_secs(STALE_AFTER_S);
    for (node, at) in &acked.registrations {
        let Some(now) = status.get(node) else {
            panic!("kill {kill}: acknowledged registration {node} is gone");
        };
        let silent_before_kill = killed_at.saturating_duration_since(*at);
        if silent_before_kill < stale - Duration::from_secs(1) {
            assert_eq!(
                now, "registering",
                "kill {kill}: {node}, silent {silent_before_kill:?} before the kill"
            );
        } else if silent_before_kill > stale + Duration::from_secs(3) {
            assert_eq!(
                now, "unreachable",
                "kill {kill}: {node}, silent {silent_before_kill:?} before the kill"
            );
        }
    }
    for i in 0..STAND_INS {
        assert_eq!(
            status.get(&stand_in_id(i)).map(String::as_str),
            Some("ready"),
            "kill {kill}: {}",
            stand_in_id(i)
        );
    }
    if acked.loadgen_enrolled {
        for i in 0..LOAD_NODES {
            let id = format!("load-{i:07}");
            assert_eq!(
                status.get(&id).map(String::as_str),
                Some("ready"),
                "kill {kill}: {id}, heartbeating until the kill"
            );
        }
    }

    assert!(
        started.elapsed() < Duration::from_secs(STALE_AFTER_S),
        "kill {kill}: the status checks ran past the grace; raise STALE_AFTER_S"
    );

    // Every acknowledged placement is there, on its node with its footprint; every
    // acknowledged deletion is gone.
    let listed: BTreeMap<&str, &fleetwire_types::VmRecord> =
        vms.iter().map(|v| (v.vm_id.as_str(), v)).collect();
    for (vm_id, (node, disk_gb)) in &acked.placed {
        if acked.deleted.contains(vm_id) {
            assert!(
                !listed.contains_key(vm_id.as_str()),
                "kill {kill}: deleted VM {vm_id} is back"
            );
            continue;
        }
        let Some(vm) = listed.get(vm_id.as_str()) else {
            if acked.delete_unanswered.contains(vm_id) {
                // The deletion reached the agent, maybe, but its answer never came.
                continue;
            }
            panic!("kill {kill}: acknowledged placement {vm_id} is gone");
        };
        assert_eq!(
            vm.node_id.as_ref().map(|n| n.as_str()),
            Some(node.as_str()),
            "kill {kill}: {vm_id}"
        );
        assert_eq!(
            vm.disk_gb,
            Some(*disk_gb),
            "kill {kill}: {vm_id}'s footprint"
        );
    }

    // Each node's ledger holds at least its VMs' footprints (never a VM without its
    // reservation, acknowledged or not), and exactly them once the self-heal has run.
    let ledger_gaps = |nodes: &[fleetwire_types::NodeRecord], vms: &[fleetwire_types::VmRecord]| {
        let mut footprints: BTreeMap<&str, (u64, u32)> = BTreeMap::new();
        for vm in vms {
            if let Some(node) = &vm.node_id {
                let entry = footprints.entry(node.as_str()).or_default();
                entry.0 += vm.disk_gb.unwrap_or(0);
                entry.1 += 1;
            }
        }
        nodes
            .iter()
            .filter_map(|node| {
                let id = node.node_id.as_str();
                let (disk, count) = footprints.get(id).copied().unwrap_or_default();
                assert!(
                    node.reserved_disk_gb >= disk,
                    "kill {kill}: {id}'s ledger holds {} GB, its VMs {disk} GB",
                    node.reserved_disk_gb
                );
                assert_eq!(node.vm_count, count, "kill {kill}: {id}'s vm_count");
                (node.reserved_disk_gb != disk)
                    .then(|| format!("{id}: {} GB for {disk} GB", node.reserved_disk_gb))
            })
            .collect::<Vec<_>>()
    };
    let drift = ledger_gaps(&nodes, &vms);
    if !drift.is_empty() {
        eprintln!("kill {kill}: ledger above the VMs' footprints until the self-heal: {drift:?}");
        let gaps = &ledger_gaps;
        eventually(
            "the self-heal to bring every ledger to its VMs' footprints",
            Duration::from_secs(20),
            move || async move {
                let nodes = api.list_nodes(Some(&NodeStatusFilter::All)).await.unwrap();
                let vms = api.list_vms(None).await.unwrap();
                gaps(&nodes, &vms).is_empty().then_some(())
            },
        )
        .await;
    }
}
