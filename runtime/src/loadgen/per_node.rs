//! A keep-alive connection per simulated node (`--connection-per-node`, implied by mTLS),
//! on which the node sends only its own heartbeats, back to back; and the reconnect storm
//! (`--reconnect-storm`): every connection closed at once, then all reopened at once.
//!
//! The connections are spread over `--threads` threads, each one single-threaded runtime (so
//! the load generator takes as little of the machine as it can, docs/performance.md). The
//! caller steps every thread through the phases together: connect, heartbeats, and for the
//! storm close, then reconnect. With mTLS each connection presents its node's certificate: the
//! controller takes a connection's heartbeats for that node only (docs/security.md).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use hdrhistogram::Histogram;
use hyper::body::Bytes;
use parking_lot::Mutex;
use rustls::ClientConfig;
use tokio::sync::{oneshot, Semaphore};

use super::bodies::node_id;
use super::dial::{Dialer, Stream};
use super::heartbeat_connection::HeartbeatConnection;
use super::report::{micros, micros_histogram, StormReport};

/// Connections each thread opens at once before the heartbeats (not in the storm, which opens
/// all at once): the controller's accept queue is bounded, and a SYN dropped there costs a
/// second's retransmission, which would only blur the time the connecting phase takes.
const CONNECTS_IN_FLIGHT: usize = 64;

/// How long one node of the storm may take to reconnect and be answered before it counts as
/// failed: far beyond the heartbeat interval (10 s) the storm must fit in.
const STORM_NODE_TIMEOUT: Duration = Duration::from_secs(60);

/// What every thread shares.
pub struct Fleet {
    pub dialer: Arc<Dialer>,
    /// With mTLS: each node's rustls settings (its certificate and key), by node index.
    pub identities: Option<Arc<Vec<Arc<ClientConfig>>>>,
    pub bodies: Arc<Vec<Bytes>>,
    /// With `--changing-figures`: where `ram_used_mb` sits in each body.
    pub ram_used_offsets: Option<Arc<Vec<usize>>>,
    /// Each connection's time between heartbeats, under `--rate`.
    pub pace: Option<Duration>,
    pub failed: Arc<AtomicU64>,
    /// `200` answers to heartbeats sent before the measured phase.
    pub warmup_ok: Arc<AtomicU64>,
    /// The first refusal's body, for the operator.
    pub first_refusal: Arc<Mutex<Option<String>>>,
}

impl Fleet {
    async fn open(&self, index: usize) -> anyhow::Result<HeartbeatConnection<Stream>> {
        let identity = self.identities.as_ref().map(|all| all[index].clone());
        let stream = self.dialer.connect(identity).await?;
        Ok(HeartbeatConnection::new(stream, &self.dialer.host))
    }

    fn refused(&self, connection: &HeartbeatConnection<Stream>, status: u16) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_refusal.lock();
        if first.is_none() {
            *first = Some(format!("{status}: {}", connection.refusal));
        }
    }
}

/// One thread's part of a storm.
struct StormPart {
    ok: usize,
    /// From the common start to this thread's last `200`.
    last: Duration,
    per_node: Histogram<u64>,
    first_failure: Option<String>,
}

/// The caller's ends of one thread's phases, each taken when its phase comes.
struct Steps {
    connected: Option<oneshot::Receiver<anyhow::Result<()>>>,
    start: Option<oneshot::Sender<(Instant, Instant)>>,
    measured: Option<oneshot::Receiver<anyhow::Result<Histogram<u64>>>>,
    close: Option<oneshot::Sender<()>>,
    closed: Option<oneshot::Receiver<()>>,
    reconnect: Option<oneshot::Sender<Instant>>,
    stormed: Option<oneshot::Receiver<StormPart>>,
}

/// The thread's ends.
struct ThreadSteps {
    connected: oneshot::Sender<anyhow::Result<()>>,
    start: oneshot::Receiver<(Instant, Instant)>,
    measured: oneshot::Sender<anyhow::Result<Histogram<u64>>>,
    close: oneshot::Receiver<()>,
    closed: oneshot::Sender<()>,
    reconnect: oneshot::Receiver<Instant>,
    stormed: oneshot::Sender<StormPart>,
}

