//! The hot paths as callgrind counts them: whole requests served in process, with nothing
//! between them but memory, so an instruction count (stable where a timing on a shared
//! machine is not) guards each path against growth (docs/performance.md, "Instruction
//! budgets"; `tests/perf/instruction_budget.sh` runs it under callgrind and compares the
//! counts with `tests/perf/instruction_budget.json`).
//!
//! ```sh
//! instruction_counts heartbeat N       # N PPN heartbeats over one keep-alive connection
//! instruction_counts mtls_heartbeat N  # the same in mTLS mode: 10 nodes, a TLS connection each
//! instruction_counts fleet N           # N `GET /v1/fleet` at 10,000 nodes
//! instruction_counts converge N        # N agent reconcile passes over 20 running instances
//! ```
//!
//! Each first serves a warm-up (the nodes enrolled, every code path touched once), then the N
//! requests; the script runs two values of N and divides the difference, so what is counted is
//! one request through the HTTP parse, the route, the validated reader, the node table, the
//! write-behind mark and the answer, and nothing of the start-up. A current-thread runtime and
//! background jobs an hour apart keep the count the same from run to run.

use std::time::{Duration, Instant};

use std::sync::Arc;

use axum::serve::Listener;
use fleetwire::controller::http::heartbeat_route::HeartbeatFirst;
use fleetwire::controller::leadership::served::Served;
use fleetwire::controller::rules::nodes;
use fleetwire::controller::shared::{Controller, Credentials};
use fleetwire::controller::trust::certs::{FleetCa, ServerName};
use fleetwire::controller::trust::own_certs::issue_server;
use fleetwire::controller::{ControllerArgs, Settings};
use fleetwire::fleet_tls_client::{client_config, ServerRole};
use fleetwire::store::sqlite::SqliteStore;
use fleetwire::tls_server::{
    server_config, ClientCerts, Peer, ReloadableCert, TlsListener, WithPeer,
};
use fleetwire_types::{CertSerial, NodeHeartbeat, Timestamp};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Nodes in the fleet the heartbeats come from.
const HEARTBEAT_NODES: usize = 100;
/// Nodes (each with its certificate and its own connection) the mTLS heartbeats come from.
const MTLS_NODES: usize = 10;
/// Nodes in the fleet `GET /v1/fleet` renders (issue 27's figure).
const FLEET_NODES: usize = 10_000;
/// Instances on the agent whose reconcile pass is counted: as many as docs/performance.md's
/// measured host ("With 20 running guests").
const AGENT_INSTANCES: usize = 20;

/// Connections handed to the server as in-memory streams.
struct MemoryListener(mpsc::Receiver<DuplexStream>);

