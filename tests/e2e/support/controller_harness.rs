//! What the controller's end-to-end tests share: the real `fleetwire controller` process on a
//! free port with its SQLite file in a temporary directory, an HTTP client, PPN heartbeat
//! bodies, and in-test stand-ins for a node agent and a smolvm runtime (axum on 127.0.0.1).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{fleetwire, free_port, wait_for, Running};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

/// A running `fleetwire controller`.
pub struct ControllerProcess {
    pub process: Running,
    pub port: u16,
    pub dir: PathBuf,
    pub args: Vec<String>,
    /// mTLS mode (HTTPS, certificates and tokens); `false`: `--plain-http`.
    pub secure: bool,
    _temp: Option<tempfile::TempDir>,
}

/// The operator tokens `start_secure` gives a controller (`--operator-token-file`).
pub const ADMIN_TOKEN: &str = "admin-token-0123456789abcdefghijklmnopqrstuvwxyz";
pub const VIEWER_TOKEN: &str = "viewer-token-0123456789abcdefghijklmnopqrstuvwxyz";

impl ControllerProcess {
    /// Starts a controller in `--plain-http` mode (PPN's wire, no authentication: what most
    /// of these tests are about) with its database in a new temporary directory. The trust
    /// tests use [`ControllerProcess::start_secure`].
    pub fn start(extra: &[&str]) -> ControllerProcess {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().to_path_buf();
        let mut controller = Self::start_in(&dir, extra);
        controller._temp = Some(temp);
        controller
    }

    /// Starts a `--plain-http` controller on `dir/controller.sqlite3` (kept when it stops).
    pub fn start_in(dir: &std::path::Path, extra: &[&str]) -> ControllerProcess {
        let mut args = vec!["--plain-http"];
        args.extend_from_slice(extra);
        Self::launch(dir, &args, false, "/readyz", None)
    }

    /// [`ControllerProcess::start`] (plain, `secure` false) or
    /// [`ControllerProcess::start_secure`], its descriptor limit (`RLIMIT_NOFILE`) set to
    /// `nofile`, soft and hard, so that it cannot raise it.
    pub fn start_with_nofile(secure: bool, nofile: u64) -> ControllerProcess {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().to_path_buf();
        let mut controller = if secure {
            Self::secure_in(&dir, &[], "/readyz", Some(nofile))
        } else {
            Self::launch(&dir, &["--plain-http"], false, "/readyz", Some(nofile))
        };
        controller._temp = Some(temp);
        controller
    }

    /// Starts a controller in its default mode, mTLS, in a new temporary directory: its CA in
    /// `dir/ca`, operator tokens [`ADMIN_TOKEN`] (admin) and [`VIEWER_TOKEN`] (read-only).
    pub fn start_secure(extra: &[&str]) -> ControllerProcess {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().to_path_buf();
        let mut controller = Self::start_secure_in(&dir, extra);
        controller._temp = Some(temp);
        controller
    }

    /// [`ControllerProcess::start_secure`] in `dir` (kept when it stops).
    pub fn start_secure_in(dir: &std::path::Path, extra: &[&str]) -> ControllerProcess {
        Self::secure_in(dir, extra, "/readyz", None)
    }

    fn secure_in(
        dir: &std::path::Path,
        extra: &[&str],
        ready_path: &str,
        nofile: Option<u64>,
    ) -> ControllerProcess {
        use std::os::unix::fs::PermissionsExt;
        let tokens = dir.join("operator-tokens");
        std::fs::write(
            &tokens,
            format!("# test operators\n{ADMIN_TOKEN},ops-admin,admin\n{VIEWER_TOKEN},ops-viewer,read-only\n"),
        )
        .unwrap();
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
        let data_dir = dir.to_str().unwrap().to_string();
        let tokens = tokens.to_str().unwrap().to_string();
        let mut args = vec![
            "--data-dir",
            data_dir.as_str(),
            "--operator-token-file",
            tokens.as_str(),
        ];
        args.extend_from_slice(extra);
        Self::launch(dir, &args, true, ready_path, nofile)
    }

    /// [`ControllerProcess::start_secure_in`] for a controller that stands by (several on one
    /// PostgreSQL database): waits for `/healthz`, since its `/readyz` answers 503.
    pub fn start_secure_standby_in(dir: &std::path::Path, extra: &[&str]) -> ControllerProcess {
        Self::secure_in(dir, extra, "/healthz", None)
    }

