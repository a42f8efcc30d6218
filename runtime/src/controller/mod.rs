//! `fleetwire controller`: the fleet's control plane. It enrolls nodes (by registration, or
//! by a PPN agent's first heartbeat), keeps their state from heartbeats, places VMs on them
//! and serves the API of `schemas/fleet-api.openapi.json` on the PPN controller port, built
//! only on the generated types. See `docs/controller.md`.

pub mod agent_client;
pub mod api;
pub mod certs;
pub mod docs;
pub mod fleet_document;
pub mod heartbeat_entries;
pub mod heartbeat_route;
pub mod jobs;
pub mod ledger;
pub mod liveness;
pub mod metrics;
pub mod nodes;
pub mod placement;
pub mod routes;
pub mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::Bytes;
use compact_str::CompactString;
use fleetwire_types::{HostState, NodeRecord, VmRecord};

use crate::store::sqlite::SqliteStore;
use crate::store::writer::{Change, Queued, Writer, WriterHandle};
use crate::store::{Store, StoreError, StoredNode};
use state::{DirtyNode, NodeFlags, NodeSlot, NodeState, NodeTable, VmEntry};

use crate::cli_values::parse_duration;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `fleetwire controller`: every setting is a flag with a `FLEETWIRE_*` environment fallback.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    /// Address to serve the API on (the PPN controller port is 9203).
    #[arg(long, env = "FLEETWIRE_LISTEN", default_value = "0.0.0.0:9203")]
    pub listen: SocketAddr,
    /// Directory for the controller's state (the default database lives here).
    #[arg(long, env = "FLEETWIRE_DATA_DIR", default_value = "/var/lib/fleetwire")]
    pub data_dir: PathBuf,
    /// SQLite database file [default: <data-dir>/controller.sqlite3].
    #[arg(long, env = "FLEETWIRE_DB")]
    pub db: Option<PathBuf>,
    /// Directory of the node CA (ca.pem, ca.key), created on first use; without it no node
    /// certificates are issued.
    #[arg(long, env = "FLEETWIRE_CA_DIR")]
    pub ca_dir: Option<PathBuf>,
    /// Validity of the node certificates the CA issues.
    #[arg(long, env = "FLEETWIRE_CERT_VALIDITY", default_value = "30d", value_parser = parse_duration)]
    pub cert_validity: Duration,
    /// A node silent this long (by the controller's receive time) becomes "unreachable".
    #[arg(long, env = "FLEETWIRE_STALE_AFTER", default_value = "30s", value_parser = parse_duration)]
    pub stale_after: Duration,
    /// An unreachable node silent this long is deleted.
    #[arg(long, env = "FLEETWIRE_FORGET_AFTER", default_value = "24h", value_parser = parse_duration)]
    pub forget_after: Duration,
    /// Disk-cordon a node whose reported free disk drops below this many GB.
    #[arg(long, env = "FLEETWIRE_DISK_CORDON_BELOW", default_value_t = 20)]
    pub disk_cordon_below: u64,
    /// Clear the disk cordon once free disk is back at this many GB or more (must be higher).
    #[arg(long, env = "FLEETWIRE_DISK_UNCORDON_ABOVE", default_value_t = 40)]
    pub disk_uncordon_above: u64,
    /// Disk reservations on a node may reach total_disk_gb times this.
    #[arg(long, env = "FLEETWIRE_DISK_OVERCOMMIT_RATIO", default_value_t = 2.0)]
    pub disk_overcommit_ratio: f64,
    /// Longest time a request may take before it is answered with `timeout`.
    #[arg(long, env = "FLEETWIRE_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Longest time a call to a node agent or runtime may take.
    #[arg(long, env = "FLEETWIRE_AGENT_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub agent_timeout: Duration,
    /// How often the staleness sweep runs.
    #[arg(long, env = "FLEETWIRE_SWEEP_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub sweep_interval: Duration,
    /// How often the disk ledger is recomputed from the VM records.
    #[arg(long, env = "FLEETWIRE_SELF_HEAL_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub self_heal_interval: Duration,
    /// How often each node's runtime is probed for its engine version.
    #[arg(long, env = "FLEETWIRE_PROBE_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub probe_interval: Duration,
    /// Heartbeat-derived changes are written at most this long after they happen, plus the
    /// time of the write itself, which the write-behind queue's budget keeps under half of
    /// this (at most 600ms, so a change reaches the store within 1 s).
    #[arg(long, env = "FLEETWIRE_FLUSH_INTERVAL", default_value = "500ms", value_parser = parse_duration)]
    pub flush_interval: Duration,
    /// Port of the agents' local API for a node that never says which (PPN agents do not):
    /// spawn and delete calls go to wg_ip on this port. 9220 is what PPN controllers call and
    /// PPN's host setup runs its agents on; the variable is PPN's own, so a PPN controller's
    /// environment carries over (docs/controller.md).
    #[arg(long, env = "VM_HOST_SPAWN_PORT", default_value_t = 9220,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub default_spawn_port: u16,
    /// Log format.
    #[arg(long, env = "FLEETWIRE_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

