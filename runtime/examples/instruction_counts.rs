//! The hot paths as callgrind counts them: whole requests served in process, with nothing
//! between them but memory, so an instruction count (stable where a timing on a shared
//! machine is not) guards each path against growth (docs/performance.md, "Instruction
//! budgets"; `tests/perf/instruction_budget.sh` runs it under callgrind and compares the
//! counts with `tests/perf/instruction_budget.json`).
//!
//! ```sh
//! instruction_counts heartbeat N   # N PPN heartbeats over one keep-alive connection
//! instruction_counts fleet N       # N `GET /v1/fleet` at 10,000 nodes
//! ```
//!
//! Each first serves a warm-up (the nodes enrolled, every code path touched once), then the N
//! requests; the script runs two values of N and divides the difference, so what is counted is
//! one request through the HTTP parse, the route, the validated reader, the node table, the
//! write-behind mark and the answer, and nothing of the start-up. A current-thread runtime and
//! background jobs an hour apart keep the count the same from run to run.

use std::time::{Duration, Instant};

use axum::serve::Listener;
use fleetwire::controller::http::heartbeat_route::HeartbeatFirst;
use fleetwire::controller::rules::nodes;
use fleetwire::controller::shared::{Controller, Credentials};
use fleetwire::controller::{ControllerArgs, Settings};
use fleetwire::store::sqlite::SqliteStore;
use fleetwire_types::{NodeHeartbeat, Timestamp};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Nodes in the fleet the heartbeats come from.
const HEARTBEAT_NODES: usize = 100;
/// Nodes in the fleet `GET /v1/fleet` renders (issue 27's figure).
const FLEET_NODES: usize = 10_000;

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

/// Sends `bytes` and reads one answer whole (by its content-length); returns its status.
async fn exchange(stream: &mut DuplexStream, bytes: &[u8], buffer: &mut Vec<u8>) -> u16 {
    stream.write_all(bytes).await.expect("writing the request");
    buffer.clear();
    loop {
        let mut chunk = [0u8; 64 * 1024];
        let read = stream.read(&mut chunk).await.expect("reading the answer");
        assert!(read > 0, "the server closed the connection");
        buffer.extend_from_slice(&chunk[..read]);
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

fn main() {
    let mut args = std::env::args().skip(1);
    let (what, count) = match (
        args.next(),
        args.next().and_then(|n| n.parse::<usize>().ok()),
    ) {
        (Some(what), Some(count)) if what == "heartbeat" || what == "fleet" => (what, count),
        _ => {
            eprintln!("usage: instruction_counts heartbeat|fleet N");
            std::process::exit(2);
        }
    };
    fleetwire::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        // Background jobs an hour apart: none runs while the requests are counted.
        let hour = Duration::from_secs(3600);
        let settings = Settings {
            plain_http: true,
            flush_interval: hour,
            sweep_interval: hour,
            self_heal_interval: hour,
            probe_interval: hour,
            ..Settings::from_args(&ControllerArgs::defaults()).unwrap()
        };
        let started = Controller::start(
            settings,
            Box::new(SqliteStore::in_memory().unwrap()),
            None,
            Credentials::none(),
        )
        .unwrap();
        let controller = started.controller.clone();
        let (connect, connections) = mpsc::channel(1);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = HeartbeatFirst::new(controller.clone());
        let server = tokio::spawn(fleetwire::http_serve::serve(
            MemoryListener(connections),
            move |_| service.clone(),
            async move {
                let _ = stopped.await;
            },
        ));
        let (mut client, server_side) = tokio::io::duplex(1 << 20);
        connect.send(server_side).await.unwrap();
        let mut buffer = Vec::with_capacity(1 << 20);

        let heartbeat_nodes = HEARTBEAT_NODES;
        if what == "fleet" {
            // The fleet's other nodes go straight into the table, as their heartbeats would
            // put them (as the `controller_hot_path` bench does): serving 20,000 heartbeats
            // first would take minutes under callgrind.
            let template: NodeHeartbeat =
                fleetwire_types::read_strict(&fleetwire::loadgen::heartbeat_body(0, 1)).unwrap();
            for i in heartbeat_nodes..FLEET_NODES {
                let mut heartbeat = template.clone();
                heartbeat.node_id = fleetwire::loadgen::node_id(i).parse().unwrap();
                let (slot, _) = controller
                    .table
                    .get_or_insert(heartbeat.node_id.as_str(), || {
                        nodes::enroll_by_heartbeat(&heartbeat, Timestamp::now())
                    });
                nodes::apply_heartbeat(
                    &mut slot.lock(),
                    heartbeat,
                    Instant::now(),
                    Timestamp::now(),
                    &controller.settings,
                    // Each node's VM ids are its own: every claim is granted.
                    &mut |_, _| true,
                );
            }
        }
        let heartbeats: Vec<Vec<u8>> = (0..heartbeat_nodes)
            .map(|i| {
                request(
                    "POST",
                    "/v1/nodes/heartbeat",
                    &fleetwire::loadgen::heartbeat_body(i, 1),
                )
            })
            .collect();
        // Warm-up: every node enrolled by its first heartbeat, then a second round.
        for round in 0..2 {
            for heartbeat in &heartbeats {
                let status = exchange(&mut client, heartbeat, &mut buffer).await;
                assert_eq!(status, 200, "warm-up round {round}");
            }
        }
        let fleet = request("GET", "/v1/fleet", b"");
        assert_eq!(exchange(&mut client, &fleet, &mut buffer).await, 200);

        for i in 0..count {
            let status = if what == "heartbeat" {
                exchange(&mut client, &heartbeats[i % heartbeat_nodes], &mut buffer).await
            } else {
                exchange(&mut client, &fleet, &mut buffer).await
            };
            assert_eq!(status, 200);
        }
        drop(client);
        let _ = stop.send(());
        let _ = server.await;
        started.writer.shutdown().await;
    });
}
