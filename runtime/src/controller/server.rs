//! The server loop of `fleetwire controller` ([`run`]): checks the settings, opens the store
//! and the node CA, starts the controller and its jobs, serves HTTP until a shutdown signal,
//! then flushes the store.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use crate::controller::config::arguments::ControllerArgs;
use crate::controller::config::settings::Settings;
use crate::controller::fleet::jobs;
use crate::controller::http::heartbeat_route::HeartbeatFirst;
use crate::controller::leadership::lease::{self, LeaseConfig, Role};
use crate::controller::leadership::served::Served;
use crate::controller::leadership::standby::{self, Standby};
use crate::controller::metrics::Metrics;
use crate::controller::shared::{Controller, Credentials, Started};
use crate::controller::table::node_table::DirtyNode;
use crate::controller::trust::certs::FleetCa;
use crate::controller::trust::operator_tokens::WatchedOperatorTokens;
use crate::controller::trust::own_certs::{self, issue_server, server_names};
use crate::fleet_identity::renewal_due;
use crate::store::error::StoreError;
use crate::store::fleet_ca::{self, Pinned};
use crate::store::open::{open, open_postgres, Database};
use crate::store::postgres::tokens::PostgresBootstrapTokens;
use crate::store::postgres::{Fence, PostgresStore};
use crate::store::tokens::BootstrapTokenStore;
use crate::store::writer::Writer;
use crate::store::Store;
use crate::tls_server::{server_config, ClientCerts, Peer, ReloadableCert, TlsListener, WithPeer};

