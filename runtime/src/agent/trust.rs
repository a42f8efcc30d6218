//! What the agent trusts and presents towards the controller (docs/security.md): in secure
//! mode only the fleet CA (the pinned `ca.crt`, or `VM_FLEET_CA_FILE` before the first
//! enrollment), with the node certificate as client identity once there is one, and the
//! bootstrap token for an enrollment without a certificate. Plain mode trusts nothing and
//! presents nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::config::{AgentConfig, BootstrapSecret, BootstrapTokenSource, BOOTSTRAP_TOKEN_SHAPE};
use super::identity::{NodeIdentity, CA_FILE};
use crate::fleet_tls_client::{client_config, ServerRole};
use crate::tls_server::TlsSetupError;

/// How long one call to the controller may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the agent cannot call the controller the way its mode requires.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("reading the fleet CA {}: {error}", path.display())]
    CaUnreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("the fleet CA {} or the node certificate: {error}", path.display())]
    Tls { path: PathBuf, error: TlsSetupError },
    #[error("no fleet CA to trust the controller with: neither {} nor VM_FLEET_CA_FILE", pinned.display())]
    NoCa { pinned: PathBuf },
    #[error("building the HTTP client: {0}")]
    Client(reqwest::Error),
    #[error("the controller client: {0}")]
    Api(fleetwire_client::BuildError),
    #[error("VM_BOOTSTRAP_TOKEN_FILE {}: {error}", path.display())]
    TokenFileUnreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("VM_BOOTSTRAP_TOKEN_FILE {} does not hold a bootstrap token (its content is not shown): {BOOTSTRAP_TOKEN_SHAPE}", path.display())]
    TokenFileMalformed { path: PathBuf },
}

