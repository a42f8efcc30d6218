//! The controller link: register (see `enroll`), then one `NodeHeartbeat` per interval, built
//! from the host's facts (`host_facts`) and the last pass. A heartbeat answered 404 means the
//! controller forgot the node, 401 that it no longer takes the node certificate: the agent
//! registers again. In secure mode the link also keeps the node certificate fresh: renewed
//! two thirds into its validity, just before a heartbeat, over the current mTLS identity
//! (docs/security.md).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fleetwire_client::operations::POST_HEARTBEAT;
use fleetwire_types::{F32Min0, F64Min0, NodeHeartbeat, RegisterNodeResponse, Timestamp};
use reqwest::StatusCode;
use tokio::sync::watch;

use super::backoff::{Backoff, HeartbeatPace};
use super::config::BootstrapTokenSource;
use super::enroll::{self, Enrolled, RegisterError};
use super::host_facts::{agent_version, boot_id_of, hostname_of, HostFacts};
use super::identity::{self, IdentityError, NodeIdentity};
use super::runtime_tls::export_runtime_tls;
use super::shared::{Agent, ServingTls};
use super::trust;
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
        // What a guest booted with KVM showed (the qemu driver's probe), where the driver knows.
        kvm_available: runtime
            .and_then(|r| r.kvm_available)
            .unwrap_or(facts.kvm_available),
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
    /// 401: the controller no longer takes the node certificate.
    Unauthorized(String),
    Refused(String),
    Unreachable(String),
}

async fn send_heartbeat(agent: &Agent, client: &fleetwire_client::Client) -> Beat {
    let heartbeat = build_heartbeat(agent);
    let body = serde_json::to_value(&heartbeat).expect("a generated value serializes");
    if let Some(v) = fleetwire_types::validate_value::<NodeHeartbeat>(&body).first() {
        return Beat::Refused(format!(
            "built an invalid heartbeat: {}",
            fleetwire_types::describe(v)
        ));
    }
    let Err(e) = client.post_heartbeat(&heartbeat).await else {
        return Beat::Taken;
    };
    let why = format!(
        "POST {}{}: {e}",
        agent.config.fleet_endpoint, POST_HEARTBEAT.path
    );
    match e.status() {
        // Any success: a PPN controller's answers are not all the document's.
        Some(s) if s.is_success() => Beat::Taken,
        Some(StatusCode::NOT_FOUND) => Beat::Forgotten,
        Some(StatusCode::UNAUTHORIZED) => Beat::Unauthorized(why),
        Some(s) if s.is_server_error() => Beat::Unreachable(why),
        Some(_) => Beat::Refused(why),
        None => Beat::Unreachable(why),
    }
}

/// What the link knows of the node's identity, and the client that presents it.
struct Link {
    identity: NodeIdentity,
    /// The controller answered 401 to the certificate: only a bootstrap token helps now.
    cert_refused: bool,
    /// The expiry error was logged for the current certificate.
    expiry_told: bool,
    /// Secure mode: presents the certificate, when there is one. Plain mode: plain HTTP.
    client: fleetwire_client::Client,
}

/// Why an attempt to enroll or renew did not get through.
enum Attempt {
    /// The controller cannot be reached: retry after a backoff.
    Unreachable(String),
    /// Something to fix by hand (logged as an error): retry after a backoff.
    Failed(String),
    /// The controller refused the certificate (logged): the bootstrap token is next, at once.
    CertRefused,
}

impl Link {
    /// The link for `identity`; `Err` hands it back with why no client could be built.
    fn open(
        agent: &Agent,
        identity: NodeIdentity,
    ) -> Result<Link, Box<(NodeIdentity, trust::TrustError)>> {
        let client = match trust::controller_client(&agent.config, Some(&identity)) {
            Ok(client) => client,
            Err(e) => return Err(Box::new((identity, e))),
        };
        let link = Link {
            identity,
            cert_refused: false,
            expiry_told: false,
            client,
        };
        // The runtime got its copy at start (`serve`); the local API waits for this one.
        link.publish(agent);
        Ok(link)
    }

    /// Secure mode: the certificate the controller may still take (present, not refused, not
    /// expired). Plain mode has none to offer.
    fn usable_cert(&self, now: SystemTime) -> bool {
        !self.cert_refused
            && self
                .identity
                .cert
                .as_ref()
                .is_some_and(|c| !c.validity.expired(now))
    }

