//! The agent's secure mode (docs/security.md) against an HTTPS stand-in controller whose fleet
//! CA is made here (the real `FleetCa`, with the certificate marks of `fleet_identity`): the
//! agent enrolls with its bootstrap token, then heartbeats and renews over mTLS with its node
//! certificate; its local API takes only the controller's certificate; a certificate the
//! controller stops taking sends the agent back to a bootstrap token, read again from its file.
//! The token never reaches the agent's log.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::agent_harness::agent_command;
use crate::support::{free_port, install_crypto_provider, wait_for, Running};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use fleetwire::controller::trust::certs::{FleetCa, ServerName};
use fleetwire::fleet_identity::{identify, PeerIdentity};
use fleetwire::tls_server::{
    certified_key, identity_of, server_config, ClientCerts, IdentifyPeers, ReloadableCert,
    TlsListener,
};
use fleetwire_types::{NodeHeartbeat, RegisterNodeRequest, RegisterNodeResponse};
use rcgen::{CertificateParams, CertificateSigningRequestParams, KeyPair, PublicKeyData};
use serde_json::{json, Value};
use tokio::sync::oneshot;

const NODE: &str = "node-1";
/// Two single-use bootstrap tokens bound to `NODE`.
const TOKEN: &str = "k3x9qa.7d2mfp0w8zr4t6yb";
const SECOND_TOKEN: &str = "m4n8pq.2b6c9d1e5f7g3h0j";
/// The node certificates' validity: short, so the agent renews (at 6 s) during the test.
const VALIDITY: Duration = Duration::from_secs(9);

/// How a registration was authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Via {
    Token(String),
    /// The node certificate with this serial.
    Cert(String),
}

#[derive(Debug, Clone)]
struct Registration {
    via: Via,
    /// The CSR's public key.
    key: Vec<u8>,
    /// The serial of the certificate issued.
    issued: String,
    at: Instant,
}

#[derive(Default)]
struct Seen {
    registrations: Vec<Registration>,
    /// When each heartbeat came, with the serial of the certificate it came with.
    heartbeats: Vec<(Instant, String)>,
    /// The serial the controller takes for the node (`None`: none, as after a revocation).
    current: Option<String>,
    /// Bootstrap tokens not used yet.
    tokens: Vec<String>,
    refused: Vec<String>,
    /// Answer registrations over the certificate 503, as a controller that cannot sign now.
    refuse_renewals: bool,
}

struct Standin {
    seen: Mutex<Seen>,
    /// The fleet CA, signing as the controller does (`controller::trust::certs`).
    ca: FleetCa,
    ca_pem: String,
}

fn api_error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({"code": code, "message": message}))).into_response()
}

fn serial_of(cert_pem: &str) -> String {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).unwrap();
    match identify(&pem.contents) {
        Some(PeerIdentity::Node { serial_hex, .. }) => serial_hex,
        other => panic!("not a node certificate: {other:?}"),
    }
}

