//! The running controller ([`Controller`]): what every handler and job shares — the settings,
//! the node table, the store writer, the metrics, the node CA and the client for the nodes —
//! and the reads served from the table.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use axum::body::Bytes;
use fleetwire_types::{HostState, VmRecord};

use crate::controller::agent_client::AgentClient;
use crate::controller::config::settings::Settings;
use crate::controller::metrics::Metrics;
use crate::controller::rules::nodes;
use crate::controller::table::fleet_document::FleetDocument;
use crate::controller::table::node_table::{DirtyNode, NodeTable};
use crate::controller::table::restore::restore;
use crate::controller::table::table_source::TableSource;
use crate::controller::trust::certs::NodeCa;
use crate::controller::trust::node_identity::NodeCaller;
use crate::controller::trust::operator_tokens::OperatorTokens;
use crate::fleet_identity::PeerIdentity;
use crate::store::backend::Store;
use crate::store::error::StoreError;
use crate::store::tokens::BootstrapTokenStore;
use crate::store::writer::{Writer, WriterHandle};

/// The running controller: what every handler and job shares.
pub struct Controller {
    pub settings: Settings,
    pub table: NodeTable,
    pub writer: WriterHandle<DirtyNode>,
    pub metrics: Metrics,
    pub ca: Option<NodeCa>,
    pub agents: AgentClient,
    /// Operator tokens and the bootstrap-token store.
    pub credentials: Credentials,
    probe_requests: tokio::sync::mpsc::UnboundedSender<String>,
}

/// The credentials a controller checks (docs/security.md).
pub struct Credentials {
    /// `--operator-token-file`'s tokens (none: every operator route answers 401 in mTLS mode).
    pub operators: OperatorTokens,
    /// Where bootstrap tokens are kept, hashed.
    pub bootstrap_tokens: Option<Arc<dyn BootstrapTokenStore>>,
}

impl Credentials {
    /// No operator tokens and no bootstrap tokens.
    pub fn none() -> Credentials {
        Credentials {
            operators: OperatorTokens::empty(),
            bootstrap_tokens: None,
        }
    }
}

/// What [`Controller::start`] hands back besides the controller.
pub struct Started {
    pub controller: Arc<Controller>,
    pub writer: Writer<DirtyNode>,
    pub probe_requests: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl AsRef<NodeTable> for Controller {
    fn as_ref(&self) -> &NodeTable {
        &self.table
    }
}

impl Controller {
    /// Loads the stored fleet (nodes heard from until the restart keep their status for one
    /// `--stale-after` window: the start-up grace) and starts the store writer.
    pub fn start(
        settings: Settings,
        mut store: Box<dyn Store>,
        ca: Option<NodeCa>,
        credentials: Credentials,
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
        let metrics = Metrics::new().with_transport(settings.transport());
        let (probe_tx, probe_rx) = tokio::sync::mpsc::unbounded_channel();
        let agents = AgentClient::new(settings.agent_timeout, ca.as_ref(), !settings.plain_http)?;
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
                credentials,
                probe_requests: probe_tx,
            }
        });
        // Loaded nodes get the start-up grace (`nodes::loaded_last_seen`): alive until
        // `now + stale_after` unless they were silent already before the restart. Not written
        // to the store: a status is derived, never read back (see `NodeState::status_changed`).
        let now = Instant::now();
        let stale = controller.settings.stale_after;
        let mut newest: Option<fleetwire_types::Timestamp> = None;
        controller.table.for_each(|_, state| {
            let seen = state.record.last_heartbeat;
            newest = Some(newest.map_or(seen, |n| n.max(seen)));
        });
        controller.table.for_each(|_, state| {
            if let Some(newest) = newest {
                state.last_seen =
                    nodes::loaded_last_seen(state.record.last_heartbeat, newest, now, stale);
            }
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

    /// Returns once everything queued for write-behind so far is in the store.
    pub async fn flushed(&self) -> Result<(), StoreError> {
        self.writer.flushed().await
    }

    /// Who a node-scoped request comes from, as this controller's mode sees it.
    pub fn node_caller<'a>(&self, presented: Option<&'a PeerIdentity>) -> NodeCaller<'a> {
        if self.settings.plain_http {
            NodeCaller::Unchecked
        } else {
            NodeCaller::Presented(presented)
        }
    }

    /// Asks the probe job to read the node's runtime version now.
    pub fn probe_soon(&self, node_id: &str) {
        let _ = self.probe_requests.send(node_id.to_string());
    }

    /// `GET /v1/fleet`: the live nodes in node-id order (an unreachable node is left out, as
    /// PPN's listing drops it, but counted) with per-status counts. The node records
    /// are spliced in from their cached serializations, so a node is serialized once per
    /// change however often the fleet is read; the document is streamed (see
    /// [`FleetDocument`]).
    pub fn fleet_document(&self) -> FleetDocument {
        FleetDocument::new(self.table.ordered_slots())
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