    /// Hands the current certificate to the local API (secure mode).
    fn publish(&self, agent: &Agent) {
        if agent.config.plain_http {
            return;
        }
        let served = match (
            self.identity.certified_key(),
            trust::trusted_ca(&agent.config),
        ) {
            (Ok(Some(certified)), Ok((_, ca_pem))) => ServingTls { certified, ca_pem },
            (Ok(None), _) => return,
            (Err(e), _) => {
                tracing::error!("the local API cannot serve the node certificate: {e}");
                return;
            }
            (_, Err(e)) => {
                tracing::error!("the local API cannot check the controller's certificate: {e}");
                return;
            }
        };
        agent.serving_tls.send_replace(Some(served));
    }

    /// A new certificate is in place: the runtime gets a copy, the client presents it, the
    /// local API serves it.
    fn refresh(&mut self, agent: &Agent) -> Result<(), String> {
        self.cert_refused = false;
        self.expiry_told = false;
        if let Some(tls) = &agent.config.runtime_tls {
            export_runtime_tls(&identity::identity_files(&agent.config.state_dir), tls)
                .map_err(|e| format!("handing the node certificate to the runtime: {e}"))?;
        }
        self.client = trust::controller_client(&agent.config, Some(&self.identity))
            .map_err(|e| e.to_string())?;
        self.publish(agent);
        Ok(())
    }

    /// Keeps the certificate a registration answered with, for the key that was sent.
    fn keep(&mut self, agent: &Agent, answer: &RegisterNodeResponse) -> Result<(), Attempt> {
        let Some(cert_pem) = &answer.cert_pem else {
            if !agent.config.plain_http {
                return Err(Attempt::Failed(
                    "the controller registered the node without issuing a certificate: it has no node CA, so secure mode cannot work with it (VM_PLAIN_HTTP=true for a controller started with --plain-http)".to_string(),
                ));
            }
            return Ok(());
        };
        let state_dir = &agent.config.state_dir;
        let cert = identity::store_certificate(
            state_dir,
            &self.identity.key,
            cert_pem,
            answer.ca_pem.as_deref().map(String::as_str),
        )
        .map_err(|e| Attempt::Failed(format!("keeping the node certificate: {e}")))?;
        tracing::info!("stored the node certificate");
        self.identity.cert = Some(cert);
        self.refresh(agent).map_err(Attempt::Failed)
    }

    /// One registration: over mTLS with the certificate while the controller may take it,
    /// else (secure mode) with the bootstrap token.
    async fn register(&mut self, agent: &Agent) -> Result<Enrolled, Attempt> {
        let secure = !agent.config.plain_http;
        let with_cert = !secure || self.usable_cert(SystemTime::now());
        let (client, token) = if with_cert {
            (self.client.clone(), None)
        } else {
            let token = match trust::bootstrap_token(&agent.config) {
                Ok(Some(token)) => token,
                Ok(None) => {
                    return Err(Attempt::Failed(format!(
                        "{}: only a bootstrap token can enroll this node: set VM_BOOTSTRAP_TOKEN, or VM_BOOTSTRAP_TOKEN_FILE (read again at every attempt)",
                        self.why_token()
                    )))
                }
                Err(e) => {
                    return Err(Attempt::Failed(format!(
                        "{}: only a bootstrap token can enroll this node: {e}",
                        self.why_token()
                    )))
                }
            };
            tracing::info!(token_id = token.id(), "enrolling with the bootstrap token");
            let client = trust::controller_client(&agent.config, None)
                .map_err(|e| Attempt::Failed(e.to_string()))?;
            (client, Some(token))
        };
        match enroll::register(agent, &client, &self.identity.key, token.as_ref()).await {
            Ok(Enrolled::Registered(answer)) => {
                self.keep(agent, &answer)?;
                Ok(Enrolled::Registered(answer))
            }
            // A controller without the registration route is PPN's, which enrolls by heartbeat
            // and authenticates nobody: only plain mode may fall back to it.
            Ok(Enrolled::ByHeartbeat) if secure => Err(Attempt::Failed(
                "the controller has no registration route (a PPN controller?): secure mode needs a fleetwire controller; set VM_PLAIN_HTTP=true to enroll by heartbeat in a PPN fleet".to_string(),
            )),
            Ok(Enrolled::ByHeartbeat) => Ok(Enrolled::ByHeartbeat),
            Err(RegisterError::Unreachable(e)) => Err(Attempt::Unreachable(e)),
            Err(RegisterError::Unauthorized(e)) if secure && token.is_none() => {
                tracing::warn!(
                    "the controller no longer takes the node certificate ({e}): enrolling needs a bootstrap token"
                );
                self.cert_refused = true;
                Err(Attempt::CertRefused)
            }
            Err(e @ (RegisterError::Unauthorized(_) | RegisterError::Forbidden(_)))
                if token.is_some() =>
            {
                let instead = match &agent.config.bootstrap_token {
                    Some(BootstrapTokenSource::File(path)) => format!(
                        "put it in {} (VM_BOOTSTRAP_TOKEN_FILE, read again at every attempt)",
                        path.display()
                    ),
                    _ => "give it as VM_BOOTSTRAP_TOKEN (read at start) or in the file VM_BOOTSTRAP_TOKEN_FILE names (read again at every attempt)".to_string(),
                };
                Err(Attempt::Failed(format!(
                    "the bootstrap token {}.… was refused ({e}): a token enrolls one node id, once, before it expires; create a new one for {} and {instead}",
                    token.as_ref().map_or("", |t| t.id()),
                    agent.config.node_id.as_str()
                )))
            }
            Err(e) => Err(Attempt::Failed(e.to_string())),
        }
    }

