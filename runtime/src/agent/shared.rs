//! The agent's shared state, read and changed by its tasks (reconcile, heartbeat, local API):
//! its settings, desired.json, the driver, its link with the controller, and what the last pass
//! published. Locks are held only to copy or swap a value, never across I/O.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use fleetwire_types::{HostDesiredState, HostReportedState, HostState};
use rustls::sign::CertifiedKey;
use tokio::sync::{watch, Notify};

use super::config::AgentConfig;
use super::desired::DesiredStore;
use crate::drivers::driver::Driver;
use crate::drivers::observation::Observation;

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

/// What the local API serves in secure mode: the node certificate with its key, and the fleet
/// CA whose controller certificate it accepts.
#[derive(Clone)]
pub struct ServingTls {
    pub certified: Arc<CertifiedKey>,
    pub ca_pem: String,
}

/// The agent's shared state. Locks are held only to copy or swap a value, never across I/O.
pub struct Agent {
    pub config: AgentConfig,
    pub desired: DesiredStore,
    pub driver: Arc<dyn Driver>,
    /// Asks the reconcile loop for a pass now.
    pub wake: Notify,
    /// The node certificate to serve (secure mode), set by the controller link at start and
    /// after every new certificate; the local API starts serving on the first one and swaps
    /// in each next one (docs/security.md).
    pub serving_tls: watch::Sender<Option<ServingTls>>,
    /// How long each pass's converge takes, for `/metrics`.
    pub pass_timing: super::pass_timing::PassTiming,
    link: Mutex<Link>,
    published: RwLock<Option<Arc<Published>>>,
}

impl Agent {
    /// The agent before its first pass: registering, nothing published.
    pub fn new(config: AgentConfig, desired: DesiredStore, driver: Arc<dyn Driver>) -> Agent {
        Agent {
            config,
            desired,
            driver,
            wake: Notify::new(),
            serving_tls: watch::channel(None).0,
            pass_timing: Default::default(),
            link: Mutex::new(Link::default()),
            published: RwLock::new(None),
        }
    }

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
