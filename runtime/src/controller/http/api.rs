//! The HTTP handlers of the controller's API: thin shells that read validated input, call
//! enrollment, the heartbeat, the node rules, placement or the table, and answer generated
//! types or `ApiError`s (domain errors become `ApiFailure`s through `From`, see
//! `api_failures`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use fleetwire_types::{
    ApiErrorCode, BootstrapTokenIssued, ControllerRole, CreateBootstrapTokenRequest,
    CreateVmRequest, Health, HealthStatus, HostState, NodeStatusFilter, RegisterNodeRequest,
    RegisterNodeResponse, SemVer, StateMessage, TenantId, Timestamp, VmRecord,
};

use crate::controller::fleet::enrollment;
use crate::controller::fleet::heartbeat_answer;
use crate::controller::fleet::placement;
use crate::controller::http::operator_access;
use crate::controller::rules::nodes;
use crate::controller::shared::Controller;
use crate::controller::table::node_state::{NodeState, WhenStored};
use crate::controller::table::node_table::DirtyNode;
use crate::controller::trust::node_identity::NodeIdentityError;
use crate::fleet_identity::PeerIdentity;
use crate::http::{read_body_bytes, require_json, ApiFailure, Valid};
use crate::tls_server::Peer;

type Shared = State<Arc<Controller>>;

/// A bootstrap token's life when `ttl_s` is absent (the schema's default).
const DEFAULT_BOOTSTRAP_TOKEN_TTL: Duration = Duration::from_secs(3600);

fn json_bytes(body: Bytes) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn invalid_query(message: String) -> ApiFailure {
    ApiFailure::new(StatusCode::BAD_REQUEST, ApiErrorCode::InvalidQuery, message)
}