fn steps() -> (Steps, ThreadSteps) {
    let (connected_tx, connected) = oneshot::channel();
    let (start, start_rx) = oneshot::channel();
    let (measured_tx, measured) = oneshot::channel();
    let (close, close_rx) = oneshot::channel();
    let (closed_tx, closed) = oneshot::channel();
    let (reconnect, reconnect_rx) = oneshot::channel();
    let (stormed_tx, stormed) = oneshot::channel();
    (
        Steps {
            connected: Some(connected),
            start: Some(start),
            measured: Some(measured),
            close: Some(close),
            closed: Some(closed),
            reconnect: Some(reconnect),
            stormed: Some(stormed),
        },
        ThreadSteps {
            connected: connected_tx,
            start: start_rx,
            measured: measured_tx,
            close: close_rx,
            closed: closed_tx,
            reconnect: reconnect_rx,
            stormed: stormed_tx,
        },
    )
}

/// A phase's end, once: a second take is the caller's mistake.
fn take<T>(slot: &mut Option<T>) -> anyhow::Result<T> {
    slot.take()
        .ok_or_else(|| anyhow!("the load threads' phases were stepped out of order"))
}

/// Why a thread's end of a phase went quiet: it stopped (panicked) before reaching it.
const THREAD_GONE: &str = "a load thread stopped";

/// The threads, between phases.
pub struct Running {
    threads: Vec<Steps>,
    nodes: usize,
}

/// Starts `threads` threads, each opening the connections of its share of the nodes.
pub fn start(fleet: Arc<Fleet>, threads: usize) -> anyhow::Result<Running> {
    let nodes = fleet.bodies.len();
    let threads = threads.clamp(1, nodes);
    let mut all = Vec::with_capacity(threads);
    for thread in 0..threads {
        let share = nodes * thread / threads..nodes * (thread + 1) / threads;
        let (steps, thread_steps) = steps();
        let fleet = fleet.clone();
        std::thread::Builder::new()
            .name(format!("loadgen-{thread}"))
            .spawn(move || run_thread(fleet, share, thread_steps))
            .context("starting a load thread")?;
        all.push(steps);
    }
    Ok(Running {
        threads: all,
        nodes,
    })
}

impl Running {
    /// Waits until every connection is open.
    pub async fn connected(&mut self) -> anyhow::Result<()> {
        for steps in &mut self.threads {
            take(&mut steps.connected)?
                .await
                .map_err(|_| anyhow!(THREAD_GONE))??;
        }
        Ok(())
    }

    /// The heartbeats: warm-up until `measure_from`, measured until `deadline`; the latency
    /// of every measured `200`.
    pub async fn heartbeats(
        &mut self,
        measure_from: Instant,
        deadline: Instant,
    ) -> anyhow::Result<Histogram<u64>> {
        for steps in &mut self.threads {
            take(&mut steps.start)?
                .send((measure_from, deadline))
                .map_err(|_| anyhow!(THREAD_GONE))?;
        }
        let mut latency = micros_histogram();
        for steps in &mut self.threads {
            let measured = take(&mut steps.measured)?;
            latency.add(measured.await.map_err(|_| anyhow!(THREAD_GONE))??)?;
        }
        Ok(latency)
    }

    /// The storm: every connection closed at once; once all are, every node reconnects at
    /// once and sends one heartbeat.
    pub async fn storm(mut self) -> anyhow::Result<StormReport> {
        for steps in &mut self.threads {
            take(&mut steps.close)?
                .send(())
                .map_err(|_| anyhow!(THREAD_GONE))?;
        }
        for steps in &mut self.threads {
            take(&mut steps.closed)?
                .await
                .map_err(|_| anyhow!(THREAD_GONE))?;
        }
        let since = Instant::now();
        for steps in &mut self.threads {
            take(&mut steps.reconnect)?
                .send(since)
                .map_err(|_| anyhow!(THREAD_GONE))?;
        }
        let mut report = StormReport {
            nodes: self.nodes,
            reconnected: 0,
            last_answered: Duration::ZERO,
            per_node: micros_histogram(),
            first_failure: None,
        };
        for steps in &mut self.threads {
            let part = take(&mut steps.stormed)?
                .await
                .map_err(|_| anyhow!(THREAD_GONE))?;
            report.reconnected += part.ok;
            report.last_answered = report.last_answered.max(part.last);
            report.per_node.add(part.per_node)?;
            report.first_failure = report.first_failure.or(part.first_failure);
        }
        Ok(report)
    }
}

