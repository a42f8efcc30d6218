//! STAND-IN for a smolvm runtime (`smolvm serve`), for the agent's smolvm driver tests only.
//!
//! No smolvm can be installed here, so this answers exactly the shapes of
//! `shared/reference/smolvm-runtime.md`: `GET /health`, `GET /readyz`, `GET /capacity` (503
//! while told to be stalled), and the machines API under `/api/v1` with `{error, code}` errors.
//! Machines are records in memory; "running" one runs nothing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::background::BackgroundServer;

#[derive(Default)]
struct Runtime {
    machines: BTreeMap<String, Value>,
    /// Every call as "METHOD path", in order.
    calls: Vec<String>,
}

#[derive(Clone)]
struct Ctx {
    runtime: Arc<Mutex<Runtime>>,
    stalled: Arc<AtomicBool>,
    boot_id: String,
    started: Instant,
}

pub struct StandinSmolvm {
    pub server: BackgroundServer,
    runtime: Arc<Mutex<Runtime>>,
    stalled: Arc<AtomicBool>,
    pub boot_id: String,
}

impl StandinSmolvm {
    pub fn start() -> StandinSmolvm {
        let runtime = Arc::new(Mutex::new(Runtime::default()));
        let stalled = Arc::new(AtomicBool::new(false));
        let boot_id = format!(
            "{}-{}",
            std::process::id(),
            chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0)
        );
        let ctx = Ctx {
            runtime: runtime.clone(),
            stalled: stalled.clone(),
            boot_id: boot_id.clone(),
            started: Instant::now(),
        };
        let router = Router::new()
            .route("/health", get(health))
            .route("/readyz", get(readyz))
            .route("/capacity", get(capacity))
            .route("/api/v1/machines", get(list).post(create))
            .route("/api/v1/machines/{id}", get(get_one).delete(remove))
            .route("/api/v1/machines/{id}/start", post(start))
            .route("/api/v1/machines/{id}/stop", post(stop))
            .with_state(ctx);
        StandinSmolvm {
            server: BackgroundServer::start(router, 0),
            runtime,
            stalled,
            boot_id,
        }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// While true, `GET /capacity` answers 503 (a wedged runtime).
    pub fn set_stalled(&self, stalled: bool) {
        self.stalled.store(stalled, Ordering::SeqCst);
    }

    pub fn machines(&self) -> BTreeMap<String, Value> {
        self.runtime.lock().unwrap().machines.clone()
    }

    pub fn calls(&self) -> Vec<String> {
        self.runtime.lock().unwrap().calls.clone()
    }
}

fn error(status: StatusCode, code: &str, message: String) -> Response {
    (status, Json(json!({"error": message, "code": code}))).into_response()
}

fn note(ctx: &Ctx, call: String) {
    ctx.runtime.lock().unwrap().calls.push(call);
}

async fn health(State(ctx): State<Ctx>) -> Json<Value> {
    let rt = ctx.runtime.lock().unwrap();
    let running = rt
        .machines
        .values()
        .filter(|m| m["state"] == "running")
        .count();
    Json(json!({
        "status": "ok",
        "version": "0.5.2",
        "machines": {"total": rt.machines.len(), "running": running},
        "uptime_seconds": ctx.started.elapsed().as_secs(),
    }))
}

async fn readyz() -> StatusCode {
    StatusCode::OK
}

async fn capacity(State(ctx): State<Ctx>) -> Response {
    if ctx.stalled.load(Ordering::SeqCst) {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "STALLED",
            "blocking pool did not answer within 2s".into(),
        );
    }
    let rt = ctx.runtime.lock().unwrap();
    let running: Vec<&Value> = rt
        .machines
        .values()
        .filter(|m| m["state"] == "running")
        .collect();
    let cpus: u64 = running
        .iter()
        .map(|m| m["cpus"].as_u64().unwrap_or(0))
        .sum();
    let mem: u64 = running.iter().map(|m| m["mem"].as_u64().unwrap_or(0)).sum();
    Json(json!({
        "allocated_cpus": cpus,
        "allocated_memory_mb": mem,
        "used_cpus": 0.25 * running.len() as f64,
        "used_memory_mb": 32 * running.len() as u64,
        "used_disk_gb": rt.machines.len() as u64,
        "boot_id": ctx.boot_id,
    }))
    .into_response()
}

async fn list(State(ctx): State<Ctx>) -> Json<Vec<Value>> {
    note(&ctx, "GET /api/v1/machines".into());
    Json(
        ctx.runtime
            .lock()
            .unwrap()
            .machines
            .values()
            .cloned()
            .collect(),
    )
}

async fn create(State(ctx): State<Ctx>, Json(body): Json<Value>) -> Response {
    let Some(name) = body["name"].as_str().map(str::to_string) else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
            "name is required".into(),
        );
    };
    note(&ctx, format!("POST /api/v1/machines {name}"));
    let mut rt = ctx.runtime.lock().unwrap();
    if rt.machines.contains_key(&name) {
        return error(
            StatusCode::CONFLICT,
            "CONFLICT",
            format!("machine {name} exists"),
        );
    }
    let machine = json!({
        "name": name,
        "state": "created",
        "cpus": body["cpus"],
        "mem": body["mem"],
        "ports": body.get("ports").cloned().unwrap_or(json!([])),
        "cmd": body.get("cmd").cloned().unwrap_or(Value::Null),
        "storage_gb": body.get("storage_gb").cloned().unwrap_or(json!(20)),
    });
    rt.machines.insert(name, machine.clone());
    (StatusCode::CREATED, Json(machine)).into_response()
}

async fn get_one(State(ctx): State<Ctx>, Path(id): Path<String>) -> Response {
    match ctx.runtime.lock().unwrap().machines.get(&id) {
        Some(m) => Json(m.clone()).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            format!("machine {id} not found"),
        ),
    }
}

fn set_state(ctx: &Ctx, id: &str, state: &str) -> Response {
    note(ctx, format!("{state} {id}"));
    let mut rt = ctx.runtime.lock().unwrap();
    match rt.machines.get_mut(id) {
        Some(m) => {
            m["state"] = json!(state);
            Json(m.clone()).into_response()
        }
        None => error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            format!("machine {id} not found"),
        ),
    }
}

async fn start(State(ctx): State<Ctx>, Path(id): Path<String>) -> Response {
    set_state(&ctx, &id, "running")
}

async fn stop(State(ctx): State<Ctx>, Path(id): Path<String>) -> Response {
    set_state(&ctx, &id, "stopped")
}

async fn remove(State(ctx): State<Ctx>, Path(id): Path<String>) -> Response {
    note(&ctx, format!("DELETE {id}"));
    match ctx.runtime.lock().unwrap().machines.remove(&id) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            format!("machine {id} not found"),
        ),
    }
}