    /// Starts the controller (its descriptor limit `nofile` if given) and waits until
    /// `ready_path` answers 200.
    fn launch(
        dir: &std::path::Path,
        extra: &[&str],
        secure: bool,
        ready_path: &str,
        nofile: Option<u64>,
    ) -> ControllerProcess {
        // The test's own `--listen 127.0.0.1:PORT` (to advertise it), else a free port.
        let listen = extra
            .iter()
            .position(|a| *a == "--listen")
            .map(|i| extra[i + 1].rsplit(':').next().unwrap().parse().unwrap());
        let port = listen.unwrap_or_else(free_port);
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        // mTLS mode logs at info into a file, for the tests that check what reaches the log.
        let (level, stderr) = if secure {
            let log = std::fs::File::create(dir.join("controller.log")).unwrap();
            ("info", Stdio::from(log))
        } else {
            ("warn", Stdio::inherit())
        };
        let mut command = fleetwire();
        command.arg("controller");
        if let Some(nofile) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure makes one system call, setrlimit, async-signal-safe, between
            // fork and exec.
            #[allow(unsafe_code)]
            unsafe {
                command.pre_exec(move || {
                    use rustix::process::{setrlimit, Resource, Rlimit};
                    let limit = Rlimit {
                        current: Some(nofile),
                        maximum: Some(nofile),
                    };
                    Ok(setrlimit(Resource::Nofile, limit)?)
                });
            }
        }
        if listen.is_none() {
            command.arg("--listen").arg(format!("127.0.0.1:{port}"));
        }
        // The SQLite file in `dir` unless the test names a database (PostgreSQL).
        if !args.iter().any(|a| a == "--db") {
            command.arg("--db").arg(dir.join("controller.sqlite3"));
        }
        let process = Running::spawn(
            command
                .args(&args)
                .env("RUST_LOG", level)
                .stdout(Stdio::null())
                .stderr(stderr),
        );
        let mut controller = ControllerProcess {
            process,
            port,
            dir: dir.to_path_buf(),
            args,
            secure,
            _temp: None,
        };
        controller.wait_until_serving(ready_path);
        controller
    }

    /// Until `path` answers 200: `/readyz` for a controller that is to lead (on PostgreSQL a
    /// controller serves as a standby until it holds the lease), `/healthz` for a standby.
    fn wait_until_serving(&mut self, path: &str) {
        let url = self.url(path);
        let ca = self.ca_path();
        let secure = self.secure;
        let log = self.dir.join("controller.log");
        wait_for(
            &format!("the controller to answer {path} with 200"),
            Duration::from_secs(20),
            || {
                if let Ok(Some(status)) = self.process.child.try_wait() {
                    let log = std::fs::read_to_string(&log).unwrap_or_default();
                    panic!("the controller exited at start-up: {status}\n{log}");
                }
                if secure {
                    // On a thread of its own: reqwest's blocking client runs a runtime, which
                    // cannot live inside a test's async runtime.
                    let ca_pem = std::fs::read(&ca).ok()?;
                    let url = url.clone();
                    let status = std::thread::spawn(move || {
                        let client = blocking_tls_client(&ca_pem);
                        client.get(&url).send().ok().map(|a| a.status().as_u16())
                    })
                    .join()
                    .ok()??;
                    (status == 200).then_some(200)
                } else {
                    blocking_get(&url).filter(|code| *code == 200)
                }
            },
        );
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.secure { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", self.port)
    }

    /// What an mTLS-mode controller logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("controller.log")).unwrap_or_default()
    }

    /// The fleet CA's certificate (mTLS mode).
    pub fn ca_path(&self) -> PathBuf {
        self.dir.join("ca/ca.pem")
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.ca_path()).expect("the controller's CA certificate")
    }

    /// A client trusting only the fleet CA, with no client certificate.
    pub fn tls_client(&self) -> reqwest::Client {
        tls_client(&self.ca_pem(), None)
    }

    /// The typed client for this controller (`fleetwire-client`): plain HTTP for a
    /// `--plain-http` controller; else HTTPS trusting only the fleet CA, presenting `token` as
    /// operator token when given.
    pub fn api(&self, token: Option<&str>) -> fleetwire_client::Client {
        let builder = fleetwire_client::Client::builder(self.url(""));
        let builder = if self.secure {
            let ca = String::from_utf8(self.ca_pem()).expect("a PEM CA");
            let builder = builder.fleet_ca_pem(ca);
            match token {
                Some(token) => builder.operator_token(token),
                None => builder,
            }
        } else {
            assert!(token.is_none(), "a --plain-http controller takes no token");
            builder.plain_http()
        };
        builder
            .timeout(Duration::from_secs(20))
            .build()
            .expect("client")
    }

    /// [`ControllerProcess::api`] with the admin operator token (mTLS mode), or plain.
    pub fn admin_api(&self) -> fleetwire_client::Client {
        self.api(self.secure.then_some(ADMIN_TOKEN))
    }

    /// The typed client presenting a node's certificate and key (PEM) over mTLS.
    pub fn node_api(&self, cert_pem: &str, key_pem: &str) -> fleetwire_client::Client {
        let ca = String::from_utf8(self.ca_pem()).expect("a PEM CA");
        fleetwire_client::Client::builder(self.url(""))
            .fleet_ca_pem(ca)
            .client_identity_pem(cert_pem, key_pem)
            .timeout(Duration::from_secs(20))
            .build()
            .expect("client")
    }

    /// SIGKILL: no shutdown, no final flush.
    pub fn kill_9(&mut self) {
        self.process.kill();
    }
}

