//! The client: where the controller is, how it is reached (the trust options of
//! docs/security.md), the credentials it presents, and the one place a request is sent. The
//! operations themselves (`Client::get_node` and the others) are generated from the API
//! document (`src/generated/operations.rs`).

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, Response, Url};
use serde::Serialize;

use fleetwire_types::FieldValidation;

use crate::error::{BuildError, Error};
use crate::response::{with_causes, AnswerLimit};
use crate::secret::BearerToken;
use crate::trust::{fleet_tls_config, no_trust_config};

/// How long one call may take unless [`ClientBuilder::timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The bearer credentials the API document's security schemes name. Which operation takes
/// which is generated from each operation's `security`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bearer {
    /// An operator token (`operatorToken`): the operator routes, with its scope.
    Operator,
    /// A single-use bootstrap token (`bootstrapToken`): a node's first registration.
    Bootstrap,
}

/// One operation of the API document, as the generated code describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// The `operationId`, also the client's method name.
    pub id: &'static str,
    pub method: Method,
    /// The path template, e.g. `/v1/nodes/{node_id}`.
    pub path: &'static str,
    /// Who may call it (`x-fleetwire-access`): `node`, `read`, `admin`, `metrics` or `open`.
    pub access: &'static str,
    /// The bearer credentials it takes, in the document's order; the client sends the first it
    /// holds (none: the route takes none, or only the node's client certificate).
    pub bearer: &'static [Bearer],
    /// Whether it takes the `fieldValidation` query parameter (every operation with a body
    /// does): the client sends its [`ClientBuilder::field_validation`] there.
    pub field_validation: bool,
}