/// `fleetwire controller`.
pub fn run(args: ControllerArgs) -> ExitCode {
    crate::log_output::init(matches!(
        args.log_format,
        crate::controller::config::arguments::LogFormat::Json
    ));
    let checked = Settings::from_args(&args)
        .map_err(|e| e.to_string())
        .and_then(|settings| Ok((settings, args.database()?)));
    let (settings, db) = match checked {
        Ok(checked) => checked,
        Err(message) => {
            eprintln!("fleetwire controller: {message}");
            return ExitCode::from(2);
        }
    };
    // Set here rather than left to tokio, so that `--worker-threads` is the one way to size
    // it (tokio's own TOKIO_WORKER_THREADS does not apply to the controller).
    let workers = args.worker_threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        usize::from,
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
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

/// What the leading role runs: the controller, its store writer and its periodic jobs.
struct Leading {
    controller: Arc<Controller>,
    writer: Writer<DirtyNode>,
    jobs: Vec<tokio::task::JoinHandle<()>>,
}

impl Leading {
    /// Aborts the jobs and stops the writer, flushing what it holds (on a lost lease the
    /// fence refuses that flush: the next heartbeats bring it to the new leader).
    async fn stop(self) {
        for job in self.jobs {
            job.abort();
        }
        self.writer.shutdown().await;
    }
}

/// What starting the leading role needs, kept for every takeover.
struct Start {
    settings: Settings,
    ca_dir: Option<PathBuf>,
    /// `--operator-token-file`'s tokens, read once at start and watched from then on: every
    /// takeover shares them.
    operators: Arc<WatchedOperatorTokens>,
    /// mTLS: the leader renews its client certificate towards the agents.
    mtls: bool,
    /// `--tls-name`: names of the controller's server certificate, never a node's.
    tls_names: Vec<String>,
    /// Until when node certificates of the fleet CA are taken (`store::fleet_ca`), once the
    /// CAs are pinned.
    legacy_until: Option<std::time::SystemTime>,
}

impl Start {
    fn ca(&self) -> anyhow::Result<Option<FleetCa>> {
        self.ca_dir
            .as_ref()
            .map(|dir| {
                FleetCa::open_or_create(dir, self.settings.cert_validity)
                    .map(|ca| {
                        ca.with_controller_validity(self.settings.own_cert_validity)
                            .with_controller_names(&server_names(&self.tls_names), &self.tls_names)
                            .with_legacy_until(self.legacy_until)
                    })
                    .with_context(|| format!("the CAs in {}", dir.display()))
            })
            .transpose()
    }

    /// Loads the fleet from `store` (the start-up grace of `nodes::loaded_last_seen` gives
    /// every node `--stale-after` before it can become unreachable, after a takeover too) and
    /// spawns the periodic jobs: only a leader runs them.
    fn lead(
        &self,
        store: Box<dyn Store>,
        tokens: Arc<dyn BootstrapTokenStore>,
    ) -> anyhow::Result<Leading> {
        if self.mtls {
            // Whoever reached a plain port could have minted them (docs/security.md).
            let retired = tokens
                .retire_plain_minted()
                .context("retiring bootstrap tokens minted in plain mode")?;
            if retired > 0 {
                tracing::warn!(
                    retired,
                    "retired the unused bootstrap tokens a --plain-http controller minted on this store"
                );
            }
        }
        let credentials = Credentials {
            operators: self.operators.clone(),
            bootstrap_tokens: Some(tokens),
        };
        let Started {
            controller,
            writer,
            probe_requests,
        } = Controller::start(self.settings.clone(), store, self.ca()?, credentials)?;
        let mut jobs = jobs::spawn(controller.clone(), probe_requests);
        if self.mtls {
            jobs.push(tokio::spawn(jobs::renew_client(controller.clone())));
        }
        Ok(Leading {
            controller,
            writer,
            jobs,
        })
    }
}

/// `--advertise-url`, or this host's name and the listen port in the scheme served.
fn advertise_url(settings: &Settings, listen: std::net::SocketAddr) -> String {
    if let Some(url) = &settings.advertise_url {
        return url.as_str().trim_end_matches('/').to_string();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| listen.ip().to_string());
    let scheme = if settings.plain_http { "http" } else { "https" };
    format!("{scheme}://{host}:{}", listen.port())
}

async fn serve(args: ControllerArgs, db: Database, settings: Settings) -> anyhow::Result<()> {
    // mTLS mode cannot run without a CA: it is the data directory's unless placed elsewhere.
    let ca_dir = match (&args.ca_dir, settings.plain_http) {
        (Some(dir), _) => Some(dir.clone()),
        (None, false) => Some(args.data_dir.join("ca")),
        (None, true) => None,
    };
    // The directories this controller keeps state in, its SQLite store's and its CA's: a
    // second controller there would share the database file and the CA's key. It stops here,
    // naming the first (docs/operations.md, "One owner per directory"). Controllers on one
    // PostgreSQL database share nothing local and lock nothing.
    let mut owned: Vec<std::path::PathBuf> = Vec::new();
    if let Database::Sqlite(file) = &db {
        owned.push(match file.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        });
    }
    owned.extend(ca_dir.iter().cloned());
    owned.dedup();
    let _owners = owned
        .iter()
        .map(|dir| {
            crate::dir_owner::take(dir, |previous| {
                tracing::warn!(
                    dir = %dir.display(),
                    "taking over the directory from {previous}, which ended without stopping"
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let plain_http = settings.plain_http;
    // Checked before anything is served: a bad CA or token file stops a standby too.
    let operators = Arc::new(match &args.operator_token_file {
        Some(path) => WatchedOperatorTokens::load(path)?,
        None => WatchedOperatorTokens::none(),
    });
    // A token `fleetwire token operator` adds works without a restart, and a removed line
    // stops working as soon (docs/security.md).
    let token_watch = tokio::spawn(operators.clone().watch());
    let mut start = Start {
        settings: settings.clone(),
        ca_dir: ca_dir.clone(),
        operators: operators.clone(),
        mtls: !plain_http,
        tls_names: args.tls_names.clone(),
        legacy_until: None,
    };
    let ca = start.ca()?;
    let no_operators = operators.is_empty();
    if !plain_http && operators.is_empty() {
        tracing::warn!(
            "no operator tokens (--operator-token-file): every operator route answers 401; `fleetwire token operator` makes one"
        );
    }
    let tcp = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let listen = tcp.local_addr()?;
    let leading: Arc<tokio::sync::Mutex<Option<Leading>>> = Arc::default();
    let start_legacy;
    let (served, roles) = match &db {
        Database::Sqlite(_) => {
            // On SQLite this controller is the only one: it leads, with no lease.
            let (store, tokens) = tokio::task::block_in_place(|| open(&db))?;
            start_legacy = pin_ca(&db, ca.as_ref())?;
            start.legacy_until = start_legacy;
            let lead = start
                .lead(store, tokens)
                .with_context(|| format!("starting on the store {db}"))?;
            let served = Served::leading(HeartbeatFirst::new(lead.controller.clone()));
            *leading.lock().await = Some(lead);
            (served, None)
        }
        Database::Postgres(url) => {
            // Connected and migrated before the lease is sought: a database this controller
            // cannot use stops it at start with the reason, and the lease table exists before
            // the first attempt, so a lone controller leads at once.
            let prepared = tokio::task::block_in_place(|| open_postgres(url))
                .with_context(|| format!("starting on the store {db}"))?;
            start_legacy = pin_ca(&db, ca.as_ref())?;
            start.legacy_until = start_legacy;
            let holder = format!("{:016x}", rand::random::<u64>());
            let leader_url = advertise_url(&settings, listen);
            tracing::info!(instance = %holder, advertise_url = %leader_url, "standing by for the leader lease");
            let role = lease::spawn(LeaseConfig {
                url: url.clone(),
                holder: holder.clone(),
                leader_url,
                ttl: settings.lease_ttl,
            });
            let standby = standby::router(Arc::new(Standby {
                role: role.clone(),
                transport: settings.transport(),
                metrics_auth: settings.metrics_auth,
                operators,
                metrics: Metrics::new().with_transport(settings.transport()),
                retry_after_secs: (settings.lease_ttl / 5).as_secs().max(1),
            }));
            let served = Served::standby(standby.clone());
            let task = tokio::spawn(follow_roles(
                role,
                Candidate {
                    url: url.clone(),
                    holder,
                    prepared,
                },
                start,
                served.clone(),
                standby,
                leading.clone(),
            ));
            (served, Some(task))
        }
    };
    // After the pin, which dates the fleet CA's node certificates (`store::fleet_ca`).
    let ca = ca.map(|ca| ca.with_legacy_until(start_legacy));
    let mut tls_config = None;
    let mut server_cert = None;
    if !plain_http {
        let ca = ca.as_ref().expect("mTLS mode always has a CA");
        let names = server_names(&args.tls_names);
        let (key, issued) = issue_server(ca, &names)?;
        let served = ReloadableCert::new(key);
        // Client certificates are nodes' (the node CA's, or the fleet CA's from before it).
        tls_config = Some(server_config(
            served.clone(),
            ca.node_ca_pem(),
            ca.legacy_trust(),
            ClientCerts::Optional,
        )?);
        server_cert = Some((
            served,
            names,
            renewal_due(issued.not_before, issued.not_after),
        ));
    }
    if plain_http && ca.is_some() {
        tracing::warn!(
            "--plain-http with a CA (--ca-dir): every registration gets a certificate of that CA without proving anything; never share this CA with a fleet in mTLS mode"
        );
    }
    // The server certificate is renewed whatever the role: a standby serves HTTPS too.
    let server_renewal = match (ca, server_cert) {
        (Some(ca), Some((served, names, due))) => Some(tokio::spawn(own_certs::renew_server(
            ca, served, names, due,
        ))),
        _ => None,
    };
    let stop = crate::shutdown::signal();
    let shutdown = async {
        crate::service_manager::ready("controller");
        stop.await;
        tracing::info!("shutting down");
        crate::service_manager::stopping("controller");
    };
    match tls_config {
        None => {
            tracing::warn!(
                listen = %listen,
                "--plain-http: serving plain HTTP and authenticating no node, as a PPN controller does: anyone who reaches this port can act as any node and read the fleet"
            );
            if no_operators {
                tracing::warn!("--plain-http without --operator-token-file: routes that change the fleet (placing and deleting VMs, cordons, unenrolling, minting bootstrap tokens) answer only clients on this host");
            }
            tracing::info!(listen = %listen, db = %db, ca = ?ca_dir, transport = "plain_http", workers = tokio::runtime::Handle::current().metrics().num_workers(), "controller serving");
            // Answers go out as soon as they are written (no Nagle delay behind an
            // unacknowledged segment, which a large `GET /v1/fleet` answer would otherwise meet).
            let listener = axum::serve::ListenerExt::tap_io(tcp, |stream| {
                if let Err(error) = stream.set_nodelay(true) {
                    tracing::debug!(%error, "cannot set TCP_NODELAY");
                }
            });
            // The client's address, for the routes plain mode serves to loopback only.
            crate::http_serve::serve(
                listener,
                |address: &std::net::SocketAddr| {
                    let peer = Peer {
                        address: *address,
                        identity: None,
                    };
                    WithPeer::new(served.clone(), peer)
                },
                shutdown,
            )
            .await;
        }
        Some(config) => {
            let names = start_names(&args.tls_names);
            tracing::info!(
                listen = %listen,
                db = %db,
                ca = ?ca_dir,
                transport = "mtls",
                server_names = %names,
                workers = tokio::runtime::Handle::current().metrics().num_workers(),
                "controller serving HTTPS"
            );
            let listener = TlsListener::new(tcp, config)?;
            crate::http_serve::serve(
                listener,
                |peer: &Peer| WithPeer::new(served.clone(), peer.clone()),
                shutdown,
            )
            .await;
        }
    }
    token_watch.abort();
    for task in [roles, server_renewal].into_iter().flatten() {
        task.abort();
    }
    if let Some(lead) = leading.lock().await.take() {
        lead.stop().await;
    }
    tracing::info!("controller stopped; pending writes flushed");
    Ok(())
}

/// Records this controller's CAs as the fleet's, or refuses to start when the store's fleet
/// has others (`store::fleet_ca`), naming the file that differs. Nothing to pin without a CA
/// (plain HTTP). Until when node certificates of the fleet CA are taken.
fn pin_ca(db: &Database, ca: Option<&FleetCa>) -> anyhow::Result<Option<std::time::SystemTime>> {
    let Some(ca) = ca else { return Ok(None) };
    let (fleet, node) = (ca.fingerprint_sha256(), ca.node_fingerprint_sha256());
    let pins = tokio::task::block_in_place(|| fleet_ca::pin(db, &fleet, &node)).map_err(|e| {
        let which = match &e {
            StoreError::OtherNodeCa { .. } => "the node CA in node-ca.pem",
            _ => "the fleet CA in ca.pem",
        };
        anyhow::Error::new(e).context(format!("{which} of {}", ca.dir().display()))
    })?;
    match pins.fleet {
        Pinned::Recorded => {
            tracing::info!(sha256 = %fleet, "recorded this fleet CA (ca.pem) as the fleet's")
        }
        _ => tracing::debug!(sha256 = %fleet, "the fleet CA is the fleet's"),
    }
    match pins.node {
        Pinned::Recorded => tracing::info!(sha256 = %node, "recorded this node CA (node-ca.pem) as the fleet's"),
        Pinned::Same => tracing::debug!(sha256 = %node, "the node CA is the fleet's"),
        Pinned::OneCa => tracing::info!(
            "node-ca.pem is ca.pem (a CA directory of one CA): no node CA to record until one is made"
        ),
    }
    let until = pins.legacy_until.map(std::time::SystemTime::from);
    if let Some(end) = pins.legacy_until.filter(|end| *end > chrono::Utc::now()) {
        if pins.node != Pinned::OneCa {
            tracing::info!(
                until = %end.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                "node certificates of the fleet CA (ca.pem, from a release of one CA) are taken until the last of them ends, and never after"
            );
        }
    }
    Ok(until)
}

fn start_names(extra: &[String]) -> String {
    let names: Vec<String> = server_names(extra)
        .iter()
        .map(ToString::to_string)
        .collect();
    names.join(",")
}

/// A controller seeking the lease on PostgreSQL: the database, its instance name in the lease,
/// and the store it connected and migrated at start.
struct Candidate {
    url: String,
    holder: String,
    prepared: (PostgresStore, PostgresBootstrapTokens),
}

/// Follows the lease: leads when it is won (the store fenced by the epoch), stands by again
/// when it is lost, for as long as the process runs.
async fn follow_roles(
    mut role: tokio::sync::watch::Receiver<Role>,
    candidate: Candidate,
    start: Start,
    served: Served,
    standby: axum::Router,
    leading: Arc<tokio::sync::Mutex<Option<Leading>>>,
) {
    let Candidate {
        url,
        holder,
        prepared,
    } = candidate;
    // Hot: the store is connected and migrated before it is needed.
    let mut prepared = Some(prepared);
    let mut epoch_led = None;
    loop {
        let now = role.borrow_and_update().clone();
        let wanted = match now {
            Role::Leader { epoch } => Some(epoch),
            Role::Standby { .. } => None,
        };
        if epoch_led.is_some() && epoch_led != wanted {
            served.stand_by(standby.clone());
            if let Some(lead) = leading.lock().await.take() {
                lead.stop().await;
            }
            tracing::error!(
                epoch = ?epoch_led,
                "STEPPED DOWN: no longer the leader; serving as a standby (requests redirect to the leader)"
            );
            epoch_led = None;
            prepared = prepare(&url).await;
        }
        if let (Some(epoch), None) = (wanted, epoch_led) {
            let began = std::time::Instant::now();
            let opened = match prepared.take() {
                Some(opened) => Ok(opened),
                None => tokio::task::block_in_place(|| open_postgres(&url)),
            };
            let started = opened
                .map_err(anyhow::Error::from)
                .and_then(|(store, tokens)| {
                    let store = store.fenced(Fence {
                        holder: holder.clone(),
                        epoch,
                    });
                    tokio::task::block_in_place(|| start.lead(Box::new(store), Arc::new(tokens)))
                });
            match started {
                Ok(lead) => {
                    let nodes = lead.controller.table.node_counts();
                    served.lead(HeartbeatFirst::new(lead.controller.clone()));
                    *leading.lock().await = Some(lead);
                    epoch_led = Some(epoch);
                    tracing::info!(
                        epoch,
                        load_ms = began.elapsed().as_millis() as u64,
                        nodes = ?nodes,
                        "LEADING: took the lease, loaded the fleet, serving the API"
                    );
                }
                Err(error) => {
                    // Holding the lease without serving would stop the fleet: exit, and the
                    // lease connection's end lets a standby take over at once (its advisory
                    // lock goes with it; docs/controller.md, "Several controllers").
                    tracing::error!("won the lease but cannot lead: {error:#}; exiting");
                    eprintln!("fleetwire controller: won the lease but cannot lead: {error:#}");
                    std::process::exit(1);
                }
            }
        }
        if role.changed().await.is_err() {
            return;
        }
    }
}

/// A connected, migrated store and tokens for the next takeover, or `None` (logged): the
/// takeover then connects itself.
async fn prepare(url: &str) -> Option<(PostgresStore, PostgresBootstrapTokens)> {
    match tokio::task::block_in_place(|| open_postgres(url)) {
        Ok(opened) => Some(opened),
        Err(error) => {
            tracing::warn!("preparing the store for a takeover: {error}");
            None
        }
    }
}
