//! The reconcile pass: converge the driver on the desired document, observe, accrue the meters,
//! build reported.json, validate it and write it atomically. It runs on every change and at
//! least every `VM_RECONCILE_INTERVAL_MS`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetwire_types::{
    AppId, DeploymentId, DesiredInstanceState, HostCapacity, InstanceState, Timestamp,
};
use tokio::sync::watch;

use super::host_facts::HostFacts;
use super::meters::MeterBook;
use super::shared::{Agent, Published};
use crate::document_file::write_document;
use crate::reported::builder::{build, LiveState};

/// How often desired.json is looked at for a hand edit.
const DESIRED_POLL: Duration = Duration::from_millis(200);

/// What passes carry from one to the next.
pub struct PassState {
    meters: MeterBook,
    /// Per app: the deployment and desired state it converged on, and when.
    converged: HashMap<AppId, (DeploymentId, DesiredInstanceState, Timestamp)>,
}

impl PassState {
    pub fn load(agent: &Agent) -> PassState {
        PassState {
            meters: MeterBook::load(
                agent.config.state_dir.join("meters.json"),
                agent.config.host_id.clone(),
                &agent.reported_path(),
            ),
            converged: HashMap::new(),
        }
    }
}

pub async fn run(agent: Arc<Agent>, mut stop: watch::Receiver<bool>) -> PassState {
    let mut state = PassState::load(&agent);
    loop {
        pass(&agent, &mut state).await;
        tokio::select! {
            _ = agent.wake.notified() => {}
            _ = tokio::time::sleep(agent.config.reconcile_interval) => {}
            _ = stop.changed() => return state,
        }
        if *stop.borrow() {
            return state;
        }
    }
}

/// Notices an operator's hand edit of desired.json within [`DESIRED_POLL`].
pub async fn watch_desired(agent: Arc<Agent>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(DESIRED_POLL) => {}
            _ = stop.changed() => return,
        }
        if agent.desired.poll() {
            agent.wake.notify_one();
        }
    }
}

fn matches(want: DesiredInstanceState, state: InstanceState) -> bool {
    match want {
        DesiredInstanceState::Running => state == InstanceState::Running,
        DesiredInstanceState::Stopped => state == InstanceState::Stopped,
    }
}

/// One pass. The result is also what `/v1/reported` and `/metrics` serve.
pub async fn pass(agent: &Agent, state: &mut PassState) {
    let desired = agent.desired.current();
    if !agent.link().draining {
        agent
            .pass_timing
            .converge(agent.driver.converge(&desired.instances))
            .await;
    }
    let observation = agent.driver.observe().await;
    let now = Instant::now();
    let facts = HostFacts::read(&agent.config.state_dir);

    let by_app: HashMap<&AppId, InstanceState> = observation
        .instances
        .iter()
        .map(|i| (&i.app_id, i.state))
        .collect();
    state
        .converged
        .retain(|app, _| desired.instances.iter().any(|d| &d.app_id == app));
    for d in &desired.instances {
        let key = (d.deployment_id.clone(), d.desired_state);
        let entry = state.converged.get(&d.app_id);
        if entry.is_some_and(|(dep, want, _)| (dep, *want) != (&key.0, key.1)) {
            state.converged.remove(&d.app_id);
        }
        let now_matches = by_app
            .get(&d.app_id)
            .is_some_and(|s| matches(d.desired_state, *s));
        if now_matches && !state.converged.contains_key(&d.app_id) {
            state
                .converged
                .insert(d.app_id.clone(), (key.0, key.1, Timestamp::now()));
        }
    }
    let converged_at: HashMap<AppId, Timestamp> = state
        .converged
        .iter()
        .map(|(app, (_, _, at))| (app.clone(), *at))
        .collect();

    state.meters.observe(&observation.instances, now);
    // Meters first: reported.json never shows a value meters.json does not hold.
    if let Err(e) = state.meters.save() {
        tracing::error!("meters.json not saved: {e}");
    }

    let refusal = agent.desired.refusal();
    let report = build(&LiveState {
        host_id: &agent.config.host_id,
        state: agent.link().host_state(),
        capacity: HostCapacity {
            vcpu_count: facts.cpu_cores,
            memory_mib: facts.ram_total_mb,
            cache_bytes: facts.disk_total_bytes,
        },
        versions: &observation.runtime.versions,
        instances: &observation.instances,
        meters: state.meters.all(),
        converged_at: &converged_at,
        message: refusal.as_deref(),
    });
    match write_document(&agent.reported_path(), &report) {
        Ok(_) => agent.publish(Published {
            report,
            observation,
            desired,
        }),
        // The last good reported.json stays; the next pass tries again.
        Err(e) => tracing::error!("reported.json not written: {e}"),
    }
}
