//! A stranger costs the controller nothing it needs for its nodes (issue 28): a controller in
//! mTLS mode whose descriptor limit is 1024 (soft and hard), held by 1,000 idle connections
//! that finished a TLS handshake without a certificate, say nothing and are opened again as
//! soon as they close, still takes an enrolled node's heartbeats, each on a fresh connection.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::controller_harness::*;
use fleetwire_types::{CreateBootstrapTokenRequest, RegisterNodeRequest};

const IDLE: usize = 1000;

/// `fleetwire controller` in mTLS mode in `dir`, its descriptor limit 1024 soft and hard, with
/// [`ADMIN_TOKEN`]; serving once this returns. Its port.
async fn controller_at_1024(dir: &std::path::Path) -> (crate::support::Running, u16) {
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
        .arg("--operator-token-file")
        .arg(&tokens)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("controller.log")).unwrap());
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
            let ca = std::fs::read(dir.join("ca/ca.pem")).ok()?;
            let answer = tls_client(&ca, None)
                .get(format!("https://127.0.0.1:{port}/readyz"))
                .send()
                .await
                .ok()?;
            (answer.status() == 200).then_some(())
        },
    )
    .await;
    (running, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_heartbeats_go_through_a_thousand_idle_connections_at_1024_descriptors() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let (controller, port) = controller_at_1024(dir).await;
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

    // For 40 s (longer than the controller's handshake and header deadlines), a heartbeat
    // every second, each from a new client (a fresh connection and handshake): every one is
    // taken within 5 s.
    let started = Instant::now();
    let mut beats = 0;
    while started.elapsed() < Duration::from_secs(40) {
        let node = tls_client(&ca_pem, Some((&cert, &key_pem)));
        let sent = tokio::time::timeout(
            Duration::from_secs(5),
            node.post(url("/v1/nodes/heartbeat"))
                .json(&ppn_heartbeat("n1", "127.0.0.1", 9))
                .send(),
        )
        .await;
        let status = match sent {
            Ok(Ok(answer)) => answer.status().as_u16(),
            Ok(Err(e)) => panic!("heartbeat {beats} at {:?} failed: {e}", started.elapsed()),
            Err(_) => panic!("heartbeat {beats} at {:?} took over 5 s", started.elapsed()),
        };
        assert_eq!(status, 200, "heartbeat {beats}");
        beats += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    // A heartbeat a second, less the time each took on this shared machine.
    assert!(beats >= 10, "{beats}");
    eprintln!(
        "{beats} heartbeats taken; the flood reopened {} connections",
        reopened.load(Ordering::Relaxed)
    );
    // The controller closed idle connections and the flood opened them again meanwhile.
    assert!(reopened.load(Ordering::Relaxed) > 0);
}
