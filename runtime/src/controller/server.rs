//! The server loop of `fleetwire controller` ([`run`]): checks the settings, opens the store
//! and the node CA, starts the controller and its jobs, serves HTTP until a shutdown signal,
//! then flushes the store.

use std::process::ExitCode;

use anyhow::Context;

use super::arguments::ControllerArgs;
use super::certs::NodeCa;
use super::heartbeat_route::HeartbeatFirst;
use super::jobs;
use super::logging::init_logging;
use super::settings::Settings;
use super::shared::{Controller, Started};
use crate::store::sqlite::SqliteStore;

/// `fleetwire controller`.
pub fn run(args: ControllerArgs) -> ExitCode {
    init_logging(args.log_format);
    let settings = match Settings::from_args(&args) {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("fleetwire controller: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("fleetwire controller: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args, settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("fleetwire controller: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ControllerArgs, settings: Settings) -> anyhow::Result<()> {
    let db = args
        .db
        .clone()
        .unwrap_or_else(|| args.data_dir.join("controller.sqlite3"));
    let store = SqliteStore::open(&db)?;
    let ca = match &args.ca_dir {
        Some(dir) => Some(
            NodeCa::open_or_create(dir, settings.cert_validity)
                .with_context(|| format!("node CA in {}", dir.display()))?,
        ),
        None => None,
    };
    let Started {
        controller,
        writer,
        probe_requests,
    } = Controller::start(settings, Box::new(store), ca)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(
        listen = %listener.local_addr()?,
        db = %db.display(),
        ca = ?args.ca_dir,
        "controller serving"
    );
    let jobs = jobs::spawn(controller.clone(), probe_requests);
    // Answers go out as soon as they are written (no Nagle delay behind an unacknowledged
    // segment, which a large `GET /v1/fleet` answer would otherwise meet).
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
    });
    let app = HeartbeatFirst::new(controller.clone());
    // The store is loaded and the port bound: connections queue until `serve` takes them.
    crate::service_manager::ready("controller");
    axum::serve(listener, tower::make::Shared::new(app))
        .with_graceful_shutdown(async {
            crate::shutdown::signal().await;
            tracing::info!("shutting down");
            crate::service_manager::stopping("controller");
        })
        .await
        .context("serving HTTP")?;
    for job in jobs {
        job.abort();
    }
    writer.shutdown().await;
    tracing::info!("controller stopped; pending writes flushed");
    Ok(())
}
