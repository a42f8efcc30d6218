//! Calls from the controller to its nodes: the node agent's local API (PPN's
//! `POST /v1/spawn` and `DELETE /v1/vms/{vm_id}` on `wg_ip:spawn_port`) and the node runtime's
//! `GET /health`. Every answer is read through the generated validated reader.

use std::net::Ipv4Addr;
use std::time::Duration;

use fleetwire_types::{CreateVmRequest, RuntimeHealth, VmRecord, WireDocument};

/// Where a node's agent listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentEndpoint {
    pub ip: Ipv4Addr,
    pub port: u16,
}

impl std::fmt::Display for AgentEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.ip, self.port)
    }
}

pub struct AgentClient {
    http: reqwest::Client,
}

/// At most this much of a failing answer is quoted in an error.
const QUOTE_CHARS: usize = 300;

fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut quoted: String = text.chars().take(QUOTE_CHARS).collect();
    if text.chars().count() > QUOTE_CHARS {
        quoted.push('…');
    }
    quoted
}

impl AgentClient {
    pub fn new(timeout: Duration) -> anyhow::Result<AgentClient> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .no_proxy()
            .build()?;
        Ok(AgentClient { http })
    }

    /// `POST /v1/spawn` on the agent; the `VmRecord` it answers.
    pub async fn spawn(
        &self,
        agent: AgentEndpoint,
        request: &CreateVmRequest,
    ) -> Result<VmRecord, String> {
        let url = format!("http://{agent}/v1/spawn");
        read_answer(
            "POST",
            &url,
            self.http.post(&url).json(request).send().await,
        )
        .await
    }

    /// `DELETE /v1/vms/{vm_id}` on the agent. An agent that no longer knows the VM (404) has
    /// nothing left to delete, which is success.
    pub async fn delete(&self, agent: AgentEndpoint, vm_id: &str) -> Result<(), String> {
        // VM ids may hold spaces, '/', '%', ... (schemas/node.schema.json's VmId): one segment.
        let url = format!("http://{agent}/v1/vms/{}", crate::ids::path_segment(vm_id));
        let response = self
            .http
            .delete(&url)
            .send()
            .await
            .map_err(|e| format!("DELETE {url} failed: {e}"))?;
        let status = response.status();
        if status.is_success() || status == reqwest::StatusCode::NOT_FOUND {
            return Ok(());
        }
        let body = response.bytes().await.unwrap_or_default();
        Err(format!("DELETE {url} answered {status}: {}", quote(&body)))
    }

    /// `GET {address}/health` on the node's runtime.
    pub async fn runtime_health(&self, address: &str) -> Result<RuntimeHealth, String> {
        let url = format!("{}/health", address.trim_end_matches('/'));
        read_answer("GET", &url, self.http.get(&url).send().await).await
    }
}

/// A successful answer read as a `T` through the validated reader; anything else is an error
/// that names the call.
async fn read_answer<T: WireDocument>(
    method: &str,
    url: &str,
    sent: reqwest::Result<reqwest::Response>,
) -> Result<T, String> {
    let response = sent.map_err(|e| format!("{method} {url} failed: {e}"))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("reading the answer of {method} {url} failed: {e}"))?;
    if !status.is_success() {
        return Err(format!(
            "{method} {url} answered {status}: {}",
            quote(&body)
        ));
    }
    fleetwire_types::read::<T>(&body).map_err(|rejection| {
        format!(
            "{method} {url} answered an invalid {}: {rejection}",
            T::INFO.name
        )
    })
}
