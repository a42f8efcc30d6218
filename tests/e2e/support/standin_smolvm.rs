//! STAND-IN for a smolvm 1.9.2 runtime (`smolvm serve`), for the agent's fast smolvm driver
//! tests; the real program is tested in `tests/e2e/peers/smolvm.rs`.
//!
//! It answers only documents of `schemas/smolvm.schema.json`, built from the generated types
//! and checked against their schemas before they leave, and behaves as smolvm 1.9.2 does for
//! what it implements (`docs/interop.md`): `GET /health` (version 1.9.2), `GET /capacity`
//! (snake_case, camelCase `cuda_devices` when told to have GPUs, a plain-text 503 while
//! stalled), and `/api/v1/machines`: create makes a record that does not boot (`created`;
//! 400 for a command without an image or an image without network, 409 for a name taken),
//! start boots it or, when told to, fails with 500 as smolvm does without libkrun, stop is
//! idempotent, delete answers `{"deleted"}`, the list is `{"machines": [...]}`, errors are
//! `{error, code}`. "Running" a machine runs nothing; its usage figures are set by the test.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use fleetwire_types::{
    CreateMachineRequest, CudaDevice, RuntimeCapacity, RuntimeDeleted, RuntimeError, RuntimeHealth,
    RuntimeMachine, RuntimeMachineCounts, RuntimeMachineList, WireDocument,
};
use serde_json::Value;

use crate::support::background::BackgroundServer;

/// The message smolvm 1.9.2 gives when it cannot boot a machine on these hosts.
pub const START_FAILURE: &str =
    "failed to start machine: kvm permission denied: stand-in told to fail its starts";

#[derive(Default)]
struct Runtime {
    machines: BTreeMap<String, RuntimeMachine>,
    /// Each machine's create request, as sent.
    requests: BTreeMap<String, Value>,
    /// Every call as "METHOD path" (create: "POST /api/v1/machines NAME"), in order.
    calls: Vec<String>,
    cuda: Vec<CudaDevice>,
    boot_id: String,
    next_pid: u32,
}

#[derive(Clone)]
struct Ctx {
    runtime: Arc<Mutex<Runtime>>,
    stalled: Arc<AtomicBool>,
    fail_starts: Arc<AtomicBool>,
    started: Instant,
}

pub struct StandinSmolvm {
    pub server: BackgroundServer,
    runtime: Arc<Mutex<Runtime>>,
    stalled: Arc<AtomicBool>,
    fail_starts: Arc<AtomicBool>,
}

fn new_boot_id() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0)
    )
}

