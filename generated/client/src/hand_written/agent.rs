//! The client of a node agent's local API (`schemas/agent-api.openapi.json`, docs/agent.md):
//! the same transport as [`Client`] (its `send`, its body readers, its errors), under a type of
//! its own because the two documents share operation names (`delete_vm`, `get_healthz`, ...).
//! The operations (`AgentClient::spawn_vm` and the others) are generated from the document
//! (`src/generated/agent_operations.rs`).

use reqwest::Response;

use crate::client::{Client, Operation};
use crate::error::{BuildError, Error};

/// A typed client for one node agent: one async method per operation of the agent's API
/// document, named by its `operationId`. The agent takes no bearer token: in mTLS mode the
/// caller's `reqwest::Client` presents the controller's certificate and decides which server
/// certificate it believes (the controller believes only the node it means to call, issue 28).
///
/// ```no_run
/// # async fn run(http: reqwest::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use fleetwire_client::agent::AgentClient;
/// let agent = AgentClient::new_with_client("https://10.0.0.7:9204", http)?;
/// for vm in agent.list_vms().await?.into_inner() {
///     println!("{} {:?}", vm.vm_id.as_str(), vm.state);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct AgentClient {
    client: Client,
}

impl AgentClient {
    /// The agent at `base_url` (`https://wg_ip:port`, or `http://…` for an agent started with
    /// `VM_PLAIN_HTTP=true`) reached through `http`, which the caller built with its own TLS
    /// settings and timeouts.
    pub fn new_with_client(base_url: &str, http: reqwest::Client) -> Result<Self, BuildError> {
        Client::new_with_client(base_url, http).map(Self::from)
    }

    /// The agent's address.
    pub fn base_url(&self) -> &reqwest::Url {
        self.client.base_url()
    }

    /// Sends one request of `operation` through the underlying [`Client`].
    pub(crate) async fn send(
        &self,
        operation: &Operation,
        segments: &[&str],
        query: &[(&str, Option<String>)],
        body: Option<Vec<u8>>,
    ) -> Result<Response, Error> {
        self.client.send(operation, segments, query, body).await
    }
}

/// A client built with [`Client::builder`] (e.g. with `max_answer_bytes`, or
/// `field_validation`) calling the agent's API instead of the controller's. Its bearer tokens,
/// if any, are never sent: no agent operation declares one.
impl From<Client> for AgentClient {
    fn from(client: Client) -> Self {
        AgentClient { client }
    }
}