/// One thread: its runtime, and its share of the nodes through the phases.
fn run_thread(fleet: Arc<Fleet>, share: Range<usize>, steps: ThreadSteps) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = steps.connected.send(Err(error.into()));
            return;
        }
    };
    // Every `let _ =` below: the caller has gone (it failed elsewhere and is telling why).
    runtime.block_on(async move {
        let connections = match open_all(&fleet, share.clone()).await {
            Ok(connections) => connections,
            Err(error) => {
                let _ = steps.connected.send(Err(error));
                return;
            }
        };
        let _ = steps.connected.send(Ok(()));
        let Ok((measure_from, deadline)) = steps.start.await else {
            return;
        };
        let connections = match heartbeats(&fleet, connections, measure_from, deadline).await {
            Ok((latency, connections)) => {
                let _ = steps.measured.send(Ok(latency));
                connections
            }
            Err(error) => {
                let _ = steps.measured.send(Err(error));
                return;
            }
        };
        if steps.close.await.is_err() {
            return;
        }
        close_all(connections).await;
        let _ = steps.closed.send(());
        let Ok(since) = steps.reconnect.await else {
            return;
        };
        let _ = steps
            .stormed
            .send(reconnect_all(&fleet, share, since).await);
    });
}

/// Opens every node's connection of `share`, [`CONNECTS_IN_FLIGHT`] at once.
async fn open_all(
    fleet: &Arc<Fleet>,
    share: Range<usize>,
) -> anyhow::Result<Vec<(usize, HeartbeatConnection<Stream>)>> {
    let permits = Arc::new(Semaphore::new(CONNECTS_IN_FLIGHT));
    let mut opening = tokio::task::JoinSet::new();
    for index in share {
        let (fleet, permits) = (fleet.clone(), permits.clone());
        opening.spawn(async move {
            let _permit = permits.acquire().await?;
            let connection = fleet
                .open(index)
                .await
                .with_context(|| format!("connecting {}", node_id(index)))?;
            anyhow::Ok((index, connection))
        });
    }
    let mut connections = Vec::with_capacity(opening.len());
    while let Some(opened) = opening.join_next().await {
        connections.push(opened??);
    }
    Ok(connections)
}

/// Every connection sends its node's heartbeats until the deadline; the measured latencies,
/// and the connections back for the storm.
async fn heartbeats(
    fleet: &Arc<Fleet>,
    connections: Vec<(usize, HeartbeatConnection<Stream>)>,
    measure_from: Instant,
    deadline: Instant,
) -> anyhow::Result<(Histogram<u64>, Vec<HeartbeatConnection<Stream>>)> {
    // One histogram for the thread: one per connection would take megabytes each.
    let latency = Arc::new(Mutex::new(micros_histogram()));
    let mut running = tokio::task::JoinSet::new();
    for (index, mut connection) in connections {
        let (fleet, latency) = (fleet.clone(), latency.clone());
        running.spawn(async move {
            let body = &fleet.bodies[index];
            let ram_used_at = fleet.ram_used_offsets.as_ref().map(|at| at[index]);
            let mut due = Instant::now();
            loop {
                if let Some(pace) = fleet.pace {
                    due += pace;
                    tokio::time::sleep_until(due.into()).await;
                }
                let sent = Instant::now();
                if sent >= deadline {
                    return anyhow::Ok(connection);
                }
                let status = connection
                    .post(body, ram_used_at)
                    .await
                    .with_context(|| format!("{}'s heartbeat", node_id(index)))?;
                if status == 200 && sent < measure_from {
                    fleet.warmup_ok.fetch_add(1, Ordering::Relaxed);
                } else if status == 200 {
                    latency
                        .lock()
                        .record(micros(sent.elapsed()))
                        .expect("within bounds");
                } else {
                    fleet.refused(&connection, status);
                }
            }
        });
    }
    let mut connections = Vec::with_capacity(running.len());
    while let Some(done) = running.join_next().await {
        connections.push(done??);
    }
    drop(running);
    let latency = Arc::try_unwrap(latency)
        .map_err(|_| anyhow!("a heartbeat task outlived its phase"))?
        .into_inner();
    Ok((latency, connections))
}

/// Closes every connection at once.
async fn close_all(connections: Vec<HeartbeatConnection<Stream>>) {
    let mut closing = tokio::task::JoinSet::new();
    for connection in connections {
        closing.spawn(connection.close());
    }
    closing.join_all().await;
}

