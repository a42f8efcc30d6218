//! `fleetwire agent`: the node agent. It enrolls with the fleet controller and heartbeats to it
//! (seed 003's `service-vm-host` contract), runs the host's machines through a runtime driver,
//! converges them on desired.json, and writes reported.json after every pass.

pub mod config;
pub mod desired;
pub mod enroll;
pub mod heartbeat;
pub mod local_api;
pub mod meters;
pub mod reconcile;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, RwLock};

use clap::Args;
use fleetwire_types::{HostDesiredState, HostReportedState, HostState};
use tokio::sync::{watch, Notify};

use crate::drivers::{Driver, DriverSettings, Observation};
use config::AgentConfig;
use desired::DesiredStore;

/// Flags mirror the environment variables; each flag falls back to its variable.
#[derive(Args, Debug, Default, Clone)]
pub struct AgentArgs {
    /// The fleet controller's URL, e.g. http://10.0.0.1:9203 (required).
    #[arg(long, env = "VM_FLEET_ENDPOINT", value_name = "URL")]
    pub fleet_endpoint: Option<String>,
    /// This node's fleet-unique id (required).
    #[arg(long, env = "VM_NODE_ID", value_name = "ID")]
    pub node_id: Option<String>,
    /// This node's WireGuard IPv4 address (required).
    #[arg(long, env = "VM_WG_IP", value_name = "IPV4")]
    pub wg_ip: Option<String>,
    /// Seconds between heartbeats [default: 10].
    #[arg(long, env = "VM_HEARTBEAT_INTERVAL_S", value_name = "SECONDS")]
    pub heartbeat_interval_s: Option<String>,
    /// Port of the local API [default: 9204].
    #[arg(long, env = "VM_SPAWN_PORT", value_name = "PORT")]
    pub spawn_port: Option<String>,
    /// Last-resort node for placement: true or 1 [default: false].
    #[arg(long, env = "VM_RESERVED", value_name = "BOOL")]
    pub reserved: Option<String>,
    /// Where desired.json, reported.json, meters.json, the node key and volumes live
    /// [default: $STATE_DIRECTORY, else ./.fleetwire/agent-<node id>].
    #[arg(long, env = "VM_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<String>,
    /// Runtime driver: process or smolvm [default: process].
    #[arg(long, env = "VM_RUNTIME", value_name = "NAME")]
    pub runtime: Option<String>,
    /// The runtime API's URL (smolvm) [default: http://127.0.0.1:8080].
    #[arg(long, env = "VM_RUNTIME_ADDRESS", value_name = "URL")]
    pub runtime_address: Option<String>,
    /// The runtime's plain loopback door, for /health and /capacity (smolvm fleet mode)
    /// [default: http://127.0.0.1:<port of VM_RUNTIME_ADDRESS + 1> in fleet mode, else
    /// VM_RUNTIME_ADDRESS].
    #[arg(long, env = "VM_RUNTIME_LOCAL_ADDRESS", value_name = "URL")]
    pub runtime_local_address: Option<String>,
    /// The runtime's URL as the controller reaches it, reported at registration and probed
    /// for the engine version [default: VM_RUNTIME_ADDRESS's scheme and port on VM_WG_IP].
    #[arg(long, env = "VM_RUNTIME_ADVERTISE_ADDRESS", value_name = "URL")]
    pub runtime_advertise_address: Option<String>,
    /// Where the agent keeps the node certificate, its key and the fleet CA for smolvm's
    /// SMOLVM_SERVE_TLS_* (fleet mode) [default: <state dir>/runtime-tls].
    #[arg(long, env = "VM_RUNTIME_TLS_DIR", value_name = "DIR")]
    pub runtime_tls_dir: Option<String>,
    /// Numeric group id given read access to the key in VM_RUNTIME_TLS_DIR (the runtime's
    /// group) [default: the agent's own group].
    #[arg(long, env = "VM_RUNTIME_TLS_GID", value_name = "GID")]
    pub runtime_tls_gid: Option<String>,
    /// Address the local API listens on [default: 0.0.0.0].
    #[arg(long, env = "VM_LISTEN_ADDRESS", value_name = "IP")]
    pub listen_address: Option<String>,
    /// Longest time between two reconcile passes, in ms [default: 1000].
    #[arg(long, env = "VM_RECONCILE_INTERVAL_MS", value_name = "MS")]
    pub reconcile_interval_ms: Option<String>,
    /// Grace between SIGTERM and SIGKILL when stopping a tenant, in ms [default: 10000].
    #[arg(long, env = "VM_STOP_TIMEOUT_MS", value_name = "MS")]
    pub stop_timeout_ms: Option<String>,
    /// Command the process driver runs for a spawn that names none [default: sleep infinity].
    #[arg(long, env = "VM_DEFAULT_COMMAND", value_name = "ARGV")]
    pub default_command: Option<String>,
    /// Check the settings, print them one per line, and exit (0 when they are good).
    #[arg(long)]
    pub check: bool,
}

/// The agent's link with its controller, as reported.json's `state` tells it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Link {
    /// The controller accepted the registration (or, for a PPN controller, a heartbeat).
    pub enrolled: bool,
    /// The last call to the controller failed to reach it.
    pub unreachable: bool,
    /// The agent is stopping its machines to go away.
    pub draining: bool,
}