/// A typed client for the controller's API: one async method per operation of the API
/// document, named by its `operationId`. Cheap to clone (the connection pool is shared).
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use fleetwire_client::Client;
/// let ca_pem = std::fs::read_to_string("/var/lib/fleetwire/ca/ca.pem")?;
/// let client = Client::builder("https://controller.example:9203")
///     .fleet_ca_pem(ca_pem)
///     .operator_token(std::env::var("FLEETWIRE_OPERATOR_TOKEN")?)
///     .build()?;
/// for node in client.list_nodes(None).await?.into_inner() {
///     println!("{} {:?}", node.node_id.as_str(), node.status);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    base: Url,
    http: reqwest::Client,
    operator_token: Option<BearerToken>,
    bootstrap_token: Option<BearerToken>,
    field_validation: Option<FieldValidation>,
    max_answer_bytes: Option<usize>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("operator_token", &self.operator_token)
            .field("bootstrap_token", &self.bootstrap_token)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A builder for the controller at `base_url` (`https://host:9203`, or `http://…` for a
    /// controller started with `--plain-http`).
    pub fn builder(base_url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base_url: base_url.into(),
            transport: Transport::Unchosen,
            identity: None,
            operator_token: None,
            bootstrap_token: None,
            field_validation: None,
            max_answer_bytes: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The client for `base_url` on a `reqwest::Client` the caller built with its own TLS
    /// settings (progenitor's `new_with_client`): the same as
    /// `Client::builder(base_url).http_client(http).build()`.
    pub fn new_with_client(base_url: &str, http: reqwest::Client) -> Result<Client, BuildError> {
        Client::builder(base_url).http_client(http).build()
    }

    /// The controller's address.
    pub fn base_url(&self) -> &Url {
        &self.base
    }

    /// The HTTP client underneath, for requests the API document does not describe.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The same client, sending `token` where an operation takes a bootstrap token (a node's
    /// first registration).
    pub fn with_bootstrap_token(
        &self,
        token: impl Into<BearerToken>,
    ) -> Result<Client, BuildError> {
        refuse_secret_in_clear(&self.base)?;
        Ok(Client {
            bootstrap_token: Some(token.into()),
            ..self.clone()
        })
    }

    /// The same client, sending `token` where an operation takes an operator token.
    pub fn with_operator_token(&self, token: impl Into<BearerToken>) -> Result<Client, BuildError> {
        refuse_secret_in_clear(&self.base)?;
        Ok(Client {
            operator_token: Some(token.into()),
            ..self.clone()
        })
    }

    /// The same client, asking the server to treat body fields the schema does not define as
    /// `mode` says (`fieldValidation`): `Strict` has them refused by name.
    pub fn with_field_validation(&self, mode: FieldValidation) -> Client {
        Client {
            field_validation: Some(mode),
            ..self.clone()
        }
    }

    fn token_for(&self, bearer: Bearer) -> Option<&BearerToken> {
        match bearer {
            Bearer::Operator => self.operator_token.as_ref(),
            Bearer::Bootstrap => self.bootstrap_token.as_ref(),
        }
    }

    /// The URL of `operation` with its path `segments` (each percent-encoded as one segment)
    /// and the `query` pairs that have a value.
    pub(crate) fn url(&self, segments: &[&str], query: &[(&str, Option<String>)]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("the base URL was checked to be http(s)")
            .pop_if_empty()
            .extend(segments);
        if query.iter().any(|(_, value)| value.is_some()) {
            let mut pairs = url.query_pairs_mut();
            for (name, value) in query {
                if let Some(value) = value {
                    pairs.append_pair(name, value);
                }
            }
        }
        url
    }

    /// Sends one request of `operation`: its credential, its JSON body if any.
    pub(crate) async fn send(
        &self,
        operation: &Operation,
        segments: &[&str],
        query: &[(&str, Option<String>)],
        body: Option<Vec<u8>>,
    ) -> Result<Response, Error> {
        let mode = self
            .field_validation
            .filter(|_| operation.field_validation)
            .map(|mode| query_value(&mode));
        let mut query = query.to_vec();
        query.push(("fieldValidation", mode));
        let url = self.url(segments, &query);
        let mut request = self.http.request(operation.method.clone(), url);
        if let Some(token) = operation.bearer.iter().find_map(|b| self.token_for(*b)) {
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
                    Error::InvalidRequest {
                        operation: operation.id,
                        message: "the bearer token is not a valid header value".to_string(),
                    }
                })?;
            value.set_sensitive(true);
            request = request.header(AUTHORIZATION, value);
        }
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body);
        }
        let mut response = request.send().await.map_err(|source| Error::Transport {
            operation: operation.id,
            message: with_causes(&source),
            source,
        })?;
        if let Some(limit) = self.max_answer_bytes {
            response.extensions_mut().insert(AnswerLimit(limit));
        }
        Ok(response)
    }
}

/// A request body as JSON.
pub(crate) fn json_body<T: Serialize>(
    operation: &Operation,
    body: &T,
) -> Result<Option<Vec<u8>>, Error> {
    serde_json::to_vec(body)
        .map(Some)
        .map_err(|e| Error::InvalidRequest {
            operation: operation.id,
            message: e.to_string(),
        })
}

/// A query parameter's value: a string-valued type as its string, anything else as JSON text.
pub(crate) fn query_value<T: Serialize + ?Sized>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(text)) => text,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

fn refuse_secret_in_clear(base: &Url) -> Result<(), BuildError> {
    if base.scheme() == "https" {
        Ok(())
    } else {
        Err(BuildError::SecretInClear {
            url: base.to_string(),
        })
    }
}

enum Transport {
    Unchosen,
    FleetCa(String),
    PlainHttp,
    Caller(reqwest::Client),
}

