//! The HTTP handlers of the controller's API: thin shells that read validated input, call the
//! node rules, placement or the table, and answer generated types or `ApiError`s.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use compact_str::CompactString;
use fleetwire_types::{
    ApiErrorCode, CertSerial, CreateVmRequest, Health, HealthStatus, HostState, NodeHeartbeat,
    NodeStatusFilter, PemCertificate, RegisterNodeRequest, RegisterNodeResponse, RejectedVm,
    SemVer, StateMessage, TenantId, Timestamp, VmRecord,
};

use super::{nodes, placement, Controller};
use crate::http::{ApiFailure, Valid};
use crate::runtimes;
use crate::store::writer::Queued;

type Shared = State<Arc<Controller>>;

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
    Valid(request): Valid<RegisterNodeRequest>,
) -> Result<Json<RegisterNodeResponse>, ApiFailure> {
    if !runtimes::is_known(&request.runtime) {
        return Err(ApiFailure::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ApiErrorCode::UnknownRuntime,
            format!(
                "no driver for runtime {:?}; known runtimes: {}",
                request.runtime.as_str(),
                runtimes::KNOWN.join(", ")
            ),
        ));
    }
    // Sign first: a CSR that cannot be signed refuses the registration and changes nothing.
    let issued = match (&controller.ca, &request.csr_pem) {
        (Some(_), Some(csr)) => {
            let csr = csr.to_string();
            let node_id = request.node_id.to_string();
            let wg_ip = request.wg_ip.0;
            let addresses: Vec<_> = request.addresses.iter().map(|a| a.0).collect();
            let signer = controller.clone();
            let signed = tokio::task::spawn_blocking(move || {
                signer
                    .ca
                    .as_ref()
                    .expect("checked above")
                    .sign(&csr, &node_id, wg_ip, &addresses)
            })
            .await
            .map_err(|e| ApiFailure::internal(format!("the signing task failed: {e}")))?;
            Some(signed.map_err(|rejected| {
                let mut failure = ApiFailure::new(
                    StatusCode::BAD_REQUEST,
                    ApiErrorCode::InvalidDocument,
                    format!("not a valid RegisterNodeRequest: /csr_pem: {}", rejected.0),
                );
                failure.body.violations = vec![fleetwire_types::Violation {
                    instance_path: "/csr_pem".parse().expect("a JSON pointer"),
                    schema_path: "/$defs/RegisterNodeRequest/properties/csr_pem"
                        .parse()
                        .expect("a JSON pointer"),
                    keyword: "format".into(),
                    message: rejected.0,
                }];
                failure
            })?)
        }
        _ => None,
    };
    let node_id = request.node_id.to_string();
    let probe = request.smolvm_address.is_some();
    let now = Instant::now();
    let received = Timestamp::now();
    let (slot, new) = controller.table.get_or_insert(&node_id, || {
        nodes::enroll_by_registration(&request, received)
    });
    let (record, outcome) = {
        let mut state = slot.lock();
        let outcome = nodes::apply_registration(
            &mut state,
            request,
            now,
            received,
            controller.settings.stale_after,
        );
        if let Some(issued) = &issued {
            state.record.cert_serial =
                Some(CertSerial::try_from(issued.serial_hex.as_str()).expect("a hex serial"));
            state.record.cert_not_after = Some(Timestamp::from(issued.not_after));
        }
        state.changed_for_commit();
        (state.record.clone(), outcome)
    };
    controller.commit(vec![node_id.clone()]).await?;
    tracing::info!(
        node_id,
        new,
        runtime_restarted = outcome.runtime_restarted,
        certificate = issued.is_some(),
        "node registered"
    );
    if probe {
        controller.probe_soon(&node_id);
    }
    let pem = |text: String| PemCertificate::try_from(text).expect("rcgen writes PEM certificates");
    let (cert_pem, ca_pem) = match issued {
        Some(issued) => (Some(pem(issued.cert_pem)), Some(pem(issued.ca_pem))),
        None => (None, None),
    };
    Ok(Json(RegisterNodeResponse {
        ca_pem,
        cert_pem,
        node: record,
    }))
}

/// `POST /v1/nodes/heartbeat` as routed by the router. Over HTTP the route is served ahead of
/// the router by [`super::heartbeat_route`], with the same [`take_heartbeat`]; this entry
/// keeps the router complete (its `405` for other methods on the path, and tests that call
/// the router directly).
pub async fn post_heartbeat(
    State(controller): Shared,
    crate::http::JsonBody(body): crate::http::JsonBody,
) -> Result<Response, ApiFailure> {
    let (heartbeat, rejected) = super::heartbeat_entries::read(&body)?;
    take_heartbeat_with(&controller, heartbeat.value, rejected).await?;
    let mut response = StatusCode::OK.into_response();
    crate::unknown_fields::add_warnings(response.headers_mut(), &heartbeat.unknown_fields);
    Ok(response)
}