impl ControllerArgs {
    /// The defaults, as `fleetwire controller` with no flags would have them.
    pub fn defaults() -> ControllerArgs {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: ControllerArgs,
        }
        <Wrapper as clap::Parser>::try_parse_from(["controller"])
            .expect("the defaults parse")
            .args
    }
}

/// The checked settings the controller runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub stale_after: Duration,
    pub forget_after: Duration,
    pub disk_cordon_below_gb: u64,
    pub disk_uncordon_above_gb: u64,
    pub disk_overcommit_ratio: f64,
    pub request_timeout: Duration,
    pub agent_timeout: Duration,
    pub sweep_interval: Duration,
    pub self_heal_interval: Duration,
    pub probe_interval: Duration,
    pub flush_interval: Duration,
    pub cert_validity: Duration,
    /// `--default-spawn-port`: where a node that declared no spawn port is called.
    pub default_spawn_port: fleetwire_types::HostPort,
}

impl Settings {
    pub fn from_args(args: &ControllerArgs) -> Result<Settings, String> {
        if args.disk_uncordon_above <= args.disk_cordon_below {
            return Err(format!(
                "--disk-uncordon-above ({}) must be higher than --disk-cordon-below ({})",
                args.disk_uncordon_above, args.disk_cordon_below
            ));
        }
        if !(args.disk_overcommit_ratio.is_finite() && args.disk_overcommit_ratio > 0.0) {
            return Err(format!(
                "--disk-overcommit-ratio must be a positive number, not {}",
                args.disk_overcommit_ratio
            ));
        }
        if args.flush_interval.is_zero() || args.flush_interval > Duration::from_millis(600) {
            return Err("--flush-interval must be above 0 and at most 600ms".into());
        }
        for (name, value) in [
            ("--stale-after", args.stale_after),
            ("--sweep-interval", args.sweep_interval),
            ("--self-heal-interval", args.self_heal_interval),
            ("--probe-interval", args.probe_interval),
            ("--request-timeout", args.request_timeout),
            ("--agent-timeout", args.agent_timeout),
        ] {
            if value.is_zero() {
                return Err(format!("{name} must be above 0"));
            }
        }
        if args.forget_after <= args.stale_after {
            return Err("--forget-after must be longer than --stale-after".into());
        }
        let max_validity = Duration::from_secs(397 * 24 * 3600);
        if args.cert_validity.is_zero() || args.cert_validity > max_validity {
            return Err("--cert-validity must be above 0 and at most 397 days".into());
        }
        Ok(Settings {
            default_spawn_port: fleetwire_types::HostPort(
                std::num::NonZeroU16::new(args.default_spawn_port)
                    .ok_or("--default-spawn-port must be a port from 1 to 65535")?,
            ),
            stale_after: args.stale_after,
            forget_after: args.forget_after,
            disk_cordon_below_gb: args.disk_cordon_below,
            disk_uncordon_above_gb: args.disk_uncordon_above,
            disk_overcommit_ratio: args.disk_overcommit_ratio,
            request_timeout: args.request_timeout,
            agent_timeout: args.agent_timeout,
            sweep_interval: args.sweep_interval,
            self_heal_interval: args.self_heal_interval,
            probe_interval: args.probe_interval,
            flush_interval: args.flush_interval,
            cert_validity: args.cert_validity,
        })
    }

    #[cfg(test)]
    pub fn for_tests() -> Settings {
        Settings::from_args(&ControllerArgs::defaults()).expect("defaults are valid")
    }
}