/// Builds a [`Client`]: secure by default (docs/security.md). An `https://` controller needs
/// the fleet CA ([`ClientBuilder::fleet_ca_pem`]: the only root trusted, and the server must
/// carry the controller's mark) or a caller-built client; plain HTTP must be chosen
/// ([`ClientBuilder::plain_http`]) and then takes no bearer token.
pub struct ClientBuilder {
    base_url: String,
    transport: Transport,
    identity: Option<(String, String)>,
    operator_token: Option<BearerToken>,
    bootstrap_token: Option<BearerToken>,
    field_validation: Option<FieldValidation>,
    max_answer_bytes: Option<usize>,
    timeout: Duration,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("base_url", &self.base_url)
            .field(
                "identity",
                &self.identity.as_ref().map(|_| "<certificate and key>"),
            )
            .field("operator_token", &self.operator_token)
            .field("bootstrap_token", &self.bootstrap_token)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// HTTPS trusting only this CA (PEM: the controller's `<data-dir>/ca/ca.pem`), and only a
    /// server certificate with the controller's mark.
    pub fn fleet_ca_pem(mut self, ca_pem: impl Into<String>) -> Self {
        self.transport = Transport::FleetCa(ca_pem.into());
        self
    }

    /// Presents this certificate chain and key (PEM) as TLS client identity: a node's
    /// certificate, for the node routes (registration over mTLS, heartbeats).
    pub fn client_identity_pem(
        mut self,
        cert_chain_pem: impl Into<String>,
        key_pem: impl Into<String>,
    ) -> Self {
        self.identity = Some((cert_chain_pem.into(), key_pem.into()));
        self
    }

    /// Plain HTTP, for a controller started with `--plain-http` (PPN's wire, no
    /// authentication). No bearer token is sent in this mode.
    pub fn plain_http(mut self) -> Self {
        self.transport = Transport::PlainHttp;
        self
    }

    /// Sends every request through `http`, a client the caller built with its own TLS
    /// settings (the agent's, which also checks the controller's mark). The timeout and the
    /// client identity are then the caller's.
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.transport = Transport::Caller(http);
        self
    }

    /// The operator token for the operator routes (`Authorization: Bearer`).
    pub fn operator_token(mut self, token: impl Into<BearerToken>) -> Self {
        self.operator_token = Some(token.into());
        self
    }

    /// The bootstrap token for a node's first registration.
    pub fn bootstrap_token(mut self, token: impl Into<BearerToken>) -> Self {
        self.bootstrap_token = Some(token.into());
        self
    }

    /// What the server is to do with body fields the schema does not define, sent as
    /// `fieldValidation` with every operation that has a body: `Strict` has them refused
    /// (400, each by its JSON pointer); unset, the server's default (`Warn`) applies.
    pub fn field_validation(mut self, mode: FieldValidation) -> Self {
        self.field_validation = Some(mode);
        self
    }

    /// Refuses an answer whose body is larger than `bytes` ([`Error::AnswerTooLarge`]) instead
    /// of reading it: for a caller that talks to peers it trusts less than the controller (the
    /// controller reading a node's agent). Unset, a body is read whole.
    pub fn max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer_bytes = Some(bytes);
        self
    }

    /// How long one call may take (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn build(self) -> Result<Client, BuildError> {
        let base = base_url(&self.base_url)?;
        let https = base.scheme() == "https";
        let has_token = self.operator_token.is_some() || self.bootstrap_token.is_some();
        if has_token {
            refuse_secret_in_clear(&base)?;
        }
        let tls = match (&self.transport, https) {
            (Transport::Unchosen, true) => {
                return Err(BuildError::NoTrust {
                    host: base.host_str().unwrap_or_default().to_string(),
                })
            }
            (Transport::Unchosen, false) => {
                return Err(BuildError::PlainHttpNotChosen {
                    url: base.to_string(),
                })
            }
            (Transport::PlainHttp, true) => {
                return Err(BuildError::PlainHttpScheme {
                    url: base.to_string(),
                })
            }
            (Transport::FleetCa(_), false) => {
                return Err(BuildError::FleetCaScheme {
                    url: base.to_string(),
                })
            }
            (Transport::PlainHttp, false) if self.identity.is_some() => {
                return Err(BuildError::Conflict(
                    "a client certificate is for HTTPS; plain HTTP presents none",
                ))
            }
            (Transport::Caller(_), _) if self.identity.is_some() => {
                return Err(BuildError::Conflict(
                    "with a caller-built client, the client certificate is set on that client",
                ))
            }
            (Transport::Caller(http), _) => {
                return Ok(Client {
                    base,
                    http: http.clone(),
                    operator_token: self.operator_token,
                    bootstrap_token: self.bootstrap_token,
                    field_validation: self.field_validation,
                    max_answer_bytes: self.max_answer_bytes,
                })
            }
            (Transport::FleetCa(ca_pem), true) => fleet_tls_config(
                ca_pem,
                self.identity
                    .as_ref()
                    .map(|(cert, key)| (cert.as_str(), key.as_str())),
            )?,
            (Transport::PlainHttp, false) => no_trust_config()?,
        };
        let http = reqwest::Client::builder()
            .timeout(self.timeout)
            .https_only(https)
            .tls_backend_preconfigured(tls)
            .build()
            .map_err(BuildError::Http)?;
        Ok(Client {
            base,
            http,
            operator_token: self.operator_token,
            bootstrap_token: self.bootstrap_token,
            field_validation: self.field_validation,
            max_answer_bytes: self.max_answer_bytes,
        })
    }
}

