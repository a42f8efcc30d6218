//! The controller's background work: the staleness sweep (status by receive time, node counts,
//! forgetting nodes silent past `--forget-after`), the disk-ledger self-heal, and the probes
//! that read each node's runtime engine version.

use std::sync::Arc;
use std::time::Instant;

use fleetwire_types::{HostState, SemVer, Timestamp};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

use super::{ledger, nodes, Controller};
use crate::reported::builder::state_message;

/// Most probes in flight at once.
const PROBE_CONCURRENCY: usize = 32;

pub fn spawn(
    controller: Arc<Controller>,
    probe_requests: UnboundedReceiver<String>,
) -> Vec<JoinHandle<()>> {
    vec![
        tokio::spawn(sweep_loop(controller.clone())),
        tokio::spawn(self_heal_loop(controller.clone())),
        tokio::spawn(probe_loop(controller, probe_requests)),
    ]
}

async fn sweep_loop(controller: Arc<Controller>) {
    let mut tick = tokio::time::interval(controller.settings.sweep_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        sweep(&controller).await;
    }
}

/// One pass: re-derive the status of nodes that may have gone silent from the controller's
/// receive time, delete nodes unreachable for longer than `forget_after`, and publish the
/// counts. Only the nodes the liveness board shows to be due are locked and looked at, so a
/// pass costs the same whatever the fleet's size (bar a read of a word per node).
pub async fn sweep(controller: &Controller) {
    let now = Instant::now();
    let wall = Timestamp::now().utc();
    let settings = &controller.settings;
    let forget_after =
        chrono::Duration::from_std(settings.forget_after).unwrap_or(chrono::Duration::MAX);
    let due = controller
        .table
        .due_for_sweep(now, settings.stale_after, settings.forget_after);
    let mut went_silent = Vec::new();
    let mut forget = Vec::new();
    controller.table.for_each_due(&due, |node| {
        if let Some(previous) = nodes::refresh_status(node, now, settings.stale_after) {
            node.status_changed();
            if node.record.status == HostState::Unreachable {
                went_silent.push((
                    node.record.node_id.to_string(),
                    previous,
                    node.record.last_heartbeat,
                ));
            }
        }
        if node.record.status == HostState::Unreachable
            && wall - node.record.last_heartbeat.utc() > forget_after
        {
            forget.push(node.record.node_id.to_string());
        }
    });
    for node_id in &forget {
        controller.table.remove(node_id);
    }
    controller
        .metrics
        .set_node_counts(&controller.table.node_counts());
    for (node_id, previous, last_heartbeat) in went_silent {
        tracing::warn!(node_id, from = %previous, %last_heartbeat, "node unreachable: no heartbeat received for longer than --stale-after");
    }
    if !forget.is_empty() {
        for node_id in &forget {
            tracing::warn!(
                node_id,
                "node forgotten: unreachable for longer than --forget-after"
            );
        }
        if let Err(error) = controller.writer.commit(forget).await {
            tracing::error!(%error, "could not delete forgotten nodes from the store");
        }
    }
}

async fn self_heal_loop(controller: Arc<Controller>) {
    let mut tick = tokio::time::interval(controller.settings.self_heal_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        self_heal(&controller).await;
    }
}

/// Recomputes every node's disk ledger from its VM records and corrects drift.
pub async fn self_heal(controller: &Controller) {
    let mut healed = Vec::new();
    controller.table.for_each(|node_id, node| {
        if let Some((was, now)) = ledger::heal(node) {
            node.changed_for_commit();
            healed.push((node_id.to_string(), was, now));
        }
    });
    if healed.is_empty() {
        return;
    }
    for (node_id, was, now) in &healed {
        tracing::warn!(
            node_id,
            was_gb = was,
            now_gb = now,
            "disk ledger drifted from the VM records; corrected"
        );
    }
    let ids = healed.into_iter().map(|(id, _, _)| id).collect();
    if let Err(error) = controller.writer.commit(ids).await {
        tracing::error!(%error, "could not store the corrected disk ledgers");
    }
}