/// The running controller: what every handler and job shares.
pub struct Controller {
    pub settings: Settings,
    pub table: NodeTable,
    pub writer: WriterHandle<DirtyNode>,
    pub metrics: metrics::Metrics,
    pub ca: Option<certs::NodeCa>,
    pub agents: agent_client::AgentClient,
    probe_requests: tokio::sync::mpsc::UnboundedSender<String>,
}

/// What [`Controller::start`] hands back besides the controller.
pub struct Started {
    pub controller: Arc<Controller>,
    pub writer: Writer<DirtyNode>,
    pub probe_requests: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl Controller {
    /// Loads the stored fleet (every node unreachable until it heartbeats again) and starts
    /// the store writer.
    pub fn start(
        settings: Settings,
        mut store: Box<dyn Store>,
        ca: Option<certs::NodeCa>,
    ) -> anyhow::Result<Started> {
        let table = NodeTable::default();
        let stored = store.load_nodes().context("loading the stored fleet")?;
        let loaded = stored.len();
        let mut vms = 0;
        for row in stored {
            let state = restore(&row).with_context(|| {
                format!("the stored row of node {:?} is not readable", row.node_id)
            })?;
            vms += state.vms().len();
            table.insert_loaded(row.node_id, state);
        }
        let metrics = metrics::Metrics::new();
        let (probe_tx, probe_rx) = tokio::sync::mpsc::unbounded_channel();
        let agents = agent_client::AgentClient::new(settings.agent_timeout, ca.as_ref())?;
        let mut writer = None;
        let controller = Arc::new_cyclic(|weak: &std::sync::Weak<Controller>| {
            let flushes = metrics.flush_observer();
            let started = Writer::start(
                store,
                Box::new(TableSource(weak.clone())),
                flushes,
                settings.flush_interval,
            );
            let handle = started.handle.clone();
            writer = Some(started);
            Controller {
                settings,
                table,
                writer: handle,
                metrics,
                ca,
                agents,
                probe_requests: probe_tx,
            }
        });
        // Loaded nodes are unreachable until they heartbeat. Not written to the store: a
        // status is derived, never read back (see `NodeState::status_changed`).
        let now = Instant::now();
        let stale = controller.settings.stale_after;
        controller.table.for_each(|_, state| {
            if nodes::refresh_status(state, now, stale).is_some() {
                state.status_changed();
            }
        });
        tracing::info!(nodes = loaded, vms, "stored fleet loaded");
        Ok(Started {
            controller,
            writer: writer.expect("the writer was started"),
            probe_requests: probe_rx,
        })
    }

    /// Marks `state` changed: its cached serialization is dropped and it is queued for the
    /// next write-behind batch (a change committed before its answer uses
    /// [`NodeState::changed_for_commit`] instead).
    pub fn touch(&self, node_id: &str, state: &mut NodeState) {
        if state.changed() {
            // The runtime probe, the one caller, changes a node only when its engine version
            // does: a full queue asks nothing of it.
            let _ = self
                .writer
                .mark_dirty(DirtyNode::Id(node_id.to_string()), Change::Row);
        }
    }

    /// Queues a node touched by a heartbeat (by its slot and id, so the store writer needs
    /// neither a lookup nor the node's own copy of its id). [`Queued::Full`]: the heartbeat's
    /// answer waits for [`WriterHandle::flushed`].
    pub fn queue_heartbeat(
        &self,
        slot: NodeSlot,
        node_id: CompactString,
        change: Change,
    ) -> Queued {
        self.writer
            .mark_dirty(DirtyNode::Slot(slot, node_id), change)
    }

    /// Returns once everything queued for write-behind so far is in the store.
    pub async fn flushed(&self) -> Result<(), crate::http::ApiFailure> {
        self.writer.flushed().await.map_err(store_failure)
    }

    /// Writes `node_ids` now and waits for the commit.
    pub async fn commit(&self, node_ids: Vec<String>) -> Result<(), crate::http::ApiFailure> {
        self.writer.commit(node_ids).await.map_err(store_failure)
    }

    /// Asks the probe job to read the node's runtime version now.
    pub fn probe_soon(&self, node_id: &str) {
        let _ = self.probe_requests.send(node_id.to_string());
    }

    /// `GET /v1/fleet`: the live nodes in node-id order (an unreachable node is left out, as
    /// PPN's listing drops it, but counted) with per-status counts. The node records
    /// are spliced in from their cached serializations, so a node is serialized once per
    /// change however often the fleet is read; the document is streamed (see
    /// [`fleet_document`]).
    pub fn fleet_document(&self) -> fleet_document::FleetDocument {
        fleet_document::FleetDocument::new(self.table.ordered_slots())
    }

    /// `GET /v1/nodes`: the records of nodes whose status passes `keep`, as a JSON array.
    pub fn node_list(&self, keep: impl Fn(HostState) -> bool) -> Bytes {
        let mut out = Vec::with_capacity(4096);
        out.push(b'[');
        for slot in self.table.ordered_slots() {
            let mut node = slot.lock();
            if keep(node.record.status) {
                if out.len() > 1 {
                    out.push(b',');
                }
                out.extend_from_slice(node.fragment());
            }
        }
        out.push(b']');
        Bytes::from(out)
    }

    /// One node's record as JSON.
    pub fn node_json(&self, node_id: &str) -> Option<Bytes> {
        let slot = self.table.get(node_id)?;
        let mut state = slot.lock();
        Some(state.fragment().clone())
    }

    /// Every VM the controller knows, ordered by vm_id.
    pub fn vms(&self, keep: impl Fn(&VmRecord) -> bool) -> Vec<VmRecord> {
        let mut out = Vec::new();
        self.table.for_each(|_, node| {
            out.extend(
                node.vms()
                    .iter()
                    .filter(|vm| keep(&vm.record))
                    .map(|vm| vm.record.clone()),
            );
        });
        out.sort_by(|a, b| a.vm_id.cmp(&b.vm_id));
        out
    }

    /// One VM's record.
    pub fn vm(&self, vm_id: &str) -> Option<VmRecord> {
        let node_id = self.table.vm_node(vm_id).filter(|n| !n.is_empty())?;
        let slot = self.table.get(&node_id)?;
        let state = slot.lock();
        state.vm(vm_id).map(|vm| vm.record.clone())
    }
}

/// The store writer's view of the node table.
struct TableSource(std::sync::Weak<Controller>);

impl crate::store::writer::Source for TableSource {
    type Key = DirtyNode;

