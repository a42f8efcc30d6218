//! The typed client (`fleetwire-client`, docs/client.md) against the real `fleetwire
//! controller`: every operation of the API document is called at least once (the test checks
//! the list against `fleetwire_client::OPERATIONS`), over mTLS with the fleet CA pinned, a
//! node certificate, operator tokens and a bootstrap token, and over plain HTTP; refusals come
//! back as typed `ApiError`s (401, 403, 404, 400 with violations), and an answer that is not
//! what the document declares as `Error::InvalidResponse`.

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::support::controller_harness::*;
use fleetwire_client::{Client, Error, OPERATIONS};
use fleetwire_types::{
    ApiErrorCode, CreateBootstrapTokenRequest, CreateVmRequest, HealthStatus, NodeHeartbeat,
    NodeId, NodeStatusFilter, RegisterNodeRequest, StateMessage, TenantId, VmId,
};
use rcgen::{CertificateParams, KeyPair};
use serde_json::json;

/// The operations a test called, to compare with the document's.
static CALLED: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

fn called(operation: &'static str) {
    CALLED.lock().unwrap().insert(operation);
}

/// The refusal `result` must be: an `ApiError` with this status and code.
#[track_caller]
fn refused<T: std::fmt::Debug>(
    result: Result<T, Error>,
    status: u16,
    code: ApiErrorCode,
) -> Box<fleetwire_types::ApiError> {
    match result {
        Err(Error::Api {
            status: got,
            error,
            operation,
        }) => {
            assert_eq!(got.as_u16(), status, "{operation}: {error:?}");
            assert_eq!(error.code, code, "{operation}: {error:?}");
            assert!(!error.message.as_str().is_empty());
            called(operation);
            error
        }
        other => panic!("expected an ApiError {status}, got {other:?}"),
    }
}

fn registration_with_csr(node_id: &str, key: &KeyPair) -> RegisterNodeRequest {
    let mut body = registration(node_id, 9, 100);
    body["csr_pem"] = plain_csr(key, node_id).into();
    typed(&body)
}

