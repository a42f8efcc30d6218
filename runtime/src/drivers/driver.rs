//! The driver trait every runtime implements, the settings each is given, and why one cannot
//! start.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use fleetwire_types::{AppId, BootId, DesiredInstance};

use super::observation::Observation;
use crate::runtimes::Runtime;

/// What every driver is given.
#[derive(Debug, Clone)]
pub struct DriverSettings {
    pub state_dir: PathBuf,
    /// SIGTERM (or the runtime's stop) first; after this long, SIGKILL.
    pub stop_timeout: Duration,
    /// The runtime API's base URL (smolvm), for `/api/v1/*`. `https://`: fleet mode.
    pub runtime_address: String,
    /// Base URL of the runtime's `/health` and `/capacity` (smolvm's loopback door in fleet
    /// mode; the same as `runtime_address` in plain mode).
    pub runtime_local_address: String,
    /// Fleet mode: the client certificate, its key and the CA that signed the runtime's
    /// server certificate.
    pub runtime_client_tls: Option<ClientTlsFiles>,
    /// The qemu driver's settings (its defaults for the other drivers, which ignore them).
    pub qemu: super::qemu_settings::QemuSettings,
}

/// Why a driver could not start.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Its directories under the state directory could not be made.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The boot id it made for itself is not a `BootId`.
    #[error("boot id: {0}")]
    BootId(String),
    /// The HTTP client to its runtime could not be built.
    #[error(transparent)]
    HttpClient(#[from] reqwest::Error),
    /// QEMU could not be found or asked its version.
    #[error("{0}")]
    Qemu(String),
}

/// The boot id of a runtime the agent runs itself: this agent process's pid and start instant,
/// so it changes exactly when the runtime (the agent) starts again.
pub fn new_boot_id() -> Result<BootId, DriverError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
        .parse::<BootId>()
        .map_err(|e| DriverError::BootId(e.to_string()))
}

/// PEM files of a TLS client identity and the CA it trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// A runtime that runs machines. `converge` starts and stops work and returns without waiting
/// for machines to finish booting or stopping; `observe` reports live state. Both are called
/// once per reconcile pass, so they must stay cheap.
#[async_trait]
pub trait Driver: Send + Sync {
    /// The runtime it drives, whose name the node registers with
    /// (`RegisterNodeRequest.runtime`).
    fn runtime(&self) -> Runtime;
    /// Moves the runtime towards `desired`: start what should run, stop what should not, and
    /// remove what is no longer wanted.
    async fn converge(&self, desired: &[DesiredInstance]);
    /// Whether a new instance has room here beyond what `allocatable` counts (host ports for
    /// the qemu driver, which it sets aside for the instance on yes); the reason when not.
    /// The agent asks before it accepts a spawn.
    fn admit(&self, _instance: &DesiredInstance) -> Result<(), String> {
        Ok(())
    }
    async fn observe(&self) -> Observation;
    /// The file where the machine's output (its tenant's stdout and stderr, or its console)
    /// is kept, if this driver keeps one: what `GET /v1/vms/{vm_id}/logs` reads.
    fn output_file(&self, _app_id: &AppId) -> Option<std::path::PathBuf> {
        None
    }
    /// Stops every machine (the agent is going away) and waits for them.
    async fn shutdown(&self);
}
