//! The controller's background work: the staleness sweep (status by receive time, node counts,
//! forgetting nodes silent past `--forget-after`), the disk-ledger self-heal, and the probes
//! that read each node's runtime engine version.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use fleetwire_types::{HostState, SemVer, Timestamp};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

use crate::controller::rules::ledger;
use crate::controller::rules::nodes;
use crate::controller::shared::Controller;
use crate::controller::table::node_state::WhenStored;
use crate::controller::table::node_table::DirtyNode;
use crate::controller::trust::own_certs::{until, RETRY};
use crate::fleet_identity::renewal_due;
use crate::reported::builder::state_message;
use crate::store::writer::Change;

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
    let forgotten: Vec<_> = forget
        .iter()
        .filter_map(|node_id| controller.forget_node(node_id.clone()))
        .collect();
    controller
        .metrics
        .set_node_counts(&controller.table.node_counts());
    controller.metrics.swept();
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
        if let Err(error) = controller.stored_together(forgotten).await {
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
    let mut changes = Vec::new();
    controller.table.for_each(|node_id, node| {
        if let Some((was, now)) = ledger::heal(node) {
            let id = DirtyNode::Id(node_id.to_string());
            changes.push(controller.node_changed(id, node, WhenStored::BeforeAnswer));
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
    if let Err(error) = controller.stored_together(changes).await {
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
    let Some(slot) = controller.table.get(node_id) else {
        return;
    };
    let registered: Vec<std::net::Ipv4Addr> = {
        let node = slot.lock();
        std::iter::once(node.record.wg_ip.0)
            .chain(node.record.addresses.iter().map(|a| a.0))
            .collect()
    };
    let outcome = controller
        .agents
        .runtime_health(node_id, address, &registered)
        .await;
    let (changed, change) = {
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
        // Whether the record changed, and what to log.
        let (record_changed, changed) = match outcome {
            Ok(health) => {
                let version: SemVer = health.version;
                let problem = node.record.engine_version_problem.take();
                if node.record.engine_version.as_ref() == Some(&version) {
                    (problem.is_some(), None)
                } else {
                    let previous = node.record.engine_version.replace(version.clone());
                    (true, Some(Ok((previous, version))))
                }
            }
            Err(error) => {
                let problem = state_message(&error.to_string());
                if node.record.engine_version_problem.as_ref() == Some(&problem) {
                    (false, None)
                } else {
                    node.record.engine_version_problem = Some(problem);
                    (true, Some(Err(error)))
                }
            }
        };
        let change = record_changed.then(|| {
            let id = DirtyNode::Id(node_id.to_string());
            controller.node_changed(id, &mut node, WhenStored::WriteBehind(Change::Row))
        });
        (changed, change)
    };
    if let Some(change) = change {
        // Written behind; only a failed flush while the queue is full could report anything,
        // and the store writer logs that itself.
        let _ = change.stored().await;
    }
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

/// Renews the client certificate towards the agents and runtimes as it comes due: a job of
/// the leader, the one controller that calls them.
pub async fn renew_client(controller: Arc<Controller>) {
    let Some(ca) = controller.ca.as_ref() else {
        return;
    };
    let mut due = controller
        .agents
        .identity_dates()
        .map_or(SystemTime::now(), |d| {
            renewal_due(d.not_before, d.not_after)
        });
    loop {
        tokio::time::sleep(until(due, SystemTime::now())).await;
        due = match controller.agents.renew_identity(ca) {
            Ok(issued) => {
                tracing::info!("renewed the controller's client certificate");
                renewal_due(issued.not_before, issued.not_after)
            }
            Err(error) => {
                tracing::error!("renewing the controller's client certificate: {error:#}");
                SystemTime::now() + RETRY
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::controller::config::settings::Settings;
    use crate::controller::fleet::heartbeat::take_heartbeat;
    use crate::controller::shared::Credentials;
    use crate::controller::test_support::{heartbeat, stored};
    use crate::store::sqlite::SqliteStore;

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
        let started = Controller::start(settings, store, None, Credentials::none()).unwrap();
        let controller = started.controller;
        for id in ["quiet", "chatty", "unenrolled"] {
            take_heartbeat(&controller, heartbeat(id, 1000))
                .await
                .unwrap();
        }
        // An unenrolled node gives its board word back: it is neither counted nor visited.
        controller.table.remove("unenrolled");
        tokio::time::sleep(Duration::from_millis(150)).await;
        take_heartbeat(&controller, heartbeat("chatty", 1000))
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
        take_heartbeat(&controller, heartbeat("quiet", 1000))
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

    #[tokio::test]
    async fn a_node_going_silent_costs_the_store_nothing_and_still_loads_unreachable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite3");
        let settings = Settings {
            stale_after: Duration::from_millis(50),
            ..Settings::for_tests()
        };
        let start = || {
            let store = Box::new(SqliteStore::open(&path).unwrap());
            Controller::start(settings.clone(), store, None, Credentials::none()).unwrap()
        };
        let started = start();
        let controller = started.controller;
        take_heartbeat(&controller, heartbeat("n1", 1000))
            .await
            .unwrap();
        assert_eq!(stored(&path, "status"), ["ready"]);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Another node is heard from after n1 went silent: n1 was stale before the restart.
        take_heartbeat(&controller, heartbeat("n2", 1000))
            .await
            .unwrap();
        sweep(&controller).await;
        let served: serde_json::Value =
            serde_json::from_slice(&controller.node_json("n1").unwrap()).unwrap();
        assert_eq!(served["status"], "unreachable");
        controller.flushed().await.unwrap();
        assert_eq!(
            stored(&path, "status"),
            ["ready", "ready"],
            "the status is not written"
        );
        started.writer.shutdown().await;
        drop(controller);

        // Loaded again, n1 (silent before the restart) is unreachable until it heartbeats, and
        // that writes nothing; n2 (heard from until the restart) has the start-up grace.
        let started = start();
        assert_eq!(
            status(&started.controller, "n1").as_deref(),
            Some("unreachable")
        );
        assert_eq!(status(&started.controller, "n2").as_deref(), Some("ready"));
        started.controller.flushed().await.unwrap();
        assert_eq!(stored(&path, "status"), ["ready", "ready"]);
        // A heartbeat brings it back, and its row is written in full.
        take_heartbeat(&started.controller, heartbeat("n1", 2000))
            .await
            .unwrap();
        started.controller.flushed().await.unwrap();
        assert_eq!(stored(&path, "ram_available_mb"), [6192, 7192]);
        started.writer.shutdown().await;
    }

    #[tokio::test]
    async fn nodes_heard_from_until_a_restart_stay_ready_for_one_stale_window_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite3");
        let settings = Settings {
            stale_after: Duration::from_millis(300),
            ..Settings::for_tests()
        };
        let start = || {
            let store = Box::new(SqliteStore::open(&path).unwrap());
            Controller::start(settings.clone(), store, None, Credentials::none()).unwrap()
        };
        let started = start();
        for id in ["a", "b"] {
            take_heartbeat(&started.controller, heartbeat(id, 1000))
                .await
                .unwrap();
        }
        started.controller.flushed().await.unwrap();
        started.writer.shutdown().await;
        drop(started.controller);
        // The controller stays down for longer than the staleness window.
        tokio::time::sleep(Duration::from_millis(500)).await;

        let started = start();
        let controller = started.controller;
        sweep(&controller).await;
        // Silent for the outage only: not unreachable merely because the controller was down.
        assert_eq!(status(&controller, "a").as_deref(), Some("ready"));
        assert_eq!(status(&controller, "b").as_deref(), Some("ready"));
        assert!(controller
            .metrics
            .render()
            .contains("fleetwire_controller_nodes{status=\"ready\"} 2"));
        // One node comes back within the grace; the other stays silent past it.
        tokio::time::sleep(Duration::from_millis(150)).await;
        take_heartbeat(&controller, heartbeat("a", 1000))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        sweep(&controller).await;
        assert_eq!(status(&controller, "a").as_deref(), Some("ready"));
        assert_eq!(status(&controller, "b").as_deref(), Some("unreachable"));
        started.writer.shutdown().await;
    }
}