async fn secure_operations() {
    let controller = ControllerProcess::start_secure(&[]);
    let open = controller.api(None);
    let admin = controller.admin_api();
    let viewer = controller.api(Some(VIEWER_TOKEN));

    let health = open.get_healthz().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    assert_eq!(health.value.status, HealthStatus::Ok);
    called("get_healthz");
    let ready = open.get_readyz().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    called("get_readyz");

    // Operators: no token is 401, a read-only token on a change 403.
    refused(open.list_nodes(None).await, 401, ApiErrorCode::Unauthorized);
    let node_id: NodeId = "client-n1".parse().unwrap();
    let token_request = CreateBootstrapTokenRequest {
        node_id: node_id.clone(),
        ttl_s: Some(600),
    };
    refused(
        viewer.create_bootstrap_token(&token_request).await,
        403,
        ApiErrorCode::Forbidden,
    );
    let issued = admin.create_bootstrap_token(&token_request).await.unwrap();
    assert_eq!(issued.status().as_u16(), 201);
    assert_eq!(issued.node_id, node_id);
    called("create_bootstrap_token");

    // A node: registered with the bootstrap token, then heartbeats and a renewal over mTLS.
    let key = KeyPair::generate().unwrap();
    let enrolling = open.with_bootstrap_token(issued.token.as_str()).unwrap();
    let registered = enrolling
        .register_node(&registration_with_csr("client-n1", &key))
        .await
        .unwrap();
    called("register_node");
    let cert_pem = registered.value.cert_pem.clone().expect("a certificate");
    assert_eq!(
        registered.value.ca_pem.as_ref().unwrap().as_bytes(),
        controller.ca_pem().as_slice()
    );
    // The token was single-use.
    refused(
        enrolling
            .register_node(&registration_with_csr("client-n1", &key))
            .await,
        401,
        ApiErrorCode::Unauthorized,
    );
    let node = controller.node_api(&cert_pem, &key.serialize_pem());
    let heartbeat: NodeHeartbeat = typed(&ppn_heartbeat("client-n1", "127.0.0.1", 9));
    let taken = node.post_heartbeat(&heartbeat).await.unwrap();
    assert_eq!(taken.status().as_u16(), 200);
    called("post_heartbeat");
    let renewed = node
        .register_node(&registration_with_csr("client-n1", &key))
        .await
        .unwrap();
    assert!(renewed.value.cert_pem.is_some());
    // A heartbeat without a certificate is refused, typed.
    refused(
        open.post_heartbeat(&heartbeat).await,
        401,
        ApiErrorCode::Unauthorized,
    );

    // The operator routes.
    let listed = viewer
        .list_nodes(Some(&NodeStatusFilter::All))
        .await
        .unwrap();
    assert_eq!(listed.value.len(), 1, "{:?}", listed.value);
    assert!(listed.unknown_fields().is_empty());
    called("list_nodes");
    let got = viewer.get_node(&node_id).await.unwrap();
    assert_eq!(got.node_id, node_id);
    called("get_node");
    refused(
        viewer.get_node(&"nobody".parse().unwrap()).await,
        404,
        ApiErrorCode::NotFound,
    );
    let fleet = viewer.get_fleet().await.unwrap();
    assert!(fleet.nodes.iter().any(|n| n.node_id == node_id));
    called("get_fleet");
    let reason: StateMessage = "disk swap".parse().unwrap();
    let cordoned = admin.cordon_node(&node_id, Some(&reason)).await.unwrap();
    assert_eq!(cordoned.cordon_reason.as_ref(), Some(&reason));
    called("cordon_node");
    let uncordoned = admin.uncordon_node(&node_id).await.unwrap();
    assert!(uncordoned.cordon_reason.is_none(), "{:?}", uncordoned.value);
    called("uncordon_node");
    let draining = admin.drain_node(&node_id).await.unwrap();
    assert_eq!(draining.status, fleetwire_types::HostState::Draining);
    called("drain_node");
    let metrics = viewer.get_metrics().await.unwrap();
    assert!(
        metrics.contains("fleetwire_controller"),
        "{}",
        metrics.value
    );
    called("get_metrics");
    refused(
        viewer.delete_node(&node_id).await,
        403,
        ApiErrorCode::Forbidden,
    );
    let deleted = admin.delete_node(&node_id).await.unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    called("delete_node");
    refused(viewer.get_node(&node_id).await, 404, ApiErrorCode::NotFound);

    // Another CA than the fleet's: the controller is not trusted, and the token not sent.
    let other_key = KeyPair::generate().unwrap();
    let other_ca = CertificateParams::new(vec!["other".to_string()])
        .unwrap()
        .self_signed(&other_key)
        .unwrap()
        .pem();
    let stranger = Client::builder(controller.url(""))
        .fleet_ca_pem(other_ca)
        .operator_token(ADMIN_TOKEN)
        .build()
        .unwrap();
    let e = stranger.list_nodes(None).await.unwrap_err();
    assert!(matches!(e, Error::Transport { .. }), "{e}");
    assert!(!format!("{e} {e:?}").contains(ADMIN_TOKEN));
    assert!(!controller.log().contains(ADMIN_TOKEN));
}

