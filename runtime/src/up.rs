//! `fleetwire up`: a fleet of one on this machine. A controller on 127.0.0.1 (SQLite) and a
//! local agent with the process driver enrolled in it, both real child processes of this
//! binary, all state under one folder; stopped together on Ctrl-C. Secure as any fleet is
//! (docs/security.md): HTTPS with the fleet CA, an admin operator token written for the user,
//! and the agent enrolled with a bootstrap token; `--plain-http` runs PPN's plain mode.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use fleetwire_types::{read, NodeId, NodeRecord};

use crate::controller::trust::certs::NodeCa;
use crate::store::{sqlite::tokens::SqliteBootstrapTokens, tokens::BootstrapTokenStore};
use tokio::process::{Child, Command};

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

/// The operator commands' config file for this fleet of one (docs/operator-cli.md), so the
/// banner's `fleetwire nodes list --config FILE` works as printed.
fn operator_config(dir: &Path, access: &Access, token_file: Option<&Path>) -> Result<PathBuf> {
    // A JSON string is a TOML basic string too (serde_json writes no `\/`).
    let quoted = |text: &str| serde_json::Value::from(text).to_string();
    let mut text = format!("url = {}\n", quoted(&access.api));
    match (&access.tls, token_file) {
        (Some((ca, _)), Some(token)) => {
            text.push_str(&format!("ca_file = {}\n", quoted(&ca.to_string_lossy())));
            text.push_str(&format!(
                "token_file = {}\n",
                quoted(&token.to_string_lossy())
            ));
        }
        _ => text.push_str("plain_http = true\n"),
    }
    let path = dir.join("operator.toml");
    crate::atomic_file::write(&path, text.as_bytes(), 0o600)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

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
    let node_id = match &args.node_id {
        Some(id) => id.clone(),
        None => default_node_id(),
    };
    node_id
        .parse::<NodeId>()
        .map_err(|e| anyhow::anyhow!("--node-id {node_id:?}: {e}"))?;
    let exe = std::env::current_exe().context("locating the fleetwire binary")?;
    let controller_dir = dir.join("controller");
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
    let (access, http, token_file) = if args.plain_http {
        command.arg("--plain-http");
        let http = crate::tls::client_builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let api = format!("http://{}", args.listen);
        (Access { api, tls: None }, http, None)
    } else {
        // The CA first, so that this process trusts it before the controller answers.
        let ca = NodeCa::open_or_create(&ca_dir, Duration::from_secs(3600))
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
        )
    };
    let operator_config = operator_config(&dir, &access, token_file.as_deref())?;
    let api = access.api.clone();
    let mut controller = spawn(&mut command, &dir.join("controller.log"))?;
    step(&format!("controller on {api}"), &mut controller, || async {
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
    let mut agent = spawn(
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
            .env("VM_RUNTIME", args.runtime.as_str()),
        &dir.join("agent.log"),
    )?;
    let node = step(
        &format!("agent {node_id} enrolling"),
        &mut agent,
        || async {
            let body = http
                .get(format!("{api}/v1/nodes/{node_id}"))
                .send()
                .await
                .ok()?
                .bytes()
                .await
                .ok()?;
            let node: NodeRecord = read(&body).ok()?.value;
            (node.status.to_string() == "ready" && reported.exists()).then_some(node)
        },
    )
    .await;
    let node = match node {
        Ok(node) => node,
        Err(err) => {
            stop("controller", &mut controller).await;
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
    println!(
        "\nfleetwire is up: a fleet of one ({mode}).\n\
         \n  fleet       {curl} {api}/v1/fleet\
         \n  nodes       {exe} nodes list --config {config}   (also vms, fleet: docs/operator-cli.md)\
         \n  reference   {reference}\
         \n  metrics     {curl} {api}/metrics\
         \n  node        {id} ({cpus} CPUs, {mem} MB free), agent on 127.0.0.1:{port}\
         \n  reported    {reported}\
         \n  logs        {logs}\
         \n\nPlace a machine ({what}):\
         \n\n  {curl} -X POST {api}/v1/vms -H 'content-type: application/json' \\\
         \n    -d '{example}'\
         \n\nthen watch it in {reported}. Ctrl-C stops both.",
        id = node.node_id.as_str(),
        exe = std::env::current_exe()
            .map(|exe| exe.display().to_string())
            .unwrap_or_else(|_| "fleetwire".into()),
        config = operator_config.display(),
        cpus = node.total_cpus.map(|c| c.to_string()).unwrap_or_else(|| "?".into()),
        mem = node.ram_available_mb,
        port = args.spawn_port,
        reported = reported.display(),
        logs = dir.join("{controller,agent}.log").display(),
    );

    let reason = tokio::select! {
        _ = crate::shutdown::signal() => None,
        status = controller.wait() => Some(format!("the controller exited ({})", describe(status))),
        status = agent.wait() => Some(format!("the agent exited ({})", describe(status))),
    };
    if let Some(reason) = &reason {
        eprintln!("\n{reason}; stopping. See {}", dir.join("*.log").display());
    } else {
        println!("\nstopping");
    }
    // The agent first, so it is not left heartbeating into a controller that is gone.
    stop("agent", &mut agent).await;
    stop("controller", &mut controller).await;
    match reason {
        None => {
            println!("stopped; state kept in {}", dir.display());
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

fn spawn(command: &mut Command, log: &Path) -> Result<Child> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    // If `up` itself dies without stopping them (SIGKILL, a crash), the kernel sends each
    // child SIGTERM, so a fleet of one never outlives its `up`.
    // SAFETY: prctl(2) is async-signal-safe and touches only the child being set up.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    command
        .stdin(std::process::Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .kill_on_drop(true)
        .spawn()
        .context("starting a fleetwire process")
}

/// Shows `what` with a running clock until `probe` answers, the child exits, or time runs out.
/// The clock is redrawn in place (`\r`) only on a terminal; into a file or a pipe each step
/// is one plain line when it starts and one when it ends, so a log reads line by line.
async fn step<T, F, Fut>(what: &str, child: &mut Child, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    use std::io::IsTerminal;
    let started = Instant::now();
    let mut out = std::io::stdout();
    let terminal = out.is_terminal();
    let redraw = if terminal { "\r" } else { "" };
    if !terminal {
        println!("  {what} …");
    }
    loop {
        if terminal {
            let _ = write!(out, "\r  {what} … {:.1} s", started.elapsed().as_secs_f32());
            let _ = out.flush();
        }
        if let Some(value) = probe().await {
            println!(
                "{redraw}  {what} … ready ({:.1} s)",
                started.elapsed().as_secs_f32()
            );
            return Ok(value);
        }
        if let Some(status) = child.try_wait()? {
            if terminal {
                println!();
            }
            bail!(
                "{what}: the process exited ({}) before it was ready",
                describe(Ok(status))
            );
        }
        if started.elapsed() > START_TIMEOUT {
            if terminal {
                println!();
            }
            bail!("{what}: not ready after {START_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SIGTERM, then SIGKILL if it has not gone within [`STOP_TIMEOUT`].
async fn stop(name: &str, child: &mut Child) {
    let Some(pid) = child.id() else { return };
    // SAFETY: kill(2) on our own child's pid, which has not been reaped (id() is Some).
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    match tokio::time::timeout(STOP_TIMEOUT, child.wait()).await {
        Ok(status) => println!("  {name} stopped ({})", describe(status)),
        Err(_) => {
            let _ = child.kill().await;
            println!("  {name} did not stop within {STOP_TIMEOUT:?}; killed");
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