impl StandinSmolvm {
    pub fn start() -> StandinSmolvm {
        let runtime = Arc::new(Mutex::new(Runtime {
            boot_id: new_boot_id(),
            next_pid: 40_000,
            ..Runtime::default()
        }));
        let stalled = Arc::new(AtomicBool::new(false));
        let fail_starts = Arc::new(AtomicBool::new(false));
        let ctx = Ctx {
            runtime: runtime.clone(),
            stalled: stalled.clone(),
            fail_starts: fail_starts.clone(),
            started: Instant::now(),
        };
        let router = Router::new()
            .route("/health", get(health))
            .route("/readyz", get(readyz))
            .route("/capacity", get(capacity))
            .route("/api/v1/machines", get(list).post(create))
            .route("/api/v1/machines/{name}", get(get_one).delete(remove))
            .route("/api/v1/machines/{name}/start", post(start))
            .route("/api/v1/machines/{name}/stop", post(stop))
            .with_state(ctx);
        StandinSmolvm {
            server: BackgroundServer::start(router, 0),
            runtime,
            stalled,
            fail_starts,
        }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    pub fn boot_id(&self) -> String {
        self.runtime.lock().unwrap().boot_id.clone()
    }

    /// While true, `GET /capacity` answers 503 (a wedged runtime).
    pub fn set_stalled(&self, stalled: bool) {
        self.stalled.store(stalled, Ordering::SeqCst);
    }

    /// While true, every start answers 500 as smolvm does on a host without libkrun.
    pub fn set_fail_starts(&self, fail: bool) {
        self.fail_starts.store(fail, Ordering::SeqCst);
    }

    /// The host's CUDA devices, as `/capacity` reports them.
    pub fn set_cuda_devices(&self, devices: Vec<CudaDevice>) {
        self.runtime.lock().unwrap().cuda = devices;
    }

    /// A new serve process: a new boot id; machines stay in the database but none runs.
    pub fn restart(&self) {
        let mut rt = self.runtime.lock().unwrap();
        rt.boot_id = new_boot_id();
        for m in rt.machines.values_mut() {
            if m.state == "running" {
                stop_machine(m);
            }
        }
    }

    /// Sets a running machine's usage figures (`cpuMillis`, `rssMb`, `diskUsedMb`).
    pub fn set_usage(&self, name: &str, cpu_millis: u64, rss_mb: u64, disk_used_mb: u64) {
        let mut rt = self.runtime.lock().unwrap();
        let m = rt
            .machines
            .get_mut(name)
            .expect("a machine of the stand-in");
        m.cpu_millis = Some(cpu_millis);
        m.rss_mb = Some(rss_mb);
        m.disk_used_mb = Some(disk_used_mb);
    }

    /// The machines as the runtime would list them, by name.
    pub fn machines(&self) -> BTreeMap<String, RuntimeMachine> {
        self.runtime.lock().unwrap().machines.clone()
    }

    /// Each machine's create request as the driver sent it, by name.
    pub fn requests(&self) -> BTreeMap<String, Value> {
        self.runtime.lock().unwrap().requests.clone()
    }

    pub fn calls(&self) -> Vec<String> {
        self.runtime.lock().unwrap().calls.clone()
    }
}

/// A document of ours, checked against its schema before it goes out.
fn document<T: WireDocument + serde::Serialize>(status: StatusCode, doc: &T) -> Response {
    let value = serde_json::to_value(doc).expect("a generated value serializes");
    let problems = fleetwire_types::validate_value::<T>(&value);
    assert!(
        problems.is_empty(),
        "the stand-in would answer an invalid {}: {problems:?}",
        T::INFO.name
    );
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

fn error(status: StatusCode, code: &str, message: String) -> Response {
    document(
        status,
        &RuntimeError {
            error: message,
            code: code.to_string(),
        },
    )
}

fn not_found(name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        format!("machine '{name}' not found"),
    )
}

fn note(ctx: &Ctx, call: String) {
    ctx.runtime.lock().unwrap().calls.push(call);
}

fn stop_machine(m: &mut RuntimeMachine) {
    m.state = "stopped".into();
    m.pid = None;
    m.cpu_millis = None;
    m.rss_mb = None;
}

async fn health(State(ctx): State<Ctx>) -> Response {
    let rt = ctx.runtime.lock().unwrap();
    let running = rt
        .machines
        .values()
        .filter(|m| m.state == "running")
        .count() as u64;
    document(
        StatusCode::OK,
        &RuntimeHealth {
            status: "ok".into(),
            version: "1.9.2".parse().unwrap(),
            machines: Some(RuntimeMachineCounts {
                total: rt.machines.len() as u64,
                running,
            }),
            uptime_seconds: Some(ctx.started.elapsed().as_secs()),
        },
    )
}

async fn readyz() -> StatusCode {
    StatusCode::OK
}

async fn capacity(State(ctx): State<Ctx>) -> Response {
    if ctx.stalled.load(Ordering::SeqCst) {
        // smolvm's own 503 is plain text.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "main runtime stalled; node unschedulable",
        )
            .into_response();
    }
    let rt = ctx.runtime.lock().unwrap();
    let running: Vec<&RuntimeMachine> = rt
        .machines
        .values()
        .filter(|m| m.state == "running")
        .collect();
    document(
        StatusCode::OK,
        &RuntimeCapacity {
            allocated_cpus: running.iter().map(|m| m.cpus).sum(),
            allocated_memory_mb: running.iter().map(|m| m.memory_mb).sum(),
            used_cpus: fleetwire_types::F64Min0::new(0.25 * running.len() as f64).unwrap(),
            used_memory_mb: running.iter().filter_map(|m| m.rss_mb).sum(),
            used_disk_gb: running
                .iter()
                .map(|m| m.storage_gb.unwrap_or(20) + m.overlay_gb.unwrap_or(10))
                .sum(),
            boot_id: rt.boot_id.parse().unwrap(),
            cuda_devices: (!rt.cuda.is_empty()).then(|| rt.cuda.clone()),
        },
    )
}