fn base_url(text: &str) -> Result<Url, BuildError> {
    let fail = |reason: &str| BuildError::BaseUrl {
        url: text.to_string(),
        reason: reason.to_string(),
    };
    let url = Url::parse(text).map_err(|e| fail(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(fail("only http:// and https:// addresses are controllers"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(fail("a controller address has no query or fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(fail("credentials do not belong in the address"));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_chosen_explicitly_and_carries_no_token() {
        let e = Client::builder("http://127.0.0.1:9203")
            .build()
            .unwrap_err();
        assert!(matches!(e, BuildError::PlainHttpNotChosen { .. }), "{e}");
        let e = Client::builder("http://127.0.0.1:9203")
            .plain_http()
            .operator_token("secret-operator-token")
            .build()
            .unwrap_err();
        assert!(matches!(e, BuildError::SecretInClear { .. }), "{e}");
        assert!(!format!("{e} {e:?}").contains("secret-operator-token"));
        let plain = Client::builder("http://127.0.0.1:9203")
            .plain_http()
            .build()
            .unwrap();
        assert!(plain.with_bootstrap_token("t").is_err());
    }

    #[test]
    fn https_needs_the_fleet_ca() {
        let e = Client::builder("https://controller:9203")
            .build()
            .unwrap_err();
        assert!(matches!(e, BuildError::NoTrust { .. }), "{e}");
        let e = Client::builder("https://controller:9203")
            .plain_http()
            .build()
            .unwrap_err();
        assert!(matches!(e, BuildError::PlainHttpScheme { .. }), "{e}");
        let e = Client::builder("http://controller:9203")
            .fleet_ca_pem("x")
            .build()
            .unwrap_err();
        assert!(matches!(e, BuildError::FleetCaScheme { .. }), "{e}");
    }

    #[test]
    fn tokens_never_show_in_debug_output() {
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(no_trust_config().unwrap())
            .build()
            .unwrap();
        let client = Client::builder("https://controller:9203/")
            .http_client(http)
            .operator_token("op-secret")
            .bootstrap_token("boot-secret")
            .build()
            .unwrap();
        let shown = format!("{client:?}");
        assert!(
            !shown.contains("op-secret") && !shown.contains("boot-secret"),
            "{shown}"
        );
    }

    #[test]
    fn path_segments_are_percent_encoded_and_empty_queries_left_out() {
        let client = Client::builder("http://127.0.0.1:9203/prefix/")
            .plain_http()
            .build()
            .unwrap();
        let url = client.url(&["v1", "nodes", "a/b c?#"], &[("status", None)]);
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:9203/prefix/v1/nodes/a%2Fb%20c%3F%23"
        );
        let url = client.url(&["v1", "vms"], &[("tenant_id", Some("t 1&x".into()))]);
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:9203/prefix/v1/vms?tenant_id=t+1%26x"
        );
    }
}