    /// Why the node needs a bootstrap token, for the error that says so.
    fn why_token(&self) -> String {
        match &self.identity.cert {
            None => "the node has no certificate yet".to_string(),
            Some(_) if self.cert_refused => {
                "the controller no longer takes the node certificate".to_string()
            }
            Some(cert) => format!(
                "the node certificate expired at {}",
                humantime::format_rfc3339_seconds(cert.validity.not_after)
            ),
        }
    }

    /// Renews the certificate over the current mTLS identity (module comment of `identity`).
    async fn renew(&mut self, agent: &Agent) -> Result<(), RenewError> {
        let state_dir = &agent.config.state_dir;
        let next = identity::stage_next_key(state_dir).map_err(RenewError::Local)?;
        let answer = match enroll::register(agent, &self.client, &next, None).await {
            Ok(Enrolled::Registered(answer)) => answer,
            Ok(Enrolled::ByHeartbeat) => {
                return Err(RenewError::Other(
                    "the controller has no registration route to renew the certificate at"
                        .to_string(),
                ))
            }
            Err(RegisterError::Unauthorized(e)) => return Err(RenewError::Unauthorized(e)),
            Err(e) => return Err(RenewError::Other(e.to_string())),
        };
        let Some(cert_pem) = &answer.cert_pem else {
            return Err(RenewError::Other(
                "the controller answered the renewal without a certificate".to_string(),
            ));
        };
        let renewed = match identity::commit_renewal(
            state_dir,
            next,
            cert_pem,
            answer.ca_pem.as_deref().map(String::as_str),
        ) {
            Ok(renewed) => renewed,
            Err(error) => {
                // The files may hold the new pair half moved into place: carry on with what is
                // on disk (`load` finishes or undoes the step), so that the next renewal never
                // replaces the key the stored certificate needs.
                if let Ok((on_disk, _)) = identity::load(state_dir) {
                    self.identity = on_disk;
                    if let Err(refresh) = self.refresh(agent) {
                        tracing::warn!("after a failed renewal: {refresh}");
                    }
                }
                return Err(RenewError::Local(error));
            }
        };
        self.identity = renewed;
        self.refresh(agent).map_err(RenewError::Other)
    }
}

/// Why a renewal did not get through.
enum RenewError {
    /// 401: the current certificate is no longer taken.
    Unauthorized(String),
    Local(IdentityError),
    Other(String),
}