/// The value of query parameter `name`, if given.
fn query_param(query: &Option<String>, name: &str) -> Option<String> {
    let query = query.as_deref()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// A path id; a path that does not decode names nothing.
fn path_id(path: Result<Path<String>, PathRejection>, what: &str) -> Result<String, ApiFailure> {
    path.map(|Path(id)| id)
        .map_err(|e| ApiFailure::not_found(format!("no {what} with that id: {e}")))
}

fn node_not_found(node_id: &str) -> ApiFailure {
    ApiFailure::not_found(format!("no node with id {node_id:?}"))
}

/// `POST /v1/nodes/register`
pub async fn register_node(
    State(controller): Shared,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    Valid(request): Valid<RegisterNodeRequest>,
) -> Result<Json<RegisterNodeResponse>, ApiFailure> {
    let presented = peer.as_ref().and_then(|p| p.identity.as_deref());
    let bearer = operator_access::bearer(&headers);
    Ok(Json(
        enrollment::register(&controller, request, presented, bearer).await?,
    ))
}

/// `POST /v1/tokens`: a single-use bootstrap token for one node id, shown this once.
pub async fn create_bootstrap_token(
    State(controller): Shared,
    Valid(request): Valid<CreateBootstrapTokenRequest>,
) -> Result<(StatusCode, Json<BootstrapTokenIssued>), ApiFailure> {
    let ttl = request.ttl_s.map_or(DEFAULT_BOOTSTRAP_TOKEN_TTL, |s| {
        Duration::from_secs(s as u64)
    });
    let Some(tokens) = controller.credentials.bootstrap_tokens.clone() else {
        return Err(ApiFailure::internal(
            "this controller keeps no bootstrap tokens".to_string(),
        ));
    };
    let node_id = request.node_id;
    if let Some(why) = crate::ids::reserved_node_id(node_id.as_str()) {
        return Err(ApiFailure::reserved_node_id(
            "CreateBootstrapTokenRequest",
            node_id.as_str(),
            why,
        ));
    }
    // Remembered, so that a controller starting in mTLS mode on this store retires it.
    let minted = if controller.settings.plain_http {
        crate::store::tokens::Minted::PlainHttp
    } else {
        crate::store::tokens::Minted::Authenticated
    };
    let issued = tokio::task::spawn_blocking(move || {
        tokens.create_as(&node_id, ttl, chrono::Utc::now(), minted)
    })
    .await
    .map_err(|e| ApiFailure::internal(format!("the token task failed: {e}")))??;
    tracing::info!(
        token_id = issued.token.id.as_str(),
        node_id = issued.node_id.as_str(),
        "bootstrap token created"
    );
    Ok((StatusCode::CREATED, Json(issued.to_wire())))
}

/// `POST /v1/nodes/heartbeat`, as the router routes it.
pub async fn post_heartbeat(State(controller): Shared, request: Request) -> Response {
    heartbeat(&controller, request).await
}

/// The heartbeat's one handler, which the HTTP service also calls ahead of the router
/// (`heartbeat_route`, docs/performance.md): the JSON content-type check (`415`), in mTLS mode
/// a caller without a node certificate refused before its body is read, the body limit
/// (`413`) and deadline (`408`), then [`heartbeat_answer::answer`] (the validated reader, `400`
/// with pointers, unknown fields as `Warning` headers, the heartbeat taken).
pub async fn heartbeat(controller: &Controller, request: Request) -> Response {
    if let Err(failure) = require_json(request.headers()) {
        return failure.into_response();
    }
    let presented = request
        .extensions()
        .get::<Peer>()
        .and_then(|peer| peer.identity.clone());
    // mTLS mode: a caller without a node certificate is refused before its body is read
    // (issue 28); whether it is the body's node, and its current certificate, is checked on.
    if !controller.settings.plain_http
        && !matches!(presented.as_deref(), Some(PeerIdentity::Node { .. }))
    {
        return ApiFailure::from(NodeIdentityError::NoCertificate).into_response();
    }
    let body = match read_body_bytes(request.into_body()).await {
        Ok(body) => body,
        Err(failure) => return failure.into_response(),
    };
    heartbeat_answer::answer(controller, &body, presented.as_deref())
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `GET /v1/nodes[?status=...]`
pub async fn list_nodes(
    State(controller): Shared,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiFailure> {
    let filter = match query_param(&query, "status") {
        None => NodeStatusFilter::default(),
        Some(value) => value.parse().map_err(|_| {
            invalid_query(format!(
                "status: {value:?} is not one of live, registering, ready, draining, unreachable, all"
            ))
        })?,
    };
    let keep = |status: HostState| match filter {
        NodeStatusFilter::All => true,
        NodeStatusFilter::Live => status != HostState::Unreachable,
        NodeStatusFilter::Registering => status == HostState::Registering,
        NodeStatusFilter::Ready => status == HostState::Ready,
        NodeStatusFilter::Draining => status == HostState::Draining,
        NodeStatusFilter::Unreachable => status == HostState::Unreachable,
    };
    Ok(json_bytes(controller.node_list(keep)))
}

/// `GET /v1/nodes/{node_id}`: any status, unreachable included.
pub async fn get_node(
    State(controller): Shared,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiFailure> {
    let node_id = path_id(path, "node")?;
    controller
        .node_json(&node_id)
        .map(json_bytes)
        .ok_or_else(|| node_not_found(&node_id))
}

/// `DELETE /v1/nodes/{node_id}`: unenrolls; nothing is sent to the node.
pub async fn delete_node(
    State(controller): Shared,
    path: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiFailure> {
    let node_id = path_id(path, "node")?;
    controller
        .forget_node(node_id.clone())
        .ok_or_else(|| node_not_found(&node_id))?
        .stored()
        .await?;
    tracing::info!(node_id, "node unenrolled");
    Ok(StatusCode::NO_CONTENT)
}

/// Applies an operator action to a node, commits it, and answers the node's record.
async fn operate(
    controller: &Controller,
    node_id: String,
    action: impl FnOnce(&mut NodeState),
    what: &str,
) -> Result<Response, ApiFailure> {
    let slot = controller
        .table
        .get(&node_id)
        .ok_or_else(|| node_not_found(&node_id))?;
    let (body, change) = {
        let mut state = slot.lock();
        action(&mut state);
        let node = DirtyNode::Id(node_id.clone());
        let change = controller.node_changed(node, &mut state, WhenStored::BeforeAnswer);
        (state.fragment().clone(), change)
    };
    change.stored().await?;
    tracing::info!(node_id, "node {what}");
    Ok(json_bytes(body))
}

/// `POST /v1/nodes/{node_id}/cordon[?reason=...]`
pub async fn cordon_node(
    State(controller): Shared,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiFailure> {
    let node_id = path_id(path, "node")?;
    let reason = query_param(&query, "reason")
        .map(|text| {
            StateMessage::try_from(text.as_str()).map_err(|e| invalid_query(format!("reason: {e}")))
        })
        .transpose()?;
    operate(
        &controller,
        node_id,
        |state| nodes::cordon(state, reason, Timestamp::now()),
        "cordoned",
    )
    .await
}

/// `POST /v1/nodes/{node_id}/uncordon`
pub async fn uncordon_node(
    State(controller): Shared,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiFailure> {
    let node_id = path_id(path, "node")?;
    let stale_after = controller.settings.stale_after;
    operate(
        &controller,
        node_id,
        |state| nodes::uncordon(state, Instant::now(), stale_after),
        "uncordoned",
    )
    .await
}

/// `POST /v1/nodes/{node_id}/drain`
pub async fn drain_node(
    State(controller): Shared,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiFailure> {
    let node_id = path_id(path, "node")?;
    let stale_after = controller.settings.stale_after;
    operate(
        &controller,
        node_id,
        |state| nodes::drain(state, Instant::now(), stale_after),
        "draining",
    )
    .await
}

/// `GET /v1/fleet`
pub async fn get_fleet(State(controller): Shared) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        axum::body::Body::new(controller.fleet_document()),
    )
        .into_response()
}

/// `POST /v1/vms`
pub async fn create_vm(
    State(controller): Shared,
    Valid(request): Valid<CreateVmRequest>,
) -> Result<Json<VmRecord>, ApiFailure> {
    Ok(Json(placement::create_vm(&controller, request).await?))
}

/// `GET /v1/vms[?tenant_id=...]`
pub async fn list_vms(
    State(controller): Shared,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<VmRecord>>, ApiFailure> {
    let tenant = query_param(&query, "tenant_id")
        .map(|text| {
            TenantId::try_from(text.as_str())
                .map_err(|e| invalid_query(format!("tenant_id: {text:?} is not a tenant id: {e}")))
        })
        .transpose()?;
    Ok(Json(controller.vms(|vm| {
        tenant
            .as_ref()
            .is_none_or(|t| vm.tenant_id.as_ref() == Some(t))
    })))
}

/// `GET /v1/vms/{vm_id}`
pub async fn get_vm(
    State(controller): Shared,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<VmRecord>, ApiFailure> {
    let vm_id = path_id(path, "VM")?;
    controller
        .vm(&vm_id)
        .map(Json)
        .ok_or_else(|| ApiFailure::not_found(format!("no VM with id {vm_id:?}")))
}

/// `DELETE /v1/vms/{vm_id}`
pub async fn delete_vm(
    State(controller): Shared,
    path: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiFailure> {
    let vm_id = path_id(path, "VM")?;
    placement::delete_vm(&controller, &vm_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn version() -> Option<SemVer> {
    SemVer::try_from(env!("CARGO_PKG_VERSION")).ok()
}

/// `GET /healthz`: the process serves HTTP; the store is not touched.
pub async fn get_healthz(State(controller): Shared) -> Json<Health> {
    Json(Health {
        status: HealthStatus::Ok,
        store: None,
        version: version(),
        transport: Some(controller.settings.transport()),
        role: Some(ControllerRole::Leader),
        leader_url: None,
    })
}

/// `GET /readyz`: ready when the store answers through its writer within two seconds.
pub async fn get_readyz(State(controller): Shared) -> (StatusCode, Json<Health>) {
    let check =
        tokio::time::timeout(std::time::Duration::from_secs(2), controller.writer.check()).await;
    let problem = match check {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(error.to_string()),
        Err(_) => Some("the store did not answer within 2 s".to_string()),
    };
    let message = |text: &str| Some(StateMessage::truncated(text));
    match problem {
        None => (
            StatusCode::OK,
            Json(Health {
                status: HealthStatus::Ok,
                store: message("reachable"),
                version: version(),
                transport: Some(controller.settings.transport()),
                role: Some(ControllerRole::Leader),
                leader_url: None,
            }),
        ),
        Some(problem) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: HealthStatus::Unavailable,
                store: message(&problem),
                version: version(),
                transport: Some(controller.settings.transport()),
                role: Some(ControllerRole::Leader),
                leader_url: None,
            }),
        ),
    }
}

/// `GET /metrics`
pub async fn get_metrics(State(controller): Shared) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        controller.metrics.render(),
    )
        .into_response()
}