    fn snapshot(&self, node: &mut DirtyNode) -> Option<crate::store::NodeWrite> {
        self.0.upgrade().and_then(|c| c.table.snapshot(node))
    }

    fn prefetch(&self, node: &DirtyNode) {
        if let DirtyNode::Slot(slot, _) = node {
            state::prefetch(slot);
        }
    }

    fn written(&self, writes: &[crate::store::NodeWrite]) {
        if let Some(controller) = self.0.upgrade() {
            controller.table.written(writes);
        }
    }
}

/// A node as stored → its in-memory state.
fn restore(row: &StoredNode) -> anyhow::Result<NodeState> {
    // Read back through the validated reader like any other wire document.
    let accepted = fleetwire_types::read::<NodeRecord>(&row.record)
        .map_err(|r| anyhow::anyhow!("its record is not a NodeRecord: {r}"))?;
    // A record stored by a newer controller: keep what this one knows, and say so.
    crate::unknown_fields::note(&accepted, "the store");
    let mut record = accepted.value;
    if let Some(seen) = row.seen {
        if seen > record.last_heartbeat {
            record.last_heartbeat = seen;
        }
    }
    let vms: Vec<VmEntry> =
        serde_json::from_slice(&row.vms).context("its VM list is unreadable")?;
    let flags: NodeFlags =
        serde_json::from_slice(&row.flags).context("its flags are unreadable")?;
    anyhow::ensure!(
        record.node_id.as_str() == row.node_id,
        "its record names node {:?}",
        record.node_id.as_str()
    );
    Ok(NodeState::loaded(record, vms, flags))
}

pub fn store_failure(error: StoreError) -> crate::http::ApiFailure {
    crate::http::ApiFailure::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        fleetwire_types::ApiErrorCode::StoreUnavailable,
        format!("the controller's store failed: {error}"),
    )
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

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
    let store = SqliteStore::open(&db).map_err(|e| anyhow::anyhow!("{e}"))?;
    let ca = match &args.ca_dir {
        Some(dir) => Some(
            certs::NodeCa::open_or_create(dir, settings.cert_validity)
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
    let app = heartbeat_route::HeartbeatFirst::new(controller.clone());
    axum::serve(listener, tower::make::Shared::new(app))
        .with_graceful_shutdown(async {
            crate::shutdown::signal().await;
            tracing::info!("shutting down");
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
