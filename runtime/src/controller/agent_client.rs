//! Calls from the controller to its nodes: the node agent's local API on
//! `wg_ip:spawn_port`, only through the client generated from
//! `schemas/agent-api.openapi.json` (`fleetwire_client::agent`, issue 31; docs/architecture.md,
//! "How the controller reaches agents"), and the node runtime's `GET /health`, which no API
//! document of fleetwire describes. What stays here is the controller's policy: which address
//! it calls, the mTLS client that believes only that node's certificate (issue 28), timeouts,
//! the size of answer it reads, and how failures read as [`AgentCallError`]. Every answer is
//! read through the generated validated reader.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::Context;
use fleetwire_types::{
    CreateVmRequest, LogOffset, RuntimeHealth, VmId, VmLogChunk, VmRecord, WireDocument,
};

use parking_lot::RwLock;

use crate::controller::trust::certs::{ControllerIdentity, FleetCa};
use crate::fleet_tls_client::{client_config, ServerRole};

/// Why a call to a node's agent or runtime failed; the message names the call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentCallError {
    /// No answer: the connection failed or timed out.
    #[error("{method} {url} failed: {cause}")]
    Unanswered {
        method: &'static str,
        url: String,
        cause: String,
    },
    /// The answer's body could not be read.
    #[error("reading the answer of {method} {url} failed: {cause}")]
    Unreadable {
        method: &'static str,
        url: String,
        cause: String,
    },
    /// An answer other than success, quoted.
    #[error("{method} {url} answered {status}: {quoted}")]
    Refused {
        method: &'static str,
        url: String,
        status: reqwest::StatusCode,
        quoted: String,
    },
    /// A successful answer that is not the document the call answers.
    #[error("{method} {url} answered an invalid {document}: {rejection}")]
    Invalid {
        method: &'static str,
        url: String,
        document: &'static str,
        rejection: String,
    },
    /// An `https://` address, and no node CA to present a client certificate from.
    #[error(
        "{url}: the peer takes mTLS only and this controller has no node CA (--ca-dir) to \
         authenticate with"
    )]
    NoClientCertificate { url: String },
    /// A runtime address whose host is not one the node registered (its certificate's
    /// names): not probed.
    #[error(
        "{url}: the controller probes a node's runtime only at the node's registered addresses \
         (its wg_ip, its addresses or its node id), not at {host:?}"
    )]
    UncertifiedAddress { url: String, host: String },
    /// The call was not sent: its arguments are not what the agent's API takes.
    #[error("{method} {url} was not sent: {cause}")]
    Unsent {
        method: &'static str,
        url: String,
        cause: String,
    },
    /// The TLS client for the call could not be set up.
    #[error("{url}: setting up TLS for the call failed: {cause}")]
    TlsSetup { url: String, cause: String },
}

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

/// When the controller's client certificate is valid.
#[derive(Debug, Clone, Copy)]
pub struct ControllerIdentityDates {
    pub not_before: std::time::SystemTime,
    pub not_after: std::time::SystemTime,
}

/// What the controller presents and trusts when it calls a node over mTLS.
struct Mtls {
    /// The node CA's certificate.
    ca_pem: String,
    /// It and the controller CA's, taken until the date (`FleetCa::legacy_trust`): an agent
    /// still serving a certificate of a release of one CA.
    legacy: Option<(String, std::time::SystemTime)>,
    cert_pem: String,
    key_pem: String,
    dates: ControllerIdentityDates,
}

