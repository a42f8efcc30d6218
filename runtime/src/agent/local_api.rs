//! The agent's local API on `VM_SPAWN_PORT`: PPN's agent routes (`POST /v1/spawn`,
//! `DELETE /v1/vms/{vm_id}`) plus `GET /v1/vms`, `GET /v1/vms/{vm_id}/logs`, `GET /healthz`,
//! `GET /metrics`, `GET /v1/reported` and `PUT /v1/desired`. Every body goes through the generated validators.
//! In secure mode it serves HTTPS with the node certificate and takes only the controller's
//! client certificate (docs/security.md); plain mode serves plain HTTP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put, MethodRouter};
use axum::{Json, Router};
use fleetwire_types::{
    ApiErrorCode, AppId, Command, CreateVmRequest, DesiredInstance, DesiredInstanceState, Health,
    HealthStatus, HostDesiredState, InstanceResources, InstanceState, TransportSecurity,
    VmLogChunk, VmRecord,
};
use tokio::sync::watch;

use super::desired::DesiredError;
use super::shared::Agent;
use super::vm_records::vm_records;
use crate::document_file::WriteError;
use crate::fleet_identity::PeerIdentity;
use crate::http::{unknown_route, wrong_method, ApiFailure, Valid, MAX_BODY_BYTES};
use crate::runtimes::Runtime;

/// How long `POST /v1/spawn` waits for the machine to come up before answering with what it is.
const SPAWN_WAIT: Duration = Duration::from_secs(10);

/// The most of a VM's output one `GET /v1/vms/{vm_id}/logs` answer carries (the schema's
/// `VmLogChunk`).
const LOG_CHUNK_BYTES: u64 = 128 * 1024;

/// One operation of the agent's API document (schemas/agent-api.openapi.json).
pub struct LocalRoute {
    pub method: Method,
    /// The path as the API document writes it (axum's syntax is the same).
    pub path: &'static str,
    pub operation_id: &'static str,
    pub handler: fn() -> MethodRouter<Arc<Agent>>,
}

/// Every operation the local API serves: ONE table, checked against the generated API
/// document by a test, so the two cannot drift. All are the controller's (secure mode) or
/// anyone's (plain mode): the document's `x-fleetwire-access: controller`.
pub const ROUTES: &[LocalRoute] = &[
    LocalRoute {
        method: Method::POST,
        path: "/v1/spawn",
        operation_id: "spawn_vm",
        handler: || post(spawn),
    },
    LocalRoute {
        method: Method::GET,
        path: "/v1/vms",
        operation_id: "list_vms",
        handler: || get(list_vms),
    },
    LocalRoute {
        method: Method::DELETE,
        path: "/v1/vms/{vm_id}",
        operation_id: "delete_vm",
        handler: || delete(delete_vm),
    },
    LocalRoute {
        method: Method::GET,
        path: "/v1/vms/{vm_id}/logs",
        operation_id: "get_vm_logs",
        handler: || get(vm_logs),
    },
    LocalRoute {
        method: Method::PUT,
        path: "/v1/desired",
        operation_id: "put_desired",
        handler: || put(put_desired),
    },
    LocalRoute {
        method: Method::GET,
        path: "/v1/desired",
        operation_id: "get_desired",
        handler: || get(get_desired),
    },
    LocalRoute {
        method: Method::GET,
        path: "/v1/reported",
        operation_id: "get_reported",
        handler: || get(get_reported),
    },
    LocalRoute {
        method: Method::GET,
        path: "/metrics",
        operation_id: "get_metrics",
        handler: || get(metrics),
    },
    LocalRoute {
        method: Method::GET,
        path: "/healthz",
        operation_id: "get_healthz",
        handler: || get(healthz),
    },
];