/// The controller link: register, then heartbeat every interval until stopped. `identity` is
/// the node's key and certificate as `identity::load` found them.
pub async fn run(agent: Arc<Agent>, identity: NodeIdentity, mut stop: watch::Receiver<bool>) {
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    let mut identity = identity;
    let mut link = loop {
        match Link::open(&agent, identity) {
            Ok(link) => break link,
            Err(failed) => {
                let (back, e) = *failed;
                // E.g. the CA file went away after the settings were checked: an operator can
                // put it back without restarting the agent.
                tracing::error!("cannot call the controller: {e} (tried again)");
                identity = back;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_delay()) => {}
            _ = stop.changed() => return,
        }
    };
    backoff.reset();
    // Registration carries the runtime's boot id, known after the first pass.
    for _ in 0..100 {
        if agent.published().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let secure = !agent.config.plain_http;
    let mut registered = false;
    // Heartbeats that cannot reach the controller are retried on this, not every interval.
    let mut pace = HeartbeatPace::new(agent.config.heartbeat_interval);
    loop {
        let now = SystemTime::now();
        if secure {
            if let Some(cert) = &link.identity.cert {
                if cert.validity.expired(now) && !link.expiry_told {
                    tracing::error!(
                        "the node certificate expired at {}; re-enroll with a new bootstrap token: VM_BOOTSTRAP_TOKEN or VM_BOOTSTRAP_TOKEN_FILE",
                        humantime::format_rfc3339_seconds(cert.validity.not_after)
                    );
                    link.expiry_told = true;
                    registered = false;
                    agent.update_link(|l| l.enrolled = false);
                }
            }
        }
        let wait = if !registered {
            match link.register(&agent).await {
                // The backoff is reset by a heartbeat taken, not here: a controller that takes
                // registrations but refuses every heartbeat is not called in a tight loop.
                Ok(Enrolled::Registered(_)) => {
                    agent.update_link(|l| {
                        l.enrolled = true;
                        l.unreachable = false;
                    });
                    registered = true;
                    Duration::ZERO
                }
                // A PPN controller has no registration route: the first heartbeat enrolls.
                Ok(Enrolled::ByHeartbeat) => {
                    agent.update_link(|l| l.unreachable = false);
                    registered = true;
                    Duration::ZERO
                }
                Err(Attempt::CertRefused) => Duration::ZERO,
                Err(Attempt::Unreachable(e)) => {
                    tracing::warn!("controller unreachable: {e}");
                    agent.update_link(|l| l.unreachable = true);
                    backoff.next_delay()
                }
                Err(Attempt::Failed(e)) => {
                    tracing::error!("registration failed: {e}");
                    agent.update_link(|l| l.unreachable = false);
                    backoff.next_delay()
                }
            }
        } else {
            // Renewal first, so the heartbeat of this interval goes out with the fresh
            // certificate and none is skipped.
            let due = secure
                && link
                    .identity
                    .cert
                    .as_ref()
                    .is_some_and(|c| c.validity.renewal_due(now));
            if due {
                match link.renew(&agent).await {
                    Ok(()) => tracing::info!("renewed the node certificate"),
                    Err(RenewError::Unauthorized(e)) => {
                        tracing::warn!("the controller no longer takes the node certificate: {e}");
                        agent.update_link(|l| l.enrolled = false);
                        registered = false;
                    }
                    Err(RenewError::Local(e)) => {
                        tracing::error!("renewing the node certificate: {e}")
                    }
                    Err(RenewError::Other(e)) => {
                        tracing::warn!("renewing the node certificate: {e} (tried again at the next heartbeat)")
                    }
                }
            }
            if !registered {
                Duration::ZERO
            } else {
                match send_heartbeat(&agent, &link.client).await {
                    Beat::Taken => {
                        agent.update_link(|l| {
                            l.enrolled = true;
                            l.unreachable = false;
                        });
                        backoff.reset();
                        pace.taken()
                    }
                    Beat::Forgotten => {
                        tracing::warn!("the controller does not know this node: registering again");
                        agent.update_link(|l| l.enrolled = false);
                        registered = false;
                        Duration::ZERO
                    }
                    Beat::Unauthorized(e) => {
                        tracing::warn!(
                            "the controller no longer takes the node certificate ({e}): registering again"
                        );
                        agent.update_link(|l| l.enrolled = false);
                        registered = false;
                        backoff.next_delay()
                    }
                    Beat::Refused(e) => {
                        tracing::error!("heartbeat refused: {e}");
                        agent.config.heartbeat_interval
                    }
                    Beat::Unreachable(e) => {
                        tracing::warn!("heartbeat failed: {e}");
                        agent.update_link(|l| l.unreachable = true);
                        pace.unreachable()
                    }
                }
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}