pub struct AgentClient {
    http: reqwest::Client,
    /// The controller's own client certificate and the node CA: for the agents in mTLS mode
    /// and for `https://` runtime addresses (smolvm's fleet mode). `None` without a node CA.
    /// Replaced when the certificate is renewed (`own_certs`).
    mtls: RwLock<Option<Mtls>>,
    /// mTLS mode: the agents serve HTTPS with their node certificates.
    agents_over_tls: bool,
    timeout: Duration,
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

fn builder(timeout: Duration) -> reqwest::ClientBuilder {
    crate::tls::client_builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .no_proxy()
}

impl AgentClient {
    /// `ca`: the node CA, when the controller has one; the controller then issues itself a
    /// client certificate to call the agents over mTLS (`agents_over_tls`, mTLS mode) and to
    /// probe runtimes in smolvm's fleet mode (docs/security.md).
    pub fn new(
        timeout: Duration,
        ca: Option<&FleetCa>,
        agents_over_tls: bool,
    ) -> anyhow::Result<AgentClient> {
        let client = AgentClient {
            http: builder(timeout).build()?,
            mtls: RwLock::new(None),
            agents_over_tls,
            timeout,
        };
        if let Some(ca) = ca {
            client.renew_identity(ca)?;
        }
        Ok(client)
    }

    /// Issues the controller a new client certificate and calls with it from now on; calls
    /// already under way finish with the old one. Returns when the new one expires.
    pub fn renew_identity(&self, ca: &FleetCa) -> anyhow::Result<ControllerIdentity> {
        let me = ca.issue_controller_client()?;
        // Checked once here, so that a call fails only for its own node's reasons.
        let node_trust = ca.node_ca_pem().to_string();
        let legacy = ca
            .legacy_trust()
            .map(|(fleet, until)| (format!("{node_trust}{fleet}"), until));
        client_config(
            legacy.as_ref().map_or(&node_trust, |(both, _)| both),
            ServerRole::Node,
            Some((&me.cert_pem, &me.key_pem)),
        )
        .context("the controller's client certificate")?;
        *self.mtls.write() = Some(Mtls {
            ca_pem: node_trust,
            legacy,
            cert_pem: me.cert_pem.clone(),
            key_pem: me.key_pem.clone(),
            dates: ControllerIdentityDates {
                not_before: me.not_before,
                not_after: me.not_after,
            },
        });
        Ok(me)
    }

    /// A client that presents the controller's certificate and takes only `node_id`'s
    /// certificate from the fleet CA: whatever answers at a node's address, only that node is
    /// believed (issue 28). One per call: calls to nodes are rare next to heartbeats.
    fn mtls_for(&self, node_id: &str, url: &str) -> Result<reqwest::Client, AgentCallError> {
        let guard = self.mtls.read();
        let mtls = guard
            .as_ref()
            .ok_or_else(|| AgentCallError::NoClientCertificate {
                url: url.to_string(),
            })?;
        let setup = |cause: String| AgentCallError::TlsSetup {
            url: url.to_string(),
            cause,
        };
        // Checked on each call, so the window closes on time whatever the renewals.
        let trust = match &mtls.legacy {
            Some((both, until)) if std::time::SystemTime::now() < *until => both,
            _ => &mtls.ca_pem,
        };
        let tls = client_config(
            trust,
            ServerRole::TheNode(node_id),
            Some((&mtls.cert_pem, &mtls.key_pem)),
        )
        .map_err(|e| setup(e.to_string()))?;
        builder(self.timeout)
            .tls_backend_preconfigured(tls)
            .build()
            .map_err(|e| setup(e.to_string()))
    }

    /// The validity of the client certificate in use, if any.
    pub fn identity_dates(&self) -> Option<ControllerIdentityDates> {
        self.mtls.read().as_ref().map(|mtls| mtls.dates)
    }

    /// The client and base URL for `node_id`'s agent: HTTPS with the controller's certificate
    /// in mTLS mode, plain HTTP otherwise.
    fn agent(
        &self,
        node_id: &str,
        agent: AgentEndpoint,
    ) -> Result<(reqwest::Client, String), AgentCallError> {
        if !self.agents_over_tls {
            return Ok((self.http.clone(), format!("http://{agent}")));
        }
        let url = format!("https://{agent}");
        let client = self.mtls_for(node_id, &url)?;
        Ok((client, url))
    }