/// The storm's part of this thread: every node of `share` reconnects at once (a new TCP
/// connection and, with mTLS, a full handshake) and sends one heartbeat.
async fn reconnect_all(fleet: &Arc<Fleet>, share: Range<usize>, since: Instant) -> StormPart {
    let mut reconnecting = tokio::task::JoinSet::new();
    for index in share {
        let fleet = fleet.clone();
        reconnecting.spawn(async move {
            let began = Instant::now();
            let attempt = async {
                let mut connection = fleet.open(index).await?;
                let status = connection.post(&fleet.bodies[index], None).await?;
                if status != 200 {
                    anyhow::bail!("answered {status}: {}", connection.refusal);
                }
                // Kept open until the thread's storm is over: a node stays connected.
                anyhow::Ok(connection)
            };
            let outcome = match tokio::time::timeout(STORM_NODE_TIMEOUT, attempt).await {
                Ok(outcome) => outcome,
                Err(_) => Err(anyhow!("no answer within {STORM_NODE_TIMEOUT:?}")),
            };
            (index, began.elapsed(), since.elapsed(), outcome)
        });
    }
    let mut part = StormPart {
        ok: 0,
        last: Duration::ZERO,
        per_node: micros_histogram(),
        first_failure: None,
    };
    let mut kept = Vec::with_capacity(reconnecting.len());
    while let Some(done) = reconnecting.join_next().await {
        match done {
            Ok((_, took, at, Ok(connection))) => {
                part.ok += 1;
                part.last = part.last.max(at);
                part.per_node.record(micros(took)).expect("within bounds");
                kept.push(connection);
            }
            Ok((index, _, _, Err(error))) => {
                part.first_failure
                    .get_or_insert_with(|| format!("{}: {error:#}", node_id(index)));
            }
            Err(error) => {
                part.first_failure
                    .get_or_insert_with(|| format!("a reconnecting task failed: {error}"));
            }
        }
    }
    close_all(kept).await;
    part
}

#[cfg(test)]
mod tests {
    //! The per-node connections over real mTLS: a server that requires a certificate from the
    //! test CA and answers a heartbeat only when the body's node_id is the one the connection's
    //! certificate names, as the controller does (docs/security.md).

    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::super::bodies::{heartbeat_body, node_id};
    use super::super::dial::Dialer;
    use crate::tls_server::{certified_key, server_config, ClientCerts, ReloadableCert};

    /// Full handshakes and heartbeats the test server saw; resumed handshakes apart.
    #[derive(Default)]
    struct Seen {
        full_handshakes: AtomicUsize,
        resumed: AtomicUsize,
        heartbeats: AtomicU64,
    }

    /// Serves one connection: every heartbeat answered 200 when it names the certificate's
    /// node, 403 when not.
    async fn serve(
        mut tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        seen: Arc<Seen>,
    ) {
        let (_, connection) = tls.get_ref();
        match connection.handshake_kind() {
            Some(rustls::HandshakeKind::Full) => {
                seen.full_handshakes.fetch_add(1, Ordering::SeqCst)
            }
            _ => seen.resumed.fetch_add(1, Ordering::SeqCst),
        };
        let peer = connection
            .peer_certificates()
            .expect("a client certificate")[0]
            .clone();
        let (_, cert) = x509_parser::parse_x509_certificate(&peer).unwrap();
        let named = cert
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        let mut buffer = Vec::new();
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut request = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(head)) = request.parse(&buffer) {
                let length: usize = request
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                    .unwrap();
                if buffer.len() >= head + length {
                    let body: serde_json::Value =
                        serde_json::from_slice(&buffer[head..head + length]).unwrap();
                    buffer.drain(..head + length);
                    let answer: &[u8] = if body["node_id"] == named.as_str() {
                        seen.heartbeats.fetch_add(1, Ordering::SeqCst);
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
                    } else {
                        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 5\r\n\r\nwrong"
                    };
                    if tls.write_all(answer).await.is_err() {
                        return;
                    }
                    continue;
                }
            }
            let mut chunk = [0u8; 8192];
            match tls.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// A test fleet CA, and a server on 127.0.0.1 that requires its client certificates.
    struct TestServer {
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
        dialer: Arc<Dialer>,
        seen: Arc<Seen>,
        _dir: tempfile::TempDir,
    }

