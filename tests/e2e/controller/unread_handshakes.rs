//! A node's connection whose last handshake flight the controller has not read yet is not
//! dropped for a newcomer (issue 27). In TLS 1.3 a client takes the handshake as done once it
//! has sent its certificate and `Finished`, and sends its request; a controller that falls
//! behind a burst of handshakes (3,000 nodes connecting on a busy machine) has those flights
//! unread in its sockets. Dropping the oldest of them when a newcomer finds every handshake
//! slot taken (issue 28's defence against connections that say nothing) reset connections the
//! nodes held as open: their first heartbeat met `Connection reset by peer`.
//!
//! The lag is made certain here by stopping the controller (SIGSTOP): every node connection
//! gets the server's flight, then, while it is stopped, newcomers connect and the nodes send
//! their last flight and a heartbeat; once it resumes, every node must be answered `200`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustix::process::Signal;

use crate::support::controller_harness::*;
use crate::support::send_signal;

/// The controller's handshake slots (128, `tls_server`'s `ACCEPTED_UNSERVED`) less the one its
/// accept loop holds while it waits for the next connection: all taken by the nodes.
const NODES: usize = 127;
/// Connections that say nothing, queued while the controller is stopped.
const NEWCOMERS: usize = 32;

/// rustls client settings presenting the node certificate `cert` with `key` (PEM), trusting
/// `ca_pem` only.
fn node_tls(ca_pem: &[u8], cert: &str, key: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    crate::support::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(ca.unwrap()).unwrap();
    }
    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .unwrap(),
    )
}

/// A connection brought to the client's last flight: the ClientHello sent and the server's
/// flight read, so the client holds the handshake done; its certificate, `Finished` and then
/// `request` are queued, not sent.
fn up_to_the_last_flight(
    port: u16,
    tls: &Arc<rustls::ClientConfig>,
    request: &[u8],
) -> (TcpStream, rustls::ClientConnection) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut client = rustls::ClientConnection::new(tls.clone(), name).unwrap();
    while client.wants_write() {
        client.write_tls(&mut stream).unwrap();
    }
    while client.is_handshaking() {
        assert_ne!(
            client.read_tls(&mut stream).unwrap(),
            0,
            "closed mid-handshake"
        );
        client.process_new_packets().unwrap();
    }
    client.writer().write_all(request).unwrap();
    (stream, client)
}

/// Whether every thread of process `pid` is stopped (state `T` in `/proc/PID/task/*/stat`).
fn all_threads_stopped(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .all(|task| {
            let stat =
                std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap_or_default();
            // The state follows the command's closing parenthesis.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        })
}

/// The bytes received and not yet read on the controller's end (`port`) of each connection
/// from the local ports `from`, by the kernel's table (`/proc/net/tcp`'s `rx_queue`).
fn unread_at_the_controller(port: u16, from: &[u16]) -> Vec<Option<u64>> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port_of = |address: &str| u16::from_str_radix(address.rsplit(':').next()?, 16).ok();
    let mut unread = vec![None; from.len()];
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote)) = (port_of(fields[1]), port_of(fields[2])) else {
            continue;
        };
        if local != port {
            continue;
        }
        if let Some(at) = from.iter().position(|p| *p == remote) {
            let rx = fields[4].split(':').nth(1).unwrap();
            unread[at] = Some(u64::from_str_radix(rx, 16).unwrap());
        }
    }
    unread
}

/// The status of the answer to the request sent on `client`, or why none came.
fn answer_status(
    stream: &mut TcpStream,
    client: &mut rustls::ClientConnection,
) -> Result<u16, String> {
    let mut answer = Vec::new();
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match client.read_tls(stream) {
            Ok(0) => return Err("closed by the controller".into()),
            Ok(_) => {}
            Err(error) => return Err(error.to_string()),
        }
        client.process_new_packets().map_err(|e| e.to_string())?;
        let mut chunk = [0u8; 4096];
        match client.reader().read(&mut chunk) {
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let head = String::from_utf8_lossy(&answer);
    head.split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {head:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_whose_last_flight_is_unread_are_not_dropped_for_newcomers() {
    let controller = ControllerProcess::start_secure(&[]);
    let (cert, key) = enroll(&controller, "n1", 9).await;
    let tls = node_tls(&controller.ca_pem(), &cert, &key);
    let body = ppn_heartbeat("n1", "127.0.0.1", 9).to_string();
    let request = format!(
        "POST /v1/nodes/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let port = controller.port;
    let pid = controller.process.child.id();
    let outcomes = tokio::task::spawn_blocking(move || {
        // Within the controller's handshake deadline (10 s) from the first connection.
        let mut nodes: Vec<_> = (0..NODES)
            .map(|_| up_to_the_last_flight(port, &tls, request.as_bytes()))
            .collect();
        assert!(send_signal(pid, Signal::STOP));
        // Stopped, every thread, before the newcomers connect (a signal is delivered, not
        // obeyed, when `kill` returns).
        crate::support::wait_for("the controller to stop", Duration::from_secs(5), || {
            all_threads_stopped(pid).then_some(())
        });
        // Queued in the listen backlog before the nodes' flights arrive.
        let newcomers: Vec<_> = (0..NEWCOMERS)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        let mut sent = Vec::with_capacity(NODES);
        for (stream, client) in &mut nodes {
            let mut bytes = 0;
            while client.wants_write() {
                bytes += client.write_tls(stream).unwrap() as u64;
            }
            sent.push(Some(bytes));
        }
        // Arrived, all of it, in the controller's sockets before it resumes: it is the
        // controller that is behind, not the way (a flight still in transit is the client's
        // to finish, and its handshake may be dropped for a newcomer).
        let from: Vec<u16> = nodes
            .iter()
            .map(|(stream, _)| stream.local_addr().unwrap().port())
            .collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let unread = unread_at_the_controller(port, &from);
            if unread == sent {
                break;
            }
            if std::time::Instant::now() > deadline {
                let short: Vec<_> = (0..NODES)
                    .filter(|at| unread[*at] != sent[*at])
                    .map(|at| (at, unread[at], sent[at]))
                    .collect();
                panic!("not all arrived (index, unread, sent): {short:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(send_signal(pid, Signal::CONT));
        let outcomes: Vec<_> = nodes
            .iter_mut()
            .map(|(stream, client)| answer_status(stream, client))
            .collect();
        drop(newcomers);
        outcomes
    })
    .await
    .unwrap();
    let failed: Vec<_> = outcomes
        .iter()
        .enumerate()
        .filter(|(_, outcome)| *outcome != &Ok(200))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {NODES} nodes' heartbeats not answered 200 (node index, outcome): {failed:?}",
        failed.len()
    );
}
