//! `fleetwire up`: a fleet of one on this machine. A controller on 127.0.0.1 (SQLite) and a
//! local agent with the process driver enrolled in it, both real child processes of this
//! binary, all state under one folder; stopped together on Ctrl-C. Secure as any fleet is
//! (docs/security.md): HTTPS with the fleet CA, an admin operator token written for the user,
//! and the agent enrolled with a bootstrap token; `--plain-http` runs PPN's plain mode.
//!
//! What `up` says is true (docs/operator-cli.md, "fleetwire up"): a program is ready when the
//! child `up` started says so itself (systemd's notify protocol, on a socket of its own) and
//! answers; the agent once it has heartbeated since it started; the children's warnings and
//! errors reach `up`'s standard error as they happen, and everything they print, its log file.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use fleetwire_types::{read, NodeId, NodeRecord};

use crate::controller::trust::certs::FleetCa;
use crate::store::{sqlite::tokens::SqliteBootstrapTokens, tokens::BootstrapTokenStore};
use tokio::io::AsyncBufReadExt;
use tokio::net::UnixDatagram;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

#[derive(Args, Debug, Clone)]
pub struct UpArgs {
    /// Where the controller's database and CA, the agent's state and both logs live.
    #[arg(long, default_value = ".fleetwire")]
    pub dir: PathBuf,
    /// The controller's address (its API, `/docs` and `/metrics`).
    #[arg(long, default_value = "127.0.0.1:9203")]
    pub listen: SocketAddr,
    /// The local agent's port (PPN's `VM_SPAWN_PORT`).
    #[arg(long, default_value_t = 9204)]
    pub spawn_port: u16,
    /// The node id the local agent enrolls with [default: this host's name, made an identifier].
    #[arg(long)]
    pub node_id: Option<String>,
    /// Seconds between the agent's heartbeats.
    #[arg(long, default_value_t = 2)]
    pub heartbeat_interval: u64,
    /// PPN's plain mode: plain HTTP and no authentication, for both programs.
    #[arg(long)]
    pub plain_http: bool,
    /// The local agent's runtime driver (`VM_RUNTIME`): process, smolvm or qemu. The agent
    /// inherits this environment, so the runtime's own settings (`VM_IMAGE_DIR`, ...) pass
    /// through.
    #[arg(long, default_value = "process")]
    pub runtime: crate::runtimes::Runtime,
}

/// How this fleet of one is reached: the URL, and in mTLS mode the CA to trust and the file
/// holding the `Authorization` header (with the admin operator token) the user's commands send.
struct Access {
    api: String,
    tls: Option<(PathBuf, PathBuf)>,
}

impl Access {
    /// `curl -s` with whatever the fleet needs, as the banner prints it. The token is read by
    /// curl from its file (`-H @file`), so it never shows in the process list.
    fn curl(&self) -> String {
        match &self.tls {
            None => "curl -s".to_string(),
            Some((ca, header)) => {
                format!("curl -s --cacert {} -H @{}", ca.display(), header.display())
            }
        }
    }
}