async fn probe_loop(controller: Arc<Controller>, mut requests: UnboundedReceiver<String>) {
    let mut tick = tokio::time::interval(controller.settings.probe_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let limit = Arc::new(tokio::sync::Semaphore::new(PROBE_CONCURRENCY));
    loop {
        let targets: Vec<(String, String)> = tokio::select! {
            _ = tick.tick() => {
                let mut targets = Vec::new();
                controller.table.for_each(|node_id, node| {
                    if node.record.status != HostState::Unreachable {
                        if let Some(address) = &node.record.smolvm_address {
                            targets.push((node_id.to_string(), address.to_string()));
                        }
                    }
                });
                targets
            }
            request = requests.recv() => {
                let Some(node_id) = request else { return };
                controller.table.get(&node_id)
                    .and_then(|slot| slot.lock().record.smolvm_address.as_ref().map(|a| a.to_string()))
                    .map(|address| vec![(node_id, address)])
                    .unwrap_or_default()
            }
        };
        for (node_id, address) in targets {
            let permit = limit
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore stays open");
            let controller = controller.clone();
            tokio::spawn(async move {
                probe(&controller, &node_id, &address).await;
                drop(permit);
            });
        }
    }
}

/// Reads the node runtime's `GET /health` and records its version as `engine_version`. When
/// it cannot, `engine_version_problem` says why (the version last read is kept: a runtime
/// that cannot be reached for a while has not changed its engine); a success clears it.
pub async fn probe(controller: &Controller, node_id: &str, address: &str) {
    let outcome = controller.agents.runtime_health(address).await;
    let Some(slot) = controller.table.get(node_id) else {
        return;
    };
    let changed = {
        let mut node = slot.lock();
        if node
            .record
            .smolvm_address
            .as_ref()
            .is_none_or(|a| a.as_str() != address)
        {
            // Re-registered with another address while the probe ran: its own probe follows.
            return;
        }
        match outcome {
            Ok(health) => {
                let version: SemVer = health.version;
                let problem = node.record.engine_version_problem.take();
                if node.record.engine_version.as_ref() == Some(&version) {
                    if problem.is_some() {
                        controller.touch(node_id, &mut node);
                    }
                    None
                } else {
                    let previous = node.record.engine_version.replace(version.clone());
                    controller.touch(node_id, &mut node);
                    Some(Ok((previous, version)))
                }
            }
            Err(error) => {
                let problem = state_message(&error);
                if node.record.engine_version_problem.as_ref() == Some(&problem) {
                    None
                } else {
                    node.record.engine_version_problem = Some(problem);
                    controller.touch(node_id, &mut node);
                    Some(Err(error))
                }
            }
        }
    };
    match changed {
        Some(Ok((previous, version))) => {
            tracing::info!(node_id, engine_version = %version.as_str(), previous = ?previous.map(|v| v.to_string()), "runtime engine version recorded");
        }
        Some(Err(error)) => {
            tracing::warn!(node_id, %error, "cannot read the runtime's engine version");
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fleetwire_types::NodeHeartbeat;

    use super::*;
    use crate::controller::api::take_heartbeat;
    use crate::controller::Settings;
    use crate::store::sqlite::SqliteStore;

    fn heartbeat(node_id: &str) -> NodeHeartbeat {
        let body = serde_json::json!({
            "node_id": node_id, "wg_ip": "10.0.0.1", "hostname": "h1",
            "ram_total_mb": 8192, "ram_used_mb": 1000, "cpu_cores": 4,
            "cpu_load_pct": 3.5, "kvm_available": true, "vms": [], "boot_id": "host-a",
            "timestamp_utc": "2001-01-01T00:00:00Z"
        });
        fleetwire_types::read_strict(&serde_json::to_vec(&body).unwrap()).unwrap()
    }

    fn status(controller: &Controller, node_id: &str) -> Option<String> {
        let json = controller.node_json(node_id)?;
        let record: serde_json::Value = serde_json::from_slice(&json).unwrap();
        Some(record["status"].as_str().unwrap().to_string())
    }

    #[tokio::test]
    async fn the_sweep_finds_silent_nodes_through_the_board_counts_them_and_forgets_them() {
        let settings = Settings {
            stale_after: Duration::from_millis(100),
            forget_after: Duration::from_millis(400),
            ..Settings::for_tests()
        };
        let store = Box::new(SqliteStore::in_memory().unwrap());
        let started = Controller::start(settings, store, None).unwrap();
        let controller = started.controller;
        for id in ["quiet", "chatty", "unenrolled"] {
            take_heartbeat(&controller, heartbeat(id)).await.unwrap();
        }
        // An unenrolled node gives its board word back: it is neither counted nor visited.
        controller.table.remove("unenrolled");
        tokio::time::sleep(Duration::from_millis(150)).await;
        take_heartbeat(&controller, heartbeat("chatty"))
            .await
            .unwrap();
        sweep(&controller).await;
        assert_eq!(status(&controller, "quiet").as_deref(), Some("unreachable"));
        assert_eq!(status(&controller, "chatty").as_deref(), Some("ready"));
        let metrics = controller.metrics.render();
        assert!(
            metrics.contains("fleetwire_controller_nodes{status=\"ready\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics.contains("fleetwire_controller_nodes{status=\"unreachable\"} 1"),
            "{metrics}"
        );

        // The node comes back: ready, and counted so.
        take_heartbeat(&controller, heartbeat("quiet"))
            .await
            .unwrap();
        sweep(&controller).await;
        assert_eq!(status(&controller, "quiet").as_deref(), Some("ready"));
        assert!(controller
            .metrics
            .render()
            .contains("fleetwire_controller_nodes{status=\"ready\"} 2"));

        // Both go silent, past the forget limit: unreachable first, then forgotten.
        tokio::time::sleep(Duration::from_millis(150)).await;
        sweep(&controller).await;
        assert_eq!(status(&controller, "quiet").as_deref(), Some("unreachable"));
        tokio::time::sleep(Duration::from_millis(400)).await;
        sweep(&controller).await;
        assert_eq!(status(&controller, "quiet"), None);
        assert_eq!(status(&controller, "chatty"), None);
        assert!(controller
            .metrics
            .render()
            .contains("fleetwire_controller_nodes{status=\"unreachable\"} 0"));
        started.writer.shutdown().await;
    }
}
