//! Every HTTP call the smolvm driver makes, in one place: one `reqwest::Client` and two bases.
//!
//! - the **API base** serves `/api/v1/*` (the machines API);
//! - the **node base** serves `/health` and `/capacity`.
//!
//! In plain mode both are the runtime address (`VM_RUNTIME_ADDRESS`): smolvm serves its whole
//! router on one listener. In fleet mode smolvm serves `/api/v1` only on its mTLS port and
//! `/health`, `/capacity` on a plain loopback door (`docs/interop.md`); [`SmolvmTransport`]
//! picks the base and the client (with the node's certificate for the API) per path, so the
//! driver above it does not change.
//!
//! Every answer is read through the generated validated reader into the types of
//! `schemas/smolvm.schema.json`; every request body is a generated type.

use fleetwire_types::{
    CreateMachineRequest, RuntimeCapacity, RuntimeDeleted, RuntimeError, RuntimeHealth,
    RuntimeMachine, RuntimeMachineList, WireDocument,
};
use reqwest::{Method, StatusCode};

use super::transport::SmolvmTransport;
use crate::drivers::driver::{DriverError, DriverSettings};

/// At most this much of a plain-text error answer is quoted.
const QUOTE_CHARS: usize = 300;

/// A runtime call that did not give what the API promises.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct CallError {
    /// The HTTP status, when the runtime answered at all.
    pub status: Option<StatusCode>,
    /// `METHOD path: what happened`, with smolvm's own message when it gave one.
    pub message: String,
}

/// `GET /capacity`: the figures, or 503 (the runtime says it is stalled).
pub enum Capacity {
    Figures(RuntimeCapacity),
    Stalled,
}

pub struct SmolvmClient {
    transport: SmolvmTransport,
}

impl SmolvmClient {
    pub fn new(settings: &DriverSettings) -> Result<SmolvmClient, DriverError> {
        Ok(SmolvmClient {
            transport: SmolvmTransport::new(settings)?,
        })
    }

    pub async fn health(&self) -> Result<RuntimeHealth, CallError> {
        let (status, body) = self.send(Method::GET, "/health", None).await?;
        answer("GET", "/health", status, &body)
    }

    pub async fn capacity(&self) -> Result<Capacity, CallError> {
        let (status, body) = self.send(Method::GET, "/capacity", None).await?;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            return Ok(Capacity::Stalled);
        }
        answer("GET", "/capacity", status, &body).map(Capacity::Figures)
    }

    /// `GET /api/v1/machines`: every machine the runtime holds.
    pub async fn machines(&self) -> Result<Vec<RuntimeMachine>, CallError> {
        let path = "/api/v1/machines";
        let (status, body) = self.send(Method::GET, path, None).await?;
        answer::<RuntimeMachineList>("GET", path, status, &body).map(|l| l.machines)
    }

    /// `POST /api/v1/machines`: the machine's record and disks; it does not boot.
    pub async fn create(
        &self,
        request: &CreateMachineRequest,
    ) -> Result<RuntimeMachine, CallError> {
        let path = "/api/v1/machines";
        let body = serde_json::to_vec(request).expect("a generated value serializes");
        let (status, answer_body) = self.send(Method::POST, path, Some(body)).await?;
        answer("POST", path, status, &answer_body)
    }

    /// `POST /api/v1/machines/{name}/start`: boots the machine (200 also when it runs already).
    pub async fn start(&self, name: &str) -> Result<RuntimeMachine, CallError> {
        let path = format!("/api/v1/machines/{name}/start");
        let (status, body) = self.send(Method::POST, &path, None).await?;
        answer("POST", &path, status, &body)
    }

    /// `POST /api/v1/machines/{name}/stop`: idempotent.
    pub async fn stop(&self, name: &str) -> Result<RuntimeMachine, CallError> {
        let path = format!("/api/v1/machines/{name}/stop");
        let (status, body) = self.send(Method::POST, &path, None).await?;
        answer("POST", &path, status, &body)
    }

    /// `DELETE /api/v1/machines/{name}`: stops it if needed and removes it with its disks.
    /// A machine that is already gone (404) is deleted.
    pub async fn delete(&self, name: &str) -> Result<(), CallError> {
        let path = format!("/api/v1/machines/{name}");
        let (status, body) = self.send(Method::DELETE, &path, None).await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        answer::<RuntimeDeleted>("DELETE", &path, status, &body).map(|_| ())
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        json: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Vec<u8>), CallError> {
        let url = self.transport.url(path);
        let mut request = self
            .transport
            .request(method.clone(), path)
            .map_err(|message| CallError {
                status: None,
                message: format!("{method} {url}: {message}"),
            })?;
        if let Some(json) = json {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(json);
        }
        let failed = |e: reqwest::Error| CallError {
            status: None,
            message: format!("{method} {url}: {}", crate::tls::with_causes(&e)),
        };
        let response = request.send().await.map_err(failed)?;
        let status = response.status();
        let body = response.bytes().await.map_err(failed)?;
        Ok((status, body.to_vec()))
    }
}

/// A 2xx answer read as `T`; anything else as an error naming the call, with smolvm's
/// `{error, code}` when it sent one, or the start of its plain-text answer (axum's own 4xx).
fn answer<T: WireDocument>(
    method: &str,
    path: &str,
    status: StatusCode,
    body: &[u8],
) -> Result<T, CallError> {
    if status.is_success() {
        // smolvm's answers carry fields fleetwire does not read (mounts, gpu, ...): set aside
        // and counted under the one policy (docs/interop.md).
        let accepted = fleetwire_types::read::<T>(body).map_err(|r| CallError {
            status: Some(status),
            message: format!("{method} {path}: not a valid {}: {r}", T::INFO.name),
        })?;
        crate::unknown_fields::note(&accepted, &format!("smolvm {method} {path}"));
        return Ok(accepted.value);
    }
    let said = match fleetwire_types::read::<RuntimeError>(body).map(|a| a.value) {
        Ok(e) => format!("{} ({})", e.error, e.code),
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let mut quoted: String = text.trim().chars().take(QUOTE_CHARS).collect();
            if text.chars().count() > QUOTE_CHARS {
                quoted.push('…');
            }
            if quoted.is_empty() {
                "no explanation".into()
            } else {
                quoted
            }
        }
    };
    Err(CallError {
        status: Some(status),
        message: format!("{method} {path}: {status}: {said}"),
    })
}