impl Link {
    pub fn host_state(&self) -> HostState {
        if self.draining {
            HostState::Draining
        } else if self.unreachable {
            HostState::Unreachable
        } else if self.enrolled {
            HostState::Ready
        } else {
            HostState::Registering
        }
    }
}

/// What the last pass built: the document written, and what it was built from.
pub struct Published {
    pub report: HostReportedState,
    pub observation: Observation,
    pub desired: Arc<HostDesiredState>,
}

/// The agent's shared state. Locks are held only to copy or swap a value, never across I/O.
pub struct Agent {
    pub config: AgentConfig,
    pub desired: DesiredStore,
    pub driver: Arc<dyn Driver>,
    /// Asks the reconcile loop for a pass now.
    pub wake: Notify,
    link: Mutex<Link>,
    published: RwLock<Option<Arc<Published>>>,
}

impl Agent {
    pub fn reported_path(&self) -> PathBuf {
        self.config.state_dir.join("reported.json")
    }

    pub fn link(&self) -> Link {
        *self.link.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn update_link(&self, f: impl FnOnce(&mut Link)) {
        let changed = {
            let mut link = self.link.lock().unwrap_or_else(|p| p.into_inner());
            let before = link.host_state();
            f(&mut link);
            before != link.host_state()
        };
        if changed {
            tracing::info!(state = ?self.link().host_state(), "host state changed");
            self.wake.notify_one();
        }
    }

    pub fn published(&self) -> Option<Arc<Published>> {
        self.published
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn publish(&self, p: Published) {
        *self.published.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(p));
    }
}

/// Entry point of `fleetwire agent`. Exit codes: 0 stopped cleanly, 1 failed, 2 bad settings.
pub fn run(args: &AgentArgs) -> ExitCode {
    let config = match AgentConfig::from_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fleetwire agent: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        print!("{}", config.describe());
        return ExitCode::SUCCESS;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fleetwire agent: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(serve_until(config, crate::shutdown::signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleetwire agent: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Runs the agent until `shutdown` completes, then drains its machines and returns. For
/// embedding (e.g. `fleetwire up`); `fleetwire agent` stops on SIGTERM or SIGINT.
pub async fn serve_until(
    config: AgentConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(&config.state_dir).with_context(|| {
        format!(
            "cannot create the state directory {}",
            config.state_dir.display()
        )
    })?;
    remove_stale_temp_files(&config.state_dir);
    if let Some(tls) = &config.runtime_tls {
        // After a restart: smolvm finds what the last registration issued, in the place and
        // with the group this start is configured with.
        enroll::export_runtime_tls(&config.state_dir, tls)?;
    }
    let desired = DesiredStore::open(
        config.state_dir.join("desired.json"),
        config.host_id.clone(),
    )
    .context("desired.json")?;
    let driver = crate::drivers::driver_for(
        config.runtime.name(),
        &DriverSettings {
            state_dir: config.state_dir.clone(),
            stop_timeout: config.stop_timeout,
            runtime_address: config.runtime_address.clone(),
            runtime_local_address: config.runtime_local_address.clone(),
            runtime_client_tls: config.runtime_tls.as_ref().map(|_| {
                crate::drivers::ClientTlsFiles {
                    cert: config.state_dir.join(enroll::CERT_FILE),
                    key: config.state_dir.join(enroll::KEY_FILE),
                    ca: config.state_dir.join(enroll::CA_FILE),
                }
            }),
        },
    )?;
    let listener = tokio::net::TcpListener::bind((config.listen_address, config.spawn_port))
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}:{} (VM_SPAWN_PORT)",
                config.listen_address, config.spawn_port
            )
        })?;
    let agent = Arc::new(Agent {
        config,
        desired,
        driver,
        wake: Notify::new(),
        link: Mutex::new(Link::default()),
        published: RwLock::new(None),
    });
    tracing::info!(
        node_id = agent.config.node_id.as_str(),
        runtime = agent.driver.name(),
        state_dir = %agent.config.state_dir.display(),
        local_api = %listener.local_addr()?,
        "agent starting"
    );

    let (stop_tx, stop_rx) = watch::channel(false);
    let reconcile = tokio::spawn(reconcile::run(agent.clone(), stop_rx.clone()));
    let watcher = tokio::spawn(reconcile::watch_desired(agent.clone(), stop_rx.clone()));
    let link = tokio::spawn(heartbeat::run(agent.clone(), stop_rx.clone()));
    let api = tokio::spawn(local_api::serve(agent.clone(), listener, stop_rx.clone()));

    shutdown.await;
    tracing::info!("stopping: draining the machines");
    agent.update_link(|l| l.draining = true);
    let _ = stop_tx.send(true);
    let mut pass_state = match reconcile.await {
        Ok(state) => state,
        Err(_) => reconcile::PassState::load(&agent),
    };
    let _ = watcher.await;
    let _ = link.await;
    agent.driver.shutdown().await;
    // The last word: what the machines came to.
    reconcile::pass(&agent, &mut pass_state).await;
    // Graceful shutdown waits for idle keep-alive connections too: bounded.
    let mut api = api;
    if tokio::time::timeout(std::time::Duration::from_secs(2), &mut api)
        .await
        .is_err()
    {
        api.abort();
    }
    tracing::info!("stopped");
    Ok(())
}

/// Temp files of writes a crash interrupted (the target file itself is always whole).
fn remove_stale_temp_files(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.ends_with(".tmp") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
