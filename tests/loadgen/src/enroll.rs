//! Enrolling the simulated nodes before the heartbeats. Plain HTTP: a first heartbeat each,
//! as a PPN agent enrolls. mTLS (docs/security.md): for each node an operator mints a
//! bootstrap token (`POST /v1/tokens`), and the node registers with it and the CSR of a fresh
//! key (`POST /v1/nodes/register`); the certificate that comes back and the key stay in memory
//! as the node's rustls settings.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use hyper::body::Bytes;
use hyper::{Method, StatusCode};
use rustls::ClientConfig;

use super::bodies::{node_id, register_body, token_request_body};
use super::dial::{Dialer, OperatorToken};
use super::heartbeat_connection::HeartbeatConnection;
use super::operator_client::OperatorClient;

/// Registrations in flight at once: enough to keep the controller's signing busy on both
/// cores, few enough not to queue behind its request timeout.
pub const REGISTRATIONS_IN_FLIGHT: usize = 64;

/// How much of a refusal's body an error quotes.
const REFUSAL_QUOTE_CHARS: usize = 300;

fn quote(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .chars()
        .take(REFUSAL_QUOTE_CHARS)
        .collect()
}

/// Plain HTTP: one heartbeat per node, over `connections` keep-alive connections.
pub async fn by_heartbeat(
    dialer: &Arc<Dialer>,
    bodies: &Arc<Vec<Bytes>>,
    connections: usize,
) -> anyhow::Result<()> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut enrolling = tokio::task::JoinSet::new();
    for _ in 0..connections.min(bodies.len()) {
        let (dialer, bodies, next) = (dialer.clone(), bodies.clone(), next.clone());
        enrolling.spawn(async move {
            let stream = dialer.connect(None).await?;
            let mut connection = HeartbeatConnection::new(stream, &dialer.host);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else {
                    return anyhow::Ok(());
                };
                let status = connection.post(body, None).await?;
                if status != 200 {
                    bail!("enrolling a node: {status}: {}", connection.refusal);
                }
            }
        });
    }
    while let Some(done) = enrolling.join_next().await {
        done??;
    }
    Ok(())
}

/// mTLS: a bootstrap token and a registration per node, [`REGISTRATIONS_IN_FLIGHT`] at once;
/// each node's rustls settings (its certificate and key), by node index.
pub async fn by_registration(
    dialer: &Arc<Dialer>,
    operator: &OperatorToken,
    nodes: usize,
) -> anyhow::Result<Vec<Arc<ClientConfig>>> {
    let next = Arc::new(AtomicUsize::new(0));
    let admin = Arc::new(operator.bearer());
    let mut enrolling = tokio::task::JoinSet::new();
    for _ in 0..REGISTRATIONS_IN_FLIGHT.min(nodes) {
        let (dialer, next, admin) = (dialer.clone(), next.clone(), admin.clone());
        enrolling.spawn(async move {
            let mut client = OperatorClient::connect(&dialer).await?;
            let mut enrolled = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= nodes {
                    return anyhow::Ok(enrolled);
                }
                let config = register(&dialer, &mut client, &admin, i)
                    .await
                    .with_context(|| format!("enrolling {}", node_id(i)))?;
                enrolled.push((i, config));
            }
        });
    }
    let mut configs: Vec<Option<Arc<ClientConfig>>> = vec![None; nodes];
    while let Some(done) = enrolling.join_next().await {
        for (i, config) in done?? {
            configs[i] = Some(config);
        }
    }
    configs
        .into_iter()
        .enumerate()
        .map(|(i, c)| c.ok_or_else(|| anyhow!("{} was not enrolled", node_id(i))))
        .collect()
}

/// One node: its token, its key and CSR, its registration; its rustls settings.
async fn register(
    dialer: &Dialer,
    client: &mut OperatorClient,
    admin: &str,
    index: usize,
) -> anyhow::Result<Arc<ClientConfig>> {
    let (status, body) = client
        .call(
            Method::POST,
            "/v1/tokens",
            Some(admin),
            token_request_body(index),
        )
        .await?;
    if status != StatusCode::CREATED {
        bail!(
            "POST /v1/tokens answered {status}: {}{}",
            quote(&body),
            match status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN =>
                    " (is the operator token an admin token of this controller?)",
                _ => "",
            }
        );
    }
    // The answer holds the token: a failure to read it is told without its body.
    let issued: fleetwire_types::BootstrapTokenIssued = fleetwire_types::read(&body)
        .map_err(|_| {
            anyhow!("POST /v1/tokens answered 201 with a body that is not a BootstrapTokenIssued (not shown: it holds a token)")
        })?
        .value;
    let bootstrap = format!("Bearer {}", issued.token.as_str());

    let key = rcgen::KeyPair::generate().context("generating the node key")?;
    let csr = fleetwire::agent::enroll::csr_pem(
        &key,
        &node_id(index),
        std::net::Ipv4Addr::LOCALHOST.into(),
    )?;
    let (status, body) = client
        .call(
            Method::POST,
            "/v1/nodes/register",
            Some(&bootstrap),
            register_body(index, &csr),
        )
        .await?;
    if status != StatusCode::OK {
        bail!(
            "POST /v1/nodes/register answered {status}: {}",
            quote(&body)
        );
    }
    let answer: fleetwire_types::RegisterNodeResponse = fleetwire_types::read(&body)
        .map_err(|e| anyhow!("POST /v1/nodes/register: not a RegisterNodeResponse: {e}"))?
        .value;
    let cert_pem = answer
        .cert_pem
        .ok_or_else(|| anyhow!("POST /v1/nodes/register issued no certificate"))?;
    dialer.node_config(&cert_pem, &key.serialize_pem())
}
