//! Running the agent: check the settings, open the state directory and desired.json, start
//! the driver and the tasks (reconcile, desired.json watch, controller link, local API), and on
//! shutdown drain the machines and write the last reported.json.

use std::process::ExitCode;
use std::sync::Arc;

use tokio::sync::watch;

use super::args::AgentArgs;
use super::config::AgentConfig;
use super::desired::DesiredStore;
use super::runtime_tls::export_runtime_tls;
use super::shared::Agent;
use super::{heartbeat, identity, local_api, reconcile};
use crate::drivers::driver::{Driver, DriverError, DriverSettings};

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
    crate::log_output::init(false);
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
    match runtime.block_on(async { serve_until(config, crate::shutdown::signal()).await }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleetwire agent: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Runs the agent until `shutdown` completes, then drains its machines and returns; `run`
/// (`fleetwire agent`, also what `fleetwire up` starts as a child) gives it SIGTERM or SIGINT.
pub async fn serve_until(
    config: AgentConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    // A second agent on this state directory would end the first one's tenants and take its
    // node's identity: it stops here, naming the first (docs/operations.md).
    let _owner = crate::dir_owner::take(&config.state_dir, |previous| {
        tracing::warn!(
            state_dir = %config.state_dir.display(),
            "taking over the state directory from {previous}, which ended without stopping"
        )
    })
    .context("the state directory")?;
    crate::atomic_file::remove_stale_temp_files(&config.state_dir);
    // Before anything reads the key: a renewal a crash interrupted is finished or undone.
    let (node_identity, recovery) =
        identity::load(&config.state_dir).context("the node's key and certificate")?;
    if recovery == identity::Recovery::DroppedUnusedKey {
        tracing::info!("dropped the key of a certificate renewal a stop interrupted");
    }
    if let Some(tls) = &config.runtime_tls {
        // After a restart: smolvm finds what the last registration issued, in the place and
        // with the group this start is configured with.
        export_runtime_tls(&identity::identity_files(&config.state_dir), tls)?;
    }
    let desired = DesiredStore::open(
        config.state_dir.join("desired.json"),
        config.host_id.clone(),
    )
    .context("desired.json")?;
    let driver = driver_for(&config)?;
    let listener = tokio::net::TcpListener::bind((config.listen_address, config.spawn_port))
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}:{} (VM_SPAWN_PORT)",
                config.listen_address, config.spawn_port
            )
        })?;
    let agent = Arc::new(Agent::new(config, desired, driver));
    tracing::info!(
        node_id = agent.config.node_id.as_str(),
        runtime = agent.driver.runtime().as_str(),
        state_dir = %agent.config.state_dir.display(),
        local_api = %listener.local_addr()?,
        transport = if agent.config.plain_http { "plain HTTP" } else { "HTTPS and mTLS" },
        "agent starting"
    );
    // Plain mode serves the local API without authentication: beyond loopback that is
    // anyone on the network, which an operator must not miss (issue 28).
    if agent.config.plain_http && !agent.config.listen_address.is_loopback() {
        tracing::warn!(
            local_api = %listener.local_addr()?,
            "the local API serves plain HTTP without authentication on a non-loopback address: anyone who reaches it may start and delete VMs (VM_PLAIN_HTTP=true)"
        );
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let reconcile = tokio::spawn(reconcile::run(agent.clone(), stop_rx.clone()));
    let watcher = tokio::spawn(reconcile::watch_desired(agent.clone(), stop_rx.clone()));
    let link = tokio::spawn(heartbeat::run(
        agent.clone(),
        node_identity,
        stop_rx.clone(),
    ));
    let api = tokio::spawn(local_api::serve(agent.clone(), listener, stop_rx.clone()));
    // The local API's port is bound and every task runs.
    crate::service_manager::ready("agent");

    shutdown.await;
    tracing::info!("stopping: draining the machines");
    crate::service_manager::stopping("agent");
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

/// The driver an agent of this configuration runs its VMs with: the one place that turns the
/// agent's settings into the driver's (the instruction-count harness builds its agent with it).
pub fn driver_for(config: &AgentConfig) -> Result<Arc<dyn Driver>, DriverError> {
    crate::drivers::registry::driver_for(
        config.runtime,
        &DriverSettings {
            state_dir: config.state_dir.clone(),
            stop_timeout: config.stop_timeout,
            runtime_address: config.runtime_address.clone(),
            runtime_local_address: config.runtime_local_address.clone(),
            runtime_client_tls: config
                .runtime_tls
                .as_ref()
                .map(|_| identity::identity_files(&config.state_dir)),
            qemu: config.qemu.clone(),
        },
    )
}