async fn register(State(standin): State<Arc<Standin>>, request: Request) -> Response {
    let peer = identity_of(&request).cloned();
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let body = axum::body::to_bytes(request.into_body(), 1 << 20)
        .await
        .unwrap();
    let req: RegisterNodeRequest = fleetwire_types::read_strict(&body).expect("a valid request");
    let mut seen = standin.seen.lock().unwrap();
    let via = match (peer, bearer) {
        (
            Some(PeerIdentity::Node {
                node_id,
                serial_hex,
            }),
            _,
        ) => {
            if node_id != req.node_id.as_str() {
                return api_error(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "another node's certificate",
                );
            }
            if seen.current.as_deref() != Some(serial_hex.as_str()) {
                return api_error(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "not the node's current certificate",
                );
            }
            if seen.refuse_renewals {
                return api_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "not now",
                );
            }
            Via::Cert(serial_hex)
        }
        (_, Some(token)) => {
            let Some(i) = seen.tokens.iter().position(|t| *t == token) else {
                seen.refused.push(token);
                return api_error(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "unknown or used bootstrap token",
                );
            };
            seen.tokens.remove(i);
            Via::Token(token)
        }
        _ => return api_error(StatusCode::UNAUTHORIZED, "unauthorized", "no credential"),
    };
    let csr_pem = req.csr_pem.as_ref().unwrap().as_str();
    let csr = CertificateSigningRequestParams::from_pem(csr_pem).expect("a CSR");
    let cert = standin
        .ca
        .sign(csr_pem, req.node_id.as_str(), Ipv4Addr::LOCALHOST, &[])
        .expect("a CSR the CA signs")
        .cert_pem;
    let issued = serial_of(&cert);
    seen.current = Some(issued.clone());
    seen.registrations.push(Registration {
        via,
        key: csr.public_key.der_bytes().to_vec(),
        issued,
        at: Instant::now(),
    });
    let answer = json!({
        "node": {
            "node_id": req.node_id, "hostname": req.hostname, "wg_ip": req.wg_ip,
            "ram_available_mb": req.total_memory_mb, "vm_count": 0, "kvm_available": req.kvm_available,
            "last_heartbeat": "2026-11-30T09:30:00Z", "status": "registering", "runtime": req.runtime,
        },
        "cert_pem": cert,
        "ca_pem": standin.ca_pem,
    });
    assert!(fleetwire_types::validate_value::<RegisterNodeResponse>(&answer).is_empty());
    (StatusCode::OK, Json(answer)).into_response()
}

async fn heartbeat(State(standin): State<Arc<Standin>>, request: Request) -> Response {
    let peer = identity_of(&request).cloned();
    let body = axum::body::to_bytes(request.into_body(), 1 << 20)
        .await
        .unwrap();
    fleetwire_types::read_strict::<NodeHeartbeat>(&body).expect("a valid NodeHeartbeat");
    let mut seen = standin.seen.lock().unwrap();
    match peer {
        Some(PeerIdentity::Node {
            node_id,
            serial_hex,
        }) if node_id == NODE && seen.current.as_deref() == Some(serial_hex.as_str()) => {
            seen.heartbeats.push((Instant::now(), serial_hex));
            StatusCode::OK.into_response()
        }
        _ => api_error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "not the node's current certificate",
        ),
    }
}

