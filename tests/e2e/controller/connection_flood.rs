//! A stranger costs the controller nothing it needs for its nodes (issue 28): a controller
//! whose descriptor limit is 1024 (soft and hard), held by 1,000 idle connections that say
//! nothing and are opened again as soon as they close, still takes a node's heartbeats, each
//! on a fresh connection: in mTLS mode (the idle connections finished a TLS handshake without
//! a certificate) and in `--plain-http` mode (they only connected).

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::controller_harness::*;
use fleetwire_types::{CreateBootstrapTokenRequest, RegisterNodeRequest};

const IDLE: usize = 1000;

/// `fleetwire controller` in mTLS mode (with [`ADMIN_TOKEN`]) or `--plain-http` in `dir`, its
/// descriptor limit 1024 soft and hard; serving once this returns. Its port.
async fn controller_at_1024(dir: &std::path::Path, plain: bool) -> (crate::support::Running, u16) {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let tokens = dir.join("operator-tokens");
    std::fs::write(&tokens, format!("{ADMIN_TOKEN},ops-admin,admin\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = crate::support::free_port();
    let mut command = crate::support::fleetwire();
    command
        .arg("controller")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--db")
        .arg(dir.join("controller.sqlite3"))
        .arg("--data-dir")
        .arg(dir)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("controller.log")).unwrap());
    if plain {
        command.arg("--plain-http");
    } else {
        command.arg("--operator-token-file").arg(&tokens);
    }
    // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 1024,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let running = crate::support::Running::spawn(&mut command);
    eventually(
        "the controller to serve",
        Duration::from_secs(20),
        || async {
            let answer = if plain {
                client().get(format!("http://127.0.0.1:{port}/readyz"))
            } else {
                let ca = std::fs::read(dir.join("ca/ca.pem")).ok()?;
                tls_client(&ca, None).get(format!("https://127.0.0.1:{port}/readyz"))
            }
            .send()
            .await
            .ok()?;
            (answer.status() == 200).then_some(())
        },
    )
    .await;
    (running, port)
}