pub fn router(agent: Arc<Agent>) -> Router {
    let plain = agent.config.plain_http;
    let mut router = Router::new();
    let mut paths: Vec<&str> = ROUTES.iter().map(|r| r.path).collect();
    paths.sort_unstable();
    paths.dedup();
    for path in paths {
        let mut methods: MethodRouter<Arc<Agent>> = MethodRouter::new();
        for route in ROUTES.iter().filter(|r| r.path == path) {
            methods = methods.merge((route.handler)());
        }
        router = router.route(path, methods);
    }
    let router = router
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn(
            crate::unknown_fields::answer_with_warnings,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(agent);
    if plain {
        router
    } else {
        // Outermost, so unknown routes and wrong methods are refused to strangers too.
        router.layer(axum::middleware::from_fn(only_the_controller))
    }
}

/// Secure mode: the TLS layer let in only certificates of the fleet CA; of those, only the
/// controller's may call the agent (a node's certificate may not: docs/security.md).
async fn only_the_controller(request: Request, next: Next) -> Response {
    match crate::tls_server::identity_of(&request) {
        Some(PeerIdentity::Controller) => next.run(request).await,
        Some(PeerIdentity::Node { node_id, .. }) => ApiFailure::new(
            StatusCode::FORBIDDEN,
            ApiErrorCode::Forbidden,
            format!("the certificate of node {node_id} cannot call a node agent: only the controller's can"),
        )
        .into_response(),
        None => ApiFailure::new(
            StatusCode::FORBIDDEN,
            ApiErrorCode::Forbidden,
            "only the fleet controller's client certificate can call a node agent",
        )
        .into_response(),
    }
}

/// Serves the local API on `listener` until `stop`: plain HTTP in plain mode; in secure mode
/// HTTPS from the first node certificate the controller link publishes on (nothing is
/// answered before: connections wait), swapping in each renewed one without a restart.
pub async fn serve(
    agent: Arc<Agent>,
    listener: tokio::net::TcpListener,
    mut stop: watch::Receiver<bool>,
) {
    let app = router(agent.clone());
    let mut stopping = stop.clone();
    let shutdown = async move {
        let _ = stopping.wait_for(|s| *s).await;
    };
    if agent.config.plain_http {
        crate::http_serve::serve(listener, |_| app.clone(), shutdown).await;
        return;
    }
    let mut served = agent.serving_tls.subscribe();
    let first = tokio::select! {
        first = served.wait_for(Option::is_some) => match first {
            Ok(first) => first.clone().expect("waited for Some"),
            Err(_) => return,
        },
        _ = stop.wait_for(|s| *s) => return,
    };
    let cert = crate::tls_server::ReloadableCert::new(first.certified);
    let tls = crate::tls_server::server_config(
        cert.clone(),
        &first.ca_pem,
        None,
        crate::tls_server::ClientCerts::Required,
    )
    .map_err(|e| e.to_string())
    .and_then(|config| {
        crate::tls_server::TlsListener::new(listener, config).map_err(|e| e.to_string())
    });
    let tls = match tls {
        Ok(tls) => tls,
        Err(e) => {
            tracing::error!("local API: cannot serve TLS: {e}");
            return;
        }
    };
    tracing::info!("local API serving HTTPS with the node certificate");
    let swap = tokio::spawn(async move {
        while served.changed().await.is_ok() {
            if let Some(next) = served.borrow_and_update().clone() {
                cert.replace(next.certified);
                tracing::info!("local API serving the renewed node certificate");
            }
        }
    });
    crate::http_serve::serve(
        tls,
        |peer: &crate::tls_server::Peer| {
            crate::tls_server::WithPeer::new(app.clone(), peer.clone())
        },
        shutdown,
    )
    .await;
    swap.abort();
}

/// Desired-state intake as the local API answers it: `422` for a document this host refuses,
/// `400` for one the writer's validator refused, `500` when desired.json cannot be written.
impl From<DesiredError> for ApiFailure {
    fn from(refusal: DesiredError) -> ApiFailure {
        let (status, code) = match &refusal {
            DesiredError::NotForThisHost(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                ApiErrorCode::InvalidDocument,
            ),
            DesiredError::Write(WriteError::Invalid { .. }) => {
                (StatusCode::BAD_REQUEST, ApiErrorCode::InvalidDocument)
            }
            DesiredError::Write(WriteError::Io { .. }) => {
                return ApiFailure::internal(refusal.to_string())
            }
        };
        let mut failure = ApiFailure::new(status, code, refusal.to_string());
        failure.body.violations = refusal.violations().to_vec();
        failure
    }
}

/// `422`: a process VM with no command, on a node without VM_DEFAULT_COMMAND.
fn no_command() -> ApiFailure {
    let message = "a process VM needs a command: the request names none (/command), and this node has no default (VM_DEFAULT_COMMAND)";
    let mut failure = ApiFailure::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ApiErrorCode::InvalidDocument,
        message,
    );
    failure.body.violations = vec![fleetwire_types::Violation {
        instance_path: "/command".parse().expect("a JSON pointer"),
        schema_path: "/$defs/CreateVmRequest/properties/command"
            .parse()
            .expect("a JSON pointer"),
        keyword: "required".into(),
        message: message.to_string(),
    }];
    failure
}

fn conflict(message: String) -> ApiFailure {
    ApiFailure::new(StatusCode::CONFLICT, ApiErrorCode::Conflict, message)
}