    /// The generated client of `node_id`'s agent (`fleetwire_client::agent`), on the
    /// controller's HTTP client for that node, and the agent's base URL for messages.
    fn agent_api(
        &self,
        node_id: &str,
        agent: AgentEndpoint,
    ) -> Result<(fleetwire_client::agent::AgentClient, String), AgentCallError> {
        let (http, base) = self.agent(node_id, agent)?;
        let client = fleetwire_client::Client::builder(base.as_str())
            .http_client(http)
            .max_answer_bytes(MAX_ANSWER_BYTES)
            .build()
            .map_err(|e| AgentCallError::TlsSetup {
                url: base.clone(),
                cause: e.to_string(),
            })?;
        Ok((client.into(), base))
    }

    /// `spawn_vm` (`POST /v1/spawn`) on `node_id`'s agent; the `VmRecord` it answers.
    pub async fn spawn(
        &self,
        node_id: &str,
        agent: AgentEndpoint,
        request: &CreateVmRequest,
    ) -> Result<VmRecord, AgentCallError> {
        let (client, base) = self.agent_api(node_id, agent)?;
        let call = Call::new("POST", format!("{base}/v1/spawn"));
        call.answer(client.spawn_vm(request).await)
    }

    /// `get_vm_logs` (`GET /v1/vms/{vm_id}/logs?offset=N`) on `node_id`'s agent: a piece of
    /// the VM's output.
    pub async fn logs(
        &self,
        node_id: &str,
        agent: AgentEndpoint,
        vm_id: &str,
        offset: u64,
    ) -> Result<VmLogChunk, AgentCallError> {
        let (client, base) = self.agent_api(node_id, agent)?;
        let call = Call::new("GET", format!("{base}{}/logs", vm_path(vm_id)));
        let id: VmId = vm_id.parse().map_err(|e| call.unsent(format!("{e}")))?;
        call.answer(client.get_vm_logs(&id, Some(&LogOffset(offset))).await)
    }

    /// `delete_vm` (`DELETE /v1/vms/{vm_id}`) on `node_id`'s agent. An agent that no longer
    /// knows the VM (404) has nothing left to delete, which is success; so is any other 2xx
    /// than the document's 204 (a PPN agent's 200, docs/interop.md), whatever its body.
    pub async fn delete(
        &self,
        node_id: &str,
        agent: AgentEndpoint,
        vm_id: &str,
    ) -> Result<(), AgentCallError> {
        let (client, base) = self.agent_api(node_id, agent)?;
        let call = Call::new("DELETE", format!("{base}{}", vm_path(vm_id)));
        match client.delete_vm(vm_id).await {
            Ok(_) => Ok(()),
            Err(e)
                if e.status().is_some_and(|status| {
                    status.is_success() || status == reqwest::StatusCode::NOT_FOUND
                }) =>
            {
                Ok(())
            }
            Err(e) => Err(call.failure(e)),
        }
    }

    /// `GET {address}/health` on `node_id`'s runtime; over mTLS for an `https://` address
    /// (smolvm's fleet mode serves nothing to a client without a certificate, and serves the
    /// node's certificate). Only when the address's host is one of `registered` (the node's
    /// `wg_ip` and `addresses`, which its certificate names) or the node id: a node cannot
    /// send the controller to another host (issue 28).
    pub async fn runtime_health(
        &self,
        node_id: &str,
        address: &str,
        registered: &[Ipv4Addr],
    ) -> Result<RuntimeHealth, AgentCallError> {
        let url = format!("{}/health", address.trim_end_matches('/'));
        let host = reqwest::Url::parse(&url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_default();
        let allowed = match host.parse::<Ipv4Addr>() {
            Ok(ip) => registered.contains(&ip),
            Err(_) => host.eq_ignore_ascii_case(node_id),
        };
        if !allowed {
            return Err(AgentCallError::UncertifiedAddress { host, url });
        }
        let client = if url
            .get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
        {
            self.mtls_for(node_id, &url)?
        } else {
            self.http.clone()
        };
        read_answer("GET", &url, client.get(&url).send().await).await
    }
}

/// `/v1/vms/{vm_id}` with the id as one segment (VM ids may hold spaces, '/', '%', ...:
/// schemas/node.schema.json's VmId), for messages; the generated client encodes it alike.
fn vm_path(vm_id: &str) -> String {
    format!("/v1/vms/{}", crate::ids::path_segment(vm_id))
}

/// One call to an agent, as its failures name it.
struct Call {
    method: &'static str,
    url: String,
}

impl Call {
    fn new(method: &'static str, url: String) -> Call {
        Call { method, url }
    }

