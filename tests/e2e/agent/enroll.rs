//! Enrollment with a fleetwire controller: the agent registers with a CSR for a key it keeps in
//! its state directory (mode 0600), stores the certificate that comes back, and registers again
//! when a heartbeat is answered 404. The controller here is a minimal test double of the
//! registration and heartbeat routes (the real controller's end-to-end test is the lead's).

use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::agent_harness::AgentProcess;
use crate::support::background::BackgroundServer;
use crate::support::wait_for;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use fleetwire_types::{HostState, NodeHeartbeat, RegisterNodeRequest, RegisterNodeResponse};
use rcgen::{
    CertificateParams, CertificateSigningRequestParams, IsCa, Issuer, KeyPair, PublicKeyData,
};
use serde_json::{json, Value};

#[derive(Default)]
struct Seen {
    registrations: Vec<RegisterNodeRequest>,
    heartbeats: u32,
    /// Answer the next heartbeat 404, as a controller that lost the node would.
    forget_next: bool,
    cert_pem: String,
}

type Shared = Arc<Mutex<Seen>>;

fn ca() -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

async fn register(
    State((seen, ca_pem, issuer)): State<(Shared, String, Arc<Issuer<'static, KeyPair>>)>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let req: RegisterNodeRequest = match fleetwire_types::read_value_strict(&body) {
        Ok(r) => r,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"code": "invalid_document", "message": e.to_string()})),
            )
        }
    };
    let csr =
        CertificateSigningRequestParams::from_pem(req.csr_pem.as_ref().expect("a CSR").as_str())
            .expect("a CSR");
    let cert = csr.signed_by(&issuer).expect("signing").pem();
    let answer = json!({
        "node": {
            "node_id": req.node_id, "hostname": req.hostname, "wg_ip": req.wg_ip,
            "ram_available_mb": req.total_memory_mb, "vm_count": 0, "kvm_available": req.kvm_available,
            "last_heartbeat": "2026-11-30T09:30:00Z", "status": "registering", "runtime": req.runtime,
        },
        "cert_pem": cert,
        "ca_pem": ca_pem,
    });
    assert!(fleetwire_types::validate_value::<RegisterNodeResponse>(&answer).is_empty());
    let mut s = seen.lock().unwrap();
    s.cert_pem = cert;
    s.registrations.push(req);
    (StatusCode::OK, Json(answer))
}

async fn heartbeat(
    State((seen, _, _)): State<(Shared, String, Arc<Issuer<'static, KeyPair>>)>,
    Json(body): Json<Value>,
) -> StatusCode {
    fleetwire_types::read_value_strict::<NodeHeartbeat>(&body).expect("a valid NodeHeartbeat");
    let mut s = seen.lock().unwrap();
    s.heartbeats += 1;
    if std::mem::take(&mut s.forget_next) {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::OK
    }
}

#[test]
fn registers_with_a_csr_stores_the_certificate_and_registers_again_after_a_404() {
    let seen: Shared = Arc::default();
    let (ca_pem, issuer) = ca();
    let router = Router::new()
        .route("/v1/nodes/register", post(register))
        .route("/v1/nodes/heartbeat", post(heartbeat))
        .with_state((seen.clone(), ca_pem.clone(), Arc::new(issuer)));
    let controller = BackgroundServer::start(router, 0);
    let agent = AgentProcess::start(&controller.url(), &[("VM_RESERVED", "true")]);

    agent.wait_reported("ready", Duration::from_secs(20), |r| {
        (r.state == HostState::Ready).then_some(())
    });
    // Plain mode (the harness's) says so on /healthz.
    let health: Value = agent.get("/healthz");
    assert_eq!(health["transport"], "plain_http", "{health}");
    {
        let s = seen.lock().unwrap();
        let req = &s.registrations[0];
        assert_eq!(req.node_id.as_str(), "node-1");
        assert_eq!(req.runtime.as_str(), "process");
        assert!(req.reserved);
        assert!(req.total_cpus > 0 && req.total_memory_mb > 0);
        // The CSR carries the public half of the key kept on the node, and nothing else of it.
        let key_path = agent.state_dir.join("node.key");
        assert_eq!(
            std::fs::metadata(&key_path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let key = KeyPair::from_pem(&std::fs::read_to_string(&key_path).unwrap()).unwrap();
        let csr = CertificateSigningRequestParams::from_pem(req.csr_pem.as_ref().unwrap().as_str())
            .unwrap();
        assert_eq!(csr.public_key.der_bytes(), key.der_bytes());
        assert!(!serde_json::to_string(req).unwrap().contains("PRIVATE KEY"));
        // What came back is stored.
        assert_eq!(
            std::fs::read_to_string(agent.state_dir.join("node.crt")).unwrap(),
            s.cert_pem
        );
        assert_eq!(
            std::fs::read_to_string(agent.state_dir.join("ca.crt")).unwrap(),
            ca_pem
        );
    }

    wait_for("a heartbeat", Duration::from_secs(10), || {
        (seen.lock().unwrap().heartbeats > 0).then_some(())
    });
    seen.lock().unwrap().forget_next = true;
    wait_for("a second registration", Duration::from_secs(15), || {
        (seen.lock().unwrap().registrations.len() >= 2).then_some(())
    });
    // Same key both times.
    let s = seen.lock().unwrap();
    assert_eq!(
        s.registrations[0].csr_pem.is_some(),
        s.registrations[1].csr_pem.is_some()
    );
    let a = CertificateSigningRequestParams::from_pem(
        s.registrations[0].csr_pem.as_ref().unwrap().as_str(),
    )
    .unwrap();
    let b = CertificateSigningRequestParams::from_pem(
        s.registrations[1].csr_pem.as_ref().unwrap().as_str(),
    )
    .unwrap();
    assert_eq!(a.public_key.der_bytes(), b.public_key.der_bytes());
}
