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
use super::operator_tokens::OperatorTokens;
use super::own_certs::{self, issue_server, server_names};
use super::settings::Settings;
use super::shared::{Controller, Credentials, Started};
use crate::fleet_identity::renewal_due;
use crate::store::open::{open, Database};
use crate::tls_server::{server_config, ClientCerts, Peer, ReloadableCert, TlsListener, WithPeer};

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
    let db = match args.database() {
        Ok(db) => db,
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
    match runtime.block_on(serve(args, db, settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("fleetwire controller: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ControllerArgs, db: Database, settings: Settings) -> anyhow::Result<()> {
    let (store, bootstrap_tokens) = open(&db)?;
    // mTLS mode cannot run without a CA: it is the data directory's unless placed elsewhere.
    let ca_dir = match (&args.ca_dir, settings.plain_http) {
        (Some(dir), _) => Some(dir.clone()),
        (None, false) => Some(args.data_dir.join("ca")),
        (None, true) => None,
    };
    let ca = match &ca_dir {
        Some(dir) => Some(
            NodeCa::open_or_create(dir, settings.cert_validity)
                .with_context(|| format!("node CA in {}", dir.display()))?,
        ),
        None => None,
    };
    let plain_http = settings.plain_http;
    let operators = match &args.operator_token_file {
        Some(path) => OperatorTokens::load(path)?,
        None => OperatorTokens::empty(),
    };
    if !plain_http && operators.is_empty() {
        tracing::warn!(
            "no operator tokens (--operator-token-file): every operator route answers 401; `fleetwire token operator` makes one"
        );
    }
    let credentials = Credentials {
        operators,
        bootstrap_tokens: Some(bootstrap_tokens),
    };
    let Started {
        controller,
        writer,
        probe_requests,
    } = Controller::start(settings, store, ca, credentials)
        .with_context(|| format!("starting on the store {db}"))?;
    let tcp = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let listen = tcp.local_addr()?;
    let mut jobs = jobs::spawn(controller.clone(), probe_requests);
    let app = HeartbeatFirst::new(controller.clone());
    let shutdown = async {
        crate::shutdown::signal().await;
        tracing::info!("shutting down");
        crate::service_manager::stopping("controller");
    };
    if plain_http {
        tracing::warn!(
            listen = %listen,
            "--plain-http: serving plain HTTP and authenticating nobody, as a PPN controller does: anyone who reaches this port can act as any node and any operator"
        );
        if controller.ca.is_some() {
            tracing::warn!(
                "--plain-http with a CA (--ca-dir): every registration gets a certificate of that CA without proving anything; never share this CA with a fleet in mTLS mode"
            );
        }
        tracing::info!(listen = %listen, db = %db, ca = ?ca_dir, transport = "plain_http", "controller serving");
        // Answers go out as soon as they are written (no Nagle delay behind an unacknowledged
        // segment, which a large `GET /v1/fleet` answer would otherwise meet).
        let listener = axum::serve::ListenerExt::tap_io(tcp, |stream| {
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%error, "cannot set TCP_NODELAY");
            }
        });
        // The store is loaded and the port bound: connections queue until `serve` takes them.
        crate::service_manager::ready("controller");
        crate::http_serve::serve(listener, |_| app.clone(), shutdown).await;
    } else {
        let ca = controller.ca.as_ref().expect("mTLS mode always has a CA");
        let names = server_names(&args.tls_names);
        let (key, issued) = issue_server(ca, &names)?;
        let served = ReloadableCert::new(key);
        let config = server_config(served.clone(), ca.ca_pem(), ClientCerts::Optional)?;
        let client_due = controller
            .agents
            .identity_dates()
            .map_or(std::time::SystemTime::now(), |d| {
                renewal_due(d.not_before, d.not_after)
            });
        jobs.push(tokio::spawn(own_certs::renew(
            controller.clone(),
            served,
            names.clone(),
            renewal_due(issued.not_before, issued.not_after),
            client_due,
        )));
        let names: Vec<String> = names.iter().map(ToString::to_string).collect();
        tracing::info!(
            listen = %listen,
            db = %db,
            ca = ?ca_dir,
            transport = "mtls",
            server_names = %names.join(","),
            "controller serving HTTPS"
        );
        let listener = TlsListener::new(tcp, config)?;
        crate::service_manager::ready("controller");
        crate::http_serve::serve(
            listener,
            |peer: &Peer| WithPeer::new(app.clone(), peer.clone()),
            shutdown,
        )
        .await;
    }
    for job in jobs {
        job.abort();
    }
    writer.shutdown().await;
    tracing::info!("controller stopped; pending writes flushed");
    Ok(())
}