/// The operator commands' config file for this fleet of one (docs/operator-cli.md,
/// "Connecting"): found as `./.fleetwire/operator.toml` from the directory `up` ran in, or
/// named by `FLEETWIRE_CONFIG` / `--config` from anywhere. Beside the connection it names the
/// controller's state directory and token file, for `fleetwire token list|create|operator`.
fn operator_config(
    dir: &Path,
    access: &Access,
    token_file: Option<&Path>,
    operator_tokens: Option<&Path>,
) -> Result<PathBuf> {
    // A JSON string is a TOML basic string too (serde_json writes no `\/`).
    let quoted = |path: &Path| serde_json::Value::from(path.to_string_lossy()).to_string();
    let mut text = format!("url = {}\n", serde_json::Value::from(access.api.as_str()));
    match (&access.tls, token_file) {
        (Some((ca, _)), Some(token)) => {
            text.push_str(&format!("ca_file = {}\n", quoted(ca)));
            text.push_str(&format!("token_file = {}\n", quoted(token)));
        }
        _ => text.push_str("plain_http = true\n"),
    }
    text.push_str(&format!(
        "data_dir = {}\n",
        quoted(&dir.join(CONTROLLER_DIR))
    ));
    if let Some(tokens) = operator_tokens {
        text.push_str(&format!("operator_token_file = {}\n", quoted(tokens)));
    }
    let path = dir.join(crate::operator_config::FILE_NAME);
    crate::atomic_file::write(&path, text.as_bytes(), 0o600)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The controller's state directory inside `up`'s.
const CONTROLLER_DIR: &str = "controller";

/// The admin operator token of this fleet of one, made on first use: `operator-tokens` (the
/// controller's `--operator-token-file`), `operator-token` (the token alone, for scripts and
/// `fleetwire token create --bearer-file`) and `operator-header` (the `Authorization` header,
/// for `curl -H @file`), all 0600.
fn operator_token(dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf)> {
    let tokens = dir.join("operator-tokens");
    let mine = dir.join("operator-token");
    let header = dir.join("operator-header");
    if !(tokens.exists() && mine.exists() && header.exists()) {
        let token = crate::controller::trust::operator_tokens::generate_token();
        for (path, text) in [
            (&tokens, format!("{token},up-admin,admin\n")),
            (&mine, format!("{token}\n")),
            (&header, format!("Authorization: Bearer {token}\n")),
        ] {
            crate::atomic_file::write(path, text.as_bytes(), 0o600)
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok((tokens, mine, header))
}

/// How long each program gets to come up before `up` gives up and says why.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long each program gets to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

pub fn run(args: &UpArgs) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(up(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("fleetwire up: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn up(args: &UpArgs) -> Result<()> {
    // Before anything is started or written: a second `up` on this directory stops here.
    let _owner = crate::dir_owner::take(&args.dir, |previous| {
        eprintln!(
            "fleetwire up: taking over {} from {previous}, which ended without stopping",
            args.dir.display()
        )
    })?;
    let dir = args.dir.canonicalize()?;
    let console = Console::new();
    let node_id = match &args.node_id {
        Some(id) => id.clone(),
        None => default_node_id(),
    };
    node_id
        .parse::<NodeId>()
        .map_err(|e| anyhow::anyhow!("--node-id {node_id:?}: {e}"))?;
    let exe = std::env::current_exe().context("locating the fleetwire binary")?;
    let controller_dir = dir.join(CONTROLLER_DIR);
    let ca_dir = controller_dir.join("ca");
    let mut command = Command::new(&exe);
    command
        .arg("controller")
        .arg("--listen")
        .arg(args.listen.to_string())
        .arg("--data-dir")
        .arg(&controller_dir)
        // A fleet of one lives on a workstation's disk: cordon it only when that is nearly
        // full, not at a production host's 20 GB.
        .args(["--disk-cordon-below", "1", "--disk-uncordon-above", "2"]);
    let (access, http, token_file, operator_tokens) = if args.plain_http {
        command.arg("--plain-http");
        let http = crate::tls::client_builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let api = format!("http://{}", args.listen);
        (Access { api, tls: None }, http, None, None)
    } else {
        // The CA first, so that this process trusts it before the controller answers.
        let ca = FleetCa::open_or_create(&ca_dir, Duration::from_secs(3600))
            .with_context(|| format!("the fleet CA in {}", ca_dir.display()))?;
        let (tokens, token_file, header_file) = operator_token(&dir)?;
        command
            .arg("--ca-dir")
            .arg(&ca_dir)
            .arg("--operator-token-file")
            .arg(&tokens);
        let token = std::fs::read_to_string(&token_file)?.trim().to_string();
        let mut auth = reqwest::header::HeaderMap::new();
        auth.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}")
                .parse()
                .context("the operator token")?,
        );
        let http = crate::tls::client_builder()
            .timeout(Duration::from_secs(2))
            .tls_certs_only([reqwest::Certificate::from_pem(ca.ca_pem().as_bytes())?])
            .default_headers(auth)
            .build()?;
        let api = format!("https://{}", args.listen);
        (
            Access {
                api,
                tls: Some((ca_dir.join("ca.pem"), header_file)),
            },
            http,
            Some(token_file),
            Some(tokens),
        )
    };
    let operator_config = operator_config(
        &dir,
        &access,
        token_file.as_deref(),
        operator_tokens.as_deref(),
    )?;
    let api = access.api.clone();
    let mut controller = Program::spawn("controller", &mut command, &dir, &console)?;
    // Ready when the controller `up` started says it listens (so what answers on the port is
    // that process, not another on the same address) and answers /readyz.
    controller
        .step(&format!("controller on {api}"), &console, || async {
            let ok = http
                .get(format!("{api}/readyz"))
                .send()
                .await
                .ok()?
                .status()
                .is_success();
            ok.then_some(())
        })
        .await?;

    let reported = dir.join("agent/reported.json");
    let mut command = Command::new(&exe);
    command.arg("agent");
    match &access.tls {
        None => {
            command.env("VM_PLAIN_HTTP", "true");
        }
        Some((ca, _)) => {
            // A token for the agent, in case it has no usable certificate yet (its first start,
            // or a certificate that expired while the fleet was down): single use, short.
            let token_file = dir.join("agent-bootstrap-token");
            let tokens = SqliteBootstrapTokens::open(&controller_dir.join("controller.sqlite3"))?;
            let node: NodeId = node_id.parse().expect("checked above");
            let issued = tokens.create(&node, Duration::from_secs(600), chrono::Utc::now())?;
            crate::atomic_file::write(
                &token_file,
                format!("{}\n", issued.token.expose()).as_bytes(),
                0o600,
            )
            .with_context(|| format!("writing {}", token_file.display()))?;
            command
                .env("VM_PLAIN_HTTP", "false")
                .env("VM_FLEET_CA_FILE", ca)
                .env("VM_BOOTSTRAP_TOKEN_FILE", &token_file);
        }
    }
    command
        .env("VM_FLEET_ENDPOINT", &api)
        .env("VM_NODE_ID", &node_id)
        .env("VM_WG_IP", "127.0.0.1")
        .env("VM_LISTEN_ADDRESS", "127.0.0.1")
        .env("VM_SPAWN_PORT", args.spawn_port.to_string())
        .env(
            "VM_HEARTBEAT_INTERVAL_S",
            args.heartbeat_interval.to_string(),
        )
        .env("VM_STATE_DIR", dir.join("agent"))
        .env("VM_RUNTIME", args.runtime.as_str());
    // The node's record may be an old one, from the last time this fleet ran (the controller
    // counts a stored node as heard from at its start): only a heartbeat received after this
    // agent started is this agent's.
    let agent_started = chrono::Utc::now();
    let mut agent = Program::spawn("agent", &mut command, &dir, &console)?;
    let node = agent
        .step(&format!("agent {node_id} enrolling"), &console, || async {
            let body = http
                .get(format!("{api}/v1/nodes/{node_id}"))
                .send()
                .await
                .ok()?
                .bytes()
                .await
                .ok()?;
            let node: NodeRecord = read(&body).ok()?.value;
            (node.status.to_string() == "ready"
                && node.last_heartbeat.utc() >= agent_started
                && reported.exists())
            .then_some(node)
        })
        .await;
    let node = match node {
        Ok(node) => node,
        Err(err) => {
            controller.stop(&console).await;
            return Err(err);
        }
    };
    // Spent (or not needed): a bootstrap token is not left lying around.
    let _ = std::fs::remove_file(dir.join("agent-bootstrap-token"));

    let curl = access.curl();
    let (mode, reference) = match &access.tls {
        None => ("plain HTTP, no authentication", format!("{api}/docs/")),
        Some((ca, _)) => (
            "mTLS",
            format!(
                "{api}/docs/ (a browser does not know this fleet's CA: trust {})",
                ca.display()
            ),
        ),
    };
    // An example each runtime runs: a command, an image, or the guest of VM_IMAGE_DIR.
    let (what, example) = match args.runtime {
        crate::runtimes::Runtime::Process => (
            "a supervised process on this host",
            r#"{"vm_type": "process", "ram_mb": 64, "vcpu_count": 1, "command": ["/bin/sh", "-c", "while true; do date; sleep 5; done"]}"#,
        ),
        crate::runtimes::Runtime::Smolvm => (
            "a smolvm microVM booting an OCI image",
            r#"{"vm_type": "smolvm", "ram_mb": 512, "vcpu_count": 1, "image": "alpine:3.20", "network": true}"#,
        ),
        crate::runtimes::Runtime::Qemu => (
            "a QEMU guest booting vmlinuz and initrd.img of VM_IMAGE_DIR, port 80 forwarded",
            r#"{"vm_type": "web", "ram_mb": 256, "vcpu_count": 1, "boot": {"kernel": "vmlinuz", "initrd": "initrd.img"}, "guest_ports": [80]}"#,
        ),
    };
    let exe_shown = exe.display().to_string();
    // The operator commands find this fleet's config by themselves from the directory `up`
    // ran in when that is where `up` keeps it (`./.fleetwire/operator.toml`); from anywhere
    // else FLEETWIRE_CONFIG names it.
    let found_here = std::env::current_dir()
        .ok()
        .and_then(|cwd| crate::operator_config::discovered_in(&cwd))
        .is_some_and(|found| found == operator_config);
    let (nodes, where_config) = if found_here {
        (
            format!("{exe_shown} nodes list"),
            format!(
                "here; elsewhere: export FLEETWIRE_CONFIG={}",
                operator_config.display()
            ),
        )
    } else {
        (
            format!(
                "FLEETWIRE_CONFIG={} {exe_shown} nodes list",
                operator_config.display()
            ),
            "or export FLEETWIRE_CONFIG once".to_string(),
        )
    };
    // Ctrl-C stops the fleet from the moment the banner says so (shutdown::signal).
    let stop = crate::shutdown::signal();
    console.line(&format!(
        "\nfleetwire is up: a fleet of one ({mode}).\n\
         \n  fleet       {curl} {api}/v1/fleet\
         \n  nodes       {nodes}   ({where_config}; also vms, fleet, token: docs/operator-cli.md)\
         \n  reference   {reference}\
         \n  metrics     {curl} {api}/metrics\
         \n  node        {id} ({cpus} CPUs, {mem} MB free), agent on 127.0.0.1:{port}\
         \n  reported    {reported}\
         \n  logs        {logs} (warnings and errors are shown here too)\
         \n\nPlace a machine ({what}):\
         \n\n  {curl} -X POST '{api}/v1/vms?fieldValidation=Strict' -H 'content-type: application/json' \\\
         \n    -d '{example}'\
         \n\nthen watch it in {reported}. Ctrl-C stops both; `{exe_shown} up` again in this \
         directory starts the same fleet.",
        id = node.node_id.as_str(),
        cpus = node
            .total_cpus
            .map(|c| c.to_string())
            .unwrap_or_else(|| "?".into()),
        mem = node.ram_available_mb,
        port = args.spawn_port,
        reported = reported.display(),
        logs = dir.join("{controller,agent}.log").display(),
    ));

    let reason = tokio::select! {
        _ = stop => None,
        status = controller.child.wait() => Some(("controller", describe(status))),
        status = agent.child.wait() => Some(("agent", describe(status))),
    };
    let reason = match reason {
        None => {
            console.line("\nstopping");
            None
        }
        Some((name, status)) => {
            // What it said last (its reason, most often) is shown before `up` says it is gone.
            match name {
                "controller" => controller.drain_logs().await,
                _ => agent.drain_logs().await,
            }
            let reason = format!("the {name} exited ({status})");
            eprintln!("\n{reason}; stopping. See {}", dir.join("*.log").display());
            Some(reason)
        }
    };
    // The agent first, so it is not left heartbeating into a controller that is gone.
    agent.stop(&console).await;
    controller.stop(&console).await;
    match reason {
        None => {
            console.line(&format!("stopped; state kept in {}", dir.display()));
            Ok(())
        }
        Some(reason) => bail!(reason),
    }
}

/// A host name made into a node identifier (`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`).
fn default_node_id() -> String {
    let name = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    let id: String = name
        .trim()
        .split('.')
        .next()
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .skip_while(|c| !c.is_ascii_alphanumeric())
        .take(63)
        .collect();
    if id.is_empty() {
        "local".into()
    } else {
        id
    }
}

/// `up`'s standard output and error, shared by the steps and the children's copied lines: a
/// progress frame is redrawn in place (`\r`) only on a terminal, and a line a child prints is
/// never drawn into the middle of one.
struct Console {
    terminal: bool,
    /// The frame on the terminal's last line, if one is drawn.
    frame: Mutex<Option<String>>,
}

/// Back to the line's start, and the line erased (ECMA-48 CSI EL), before a frame or a line
/// takes its place.
const CLEAR_LINE: &str = "\r\x1b[K";

impl Console {
    fn new() -> Arc<Console> {
        use std::io::IsTerminal;
        Arc::new(Console {
            terminal: std::io::stdout().is_terminal(),
            frame: Mutex::new(None),
        })
    }

    /// Draws `frame` over the last one (a terminal only).
    fn draw(&self, frame: String) {
        let mut current = self.frame.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "{CLEAR_LINE}{frame}");
        let _ = out.flush();
        *current = Some(frame);
    }

    /// A line on standard output, in place of the frame if one is drawn.
    fn line(&self, text: &str) {
        let mut current = self.frame.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = std::io::stdout().lock();
        if current.take().is_some() {
            let _ = write!(out, "{CLEAR_LINE}");
        }
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }

    /// A line a child printed, on standard error, above the frame (drawn again under it).
    fn child_said(&self, name: &str, text: &str) {
        let current = self.frame.lock().unwrap_or_else(|e| e.into_inner());
        if current.is_some() {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{CLEAR_LINE}");
            let _ = out.flush();
        }
        eprintln!("  {name}: {text}");
        if let Some(frame) = current.as_ref() {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{frame}");
            let _ = out.flush();
        }
    }
}

/// What of a child's output `up` shows as it happens: its log lines at WARN and ERROR, and
/// every line that is not a log line (a fatal error, a panic), without the timestamp.
fn worth_showing(line: &str) -> Option<&str> {
    let line = line.trim_end();
    if line.is_empty() {
        return None;
    }
    let (first, rest) = line.split_once(' ').unwrap_or((line, ""));
    if chrono::DateTime::parse_from_rfc3339(first).is_err() {
        return Some(line);
    }
    let rest = rest.trim_start();
    (rest.starts_with("WARN") || rest.starts_with("ERROR")).then_some(rest)
}

/// A child's readiness channel: systemd's notify protocol (sd_notify(3)), which the controller
/// and the agent speak already (`service_manager`), on a datagram socket of this child's own.
/// Only that child is given its path (as NOTIFY_SOCKET), in `up`'s directory (0700), so a
/// READY=1 on it comes from the process `up` started.
struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
}

impl NotifySocket {
    fn bind(dir: &Path, name: &str) -> Result<NotifySocket> {
        let mut path = dir.join(format!("{name}.notify"));
        // A socket's path must fit sun_path (108 bytes with its NUL).
        if path.as_os_str().len() > 100 {
            path = std::env::temp_dir()
                .join(format!("fleetwire-up-{}-{name}.notify", std::process::id()));
        }
        // Left by an `up` that was killed: nobody listens on it any more.
        let _ = std::fs::remove_file(&path);
        let socket = UnixDatagram::bind(&path)
            .with_context(|| format!("binding the readiness socket {}", path.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("making {} private", path.display()))?;
        Ok(NotifySocket { socket, path })
    }

    /// Whether a READY=1 is among the messages waiting (all of them are read).
    fn said_ready(&self) -> bool {
        let mut buf = [0u8; 4096];
        let mut ready = false;
        while let Ok(n) = self.socket.try_recv(&mut buf) {
            ready |= buf[..n].split(|b| *b == b'\n').any(|l| l == b"READY=1");
        }
        ready
    }
}

impl Drop for NotifySocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A child program of `up`: the process, its readiness channel, and the tasks copying what it
/// prints into its log file and the worth-showing lines to the console.
struct Program {
    name: &'static str,
    child: Child,
    notify: NotifySocket,
    log: PathBuf,
    copies: Vec<JoinHandle<()>>,
}

impl Program {
    fn spawn(
        name: &'static str,
        command: &mut Command,
        dir: &Path,
        console: &Arc<Console>,
    ) -> Result<Program> {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        let notify = NotifySocket::bind(dir, name)?;
        // If `up` itself dies without stopping them (SIGKILL, a crash), the kernel sends each
        // child SIGTERM, so a fleet of one never outlives its `up`.
        // SAFETY: the closure makes one system call, prctl(2), which is async-signal-safe and
        // touches only the child being set up.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::TERM,
                ))
                .map_err(std::io::Error::from)
            });
        }
        let mut child = command
            .env("NOTIFY_SOCKET", &notify.path)
            // Its output goes to a file and to `up`, never to a terminal of its own: no
            // colour escapes in the log (tracing-subscriber honours NO_COLOR).
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting the {name}"))?;
        let file = Arc::new(Mutex::new(file));
        let mut copies = Vec::new();
        let streams: [Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>; 2] = [
            child.stdout.take().map(|s| Box::new(s) as _),
            child.stderr.take().map(|s| Box::new(s) as _),
        ];
        for stream in streams.into_iter().flatten() {
            copies.push(tokio::spawn(copy_lines(
                name,
                stream,
                file.clone(),
                console.clone(),
            )));
        }
        Ok(Program {
            name,
            child,
            notify,
            log,
            copies,
        })
    }

    /// Shows `what` with a running clock until the child says it is ready and `probe` answers,
    /// the child exits, or time runs out. On a terminal the clock is redrawn in place; into a
    /// file or a pipe each step is one plain line when it starts and one when it ends.
    async fn step<T, F, Fut>(&mut self, what: &str, console: &Console, mut probe: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let started = Instant::now();
        if !console.terminal {
            console.line(&format!("  {what} …"));
        }
        let mut said_ready = false;
        loop {
            if console.terminal {
                console.draw(format!(
                    "  {what} … {:.1} s",
                    started.elapsed().as_secs_f32()
                ));
            }
            said_ready = said_ready || self.notify.said_ready();
            if said_ready {
                if let Some(value) = probe().await {
                    console.line(&format!(
                        "  {what} … ready ({:.1} s)",
                        started.elapsed().as_secs_f32()
                    ));
                    return Ok(value);
                }
            }
            if let Some(status) = self.child.try_wait()? {
                self.drain_logs().await;
                console.line(&format!("  {what} … failed"));
                bail!(
                    "{what}: the {} exited ({}) before it was ready; what it said is above, \
                     all of it in {}",
                    self.name,
                    describe(Ok(status)),
                    self.log.display()
                );
            }
            if started.elapsed() > START_TIMEOUT {
                console.line(&format!("  {what} … failed"));
                bail!(
                    "{what}: not ready after {START_TIMEOUT:?} ({}); see {}",
                    if said_ready {
                        "it started, but does not answer as ready"
                    } else {
                        "it never said it had started"
                    },
                    self.log.display()
                );
            }
            tokio::select! {
                _ = self.notify.socket.readable(), if !said_ready => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }

    /// Waits (briefly) for the copies of what the child printed to reach their end, so its
    /// last words are shown before `up` speaks of it.
    async fn drain_logs(&mut self) {
        for copy in self.copies.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(2), copy).await;
        }
    }

    /// SIGTERM, then SIGKILL if it has not gone within [`STOP_TIMEOUT`].
    async fn stop(&mut self, console: &Console) {
        let name = self.name;
        let Some(pid) = self.child.id() else {
            self.drain_logs().await;
            return;
        };
        // Our own child's pid, not yet reaped (id() is Some); Err: it has just exited.
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(status) => {
                self.drain_logs().await;
                console.line(&format!("  {name} stopped ({})", describe(status)));
            }
            Err(_) => {
                let _ = self.child.kill().await;
                console.line(&format!(
                    "  {name} did not stop within {STOP_TIMEOUT:?}; killed"
                ));
            }
        }
    }
}