impl Listener for MemoryListener {
    type Io = DuplexStream;
    // Admitted as a plain TCP peer is (`http_serve::Admission`).
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (DuplexStream, std::net::SocketAddr) {
        match self.0.recv().await {
            Some(stream) => (stream, std::net::SocketAddr::from(([127, 0, 0, 1], 1))),
            // No more connections: wait for the shutdown.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        Ok(std::net::SocketAddr::from(([127, 0, 0, 1], 9203)))
    }
}

/// One HTTP/1.1 request as a client sends it.
fn request(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "{method} {path} HTTP/1.1\r\nhost: controller\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// A client connection: in memory, or TLS over loopback TCP.
trait Connection: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Connection for T {}

/// Sends `bytes` and reads one answer whole (by its content-length); returns its status.
///
/// The answer is read into `buffer`'s spare room, never zeroed: a zeroed 64 KiB chunk for each
/// read was 65,000 of the 125,000 instructions counted per heartbeat in a release build, the
/// client's, not the controller's (docs/performance.md, "Instruction budgets").
async fn exchange(stream: &mut dyn Connection, bytes: &[u8], buffer: &mut Vec<u8>) -> u16 {
    stream.write_all(bytes).await.expect("writing the request");
    buffer.clear();
    loop {
        buffer.reserve(64 * 1024);
        let read = stream.read_buf(buffer).await.expect("reading the answer");
        assert!(read > 0, "the server closed the connection");
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = response.parse(buffer) {
            let length = response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| {
                    std::str::from_utf8(h.value)
                        .unwrap()
                        .parse::<usize>()
                        .unwrap()
                });
            let chunked = response
                .headers
                .iter()
                .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding") && h.value == b"chunked");
            let status = response.code.unwrap();
            let complete = match length {
                Some(length) => buffer.len() >= head + length,
                None if chunked => buffer.ends_with(b"0\r\n\r\n"),
                None => true,
            };
            if complete {
                return status;
            }
        }
    }
}

const PATHS: [&str; 4] = ["heartbeat", "mtls_heartbeat", "fleet", "converge"];

fn main() {
    let mut args = std::env::args().skip(1);
    let (what, count) = match (
        args.next(),
        args.next().and_then(|n| n.parse::<usize>().ok()),
    ) {
        (Some(what), Some(count)) if PATHS.contains(&what.as_str()) => (what, count),
        _ => {
            eprintln!("usage: instruction_counts {} N", PATHS.join("|"));
            std::process::exit(2);
        }
    };
    fleetwire::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if what == "converge" {
        runtime.block_on(reconcile_passes(count));
    } else {
        runtime.block_on(requests(&what, count));
    }
}

/// mTLS mode: the fleet CA's node certificate of node `index`, and the rustls settings its
/// connection presents it with (as `fleetwire loadgen`'s simulated nodes do).
fn node_identity(ca: &FleetCa, index: usize) -> (CertSerial, Arc<rustls::ClientConfig>) {
    let node_id = fleetwire_loadgen::node_id(index);
    // The address its heartbeats send, which its certificate must name.
    let address: std::net::Ipv4Addr = fleetwire_loadgen::bodies::address(index).parse().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let csr = fleetwire::agent::enroll::csr_pem(&key, &node_id, address.into()).unwrap();
    let issued = ca.sign(csr.as_str(), &node_id, address, &[]).unwrap();
    let mut config = client_config(
        ca.ca_pem(),
        ServerRole::Controller,
        Some((&issued.cert_pem, &key.serialize_pem())),
    )
    .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (
        CertSerial::try_from(issued.serial_hex.as_str()).unwrap(),
        Arc::new(config),
    )
}

/// Requests of `what` (every path but `converge`) served by the controller's own HTTP server,
/// as `fleetwire controller` serves them: plain mode over an in-memory connection, mTLS mode
/// through its TLS listener on loopback TCP with a connection per node, each presenting the
/// node's certificate.
async fn requests(what: &str, count: usize) {
    let mtls = what == "mtls_heartbeat";
    // Background jobs an hour apart: none runs while the requests are counted.
    let hour = Duration::from_secs(3600);
    let settings = Settings {
        plain_http: !mtls,
        flush_interval: hour,
        sweep_interval: hour,
        self_heal_interval: hour,
        probe_interval: hour,
        ..Settings::from_args(&ControllerArgs::defaults()).unwrap()
    };
    let ca_dir = tempfile::tempdir().unwrap();
    let mut ca = None;
    let mut tls = None;
    let mut identities = Vec::new();
    if mtls {
        let node_ca =
            FleetCa::open_or_create(ca_dir.path(), Duration::from_secs(30 * 86_400)).unwrap();
        let (key, _) = issue_server(&node_ca, &[ServerName::Dns("localhost".into())]).unwrap();
        tls = Some(
            server_config(
                ReloadableCert::new(key),
                // As `fleetwire controller` trusts node certificates (controller/server.rs).
                node_ca.node_ca_pem(),
                node_ca.legacy_trust(),
                ClientCerts::Optional,
            )
            .unwrap(),
        );
        identities = (0..MTLS_NODES)
            .map(|i| node_identity(&node_ca, i))
            .collect();
        ca = Some(node_ca);
    }
    let started = Controller::start(
        settings,
        Box::new(SqliteStore::in_memory().unwrap()),
        ca,
        Credentials::none(),
    )
    .unwrap();
    let controller = started.controller.clone();
    let heartbeat_nodes = if mtls { MTLS_NODES } else { HEARTBEAT_NODES };
    // Nodes that a heartbeat does not enroll go straight into the table, as their heartbeats
    // (the fleet's other nodes: serving 20,000 heartbeats first would take minutes under
    // callgrind) or their registration (mTLS: the node and its certificate's serial) would
    // leave them.
    let template: NodeHeartbeat =
        fleetwire_types::read_strict(&fleetwire_loadgen::heartbeat_body(0, 1)).unwrap();
    let direct = match what {
        "fleet" => heartbeat_nodes..FLEET_NODES,
        "mtls_heartbeat" => 0..MTLS_NODES,
        _ => 0..0,
    };
    for i in direct {
        let mut heartbeat = template.clone();
        heartbeat.node_id = fleetwire_loadgen::node_id(i).parse().unwrap();
        // Each simulated node at an address of its own, as its heartbeats send it.
        heartbeat.wg_ip.0 = fleetwire_loadgen::bodies::address(i).parse().unwrap();
        let (slot, _) = controller
            .table
            .get_or_insert(heartbeat.node_id.as_str(), || {
                nodes::enroll_by_heartbeat(&heartbeat, Timestamp::now())
            });
        let mut state = slot.lock();
        nodes::apply_heartbeat(
            &mut state,
            heartbeat,
            Instant::now(),
            Timestamp::now(),
            &controller.settings,
            // Each node's VM ids are its own: every claim is granted.
            &mut |_, _| true,
        );
        if let Some((serial, _)) = identities.get(i) {
            state.record.cert_serial = Some(serial.clone());
        }
    }

    // The service as `fleetwire controller` stacks it: the leader's, with the connection's
    // peer on each request.
    let service = Served::leading(HeartbeatFirst::new(controller.clone()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stopped = async move {
        let _ = stopped.await;
    };
    let mut clients: Vec<Box<dyn Connection>> = Vec::new();
    let server = if let Some(config) = tls {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = tcp.local_addr().unwrap();
        let listener = TlsListener::new(tcp, config).unwrap();
        let server = tokio::spawn(fleetwire::http_serve::serve(
            listener,
            move |peer: &Peer| WithPeer::new(service.clone(), peer.clone()),
            stopped,
        ));
        for (_, config) in &identities {
            let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let stream = tokio_rustls::TlsConnector::from(config.clone())
                .connect(name, tcp)
                .await
                .unwrap();
            clients.push(Box::new(stream));
        }
        server
    } else {
        let (connect, connections) = mpsc::channel(1);
        let server = tokio::spawn(fleetwire::http_serve::serve(
            MemoryListener(connections),
            move |address: &std::net::SocketAddr| {
                let peer = Peer {
                    address: *address,
                    identity: None,
                };
                WithPeer::new(service.clone(), peer)
            },
            stopped,
        ));
        let (client, server_side) = tokio::io::duplex(1 << 20);
        connect.send(server_side).await.unwrap();
        clients.push(Box::new(client));
        server
    };
    let mut buffer = Vec::with_capacity(1 << 20);
    let heartbeats: Vec<Vec<u8>> = (0..heartbeat_nodes)
        .map(|i| {
            request(
                "POST",
                "/v1/nodes/heartbeat",
                &fleetwire_loadgen::heartbeat_body(i, 1),
            )
        })
        .collect();
    // Node i's heartbeats on its own connection (mTLS), or all on the one (plain).
    let connections = clients.len();
    let connection = move |i: usize| i % connections;
    // Warm-up: every plain node enrolled by its first heartbeat, then a second round.
    for round in 0..2 {
        for (i, heartbeat) in heartbeats.iter().enumerate() {
            let status = exchange(clients[connection(i)].as_mut(), heartbeat, &mut buffer).await;
            assert_eq!(
                status,
                200,
                "warm-up round {round}: {}",
                String::from_utf8_lossy(&buffer)
            );
        }
    }
    let fleet = request("GET", "/v1/fleet", b"");
    if what == "fleet" {
        assert_eq!(
            exchange(clients[0].as_mut(), &fleet, &mut buffer).await,
            200
        );
    }
    for i in 0..count {
        let status = if what == "fleet" {
            exchange(clients[0].as_mut(), &fleet, &mut buffer).await
        } else {
            let node = i % heartbeat_nodes;
            exchange(
                clients[connection(node)].as_mut(),
                &heartbeats[node],
                &mut buffer,
            )
            .await
        };
        assert_eq!(status, 200);
    }
    drop(clients);
    let _ = stop.send(());
    let _ = server.await;
    started.writer.shutdown().await;
}

/// `count` reconcile passes of an agent on the process runtime whose desired.json holds
/// [`AGENT_INSTANCES`] running tenants (`sleep`), all running before the count starts: the
/// driver's converge on the desired document, its observation, the meters, reported.json built,
/// validated and written. The tenants die with the process (the driver's parent-death signal).
async fn reconcile_passes(count: usize) {
    use fleetwire::agent::config::AgentConfig;
    use fleetwire::agent::desired::DesiredStore;
    use fleetwire::agent::reconcile::{pass, PassState};
    use fleetwire::agent::shared::Agent;
    use fleetwire_types::{HostDesiredState, InstanceState};

    let dir = tempfile::tempdir().unwrap();
    let args = fleetwire::agent::AgentArgs {
        fleet_endpoint: Some("http://127.0.0.1:9".into()),
        node_id: Some("counted-node".into()),
        wg_ip: Some("127.0.0.1".into()),
        state_dir: Some(dir.path().display().to_string()),
        runtime: Some("process".into()),
        plain_http: Some("true".into()),
        ..Default::default()
    };
    let config = AgentConfig::from_args(&args).unwrap();
    let desired = DesiredStore::open(
        config.state_dir.join("desired.json"),
        config.host_id.clone(),
    )
    .unwrap();
    let driver = fleetwire::agent::serve::driver_for(&config).unwrap();
    let instances: Vec<serde_json::Value> = (0..AGENT_INSTANCES)
        .map(|i| {
            serde_json::json!({
                "appId": format!("app-{i:02}"), "deploymentId": "d-1", "desiredState": "running",
                "command": ["sleep", "3600"],
                "resources": {"vcpuCount": 1, "memoryMib": 64, "diskMib": 0},
                "vmId": format!("vm-{i:02}"), "tenantId": "acme", "vmType": "small"
            })
        })
        .collect();
    let document: HostDesiredState = fleetwire_types::read_strict(
        &serde_json::to_vec(&serde_json::json!({
            "hostId": config.host_id.as_str(), "generation": 1, "instances": instances
        }))
        .unwrap(),
    )
    .unwrap();
    let agent = Agent::new(config, desired, driver);
    agent.desired.replace(document).await.unwrap();
    let mut state = PassState::load(&agent);
    // Warm-up: passes until every tenant runs (their supervisors start them on tasks of
    // their own), then a few more so every path of a steady pass has run once.
    let mut running = 0;
    for _ in 0..600 {
        pass(&agent, &mut state).await;
        let published = agent.published().expect("a pass publishes");
        if published
            .observation
            .instances
            .iter()
            .filter(|i| i.state == InstanceState::Running)
            .count()
            == AGENT_INSTANCES
        {
            running += 1;
            if running == 3 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        running, 3,
        "the {AGENT_INSTANCES} tenants did not all start"
    );
    for _ in 0..count {
        pass(&agent, &mut state).await;
    }
}