/// `POST /v1/spawn`: PPN's create request (plus an optional `command`) becomes an instance of
/// desired.json; the answer is the VM's record once it runs (or after [`SPAWN_WAIT`]).
async fn spawn(
    State(agent): State<Arc<Agent>>,
    Valid(req): Valid<CreateVmRequest>,
) -> Result<Json<VmRecord>, ApiFailure> {
    if let Some(p) = agent.published() {
        if p.observation.runtime.stalled {
            return Err(ApiFailure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ApiErrorCode::NoCapacity,
                "the runtime is stalled (GET /capacity answers 503): this node takes no new VMs",
            ));
        }
    }
    if let Some(v) =
        crate::workload::image_network("", req.image.as_ref().map(|i| i.as_str()), req.network)
    {
        return Err(ApiFailure::rejected(
            "CreateVmRequest",
            fleetwire_types::Rejection::Invalid(vec![v]),
        ));
    }
    if let Some(v) = crate::workload::one_boot_source(
        "",
        req.image.is_some(),
        req.boot.is_some(),
        req.disk_image.is_some().then_some("disk_image"),
    ) {
        // Valid by the schema, which cannot state this rule: 422, as the document says.
        return Err(ApiFailure::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ApiErrorCode::InvalidDocument,
            format!(
                "not a usable CreateVmRequest at {}: {}",
                v.instance_path.as_str(),
                v.message
            ),
        ));
    }
    let runtime = agent.config.runtime;
    let workload = crate::workload::Workload {
        image: req.image.is_some(),
        command: req.command.is_some(),
        machine: req.boot.is_some() || req.disk_image.is_some(),
    };
    if let Err(why) = crate::workload::runtime_runs(Some(runtime), workload) {
        return Err(ApiFailure::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ApiErrorCode::InvalidDocument,
            format!("this node cannot run {workload}: {why}"),
        ));
    }
    let vm_id = req.vm_id.clone().unwrap_or_else(crate::ids::new_vm_id);
    // A VM id is wider than desired.json's identifiers: mapped (crate::ids), kept as vmId.
    let app_id: AppId = crate::ids::app_id(&vm_id);
    // A request with neither image nor command runs the node's default command, where the
    // runtime runs commands (process) and the node has one (VM_DEFAULT_COMMAND); without one
    // it is refused, never given a placeholder to run (issue 30). smolvm boots the image alone.
    let argv: Option<Vec<String>> = match &req.command {
        Some(argv) => Some(argv.0.iter().map(|a| a.to_string()).collect()),
        None if req.image.is_none() && runtime == Runtime::Process => {
            if agent.config.default_command.is_empty() {
                return Err(no_command());
            }
            Some(agent.config.default_command.clone())
        }
        None => None,
    };
    let command: Option<Command> = argv
        .map(|argv| serde_json::from_value(serde_json::json!(argv)).map_err(|_| no_command()))
        .transpose()?;
    // A PPN spawn names no boot source: a qemu node boots its base image, as PPN's does.
    let disk_image = match (&req.disk_image, &req.boot, runtime) {
        (None, None, Runtime::Qemu) if req.image.is_none() => {
            let base = agent.config.qemu.base_image.as_ref().ok_or_else(|| {
                ApiFailure::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ApiErrorCode::InvalidDocument,
                    "the request names no kernel (boot) or disk_image, and this node has no default base image (VM_BASE_IMAGE)",
                )
            })?;
            Some(
                base.parse()
                    .expect("VM_BASE_IMAGE was checked as a file name"),
            )
        }
        _ => req.disk_image.clone(),
    };
    let instance = DesiredInstance {
        app_id: app_id.clone(),
        deployment_id: crate::ids::deployment_id(&vm_id),
        desired_state: DesiredInstanceState::Running,
        command,
        resources: InstanceResources {
            vcpu_count: std::num::NonZeroU64::from(req.vcpu_count),
            memory_mib: req.ram_mb,
            disk_mib: req.disk_gb.get().saturating_mul(1024),
        },
        image: req.image.clone(),
        network: req.network,
        boot: req.boot.clone(),
        disk_image,
        guest_ports: req.guest_ports.clone().unwrap_or_else(|| Vec::new().into()),
        restart_policy: None,
        env: Default::default(),
        vm_id: Some(vm_id.clone()),
        tenant_id: req.tenant_id.clone(),
        vm_type: Some(req.vm_type.clone()),
    };
    // Room beyond memory and CPUs (the qemu driver's host ports): a node without it refuses,
    // and the controller's placement tries another.
    if let Err(why) = agent.driver.admit(&instance) {
        return Err(ApiFailure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ApiErrorCode::NoCapacity,
            format!("this node has no room for the VM: {why}"),
        ));
    }
    agent
        .desired
        .update(|doc| {
            if doc
                .instances
                .iter()
                .any(|i| i.app_id == app_id || i.vm_id.as_ref() == Some(&vm_id))
            {
                return Err(conflict(format!(
                    "VM {} already exists on this node",
                    vm_id.as_str()
                )));
            }
            doc.instances.push(instance);
            Ok(())
        })
        .await?;
    agent.wake.notify_one();

    let deadline = Instant::now() + SPAWN_WAIT;
    loop {
        let instances = agent
            .published()
            .map(|p| p.observation.instances.clone())
            .unwrap_or_default();
        let settled = instances.iter().any(|i| {
            i.app_id == app_id && matches!(i.state, InstanceState::Running | InstanceState::Failed)
        });
        if settled || Instant::now() >= deadline {
            return vm_records(&agent.config, &agent.desired.current(), &instances)
                .into_iter()
                .find(|r| r.vm_id == vm_id)
                .map(Json)
                .ok_or_else(|| {
                    ApiFailure::not_found(format!("VM {} was removed meanwhile", vm_id.as_str()))
                });
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `DELETE /v1/vms/{vm_id}`: removes the instance from desired.json; the driver stops it.
async fn delete_vm(
    State(agent): State<Arc<Agent>>,
    path: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiFailure> {
    // A path that does not decode (not UTF-8) names no VM: 404 as for any unknown id.
    let Path(vm_id) =
        path.map_err(|e| ApiFailure::not_found(format!("no VM with that id on this node: {e}")))?;
    agent
        .desired
        .update(|doc| {
            let before = doc.instances.len();
            doc.instances.retain(|i| {
                i.app_id.as_str() != vm_id && i.vm_id.as_ref().is_none_or(|v| v.as_str() != vm_id)
            });
            if doc.instances.len() == before {
                return Err(ApiFailure::not_found(format!(
                    "no VM {vm_id:?} on this node"
                )));
            }
            Ok(())
        })
        .await?;
    agent.wake.notify_one();
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/vms/{vm_id}/logs[?offset=N]`: a piece of the VM's output, from the file its
/// driver keeps it in (`Driver::output_file`), from `offset` on.
async fn vm_logs(
    State(agent): State<Arc<Agent>>,
    path: Result<Path<String>, PathRejection>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Result<Json<VmLogChunk>, ApiFailure> {
    let Path(vm_id) =
        path.map_err(|e| ApiFailure::not_found(format!("no VM with that id on this node: {e}")))?;
    let offset = match query.as_deref().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(name, _)| name == "offset")
            .map(|(_, value)| value.into_owned())
    }) {
        None => 0,
        Some(text) => text.parse::<u64>().map_err(|_| {
            ApiFailure::new(
                StatusCode::BAD_REQUEST,
                ApiErrorCode::InvalidQuery,
                format!("offset: {text:?} is not a whole number of bytes"),
            )
        })?,
    };
    let desired = agent.desired.current();
    let instance = desired
        .instances
        .iter()
        .find(|i| {
            i.app_id.as_str() == vm_id || i.vm_id.as_ref().is_some_and(|v| v.as_str() == vm_id)
        })
        .ok_or_else(|| ApiFailure::not_found(format!("no VM {vm_id:?} on this node")))?;
    let file = agent.driver.output_file(&instance.app_id).ok_or_else(|| {
        ApiFailure::not_found(format!(
            "this node's runtime ({}) keeps the output of its VMs itself",
            agent.config.runtime.as_str()
        ))
    })?;
    let shown_id = instance
        .vm_id
        .as_ref()
        .map_or_else(|| instance.app_id.as_str().to_string(), |v| v.to_string());
    let piece = tokio::task::spawn_blocking(move || read_output(&file, offset))
        .await
        .map_err(|e| ApiFailure::internal(format!("the log task failed: {e}")))?
        .map_err(|e| ApiFailure::internal(format!("reading the VM's output: {e}")))?;
    let chunk = serde_json::json!({
        "vm_id": shown_id,
        "offset": piece.offset,
        "next_offset": piece.next_offset,
        "size": piece.size,
        "text": piece.text,
    });
    fleetwire_types::read_value_strict::<VmLogChunk>(&chunk)
        .map(Json)
        .map_err(|r| ApiFailure::internal(fleetwire_types::summarize(r.violations())))
}

/// A piece of a VM's output file.
struct OutputPiece {
    offset: u64,
    next_offset: u64,
    size: u64,
    text: String,
}

/// At most [`LOG_CHUNK_BYTES`] of `file` from `offset` (from its end, if it has shrunk), cut
/// before a character split at the end, which the next piece carries whole. A file not yet
/// written is empty.
fn read_output(file: &std::path::Path, offset: u64) -> std::io::Result<OutputPiece> {
    use std::io::{Read, Seek, SeekFrom};
    let mut opened = match std::fs::File::open(file) {
        Ok(opened) => opened,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(OutputPiece {
                offset: 0,
                next_offset: 0,
                size: 0,
                text: String::new(),
            })
        }
        Err(e) => return Err(e),
    };
    let size = opened.metadata()?.len();
    let start = offset.min(size);
    opened.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    opened.take(LOG_CHUNK_BYTES).read_to_end(&mut bytes)?;
    let whole = match std::str::from_utf8(&bytes) {
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        _ => bytes.len(),
    };
    Ok(OutputPiece {
        offset: start,
        next_offset: start + whole as u64,
        size,
        text: String::from_utf8_lossy(&bytes[..whole]).into_owned(),
    })
}

async fn list_vms(State(agent): State<Arc<Agent>>) -> Json<Vec<VmRecord>> {
    Json(match agent.published() {
        Some(p) => vm_records(&agent.config, &p.desired, &p.observation.instances),
        None => Vec::new(),
    })
}

/// `PUT /v1/desired`: the whole document. A refused one is answered with its violations and
/// reported as reported.json's `message`; the document in force stays.
async fn put_desired(
    State(agent): State<Arc<Agent>>,
    body: Result<Valid<HostDesiredState>, ApiFailure>,
) -> Result<Json<HostDesiredState>, ApiFailure> {
    let outcome = match body {
        Ok(Valid(doc)) => agent.desired.replace(doc).await.map_err(ApiFailure::from),
        Err(failure) => Err(failure),
    };
    agent.wake.notify_one();
    match outcome {
        Ok(doc) => Ok(Json((*doc).clone())),
        Err(failure) => {
            agent.desired.refuse(
                "PUT /v1/desired",
                &failure.body.violations,
                &failure.body.message.to_string(),
            );
            Err(failure)
        }
    }
}

async fn get_desired(State(agent): State<Arc<Agent>>) -> Json<HostDesiredState> {
    Json((*agent.desired.current()).clone())
}

fn not_yet() -> ApiFailure {
    ApiFailure::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ApiErrorCode::Timeout,
        "no reconcile pass has completed yet",
    )
}

async fn get_reported(State(agent): State<Arc<Agent>>) -> Result<Response, ApiFailure> {
    let p = agent.published().ok_or_else(not_yet)?;
    Ok(Json(p.report.clone()).into_response())
}

async fn metrics(State(agent): State<Arc<Agent>>) -> Result<Response, ApiFailure> {
    let p = agent.published().ok_or_else(not_yet)?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        crate::reported::metrics::render_with(&p.report, |registry| {
            let agent_registry = registry.sub_registry_with_prefix("fleetwire_agent");
            crate::unknown_fields::register(agent_registry);
            agent.pass_timing.register(agent_registry);
        }),
    )
        .into_response())
}

async fn healthz(State(agent): State<Arc<Agent>>) -> Json<Health> {
    Json(Health {
        status: HealthStatus::Ok,
        version: env!("CARGO_PKG_VERSION").parse().ok(),
        store: None,
        transport: Some(if agent.config.plain_http {
            TransportSecurity::PlainHttp
        } else {
            TransportSecurity::Mtls
        }),
        role: None,
        leader_url: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_route_table_lists_exactly_the_operations_of_the_agent_api_document() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../generated/openapi/agent-api.json"
        );
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut documented = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                if ["get", "post", "put", "delete", "patch", "head", "options"]
                    .contains(&method.as_str())
                {
                    assert_eq!(
                        operation["x-fleetwire-access"], "controller",
                        "{method} {path}: only the controller calls an agent"
                    );
                    documented.insert((
                        method.to_uppercase(),
                        path.clone(),
                        operation["operationId"].as_str().unwrap().to_string(),
                    ));
                }
            }
        }
        let served: BTreeSet<_> = ROUTES
            .iter()
            .map(|r| {
                (
                    r.method.to_string(),
                    r.path.to_string(),
                    r.operation_id.to_string(),
                )
            })
            .collect();
        assert_eq!(served.len(), ROUTES.len(), "an operation is listed twice");
        assert_eq!(served, documented);
    }
}