/// A status code from a plain GET, without an async runtime (for start-up polling).
fn blocking_get(url: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_at(rest.find('/')?);
    let mut stream = std::net::TcpStream::connect(host).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

/// A blocking client trusting only `ca_pem` (start-up polling).
fn blocking_tls_client(ca_pem: &[u8]) -> reqwest::blocking::Client {
    crate::support::install_crypto_provider();
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .tls_certs_only([reqwest::Certificate::from_pem(ca_pem).expect("a PEM CA")])
        .build()
        .expect("client")
}

/// A client trusting only `ca_pem`, presenting `identity` (certificate and key, PEM) if given.
pub fn tls_client(ca_pem: &[u8], identity: Option<(&str, &str)>) -> reqwest::Client {
    crate::support::install_crypto_provider();
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .tls_certs_only([reqwest::Certificate::from_pem(ca_pem).expect("a PEM CA")]);
    if let Some((cert, key)) = identity {
        builder = builder.identity(
            reqwest::Identity::from_pem(format!("{cert}\n{key}").as_bytes()).expect("identity"),
        );
    }
    builder.build().expect("client")
}

pub fn client() -> reqwest::Client {
    crate::support::install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

/// Enrolls `node_id` on `controller` in mTLS mode as an operator and a node do: a bootstrap
/// token minted with the admin token, then a registration (at 127.0.0.1:`spawn_port`) with a
/// CSR. The node's certificate and key, PEM.
pub async fn enroll(
    controller: &ControllerProcess,
    node_id: &str,
    spawn_port: u16,
) -> (String, String) {
    let token = controller
        .admin_api()
        .create_bootstrap_token(&fleetwire_types::CreateBootstrapTokenRequest {
            node_id: node_id.parse().unwrap(),
            ttl_s: Some(600),
        })
        .await
        .unwrap()
        .token
        .to_string();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut body = registration(node_id, spawn_port, 100);
    body["csr_pem"] = plain_csr(&key, node_id).into();
    let request: fleetwire_types::RegisterNodeRequest = typed(&body);
    let cert = controller
        .api(None)
        .with_bootstrap_token(token.as_str())
        .unwrap()
        .register_node(&request)
        .await
        .unwrap()
        .into_inner()
        .cert_pem
        .unwrap()
        .to_string();
    (cert, key.serialize_pem())
}

/// A CSR for `key` naming `node_id` and nothing else.
pub fn plain_csr(key: &rcgen::KeyPair, node_id: &str) -> String {
    rcgen::CertificateParams::new(vec![node_id.to_string()])
        .unwrap()
        .serialize_request(key)
        .unwrap()
        .pem()
        .unwrap()
}

/// A JSON body as the typed document the client sends; panics, naming the violations, when it
/// is not one (a test's well-formed body must be).
pub fn typed<T: fleetwire_types::WireDocument>(body: &Value) -> T {
    fleetwire_types::read_value_strict::<T>(body)
        .unwrap_or_else(|e| panic!("not a {}: {e}", T::INFO.name))
}

/// A heartbeat exactly as an unmodified PPN agent sends it (no fleetwire fields).
pub fn ppn_body(node_id: &str, wg_ip: &str) -> Value {
    json!({
        "node_id": node_id,
        "wg_ip": wg_ip,
        "hostname": format!("{node_id}.example"),
        "ram_total_mb": 16384,
        "ram_used_mb": 4096,
        "cpu_cores": 8,
        "cpu_load_pct": 17.25,
        "kvm_available": true,
        "reserved": false,
        "vms": [],
        "boot_id": "0b8e2a4c-9d1f-4e3a-b5c6-d7e8f9a0b1c2",
        "timestamp_utc": "2026-11-30T09:30:00.123456Z"
    })
}

/// A PPN heartbeat plus fleetwire's `spawn_port`, so the controller reaches an agent stand-in
/// on its own port (a PPN agent says none, and is called on the controller's default).
pub fn ppn_heartbeat(node_id: &str, wg_ip: &str, spawn_port: u16) -> Value {
    let mut body = ppn_body(node_id, wg_ip);
    body["spawn_port"] = spawn_port.into();
    body
}

pub async fn post_json(client: &reqwest::Client, url: &str, body: &Value) -> (u16, Value) {
    let response = client.post(url).json(body).send().await.expect("POST");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, value)
}

pub async fn get_json(client: &reqwest::Client, url: &str) -> (u16, Value) {
    let response = client.get(url).send().await.expect("GET");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The typed client on a test's own HTTP client (its TLS trust and client certificate), for
/// well-formed calls; deliberately malformed requests stay raw (`post_json` and kin).
pub fn api_on(http: &reqwest::Client, controller: &ControllerProcess) -> fleetwire_client::Client {
    fleetwire_client::Client::builder(controller.url(""))
        .http_client(http.clone())
        .build()
        .expect("client")
}

/// Posts a heartbeat (a well-formed `NodeHeartbeat`) through the typed client and requires the
/// controller's `200`.
pub async fn heartbeat_ok(client: &reqwest::Client, controller: &ControllerProcess, body: &Value) {
    let heartbeat: fleetwire_types::NodeHeartbeat = typed(body);
    let taken = api_on(client, controller).post_heartbeat(&heartbeat).await;
    match taken {
        Ok(answer) => assert_eq!(answer.status().as_u16(), 200),
        Err(e) => panic!("heartbeat refused: {e}"),
    }
}

/// `fleetwire controller ARGS` run to its exit, which must come within 30 s (a controller that
/// served instead would hang the test): (code, stderr).
pub fn controller_exit(args: &[&std::ffi::OsStr]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let stderr_path = dir.path().join("stderr");
    let mut running = Running::spawn(
        fleetwire()
            .arg("controller")
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap()),
    );
    let status = wait_for(
        "the controller to refuse to start and exit",
        Duration::from_secs(30),
        || running.child.try_wait().unwrap(),
    );
    (
        status.code().unwrap_or(-1),
        std::fs::read_to_string(&stderr_path).unwrap(),
    )
}

/// Registers a node (a well-formed `RegisterNodeRequest`) through the typed client; returns
/// the answer as JSON.
pub async fn register_ok(
    client: &reqwest::Client,
    controller: &ControllerProcess,
    body: &Value,
) -> Value {
    let request: fleetwire_types::RegisterNodeRequest = typed(body);
    match api_on(client, controller).register_node(&request).await {
        Ok(answer) => {
            serde_json::to_value(answer.into_inner()).expect("a generated value serializes")
        }
        Err(e) => panic!("registration refused: {e}"),
    }
}

/// A node's record (`GET /v1/nodes/{id}` through the typed client) as JSON.
pub async fn node_record(
    client: &reqwest::Client,
    controller: &ControllerProcess,
    id: &str,
) -> Value {
    let id: fleetwire_types::NodeId = id.parse().expect("a node id");
    match api_on(client, controller).get_node(&id).await {
        Ok(record) => {
            serde_json::to_value(record.into_inner()).expect("a generated value serializes")
        }
        Err(e) => panic!("GET node {}: {e}", id.as_str()),
    }
}

/// The ids of the nodes `GET /v1/nodes?status=…` lists (through the typed client), in the
/// controller's order.
pub async fn node_ids(
    client: &reqwest::Client,
    controller: &ControllerProcess,
    status: Option<fleetwire_types::NodeStatusFilter>,
) -> Vec<String> {
    match api_on(client, controller).list_nodes(status.as_ref()).await {
        Ok(nodes) => nodes
            .iter()
            .map(|n| n.node_id.as_str().to_string())
            .collect(),
        Err(e) => panic!("GET /v1/nodes: {e}"),
    }
}

/// `GET /v1/fleet` through the typed client.
pub async fn fleet_status(
    client: &reqwest::Client,
    controller: &ControllerProcess,
) -> fleetwire_types::FleetStatus {
    match api_on(client, controller).get_fleet().await {
        Ok(fleet) => fleet.into_inner(),
        Err(e) => panic!("GET /v1/fleet: {e}"),
    }
}

/// The controller's `/metrics` text (through the typed client).
pub async fn metrics_text(client: &reqwest::Client, controller: &ControllerProcess) -> String {
    match api_on(client, controller).get_metrics().await {
        Ok(text) => text.into_inner(),
        Err(e) => panic!("GET /metrics: {e}"),
    }
}

pub async fn delete_url(client: &reqwest::Client, url: &str) -> (u16, Value) {
    let response = client.delete(url).send().await.expect("DELETE");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Polls an async probe every 50 ms until it returns `Some`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How the agent stand-in answers spawns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpawnMode {
    Succeed,
    Fail,
}

#[derive(Default)]
struct AgentLog {
    spawned: Vec<Value>,
    deleted: Vec<String>,
}

/// A node agent's local API, standing in for the real agent: answers `POST /v1/spawn` with
/// the VM as a `VmRecord` (state Running) and `DELETE /v1/vms/{id}` with 204.
pub struct AgentStandIn {
    pub port: u16,
    log: Arc<Mutex<AgentLog>>,
    mode: Arc<Mutex<SpawnMode>>,
    task: tokio::task::JoinHandle<()>,
}

impl AgentStandIn {
    pub async fn start() -> AgentStandIn {
        let log: Arc<Mutex<AgentLog>> = Arc::default();
        let mode = Arc::new(Mutex::new(SpawnMode::Succeed));
        type Shared = (Arc<Mutex<AgentLog>>, Arc<Mutex<SpawnMode>>);
        async fn spawn(
            State((log, mode)): State<Shared>,
            Json(request): Json<Value>,
        ) -> (StatusCode, Json<Value>) {
            // A little work, so concurrent placements overlap.
            tokio::time::sleep(Duration::from_millis(20)).await;
            if *mode.lock().unwrap() == SpawnMode::Fail {
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Json(json!({"error": "no room in the runtime"})),
                );
            }
            log.lock().unwrap().spawned.push(request.clone());
            (
                StatusCode::OK,
                Json(json!({
                    "vm_id": request["vm_id"], "vm_type": request["vm_type"], "state": "Running",
                    "ram_alloc_mb": request["ram_mb"], "vcpu_count": request["vcpu_count"],
                    "started_at": "2026-11-30T09:31:00Z"
                })),
            )
        }
        async fn remove(State((log, _)): State<Shared>, Path(vm_id): Path<String>) -> StatusCode {
            log.lock().unwrap().deleted.push(vm_id);
            StatusCode::NO_CONTENT
        }
        let app = Router::new()
            .route("/v1/spawn", post(spawn))
            .route("/v1/vms/{vm_id}", delete(remove))
            .with_state((log.clone(), mode.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        AgentStandIn {
            port,
            log,
            mode,
            task,
        }
    }

    pub fn set_mode(&self, mode: SpawnMode) {
        *self.mode.lock().unwrap() = mode;
    }

    pub fn spawned(&self) -> Vec<Value> {
        self.log.lock().unwrap().spawned.clone()
    }

    pub fn deleted(&self) -> Vec<String> {
        self.log.lock().unwrap().deleted.clone()
    }
}

impl Drop for AgentStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A smolvm runtime's `GET /health`, standing in for smolvm serve (which cannot be installed
/// here): answers `{"status": "ok", "version": <version>}`.
pub struct SmolvmStandIn {
    pub port: u16,
    version: Arc<Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl SmolvmStandIn {
    pub async fn start(version: &str) -> SmolvmStandIn {
        let version = Arc::new(Mutex::new(version.to_string()));
        let shared = version.clone();
        let app = Router::new().route(
            "/health",
            get(move || {
                let version = shared.lock().unwrap().clone();
                async move { Json(json!({"status": "ok", "version": version, "machines": {"total": 0, "running": 0}})) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        SmolvmStandIn {
            port,
            version,
            task,
        }
    }

    pub fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for SmolvmStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A registration body for a node on 127.0.0.1 whose agent listens on `spawn_port`.
pub fn registration(node_id: &str, spawn_port: u16, total_disk_gb: u64) -> Value {
    json!({
        "node_id": node_id,
        "hostname": format!("{node_id}.example"),
        "wg_ip": "127.0.0.1",
        "spawn_port": spawn_port,
        "total_cpus": 16,
        "total_memory_mb": 65536,
        "total_disk_gb": total_disk_gb,
        "kvm_available": true,
        "boot_id": "runtime-1",
        "agent_version": "0.1.0"
    })
}