/// What a heartbeat's answer waits for.
enum Durable {
    /// Nothing: written behind, within the flush interval.
    Behind,
    /// The node was enrolled by this heartbeat: committed by id, as a registration is.
    Commit(String),
    /// The write-behind queue is full: the next batch.
    Flush,
}

/// The heartbeat rules, the hot path: node rules under the node's lock, then the write-behind
/// queue; the caller answers `200` with an empty body, as a PPN controller does. An enrolling
/// heartbeat returns once the new node is committed; any other once its change is queued
/// (or, while the store is behind, written).
pub async fn take_heartbeat(
    controller: &Controller,
    heartbeat: NodeHeartbeat,
) -> Result<(), ApiFailure> {
    take_heartbeat_with(controller, heartbeat, Vec::new()).await
}

/// [`take_heartbeat`] for a heartbeat whose `rejected` entries of `vms` were set aside
/// ([`super::heartbeat_entries`]): the node record shows them until the next heartbeat.
pub async fn take_heartbeat_with(
    controller: &Controller,
    heartbeat: NodeHeartbeat,
    rejected: Vec<RejectedVm>,
) -> Result<(), ApiFailure> {
    let durable = apply_heartbeat(controller, heartbeat, rejected);
    match durable {
        Durable::Behind => Ok(()),
        Durable::Commit(node_id) => controller.commit(vec![node_id]).await,
        Durable::Flush => controller.flushed().await,
    }
}

fn apply_heartbeat(
    controller: &Controller,
    heartbeat: NodeHeartbeat,
    rejected: Vec<RejectedVm>,
) -> Durable {
    if !rejected.is_empty() {
        controller.metrics.rejected_vm_entries(rejected.len());
        tracing::warn!(
            node_id = heartbeat.node_id.as_str(),
            set_aside = rejected.len(),
            first = %rejected[0].reason.as_str(),
            "heartbeat taken without its invalid vms entries"
        );
    }
    let now = Instant::now();
    let received = Timestamp::now();
    let node_id = CompactString::from(heartbeat.node_id.as_str());
    let (slot, new) = controller.table.get_or_insert(&node_id, || {
        nodes::enroll_by_heartbeat(&heartbeat, received)
    });
    let (mut outcome, queue) = {
        let mut state = slot.lock();
        let mut outcome =
            nodes::apply_heartbeat(&mut state, heartbeat, now, received, &controller.settings);
        outcome.record_changed |= nodes::set_rejected_vms(&mut state, rejected);
        if let Some((removed, added)) = &outcome.vm_ids {
            controller.table.index_vms(
                &node_id,
                removed.iter().map(String::as_str),
                added.iter().map(String::as_str),
            );
        }
        let queue = if new {
            state.changed_for_commit();
            None
        } else {
            state.heartbeat_change(outcome.record_changed)
        };
        (outcome, queue)
    };
    controller.metrics.heartbeat();
    outcome.enrolled = new;
    if new
        || outcome.previous_status.is_some()
        || outcome.restart.is_some()
        || !outcome.pruned.is_empty()
        || outcome.disk_cordon.is_some()
        || outcome.stall_cordon.is_some()
    {
        outcome.log(&node_id);
    }
    if new {
        return Durable::Commit(node_id.into_string());
    }
    // Queued after the node's lock is released: its write-behind mark is already set, so a
    // batch taken in between leaves it for the next one, which this adds it to.
    match queue.map(|change| controller.queue_heartbeat(slot, node_id, change)) {
        Some(Queued::Full) => Durable::Flush,
        Some(Queued::InTime) | None => Durable::Behind,
    }
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
        .table
        .remove(&node_id)
        .ok_or_else(|| node_not_found(&node_id))?;
    controller.commit(vec![node_id.clone()]).await?;
    tracing::info!(node_id, "node unenrolled");
    Ok(StatusCode::NO_CONTENT)
}

