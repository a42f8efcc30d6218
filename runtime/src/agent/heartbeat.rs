//! The controller link: register (see `enroll`), then one `NodeHeartbeat` per interval, built
//! from the host's facts (`host_facts`) and the last pass. A heartbeat answered 404 means the
//! controller forgot the node: it registers again.

use std::sync::Arc;
use std::time::Duration;

use fleetwire_types::{F32Min0, F64Min0, NodeHeartbeat, Timestamp};
use reqwest::StatusCode;
use tokio::sync::watch;

use super::backoff::Backoff;
use super::enroll::{self, Enrolled};
use super::host_facts::{agent_version, boot_id_of, hostname_of, HostFacts};
use super::shared::Agent;
use super::vm_records::vm_records;

const MB: u64 = 1024 * 1024;
const GB: u64 = 1024 * MB;

/// Builds this interval's heartbeat from the host and the last pass.
pub fn build_heartbeat(agent: &Agent) -> NodeHeartbeat {
    let facts = HostFacts::read(&agent.config.state_dir);
    let published = agent.published();
    let (vms, runtime) = match &published {
        Some(p) => (
            vm_records(&agent.config, &p.desired, &p.observation.instances),
            Some(&p.observation.runtime),
        ),
        None => (Vec::new(), None),
    };
    NodeHeartbeat {
        node_id: agent.config.node_id.clone(),
        wg_ip: agent.config.wg_ip.clone(),
        hostname: hostname_of(&facts),
        ram_total_mb: facts.ram_total_mb,
        ram_used_mb: facts.ram_total_mb.saturating_sub(facts.ram_available_mb),
        cpu_cores: facts.cpu_cores,
        cpu_load_pct: F32Min0::new(facts.cpu_load_pct().max(0.0))
            .expect("a clamped load is at least 0"),
        kvm_available: facts.kvm_available,
        reserved: agent.config.reserved,
        vms,
        boot_id: boot_id_of(&facts.boot_id),
        timestamp_utc: Timestamp::now(),
        spawn_port: Some(agent.config.spawn_host_port()),
        agent_version: Some(agent_version()),
        runtime_boot_id: runtime.and_then(|r| r.boot_id.clone()),
        runtime_capacity: runtime.and_then(|r| r.capacity.clone()),
        runtime_stalled: runtime.is_some_and(|r| r.stalled),
        cpu_usage: runtime.and_then(|r| F64Min0::new(r.cpu_usage.max(0.0))),
        memory_usage_mb: runtime.map(|r| r.memory_usage_mb),
        disk_usage_gb: runtime.map(|r| r.disk_usage_gb),
        disk_free_gb: Some(facts.disk_free_bytes / GB),
        disk_total_gb: Some(facts.disk_total_bytes / GB),
    }
}

/// What one heartbeat came to.
enum Beat {
    Taken,
    /// 404: the controller does not know the node (any more).
    Forgotten,
    Refused(String),
    Unreachable(String),
}

/// How much of a refusing answer's body a `Beat::Refused` quotes for the log (not a schema limit).
const REFUSAL_QUOTE_CHARS: usize = 300;

async fn send_heartbeat(agent: &Agent, http: &reqwest::Client) -> Beat {
    let heartbeat = build_heartbeat(agent);
    let body = serde_json::to_value(&heartbeat).expect("a generated value serializes");
    if let Some(v) = fleetwire_types::validate_value::<NodeHeartbeat>(&body).first() {
        return Beat::Refused(format!(
            "built an invalid heartbeat: {}",
            fleetwire_types::describe(v)
        ));
    }
    let url = format!("{}/v1/nodes/heartbeat", agent.config.fleet_endpoint);
    match http.post(&url).json(&body).send().await {
        Ok(resp) if resp.status().is_success() => Beat::Taken,
        Ok(resp) if resp.status() == StatusCode::NOT_FOUND => Beat::Forgotten,
        Ok(resp) if resp.status().is_server_error() => {
            Beat::Unreachable(format!("POST {url}: {}", resp.status()))
        }
        Ok(resp) => {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            Beat::Refused(format!(
                "POST {url}: {status}: {}",
                text.chars().take(REFUSAL_QUOTE_CHARS).collect::<String>()
            ))
        }
        Err(e) => Beat::Unreachable(format!("POST {url}: {e}")),
    }
}

/// The controller link: register, then heartbeat every interval until stopped.
pub async fn run(agent: Arc<Agent>, mut stop: watch::Receiver<bool>) {
    let http = match crate::tls::client_builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot build the HTTP client: {e}");
            return;
        }
    };
    let key = match enroll::node_key(&agent.config.state_dir) {
        Ok(k) => k,
        Err(e) => {
            tracing::error!("node key: {e:#}");
            return;
        }
    };
    // Registration carries the runtime's boot id, known after the first pass.
    for _ in 0..100 {
        if agent.published().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut registered = false;
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        let wait = if !registered {
            match enroll::register(&agent, &http, &key).await {
                Ok(Enrolled::Registered) => {
                    agent.update_link(|l| {
                        l.enrolled = true;
                        l.unreachable = false;
                    });
                    registered = true;
                    backoff.reset();
                    Duration::ZERO
                }
                // A PPN controller has no registration route: the first heartbeat enrolls.
                Ok(Enrolled::ByHeartbeat) => {
                    agent.update_link(|l| l.unreachable = false);
                    registered = true;
                    backoff.reset();
                    Duration::ZERO
                }
                Err(enroll::RegisterError::Unreachable(e)) => {
                    tracing::warn!("controller unreachable: {e}");
                    agent.update_link(|l| l.unreachable = true);
                    backoff.next_delay()
                }
                Err(e) => {
                    tracing::error!("registration refused: {e}");
                    agent.update_link(|l| l.unreachable = false);
                    backoff.next_delay()
                }
            }
        } else {
            match send_heartbeat(&agent, &http).await {
                Beat::Taken => {
                    agent.update_link(|l| {
                        l.enrolled = true;
                        l.unreachable = false;
                    });
                    backoff.reset();
                    agent.config.heartbeat_interval
                }
                Beat::Forgotten => {
                    tracing::warn!("the controller does not know this node: registering again");
                    agent.update_link(|l| l.enrolled = false);
                    registered = false;
                    Duration::ZERO
                }
                Beat::Refused(e) => {
                    tracing::error!("heartbeat refused: {e}");
                    agent.config.heartbeat_interval
                }
                Beat::Unreachable(e) => {
                    tracing::warn!("heartbeat failed: {e}");
                    agent.update_link(|l| l.unreachable = true);
                    agent.config.heartbeat_interval
                }
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}
