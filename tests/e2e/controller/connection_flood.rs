//! A stranger costs the controller nothing it needs for its nodes (issue 28): a controller whose
//! descriptor limit is 1024 (soft and hard), held by 1,000 idle connections that say nothing
//! and are opened again as soon as they close, still takes an enrolled node's heartbeats, each
//! on a fresh connection. In mTLS mode the idle connections finish a TLS handshake without a
//! certificate; in `--plain-http` mode (PPN's wire, nothing to tell a node from a stranger)
//! they are bare TCP, and a node's keep-alive connection and an operator's reads get through
//! too (docs/security.md, "A stranger costs little").

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::controller_harness::*;

const IDLE: usize = 1000;
/// Longer than the controller's handshake (10 s) and header (30 s) deadlines.
const UNDER_FLOOD: Duration = Duration::from_secs(40);

/// The controller's descriptor limit is 1024, soft and hard.
fn assert_nofile_1024(controller: &ControllerProcess) {
    let limits =
        std::fs::read_to_string(format!("/proc/{}/limits", controller.process.child.id())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert_eq!(
        line.split_whitespace().filter(|w| *w == "1024").count(),
        2,
        "{line}"
    );
}

/// [`IDLE`] connections made by `connect`, held by a thread of their own, each made again once
/// `closed` says the controller closed it (polled every 100 ms).
struct Flood {
    stop: Arc<AtomicBool>,
    reopened: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

impl Flood {
    fn start<C: 'static>(
        connect: impl Fn() -> Option<C> + Send + 'static,
        closed: impl Fn(&mut C) -> bool + Send + 'static,
    ) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let reopened = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (stop, reopened) = (stop.clone(), reopened.clone());
            std::thread::spawn(move || {
                let mut idle: Vec<Option<C>> = (0..IDLE).map(|_| connect()).collect();
                let held = idle.iter().filter(|c| c.is_some()).count();
                eprintln!("the flood holds {held} idle connections");
                while !stop.load(Ordering::Relaxed) {
                    for slot in idle.iter_mut() {
                        if slot.as_mut().is_none_or(&closed) {
                            *slot = connect();
                            reopened.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Flood {
            stop,
            reopened,
            thread,
        }
    }

    /// Stops it; how many connections it opened again meanwhile.
    fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.reopened.load(Ordering::Relaxed)
    }
}

/// Panics naming `what` and when unless `request` answers 200 within 5 s.
async fn ok_within_5_s(
    what: &str,
    started: Instant,
    request: impl std::future::Future<Output = reqwest::Result<reqwest::Response>>,
) {
    let status = match tokio::time::timeout(Duration::from_secs(5), request).await {
        Ok(Ok(answer)) => answer.status().as_u16(),
        Ok(Err(e)) => panic!("{what} at {:?} failed: {e}", started.elapsed()),
        Err(_) => panic!("{what} at {:?} took over 5 s", started.elapsed()),
    };
    assert_eq!(status, 200, "{what} at {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_heartbeats_go_through_a_thousand_idle_connections_at_1024_descriptors() {
    let controller = ControllerProcess::start_with_nofile(true, 1024);
    assert_nofile_1024(&controller);
    let (cert, key_pem) = enroll(&controller, "n1", 9).await;
    let ca_pem = controller.ca_pem();

    // Connections that finish a TLS handshake without a client certificate (as an operator's
    // client does) and then say nothing.
    let tls = {
        use rustls::pki_types::pem::PemObject;
        crate::support::install_crypto_provider();
        let mut roots = rustls::RootCertStore::empty();
        for ca in rustls::pki_types::CertificateDer::pem_slice_iter(&ca_pem) {
            roots.add(ca.unwrap()).unwrap();
        }
        Arc::new(
            rustls::ClientConfig::builder()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    };
    let port = controller.port;
    let flood = Flood::start(
        move || {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
            stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let mut tls = rustls::ClientConnection::new(tls.clone(), name).ok()?;
            while tls.is_handshaking() {
                tls.complete_io(&mut stream).ok()?;
            }
            stream.set_nonblocking(true).ok()?;
            Some((stream, tls))
        },
        // The server's end, or an alert; its session tickets are read.
        |(stream, tls): &mut (TcpStream, rustls::ClientConnection)| match tls.read_tls(stream) {
            Ok(0) => true,
            Ok(_) => tls
                .process_new_packets()
                .map_or(true, |state| state.peer_has_closed()),
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        },
    );
    tokio::time::sleep(Duration::from_secs(5)).await;

    // A heartbeat every second, each from a new client (a fresh connection and handshake).
    let started = Instant::now();
    let mut beats = 0;
    while started.elapsed() < UNDER_FLOOD {
        let node = tls_client(&ca_pem, Some((&cert, &key_pem)));
        let beat = node
            .post(controller.url("/v1/nodes/heartbeat"))
            .json(&ppn_heartbeat("n1", "127.0.0.1", 9))
            .send();
        ok_within_5_s(&format!("heartbeat {beats}"), started, beat).await;
        beats += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let reopened = flood.stop();
    // A heartbeat a second, less the time each took on this shared machine.
    assert!(beats >= 10, "{beats}");
    eprintln!("{beats} heartbeats taken; the flood reopened {reopened} connections");
    // The controller closed idle connections and the flood opened them again meanwhile.
    assert!(reopened > 0);
}

/// One PPN heartbeat of `node_id` as raw HTTP/1.1 on `stream`, a keep-alive connection; its
/// answer's status. Fails if the controller closed the connection.
fn keep_alive_heartbeat(stream: &mut TcpStream, node_id: &str) -> u16 {
    let body = ppn_heartbeat(node_id, "127.0.0.1", 10).to_string();
    write!(
        stream,
        "POST /v1/nodes/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("the node's keep-alive connection takes the heartbeat");
    crate::support::read_http_answer(stream).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_mode_serves_nodes_and_operators_through_a_thousand_idle_connections_at_1024_descriptors(
) {
    let controller = ControllerProcess::start_with_nofile(false, 1024);
    assert_nofile_1024(&controller);
    // Two registered nodes (plain mode: PPN's registration, no credentials): n1 heartbeats on
    // a fresh connection each time, n2 on one keep-alive connection, as a PPN agent's HTTP
    // client does.
    register_ok(&client(), &controller, &registration("n1", 9, 100)).await;
    register_ok(&client(), &controller, &registration("n2", 10, 100)).await;
    let mut kept = TcpStream::connect(("127.0.0.1", controller.port)).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(keep_alive_heartbeat(&mut kept, "n2"), 200);

    // Bare TCP connections that send nothing.
    let port = controller.port;
    let flood = Flood::start(
        move || {
            let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let stream = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
            stream.set_nonblocking(true).ok()?;
            Some(stream)
        },
        |stream: &mut TcpStream| match stream.read(&mut [0u8; 512]) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        },
    );
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Every second: n1's heartbeat from a new client, an operator's read from a new client,
    // and n2's heartbeat on its keep-alive connection; each answered within 5 s.
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < UNDER_FLOOD {
        let beat = client()
            .post(controller.url("/v1/nodes/heartbeat"))
            .json(&ppn_heartbeat("n1", "127.0.0.1", 9))
            .send();
        ok_within_5_s(&format!("n1's heartbeat {rounds}"), started, beat).await;
        let read = client().get(controller.url("/v1/nodes/n2")).send();
        ok_within_5_s(&format!("the operator's read {rounds}"), started, read).await;
        assert_eq!(
            keep_alive_heartbeat(&mut kept, "n2"),
            200,
            "n2's keep-alive heartbeat {rounds}"
        );
        rounds += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let reopened = flood.stop();
    assert!(rounds >= 10, "{rounds}");
    eprintln!("{rounds} rounds served; the flood reopened {reopened} connections");
    // The controller closed idle connections for the newcomers and the flood opened them
    // again meanwhile.
    assert!(reopened > 0);
}