/// Applies an operator action to a node, commits it, and answers the node's record.
async fn operate(
    controller: &Controller,
    node_id: String,
    action: impl FnOnce(&mut super::state::NodeState),
    what: &str,
) -> Result<Response, ApiFailure> {
    let slot = controller
        .table
        .get(&node_id)
        .ok_or_else(|| node_not_found(&node_id))?;
    let body = {
        let mut state = slot.lock();
        action(&mut state);
        state.changed_for_commit();
        state.fragment().clone()
    };
    controller.commit(vec![node_id.clone()]).await?;
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
    placement::create_vm(&controller, request).await.map(Json)
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
pub async fn get_healthz() -> Json<Health> {
    Json(Health {
        status: HealthStatus::Ok,
        store: None,
        version: version(),
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
            }),
        ),
        Some(problem) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: HealthStatus::Unavailable,
                store: message(&problem),
                version: version(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::Settings;
    use crate::store::sqlite::SqliteStore;
    use crate::store::Store;
    use std::time::Duration;

    fn heartbeat(ram_used_mb: u64) -> NodeHeartbeat {
        let body = serde_json::json!({
            "node_id": "n1", "wg_ip": "10.0.0.1", "hostname": "h1",
            "ram_total_mb": 8192, "ram_used_mb": ram_used_mb, "cpu_cores": 4,
            "cpu_load_pct": 3.5, "kvm_available": true, "vms": [], "boot_id": "host-a",
            "timestamp_utc": "2001-01-01T00:00:00Z"
        });
        fleetwire_types::read_strict(&serde_json::to_vec(&body).unwrap()).unwrap()
    }

    /// One field of every stored node record, in node-id order.
    fn stored(path: &std::path::Path, field: &str) -> Vec<serde_json::Value> {
        let rows = SqliteStore::open(path).unwrap().load_nodes().unwrap();
        rows.iter()
            .map(|row| {
                let record: serde_json::Value = serde_json::from_slice(&row.record).unwrap();
                record[field].clone()
            })
            .collect()
    }

    /// `ram_available_mb` of the stored records (8192 minus the heartbeat's `ram_used_mb`).
    fn stored_ram_available(path: &std::path::Path) -> Vec<serde_json::Value> {
        stored(path, "ram_available_mb")
    }

    fn stored_status(path: &std::path::Path) -> Vec<serde_json::Value> {
        stored(path, "status")
    }

    #[tokio::test]
    async fn a_node_going_silent_costs_the_store_nothing_and_still_loads_unreachable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite3");
        let settings = Settings {
            stale_after: Duration::from_millis(50),
            ..Settings::for_tests()
        };
        let start = || {
            let store = Box::new(SqliteStore::open(&path).unwrap());
            Controller::start(settings.clone(), store, None).unwrap()
        };
        let started = start();
        let controller = started.controller;
        take_heartbeat(&controller, heartbeat(1000)).await.unwrap();
        assert_eq!(stored_status(&path), ["ready"]);
        tokio::time::sleep(Duration::from_millis(100)).await;
        crate::controller::jobs::sweep(&controller).await;
        let served: serde_json::Value =
            serde_json::from_slice(&controller.node_json("n1").unwrap()).unwrap();
        assert_eq!(served["status"], "unreachable");
        controller.flushed().await.unwrap();
        assert_eq!(stored_status(&path), ["ready"], "the status is not written");
        started.writer.shutdown().await;
        drop(controller);

        // Loaded again, the node is unreachable until it heartbeats, and that writes nothing.
        let started = start();
        let served: serde_json::Value =
            serde_json::from_slice(&started.controller.node_json("n1").unwrap()).unwrap();
        assert_eq!(served["status"], "unreachable");
        started.controller.flushed().await.unwrap();
        assert_eq!(stored_status(&path), ["ready"]);
        // A heartbeat brings it back, and its row is written in full.
        take_heartbeat(&started.controller, heartbeat(2000))
            .await
            .unwrap();
        started.controller.flushed().await.unwrap();
        assert_eq!(stored_ram_available(&path), [6192]);
        started.writer.shutdown().await;
    }

    #[tokio::test]
    async fn heartbeats_are_answered_after_their_write_when_enrolling_or_when_the_store_is_behind()
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite3");
        let settings = Settings {
            flush_interval: Duration::from_millis(600),
            ..Settings::for_tests()
        };
        let started =
            Controller::start(settings, Box::new(SqliteStore::open(&path).unwrap()), None).unwrap();
        let controller = started.controller;

        // Enrolling: committed before the answer.
        take_heartbeat(&controller, heartbeat(1000)).await.unwrap();
        assert_eq!(stored_ram_available(&path), [7192]);

        // A changed record with room in the queue: written behind, not yet stored.
        take_heartbeat(&controller, heartbeat(2000)).await.unwrap();
        assert_eq!(stored_ram_available(&path), [7192]);
        controller.flushed().await.unwrap();
        assert_eq!(stored_ram_available(&path), [6192]);

        // A store so slow that one row fills the 300 ms budget: the answer waits for it.
        controller
            .writer
            .assume_costs(Duration::from_secs(1), Duration::from_secs(1));
        take_heartbeat(&controller, heartbeat(3000)).await.unwrap();
        assert_eq!(stored_ram_available(&path), [5192]);
        started.writer.shutdown().await;
    }
}