/// The CA trusted for the controller: the one the first enrollment pinned in the state
/// directory, else `VM_FLEET_CA_FILE`.
pub fn trusted_ca(config: &AgentConfig) -> Result<(PathBuf, String), TrustError> {
    let pinned = config.state_dir.join(CA_FILE);
    let read = |path: &Path| match std::fs::read_to_string(path) {
        Ok(pem) => Ok(Some(pem)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(TrustError::CaUnreadable {
            path: path.to_path_buf(),
            error,
        }),
    };
    if let Some(pem) = read(&pinned)? {
        return Ok((pinned, pem));
    }
    if let Some(file) = &config.fleet_ca_file {
        if let Some(pem) = read(file)? {
            return Ok((file.clone(), pem));
        }
    }
    Err(TrustError::NoCa { pinned })
}

/// The typed client for the controller (`fleetwire-client`), on [`controller_http`]'s
/// HTTP client.
pub fn controller_client(
    config: &AgentConfig,
    identity: Option<&NodeIdentity>,
) -> Result<fleetwire_client::Client, TrustError> {
    let http = controller_http(config, identity)?;
    fleetwire_client::Client::builder(config.fleet_endpoint.as_str())
        .http_client(http)
        .build()
        .map_err(TrustError::Api)
}

/// The HTTP client for the controller. Secure mode: HTTPS trusting the fleet CA only, presenting
/// `identity`'s certificate when it has one (pass `None` to enroll with a bootstrap token).
/// Plain mode: plain HTTP.
fn controller_http(
    config: &AgentConfig,
    identity: Option<&NodeIdentity>,
) -> Result<reqwest::Client, TrustError> {
    let builder = crate::tls::client_builder().timeout(CALL_TIMEOUT);
    if config.plain_http {
        return builder.build().map_err(TrustError::Client);
    }
    let (path, pem) = trusted_ca(config)?;
    // Only the fleet CA, and only a certificate with the controller's mark: neither the
    // system's roots nor another node's certificate may pass for the controller.
    let client_pem = identity.and_then(NodeIdentity::client_pem);
    let tls = client_config(
        &pem,
        ServerRole::Controller,
        client_pem
            .as_ref()
            .map(|(cert, key)| (cert.as_str(), key.as_str())),
    )
    .map_err(|error| TrustError::Tls { path, error })?;
    builder
        .tls_backend_preconfigured(tls)
        .build()
        .map_err(TrustError::Client)
}

/// The bootstrap token for this attempt: `VM_BOOTSTRAP_TOKEN`, or the content of
/// `VM_BOOTSTRAP_TOKEN_FILE` read now (an operator may have put a new token there since).
/// `Ok(None)` when neither is set.
pub fn bootstrap_token(config: &AgentConfig) -> Result<Option<BootstrapSecret>, TrustError> {
    match &config.bootstrap_token {
        None => Ok(None),
        Some(BootstrapTokenSource::Value(secret)) => Ok(Some(secret.clone())),
        Some(BootstrapTokenSource::File(path)) => {
            let text =
                std::fs::read_to_string(path).map_err(|error| TrustError::TokenFileUnreadable {
                    path: path.clone(),
                    error,
                })?;
            BootstrapSecret::parse(&text)
                .map(Some)
                .ok_or_else(|| TrustError::TokenFileMalformed { path: path.clone() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::args::{AgentArgs, SecretText};

    const TOKEN: &str = "abc123.0123456789abcdef";

    fn config(dir: &Path, change: impl FnOnce(&mut AgentArgs)) -> AgentConfig {
        let mut args = AgentArgs {
            fleet_endpoint: Some("http://127.0.0.1:9203".into()),
            node_id: Some("n1".into()),
            wg_ip: Some("10.0.0.1".into()),
            plain_http: Some("true".into()),
            state_dir: Some(dir.display().to_string()),
            ..AgentArgs::default()
        };
        change(&mut args);
        AgentConfig::from_args(&args).unwrap()
    }

    #[test]
    fn the_token_file_is_read_at_each_attempt_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        let c = config(dir.path(), |a| {
            a.bootstrap_token_file = Some(file.display().to_string())
        });
        assert!(matches!(
            bootstrap_token(&c),
            Err(TrustError::TokenFileUnreadable { .. })
        ));
        std::fs::write(&file, "not-a-token-but-secret\n").unwrap();
        let e = bootstrap_token(&c).unwrap_err();
        assert!(!e.to_string().contains("not-a-token-but-secret"), "{e}");
        std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
        let token = bootstrap_token(&c).unwrap().unwrap();
        assert_eq!(token.expose(), TOKEN);
        assert_eq!(token.id(), "abc123");
        // A new token in the file is taken up by the next attempt.
        std::fs::write(&file, "zzz999.aaaaaaaaaaaaaaaa").unwrap();
        assert_eq!(
            bootstrap_token(&c).unwrap().unwrap().expose(),
            "zzz999.aaaaaaaaaaaaaaaa"
        );
        let c = config(dir.path(), |a| {
            a.bootstrap_token = Some(SecretText(TOKEN.into()))
        });
        assert_eq!(bootstrap_token(&c).unwrap().unwrap().expose(), TOKEN);
    }

    #[test]
    fn the_pinned_ca_wins_over_the_configured_one() {
        let dir = tempfile::tempdir().unwrap();
        let configured = dir.path().join("fleet-ca.pem");
        std::fs::write(&configured, "CONFIGURED").unwrap();
        let c = config(dir.path(), |a| {
            a.fleet_ca_file = Some(configured.display().to_string())
        });
        assert_eq!(trusted_ca(&c).unwrap().1, "CONFIGURED");
        std::fs::write(dir.path().join(CA_FILE), "PINNED").unwrap();
        assert_eq!(trusted_ca(&c).unwrap().1, "PINNED");
        let c = config(dir.path(), |_| {});
        std::fs::remove_file(dir.path().join(CA_FILE)).unwrap();
        assert!(matches!(trusted_ca(&c), Err(TrustError::NoCa { .. })));
    }
}