/// The stand-in controller's HTTPS server, on a thread of its own; stopped when dropped.
struct TlsServer {
    port: u16,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TlsServer {
    fn start(router: Router, ca: &FleetCa) -> TlsServer {
        let own = ca
            .issue_controller_server(&[ServerName::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST))])
            .unwrap();
        let cert = ReloadableCert::new(
            certified_key(&own.cert_pem, &own.key_pem, "the stand-in's certificate").unwrap(),
        );
        // Client certificates are nodes': the node CA's.
        let config =
            server_config(cert, &ca.node_trust_pem(), None, ClientCerts::Optional).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let tcp = tokio::net::TcpListener::from_std(listener).unwrap();
                let tls = TlsListener::new(tcp, config).unwrap();
                axum::serve(tls, IdentifyPeers::new(router))
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        TlsServer {
            port,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A client of the agent's local API trusting `roots` (the node CA, which issued the
/// agent's certificate), presenting `identity` (PEM certificate and key) when given.
fn local_client(roots: &str, identity: Option<String>) -> reqwest::blocking::Client {
    install_crypto_provider();
    let mut builder = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .tls_info(true)
        .tls_certs_only(reqwest::Certificate::from_pem_bundle(roots.as_bytes()).unwrap())
        // The agent's certificate names the node, not loopback: reached by its id.
        .resolve(NODE, std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    if let Some(pem) = identity {
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    builder.build().unwrap()
}

/// The certificate the agent's local API served on this answer.
fn served_certificate(resp: &reqwest::blocking::Response) -> Vec<u8> {
    resp.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("TLS info with the peer certificate")
        .to_vec()
}

fn der_of(cert_pem: &str) -> Vec<u8> {
    x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
        .unwrap()
        .1
        .contents
}

fn key_of(path: &Path) -> Vec<u8> {
    KeyPair::from_pem(&std::fs::read_to_string(path).unwrap())
        .unwrap()
        .der_bytes()
        .to_vec()
}

/// The stand-in controller with its CA in `dir/ca`, taking `TOKEN` once.
struct Fleet {
    ca: FleetCa,
    ca_pem: String,
    standin: Arc<Standin>,
    server: TlsServer,
}

impl Fleet {
    fn start(dir: &Path) -> Fleet {
        let ca = FleetCa::open_or_create(&dir.join("ca"), VALIDITY).unwrap();
        let ca_pem = ca.ca_pem().to_string();
        // The same CA, opened again for the stand-in's own signing.
        let signer = FleetCa::open_or_create(&dir.join("ca"), VALIDITY).unwrap();
        let standin = Arc::new(Standin {
            seen: Mutex::new(Seen {
                tokens: vec![TOKEN.to_string()],
                ..Seen::default()
            }),
            ca: signer,
            ca_pem: ca_pem.clone(),
        });
        let router = Router::new()
            .route("/v1/nodes/register", post(register))
            .route("/v1/nodes/heartbeat", post(heartbeat))
            .with_state(standin.clone());
        let server = TlsServer::start(router, &ca);
        Fleet {
            ca,
            ca_pem,
            standin,
            server,
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.standin.seen.lock().unwrap()
    }

    /// The agent in secure mode, trusting the fleet CA from `dir/ca/ca.pem`, its token in
    /// `token_file`, its log appended to `log_path`.
    fn agent(
        &self,
        dir: &Path,
        port: u16,
        token_file: &Path,
        log_path: &Path,
        log_level: &str,
    ) -> Running {
        let env: Vec<(String, String)> = [
            ("VM_PLAIN_HTTP", "false".to_string()),
            (
                "VM_FLEET_CA_FILE",
                dir.join("ca/ca.pem").display().to_string(),
            ),
            ("VM_BOOTSTRAP_TOKEN_FILE", token_file.display().to_string()),
            ("RUST_LOG", log_level.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let endpoint = format!("https://127.0.0.1:{}", self.server.port);
        let mut command = agent_command(&endpoint, &dir.join("state"), port, &env);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .unwrap();
        command.stderr(Stdio::from(log));
        Running::spawn(&mut command)
    }
}

/// Fails the test if either token's secret half is in `log`.
fn assert_no_token_in(log: &str) {
    for secret in [TOKEN, SECOND_TOKEN] {
        let (_, secret_half) = secret.split_once('.').unwrap();
        assert!(
            !log.contains(secret_half),
            "the token reached the log:\n{log}"
        );
    }
}

#[test]
fn a_restart_registers_over_mtls_and_an_expired_certificate_needs_a_new_token() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet::start(dir.path());
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let log_path = dir.path().join("agent.log");
    let port = free_port();
    let mut agent = fleet.agent(dir.path(), port, &token_file, &log_path, "info");
    let first = wait_for("the enrollment", Duration::from_secs(30), || {
        fleet.seen().registrations.first().cloned()
    });
    assert_eq!(first.via, Via::Token(TOKEN.to_string()));
    wait_for("a heartbeat", Duration::from_secs(10), || {
        (!fleet.seen().heartbeats.is_empty()).then_some(())
    });

    // Killed and started again: it registers with its certificate (the token is spent).
    agent.kill();
    let _agent = fleet.agent(dir.path(), port, &token_file, &log_path, "info");
    let restart = wait_for(
        "the registration after the restart",
        Duration::from_secs(30),
        || fleet.seen().registrations.get(1).cloned(),
    );
    assert_eq!(restart.via, Via::Cert(first.issued.clone()));
    assert_eq!(restart.key, first.key, "the same key after a restart");

    // The controller cannot renew the certificate any more; a new token waits in the file,
    // unused while the certificate is good. When it expires, the agent says so and enrolls
    // with the token.
    fleet.seen().refuse_renewals = true;
    std::fs::write(&token_file, SECOND_TOKEN).unwrap();
    fleet.seen().tokens.push(SECOND_TOKEN.to_string());
    let again = wait_for(
        "the enrollment with the new token",
        Duration::from_secs(30),
        || {
            fleet
                .seen()
                .registrations
                .iter()
                .find(|r| r.via == Via::Token(SECOND_TOKEN.to_string()))
                .cloned()
        },
    );
    let good_for = again.at.duration_since(restart.at);
    assert!(
        good_for >= Duration::from_secs(8),
        "the token was used {good_for:?} after the certificate was issued, before it expired"
    );
    wait_for(
        "heartbeats with the new certificate",
        Duration::from_secs(10),
        || {
            fleet
                .seen()
                .heartbeats
                .iter()
                .any(|(_, s)| *s == again.issued)
                .then_some(())
        },
    );
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("the node certificate expired at ")
            && log.contains(
                "re-enroll with a new bootstrap token: VM_BOOTSTRAP_TOKEN or VM_BOOTSTRAP_TOKEN_FILE"
            ),
        "{log}"
    );
    assert_no_token_in(&log);
}

#[test]
fn the_agent_enrolls_with_its_token_renews_over_mtls_and_serves_only_the_controller() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet::start(dir.path());
    let Fleet {
        ca,
        ca_pem,
        standin,
        ..
    } = &fleet;
    let ca_pem = ca_pem.clone();
    let seen = || fleet.seen();

    let state_dir = dir.path().join("state");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let log_path = dir.path().join("agent.log");
    let port = free_port();
    let _agent = fleet.agent(dir.path(), port, &token_file, &log_path, "debug");

    // Enrollment with the bootstrap token, for the key kept on the node.
    let first = wait_for("the enrollment", Duration::from_secs(30), || {
        seen().registrations.first().cloned()
    });
    assert_eq!(first.via, Via::Token(TOKEN.to_string()));
    wait_for("node.crt", Duration::from_secs(10), || {
        state_dir.join("node.crt").exists().then_some(())
    });
    assert_eq!(key_of(&state_dir.join("node.key")), first.key);
    assert_eq!(
        std::fs::read_to_string(state_dir.join("ca.crt")).unwrap(),
        ca_pem,
        "the fleet CA is pinned"
    );

    // Heartbeats over mTLS with that certificate (the stand-in takes no other).
    wait_for("two heartbeats", Duration::from_secs(10), || {
        (seen().heartbeats.len() >= 2).then_some(())
    });
    assert!(seen().heartbeats.iter().all(|(_, s)| *s == first.issued));

    // The local API: no certificate, no handshake; another node's certificate (the node CA's,
    // which the agent does not trust for clients), no handshake; the controller's, served.
    let nodes = ca.node_trust_pem();
    let url = |path: &str| format!("https://{NODE}:{port}{path}");
    let stranger = local_client(&nodes, None).get(url("/v1/vms")).send();
    assert!(
        stranger.is_err(),
        "a client without a certificate: {stranger:?}"
    );
    let other_key = KeyPair::generate().unwrap();
    let other_csr = CertificateParams::new(vec!["node-2".to_string()])
        .unwrap()
        .serialize_request(&other_key)
        .unwrap()
        .pem()
        .unwrap();
    let other_cert = standin
        .ca
        .sign(&other_csr, "node-2", Ipv4Addr::LOCALHOST, &[])
        .unwrap()
        .cert_pem;
    let node = local_client(
        &nodes,
        Some(format!("{other_cert}\n{}", other_key.serialize_pem())),
    )
    .get(url("/v1/vms"))
    .send();
    assert!(node.is_err(), "another node's certificate: {node:?}");
    let me = ca.issue_controller_client().unwrap();
    let controller = local_client(&nodes, Some(format!("{}\n{}", me.cert_pem, me.key_pem)));
    let vms = controller.get(url("/v1/vms")).send().unwrap();
    assert_eq!(vms.status(), StatusCode::OK);
    assert_eq!(
        served_certificate(&vms),
        der_of(&std::fs::read_to_string(state_dir.join("node.crt")).unwrap()),
        "the local API serves the node certificate"
    );
    let health: Value = controller
        .get(url("/healthz"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(health["transport"], "mtls", "{health}");

    // Two thirds into the validity the agent renews over mTLS with a new key, and the
    // heartbeats keep their interval.
    let renewal = wait_for("a renewal", Duration::from_secs(20), || {
        seen().registrations.get(1).cloned()
    });
    assert_eq!(renewal.via, Via::Cert(first.issued.clone()));
    assert_ne!(renewal.key, first.key, "a renewal comes with a new key");
    let after = renewal.at.duration_since(first.at);
    // 2/3 of 9 s, less up to 1 s of not_before truncated to the second.
    assert!(
        after >= Duration::from_secs(5) && after < Duration::from_secs(9),
        "renewed {after:?} after the enrollment"
    );
    wait_for(
        "a heartbeat with the new certificate",
        Duration::from_secs(10),
        || {
            seen()
                .heartbeats
                .iter()
                .any(|(_, s)| *s == renewal.issued)
                .then_some(())
        },
    );
    {
        let beats = &seen().heartbeats;
        let longest = beats
            .windows(2)
            .map(|w| w[1].0.duration_since(w[0].0))
            .max()
            .unwrap();
        assert!(
            longest < Duration::from_millis(2500),
            "a heartbeat was missed: {longest:?} between two (interval 1 s)"
        );
    }
    assert_eq!(key_of(&state_dir.join("node.key")), renewal.key);
    assert!(!state_dir.join("node.key.next").exists());
    // The local API swaps in the renewed certificate without a restart (for new connections:
    // a fresh client each time).
    wait_for(
        "the local API to serve a renewed certificate",
        Duration::from_secs(10),
        || {
            let fresh = local_client(&nodes, Some(format!("{}\n{}", me.cert_pem, me.key_pem)));
            let resp = fresh.get(url("/v1/vms")).send().ok()?;
            match identify(&served_certificate(&resp)) {
                Some(PeerIdentity::Node { serial_hex, .. }) => {
                    (serial_hex != first.issued).then_some(())
                }
                _ => None,
            }
        },
    );

    // The controller stops taking the certificate: the agent falls back to its token file,
    // whose token is used up; an operator puts a new one there and the agent enrolls with it.
    seen().current = None;
    wait_for(
        "the used token to be tried",
        Duration::from_secs(20),
        || seen().refused.iter().any(|t| t == TOKEN).then_some(()),
    );
    std::fs::write(&token_file, SECOND_TOKEN).unwrap();
    standin
        .seen
        .lock()
        .unwrap()
        .tokens
        .push(SECOND_TOKEN.to_string());
    let again = wait_for(
        "the enrollment with the new token",
        Duration::from_secs(40),
        || {
            seen()
                .registrations
                .iter()
                .find(|r| r.via == Via::Token(SECOND_TOKEN.to_string()))
                .cloned()
        },
    );
    wait_for("heartbeats again", Duration::from_secs(10), || {
        seen()
            .heartbeats
            .iter()
            .any(|(_, s)| *s == again.issued)
            .then_some(())
    });

    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("only a bootstrap token can enroll this node") || log.contains("was refused"),
        "{log}"
    );
    assert!(log.contains("VM_BOOTSTRAP_TOKEN_FILE"), "{log}");
    for secret in [TOKEN, SECOND_TOKEN] {
        let (_, secret_half) = secret.split_once('.').unwrap();
        assert!(
            !log.contains(secret_half),
            "the token reached the log:\n{log}"
        );
    }
}