async fn list(State(ctx): State<Ctx>) -> Response {
    note(&ctx, "GET /api/v1/machines".into());
    let machines = ctx
        .runtime
        .lock()
        .unwrap()
        .machines
        .values()
        .cloned()
        .collect();
    document(StatusCode::OK, &RuntimeMachineList { machines })
}

async fn create(State(ctx): State<Ctx>, body: Bytes) -> Response {
    // What the driver sends must be a CreateMachineRequest of our schema, which is also
    // what smolvm takes (`fleetwire-codegen peer-check`), and carry nothing else.
    let request = match fleetwire_types::read_strict::<CreateMachineRequest>(&body) {
        Ok(r) => r,
        Err(r) => {
            return error(
                StatusCode::BAD_REQUEST,
                "BAD_REQUEST",
                format!("not a CreateMachineRequest: {r}"),
            )
        }
    };
    let name = request.name.as_str().to_string();
    note(&ctx, format!("POST /api/v1/machines {name}"));
    if request.cmd.is_some() && request.image.is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "BAD_REQUEST",
            "create machine: cmd/entrypoint need an image source (image, from or registryRef)"
                .into(),
        );
    }
    if let (Some(image), false) = (&request.image, request.network) {
        return error(
            StatusCode::BAD_REQUEST,
            "BAD_REQUEST",
            format!("create machine: image '{}' must be pulled from a registry, but this machine has no network, so the pull can never succeed", image.as_str()),
        );
    }
    let mut rt = ctx.runtime.lock().unwrap();
    if rt.machines.contains_key(&name) {
        return error(
            StatusCode::CONFLICT,
            "CONFLICT",
            format!("machine '{name}' already exists"),
        );
    }
    let machine = RuntimeMachine {
        name: name.clone(),
        state: "created".into(),
        cpus: u32::from(request.cpus.get()),
        memory_mb: u64::from(request.memory_mb.get()),
        storage_gb: Some(u64::from(request.storage_gb.get())),
        overlay_gb: Some(u64::from(request.overlay_gb.get())),
        network: request.network,
        ports: Vec::new(),
        created_at: chrono::Utc::now().timestamp() as u64,
        pid: None,
        cpu_millis: None,
        rss_mb: None,
        // Sparse disks: a few blocks once created.
        disk_used_mb: Some(1),
    };
    rt.requests.insert(
        name.clone(),
        serde_json::from_slice(&body).expect("read above"),
    );
    rt.machines.insert(name, machine.clone());
    document(StatusCode::OK, &machine)
}

async fn get_one(State(ctx): State<Ctx>, Path(name): Path<String>) -> Response {
    match ctx.runtime.lock().unwrap().machines.get(&name) {
        Some(m) => document(StatusCode::OK, m),
        None => not_found(&name),
    }
}

async fn start(State(ctx): State<Ctx>, Path(name): Path<String>) -> Response {
    note(&ctx, format!("start {name}"));
    let mut rt = ctx.runtime.lock().unwrap();
    let pid = rt.next_pid;
    let Some(m) = rt.machines.get_mut(&name) else {
        return not_found(&name);
    };
    if m.state != "running" {
        if ctx.fail_starts.load(Ordering::SeqCst) {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL_ERROR",
                START_FAILURE.into(),
            );
        }
        m.state = "running".into();
        m.pid = Some(pid);
        m.cpu_millis = Some(0);
        m.rss_mb = Some(32);
    }
    let m = m.clone();
    rt.next_pid += 1;
    document(StatusCode::OK, &m)
}

async fn stop(State(ctx): State<Ctx>, Path(name): Path<String>) -> Response {
    note(&ctx, format!("stop {name}"));
    let mut rt = ctx.runtime.lock().unwrap();
    match rt.machines.get_mut(&name) {
        Some(m) => {
            stop_machine(m);
            document(StatusCode::OK, &*m)
        }
        None => not_found(&name),
    }
}

async fn remove(State(ctx): State<Ctx>, Path(name): Path<String>) -> Response {
    note(&ctx, format!("DELETE {name}"));
    let mut rt = ctx.runtime.lock().unwrap();
    rt.requests.remove(&name);
    match rt.machines.remove(&name) {
        Some(_) => document(StatusCode::OK, &RuntimeDeleted { deleted: name }),
        None => not_found(&name),
    }
}