    fn unsent(&self, cause: String) -> AgentCallError {
        AgentCallError::Unsent {
            method: self.method,
            url: self.url.clone(),
            cause,
        }
    }

    /// The generated client's answer: the body, its unknown fields noted (README "Unknown
    /// fields"), or the failure as an [`AgentCallError`].
    fn answer<T: WireDocument>(
        &self,
        answer: Result<fleetwire_client::ResponseValue<T>, fleetwire_client::Error>,
    ) -> Result<T, AgentCallError> {
        let answer = answer.map_err(|e| self.failure(e))?;
        crate::unknown_fields::note_fields(
            T::INFO.name,
            answer.unknown_fields(),
            &format!("{} {}", self.method, self.url),
        );
        Ok(answer.into_inner())
    }

    fn failure(&self, error: fleetwire_client::Error) -> AgentCallError {
        use fleetwire_client::Error as E;
        let (method, url) = (self.method, self.url.clone());
        match error {
            E::Transport { message, .. } => AgentCallError::Unanswered {
                method,
                url,
                cause: message,
            },
            E::AnswerTooLarge { limit, .. } => AgentCallError::Unreadable {
                method,
                url,
                cause: format!("the answer is larger than {limit} bytes"),
            },
            E::Api { status, error, .. } => AgentCallError::Refused {
                method,
                url,
                status,
                quoted: quote(format!("{} ({})", error.message.as_str(), error.code).as_bytes()),
            },
            E::UnexpectedStatus { status, body, .. } => AgentCallError::Refused {
                method,
                url,
                status,
                quoted: quote(body.as_bytes()),
            },
            // A success status with another body than the document's.
            E::InvalidResponse {
                status, expected, ..
            } if status.is_success() => AgentCallError::Invalid {
                method,
                url,
                document: expected,
                rejection: error.to_string(),
            },
            // A refusal whose body is not an `ApiError` (a PPN agent's own text).
            E::InvalidResponse { status, .. } => AgentCallError::Refused {
                method,
                url,
                status,
                quoted: quote(error.to_string().as_bytes()),
            },
            E::InvalidRequest { message, .. } => self.unsent(message),
        }
    }
}

/// At most this much of an answer is read: a `VmRecord` or a runtime's health is a few kB.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The answer's body, refused past [`MAX_ANSWER_BYTES`] (at once when its `Content-Length`
/// says so).
async fn read_limited(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let too_large = || format!("the answer is larger than {MAX_ANSWER_BYTES} bytes");
    if response
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A successful answer read as a `T` through the validated reader; anything else is an error
/// that names the call.
async fn read_answer<T: WireDocument>(
    method: &'static str,
    url: &str,
    sent: reqwest::Result<reqwest::Response>,
) -> Result<T, AgentCallError> {
    let response = sent.map_err(|e| AgentCallError::Unanswered {
        method,
        url: url.to_string(),
        cause: crate::tls::with_causes(&e),
    })?;
    let status = response.status();
    let body = read_limited(response)
        .await
        .map_err(|cause| AgentCallError::Unreadable {
            method,
            url: url.to_string(),
            cause,
        })?;
    if !status.is_success() {
        return Err(AgentCallError::Refused {
            method,
            url: url.to_string(),
            status,
            quoted: quote(&body),
        });
    }
    let accepted =
        fleetwire_types::read::<T>(&body).map_err(|rejection| AgentCallError::Invalid {
            method,
            url: url.to_string(),
            document: T::INFO.name,
            rejection: rejection.to_string(),
        })?;
    crate::unknown_fields::note(&accepted, &format!("{method} {url}"));
    Ok(accepted.value)
}