/// Copies what a child prints, line by line, into its log file, and the lines worth showing
/// to the console as they come. Bytes are copied as they are (a line need not be UTF-8).
async fn copy_lines(
    name: &'static str,
    stream: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    file: Arc<Mutex<std::fs::File>>,
    console: Arc<Console>,
) {
    let mut reader = tokio::io::BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        {
            let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
            let _ = file.write_all(&line);
        }
        let text = String::from_utf8_lossy(&line);
        if let Some(shown) = worth_showing(&text) {
            console.child_said(name, shown);
        }
    }
}

fn describe(status: std::io::Result<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!("signal {sig}"),
            _ => "unknown status".into(),
        },
        Err(e) => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::worth_showing;

    #[test]
    fn warnings_errors_and_other_lines_are_shown_without_their_timestamp() {
        let warn = "2026-12-03T12:00:00.123456Z  WARN fleetwire::controller: no operator tokens";
        assert_eq!(
            worth_showing(warn),
            Some("WARN fleetwire::controller: no operator tokens")
        );
        assert!(worth_showing(
            "2026-12-03T12:00:00.123456Z ERROR fleetwire::agent: heartbeat refused\n"
        )
        .is_some_and(|l| l.starts_with("ERROR")));
        assert_eq!(
            worth_showing("2026-12-03T12:00:00.123456Z  INFO fleetwire::agent: enrolled"),
            None
        );
        assert_eq!(
            worth_showing(
                "fleetwire controller: cannot listen on 127.0.0.1:9203: Address in use\n"
            ),
            Some("fleetwire controller: cannot listen on 127.0.0.1:9203: Address in use")
        );
        assert_eq!(worth_showing("\n"), None);
    }
}
