//! What can go wrong: building a client ([`BuildError`]) and calling an operation ([`Error`]).
//! No variant quotes a secret: tokens never reach an error, and the violations of an answer
//! are shown by pointer and keyword only (their messages may quote the answer, which can carry
//! a token).

use fleetwire_types::{ApiError, Violation};
use reqwest::StatusCode;

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{url:?} is not a controller address: {reason}")]
    BaseUrl { url: String, reason: String },
    #[error("https://{host} needs the fleet CA to trust the controller with (ClientBuilder::fleet_ca_pem), or a caller-built client (ClientBuilder::http_client)")]
    NoTrust { host: String },
    #[error("{url} is plain HTTP: choose it explicitly with ClientBuilder::plain_http (a controller started with --plain-http)")]
    PlainHttpNotChosen { url: String },
    #[error("plain HTTP was chosen, but {url} is not an http:// address")]
    PlainHttpScheme { url: String },
    #[error("the fleet CA is for HTTPS, but {url} is not an https:// address")]
    FleetCaScheme { url: String },
    #[error("a bearer token must not cross the network in clear: {url} is plain HTTP")]
    SecretInClear { url: String },
    #[error("{0}")]
    Conflict(&'static str),
    #[error("the fleet CA: {0}")]
    FleetCa(String),
    #[error("the client certificate or its key: {0}")]
    ClientIdentity(String),
    #[error("building the HTTP client: {0}")]
    Http(#[source] reqwest::Error),
}

/// Why a call did not give the answer the API document promises.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request could not be built (e.g. a body that does not serialize).
    #[error("{operation}: the request could not be built: {message}")]
    InvalidRequest {
        operation: &'static str,
        message: String,
    },
    /// No answer: the connection, TLS (an untrusted certificate, one without the controller's
    /// mark), a timeout, or the body could not be read. The text includes the causes.
    #[error("{operation}: {message}")]
    Transport {
        operation: &'static str,
        message: String,
        #[source]
        source: reqwest::Error,
    },
    /// The controller refused the call with an `ApiError`, at a status the document declares
    /// for one (a range such as `5XX`, or `default`, included).
    #[error("{operation}: {status}: {} ({})", error.message.as_str(), error.code)]
    Api {
        operation: &'static str,
        status: StatusCode,
        error: Box<ApiError>,
    },
    /// A status the document does not declare for the operation, with the start of the body
    /// (only for non-success statuses, which carry no secret).
    #[error("{operation}: unexpected status {status}{}", if body.is_empty() { String::new() } else { format!(": {body}") })]
    UnexpectedStatus {
        operation: &'static str,
        status: StatusCode,
        body: String,
    },
    /// The answer's body is larger than the client reads (`ClientBuilder::max_answer_bytes`).
    #[error("{operation}: the {status} answer is larger than {limit} bytes")]
    AnswerTooLarge {
        operation: &'static str,
        status: StatusCode,
        limit: usize,
    },
    /// The answer's status is declared, but its body is not the document declared for it.
    #[error(
        "{operation}: the {status} answer is not a {expected}: {}",
        where_(violations)
    )]
    InvalidResponse {
        operation: &'static str,
        status: StatusCode,
        expected: &'static str,
        violations: Vec<Violation>,
    },
}

/// `pointer (keyword)` for each violation: never the message, which may quote the body.
fn where_(violations: &[Violation]) -> String {
    let spots: Vec<String> = violations
        .iter()
        .map(|v| format!("{} ({})", v.shown_path(), v.keyword))
        .collect();
    spots.join(", ")
}

impl Error {
    /// The operation (its `operationId`) the call was.
    pub fn operation(&self) -> &'static str {
        match self {
            Error::InvalidRequest { operation, .. }
            | Error::Transport { operation, .. }
            | Error::Api { operation, .. }
            | Error::UnexpectedStatus { operation, .. }
            | Error::AnswerTooLarge { operation, .. }
            | Error::InvalidResponse { operation, .. } => operation,
        }
    }

    /// The status the controller answered with, when it answered.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Error::Api { status, .. }
            | Error::UnexpectedStatus { status, .. }
            | Error::AnswerTooLarge { status, .. }
            | Error::InvalidResponse { status, .. } => Some(*status),
            Error::InvalidRequest { .. } | Error::Transport { .. } => None,
        }
    }

    /// The controller's `ApiError`, when it refused the call with one.
    pub fn api_error(&self) -> Option<&ApiError> {
        match self {
            Error::Api { error, .. } => Some(error),
            _ => None,
        }
    }
}