async fn plain_operations() {
    let controller = ControllerProcess::start(&[]);
    let agent = AgentStandIn::start().await;
    let client = controller.admin_api();
    let heartbeat: NodeHeartbeat = typed(&ppn_heartbeat("plain-n1", "127.0.0.1", agent.port));
    client.post_heartbeat(&heartbeat).await.unwrap();

    let request: CreateVmRequest = typed(
        &json!({"vm_type": "web", "ram_mb": 512, "vcpu_count": 1, "tenant_id": "acme", "vm_id": "web 1/a"}),
    );
    let vm = client.create_vm(&request).await.unwrap();
    assert_eq!(vm.vm_id.as_str(), "web 1/a");
    called("create_vm");
    let vm_id: VmId = "web 1/a".parse().unwrap();
    let tenant: TenantId = "acme".parse().unwrap();
    let listed = client.list_vms(Some(&tenant)).await.unwrap();
    assert_eq!(listed.value.len(), 1);
    let other: TenantId = "someone-else".parse().unwrap();
    assert!(client
        .list_vms(Some(&other))
        .await
        .unwrap()
        .value
        .is_empty());
    called("list_vms");
    // The id is one path segment, percent-encoded.
    let got = client.get_vm(&vm_id).await.unwrap();
    assert_eq!(got.vm_id, vm_id);
    called("get_vm");
    refused(
        client.create_vm(&request).await,
        409,
        ApiErrorCode::Conflict,
    );
    // The stand-in agent keeps no output: the controller relays its 404 (the real agent's
    // output: tests/e2e/operator/habits.rs).
    refused(
        client.get_vm_logs(&vm_id, None).await,
        404,
        ApiErrorCode::NotFound,
    );
    let deleted = client.delete_vm(&vm_id).await.unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    assert_eq!(agent.deleted(), ["web 1/a"]);
    called("delete_vm");
    refused(client.get_vm(&vm_id).await, 404, ApiErrorCode::NotFound);

    // A body the schema takes but the controller refuses: 400 with the violation's pointer.
    let imaged: CreateVmRequest =
        typed(&json!({"vm_type": "web", "ram_mb": 512, "vcpu_count": 1, "image": "alpine:3.20"}));
    let error = refused(
        client.create_vm(&imaged).await,
        400,
        ApiErrorCode::InvalidDocument,
    );
    assert!(
        error
            .violations
            .iter()
            .any(|v| v.instance_path.as_str() == "/network"),
        "{error:?}"
    );

    // Something that is not a controller: a status the operation does not declare is told as
    // such, with the body, not read as an ApiError (docs/client.md).
    let not_a_controller = Client::builder(format!("http://127.0.0.1:{}", agent.port))
        .plain_http()
        .build()
        .unwrap();
    match not_a_controller.get_healthz().await {
        Err(Error::UnexpectedStatus {
            operation, status, ..
        }) => {
            assert_eq!((operation, status.as_u16()), ("get_healthz", 404));
        }
        other => panic!("expected an undeclared status, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_is_called_through_the_client_with_typed_answers_and_errors() {
    secure_operations().await;
    plain_operations().await;
    let called = CALLED.lock().unwrap().clone();
    let declared: BTreeSet<&str> = OPERATIONS.iter().map(|op| op.id).collect();
    assert_eq!(
        called, declared,
        "every operation of the API document is exercised"
    );
}

/// A newer controller's answers: fields this version's schemas do not define are set aside and
/// named (pointers into the whole body, a list's with the index), and `Warning` headers are
/// handed to the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_of_an_answer_are_set_aside_and_named() {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/healthz",
            get(|| async {
                (
                    [("warning", "299 - \"unknown field /extra\"")],
                    axum::Json(json!({"status": "ok", "version": "9.0.0", "since": "2030-01-01T00:00:00Z"})),
                )
            }),
        )
        .route(
            "/v1/vms",
            get(|| async {
                axum::Json(json!([{
                    "vm_id": "web-1", "vm_type": "web", "state": "Running", "ram_alloc_mb": 512,
                    "vcpu_count": 1, "started_at": null, "gpu": "h100"
                }]))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let newer = Client::builder(format!("http://127.0.0.1:{port}"))
        .plain_http()
        .build()
        .unwrap();
    let health = newer.get_healthz().await.unwrap();
    assert_eq!(health.value.status, HealthStatus::Ok);
    let unknown: Vec<&str> = health.unknown_fields().iter().map(|p| p.as_str()).collect();
    assert_eq!(unknown, ["/since"]);
    assert_eq!(health.warnings(), ["unknown field /extra"]);
    let vms = newer.list_vms(None).await.unwrap();
    assert_eq!(vms.value.len(), 1);
    let unknown: Vec<&str> = vms.unknown_fields().iter().map(|p| p.as_str()).collect();
    assert_eq!(unknown, ["/0/gpu"]);
    server.abort();
}
