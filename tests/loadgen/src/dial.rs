//! Reaching the controller: its address from the URL, and connections to it, plain TCP or TLS
//! (rustls on ring, trusting only the fleet CA given, docs/security.md), as an operator (no
//! client certificate) or as one simulated node (its own certificate).

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use anyhow::{anyhow, bail, Context};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;

use fleetwire::fleet_tls_client::{client_config, ServerRole};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// A connection to the controller.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// An operator token (`--operator-token-file` or `FLEETWIRE_LOADGEN_OPERATOR_TOKEN`). Its
/// `Debug` shows nothing of it: a token is never printed (docs/security.md).
#[derive(Clone)]
pub struct OperatorToken(String);

impl std::fmt::Debug for OperatorToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorToken(..)")
    }
}

impl OperatorToken {
    /// A token as the controller's token file takes it: at least 32 characters of
    /// `[A-Za-z0-9._~-]`. `from` names where it came from; errors never quote it.
    pub fn parse(text: &str, from: &str) -> anyhow::Result<OperatorToken> {
        let token = text.trim();
        if token.contains(',') {
            bail!("{from}: holds more than a token (a comma): give a file with the admin token alone, not the controller's token,name,scope file");
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || "._~-".contains(c);
        if token.chars().count() < 32 || !token.chars().all(allowed) {
            bail!("{from}: not an operator token (at least 32 characters of A-Z a-z 0-9 . _ ~ -)");
        }
        Ok(OperatorToken(token.to_string()))
    }

    /// From `file`, or else from `FLEETWIRE_LOADGEN_OPERATOR_TOKEN`.
    pub fn load(file: Option<&Path>) -> anyhow::Result<OperatorToken> {
        let env = super::args::OPERATOR_TOKEN_ENV;
        match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                OperatorToken::parse(&text, &path.display().to_string())
            }
            None => match std::env::var(env) {
                Ok(text) => OperatorToken::parse(&text, env),
                Err(_) => bail!("an https:// URL needs --operator-token-file or {env} (an admin operator token)"),
            },
        }
    }

    /// The `Authorization` header's value.
    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

/// What TLS needs: whom the controller's certificate must name, and the fleet CA.
struct Tls {
    server_name: ServerName<'static>,
    /// The fleet CA, PEM.
    ca_pem: String,
    /// An operator's (and an enrolling node's) settings: no client certificate.
    anonymous: Arc<ClientConfig>,
}

/// Connects to the controller of `--url`.
pub struct Dialer {
    pub addr: SocketAddr,
    /// `host:port`, for the `Host` header.
    pub host: String,
    tls: Option<Tls>,
}

/// rustls client settings for the load generator: HTTP/1.1, and no session resumption, so
/// every connection (the reconnect storm's above all) costs the full handshake a node that
/// lost its state would (docs/performance.md, "mTLS at 10,000 nodes").
fn finish(mut config: ClientConfig) -> Arc<ClientConfig> {
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

impl Dialer {
    /// For `url`; `ca_file` (the fleet CA) for an `https://` one.
    pub fn new(url: &str, ca_file: Option<&Path>) -> anyhow::Result<Dialer> {
        let uri: hyper::Uri = url
            .parse()
            .with_context(|| format!("{url:?} is not a URL"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => bail!("only http:// and https:// URLs are supported, not {url:?}"),
        };
        let host = uri.host().ok_or_else(|| anyhow!("{url:?} has no host"))?;
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))?
            .next()
            .ok_or_else(|| anyhow!("{host} does not resolve"))?;
        let tls = match (tls, ca_file) {
            (false, _) => None,
            (true, None) => bail!("an https:// URL needs --ca-file"),
            (true, Some(ca_file)) => {
                let ca_pem = std::fs::read_to_string(ca_file)
                    .with_context(|| format!("reading {}", ca_file.display()))?;
                let server_name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                    .with_context(|| format!("{host:?} is not a TLS server name"))?;
                // As an agent does: the fleet CA only, and the controller's mark.
                let anonymous = finish(
                    client_config(&ca_pem, ServerRole::Controller, None)
                        .with_context(|| format!("--ca-file {}", ca_file.display()))?,
                );
                Some(Tls {
                    server_name,
                    ca_pem,
                    anonymous,
                })
            }
        };
        Ok(Dialer {
            addr,
            host: format!("{host}:{port}"),
            tls,
        })
    }

    /// rustls settings that present `cert_pem` (a node certificate) with `key_pem`.
    pub fn node_config(&self, cert_pem: &str, key_pem: &str) -> anyhow::Result<Arc<ClientConfig>> {
        let tls = self
            .tls
            .as_ref()
            .ok_or_else(|| anyhow!("node certificates are for an https:// URL only"))?;
        let config = client_config(
            &tls.ca_pem,
            ServerRole::Controller,
            Some((cert_pem, key_pem)),
        )
        .context("the issued node certificate does not go with its key")?;
        Ok(finish(config))
    }

    async fn tcp(&self) -> anyhow::Result<TcpStream> {
        let stream = TcpStream::connect(self.addr)
            .await
            .with_context(|| format!("connecting to {}", self.addr))?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// A connection without a client certificate (an operator's, an enrolling node's).
    pub async fn anonymous(&self) -> anyhow::Result<Stream> {
        let config = self.tls.as_ref().map(|tls| tls.anonymous.clone());
        self.connect(config).await
    }

    /// A connection that presents `node` (a config from [`Dialer::node_config`]) or, plain,
    /// just a TCP connection.
    pub async fn connect(&self, node: Option<Arc<ClientConfig>>) -> anyhow::Result<Stream> {
        let tcp = self.tcp().await?;
        match (&self.tls, node) {
            (None, _) => Ok(Stream::Plain(tcp)),
            (Some(_), None) => bail!("an https:// connection needs its TLS settings"),
            (Some(tls), Some(config)) => {
                let stream = TlsConnector::from(config)
                    .connect(tls.server_name.clone(), tcp)
                    .await
                    .with_context(|| format!("TLS handshake with {}", self.addr))?;
                Ok(Stream::Tls(Box::new(stream)))
            }
        }
    }
}