    impl TestServer {
        async fn start() -> TestServer {
            crate::tls::install_crypto_provider();
            let ca_key = rcgen::KeyPair::generate().unwrap();
            let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let ca = ca_params.self_signed(&ca_key).unwrap();
            let issuer = rcgen::Issuer::new(ca_params, ca_key);
            let server_key = rcgen::KeyPair::generate().unwrap();
            let mut server_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            // The controller's mark: the load generator, like an agent, takes no other server.
            server_params.distinguished_name.push(
                rcgen::DnType::OrganizationName,
                crate::fleet_identity::CONTROLLER_ORGANIZATION,
            );
            server_params
                .subject_alt_names
                .push(rcgen::SanType::IpAddress(
                    std::net::Ipv4Addr::LOCALHOST.into(),
                ));
            let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();
            let served =
                certified_key(&server_cert.pem(), &server_key.serialize_pem(), "test").unwrap();
            let config = server_config(
                ReloadableCert::new(served),
                &ca.pem(),
                ClientCerts::Required,
            )
            .unwrap();

            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let seen = Arc::new(Seen::default());
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            tokio::spawn({
                let seen = seen.clone();
                async move {
                    loop {
                        let (tcp, _) = listener.accept().await.unwrap();
                        let (acceptor, seen) = (acceptor.clone(), seen.clone());
                        tokio::spawn(async move {
                            if let Ok(tls) = acceptor.accept(tcp).await {
                                serve(tls, seen).await;
                            }
                        });
                    }
                }
            });
            let dir = tempfile::tempdir().unwrap();
            let ca_file = dir.path().join("ca.pem");
            std::fs::write(&ca_file, ca.pem()).unwrap();
            let url = format!("https://127.0.0.1:{port}");
            TestServer {
                issuer,
                dialer: Arc::new(Dialer::new(&url, Some(&ca_file)).unwrap()),
                seen,
                _dir: dir,
            }
        }

        /// rustls settings presenting a fresh certificate that names `name`.
        fn identity(&self, name: &str) -> Arc<rustls::ClientConfig> {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            let cert = params.signed_by(&key, &self.issuer).unwrap();
            self.dialer
                .node_config(&cert.pem(), &key.serialize_pem())
                .unwrap()
        }

        fn fleet(&self, identities: Vec<Arc<rustls::ClientConfig>>) -> Arc<super::Fleet> {
            Arc::new(super::Fleet {
                dialer: self.dialer.clone(),
                bodies: Arc::new(
                    (0..identities.len())
                        .map(|i| heartbeat_body(i, 1))
                        .collect(),
                ),
                identities: Some(Arc::new(identities)),
                ram_used_offsets: None,
                pace: None,
                failed: Arc::new(AtomicU64::new(0)),
                warmup_ok: Arc::new(AtomicU64::new(0)),
                first_refusal: Default::default(),
            })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_node_heartbeats_with_its_own_certificate_and_the_storm_shakes_hands_in_full() {
        let server = TestServer::start().await;
        let nodes = 5;
        let fleet = server.fleet((0..nodes).map(|i| server.identity(&node_id(i))).collect());
        let seen = &server.seen;

        let mut running = super::start(fleet.clone(), 2).unwrap();
        running.connected().await.unwrap();
        let now = Instant::now();
        let latency = running
            .heartbeats(
                now + Duration::from_millis(100),
                now + Duration::from_millis(400),
            )
            .await
            .unwrap();
        assert_eq!(
            fleet.failed.load(Ordering::SeqCst),
            0,
            "{:?}",
            fleet.first_refusal.lock()
        );
        assert!(!latency.is_empty() && fleet.warmup_ok.load(Ordering::SeqCst) > 0);
        let storm = running.storm().await.unwrap();
        assert_eq!((storm.nodes, storm.reconnected), (nodes, nodes));
        assert!(storm.first_failure.is_none(), "{:?}", storm.first_failure);
        assert_eq!(storm.per_node.len(), nodes as u64);
        // Every reconnection was a full handshake: resumption is off (docs/performance.md).
        assert_eq!(seen.full_handshakes.load(Ordering::SeqCst), 2 * nodes);
        assert_eq!(seen.resumed.load(Ordering::SeqCst), 0);
        assert_eq!(
            seen.heartbeats.load(Ordering::SeqCst),
            latency.len() + fleet.warmup_ok.load(Ordering::SeqCst) + nodes as u64
        );
    }

    #[tokio::test]
    async fn a_node_that_speaks_for_another_is_refused_and_counted() {
        // Node 0's connection presents a certificate naming load-0000001: every heartbeat is
        // refused, and the refusal's body is kept for the operator.
        let server = TestServer::start().await;
        let fleet = server.fleet(vec![server.identity(&node_id(1))]);
        let mut running = super::start(fleet.clone(), 1).unwrap();
        running.connected().await.unwrap();
        let now = Instant::now();
        let latency = running
            .heartbeats(now, now + Duration::from_millis(100))
            .await
            .unwrap();
        assert_eq!(latency.len(), 0);
        assert!(fleet.failed.load(Ordering::SeqCst) > 0);
        assert_eq!(fleet.first_refusal.lock().as_deref(), Some("403: wrong"));
        assert_eq!(server.seen.heartbeats.load(Ordering::SeqCst), 0);
    }
}