/// The controller's descriptor limit is 1024, soft and hard.
fn assert_descriptor_limit_1024(controller: &crate::support::Running) {
    let limits =
        std::fs::read_to_string(format!("/proc/{}/limits", controller.child.id())).unwrap();
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

/// Sends a heartbeat a second for 40 s (longer than the controller's handshake and header
/// deadlines), each from a new client (a fresh connection), with `send`; every one must be
/// answered 200 within 5 s. Returns how many were sent.
async fn heartbeats_for_40_s<F, Fut>(mut send: F) -> usize
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = reqwest::Result<reqwest::Response>>,
{
    let started = Instant::now();
    let mut beats = 0;
    while started.elapsed() < Duration::from_secs(40) {
        let status = match tokio::time::timeout(Duration::from_secs(5), send()).await {
            Ok(Ok(answer)) => answer.status().as_u16(),
            Ok(Err(e)) => panic!("heartbeat {beats} at {:?} failed: {e}", started.elapsed()),
            Err(_) => panic!("heartbeat {beats} at {:?} took over 5 s", started.elapsed()),
        };
        assert_eq!(status, 200, "heartbeat {beats}");
        beats += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // A heartbeat a second, less the time each took on this shared machine.
    assert!(beats >= 10, "{beats}");
    beats
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_mode_heartbeats_go_through_a_thousand_idle_connections_at_1024_descriptors() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let (controller, port) = controller_at_1024(dir, true).await;
    assert_descriptor_limit_1024(&controller);
    // 1,000 connections that say nothing, each opened again once the controller closes it.
    let stop = Arc::new(AtomicBool::new(false));
    let reopened = Arc::new(AtomicUsize::new(0));
    let flood = {
        let (stop, reopened) = (stop.clone(), reopened.clone());
        std::thread::spawn(move || {
            let connect = || {
                let stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
                stream.set_nonblocking(true).ok()?;
                Some(stream)
            };
            let mut idle: Vec<_> = (0..IDLE).map(|_| connect()).collect();
            let held = idle.iter().filter(|c| c.is_some()).count();
            eprintln!("the flood holds {held} idle connections");
            while !stop.load(Ordering::Relaxed) {
                for slot in idle.iter_mut() {
                    let closed = match slot {
                        None => true,
                        Some(stream) => match std::io::Read::read(stream, &mut [0u8; 512]) {
                            Ok(0) => true,
                            Ok(_) => false,
                            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                        },
                    };
                    if closed {
                        *slot = connect();
                        reopened.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let url = format!("http://127.0.0.1:{port}/v1/nodes/heartbeat");
    let beats = heartbeats_for_40_s(|| {
        client()
            .post(&url)
            .json(&ppn_heartbeat("plain-1", "127.0.0.1", 9))
            .send()
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    eprintln!(
        "{beats} heartbeats taken; the flood reopened {} connections",
        reopened.load(Ordering::Relaxed)
    );
    assert!(reopened.load(Ordering::Relaxed) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_heartbeats_go_through_a_thousand_idle_connections_at_1024_descriptors() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let (controller, port) = controller_at_1024(dir, false).await;
    assert_descriptor_limit_1024(&controller);
    let ca_pem = std::fs::read(dir.join("ca/ca.pem")).unwrap();
    let url = |path: &str| format!("https://127.0.0.1:{port}{path}");
    let admin = fleetwire_client::Client::builder(url(""))
        .fleet_ca_pem(String::from_utf8(ca_pem.clone()).unwrap())
        .operator_token(ADMIN_TOKEN)
        .build()
        .unwrap();
    let anonymous = fleetwire_client::Client::builder(url(""))
        .fleet_ca_pem(String::from_utf8(ca_pem.clone()).unwrap())
        .build()
        .unwrap();

    // An enrolled node.
    let token = admin
        .create_bootstrap_token(&CreateBootstrapTokenRequest {
            node_id: "n1".parse().unwrap(),
            ttl_s: Some(600),
        })
        .await
        .unwrap()
        .token
        .to_string();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut body = registration("n1", 9, 100);
    body["csr_pem"] = plain_csr(&key, "n1").into();
    let request: RegisterNodeRequest = typed(&body);
    let cert = anonymous
        .with_bootstrap_token(token.as_str())
        .unwrap()
        .register_node(&request)
        .await
        .unwrap()
        .into_inner()
        .cert_pem
        .unwrap()
        .to_string();
    let key_pem = key.serialize_pem();

    // 1,000 connections that finish a TLS handshake without a client certificate (as an
    // operator's client does) and then say nothing, each opened again once the controller
    // closes it.
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
    let stop = Arc::new(AtomicBool::new(false));
    let reopened = Arc::new(AtomicUsize::new(0));
    let flood = {
        let (stop, reopened) = (stop.clone(), reopened.clone());
        std::thread::spawn(move || {
            let connect = || {
                let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
                stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
                let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
                let mut tls = rustls::ClientConnection::new(tls.clone(), name).ok()?;
                while tls.is_handshaking() {
                    tls.complete_io(&mut stream).ok()?;
                }
                stream.set_nonblocking(true).ok()?;
                Some((stream, tls))
            };
            let mut idle: Vec<_> = (0..IDLE).map(|_| connect()).collect();
            let held = idle.iter().filter(|c| c.is_some()).count();
            eprintln!("the flood holds {held} idle TLS connections");
            while !stop.load(Ordering::Relaxed) {
                for slot in idle.iter_mut() {
                    let closed = match slot {
                        None => true,
                        // The server's end, or an alert; its session tickets are read.
                        Some((stream, tls)) => match tls.read_tls(stream) {
                            Ok(0) => true,
                            Ok(_) => tls
                                .process_new_packets()
                                .map_or(true, |state| state.peer_has_closed()),
                            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                        },
                    };
                    if closed {
                        *slot = connect();
                        reopened.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Each heartbeat from a new client: a fresh connection and handshake.
    let heartbeat_url = url("/v1/nodes/heartbeat");
    let beats = heartbeats_for_40_s(|| {
        tls_client(&ca_pem, Some((&cert, &key_pem)))
            .post(&heartbeat_url)
            .json(&ppn_heartbeat("n1", "127.0.0.1", 9))
            .send()
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    eprintln!(
        "{beats} heartbeats taken; the flood reopened {} connections",
        reopened.load(Ordering::Relaxed)
    );
    // The controller closed idle connections and the flood opened them again meanwhile.
    assert!(reopened.load(Ordering::Relaxed) > 0);
}
