//! Serving HTTP over TLS with the fleet's certificates, for the controller's port and the
//! agent's local API (docs/security.md):
//!
//! - [`ReloadableCert`]: the server's certificate, replaced in place when it is renewed, so
//!   a rotation never restarts a listener or drops a connection;
//! - [`server_config`]: rustls, trusting client certificates from the fleet CA only, either
//!   optional (the controller: operators and enrolling nodes come without one) or required
//!   (the agent: only the controller may call it);
//! - [`TlsListener`]: an `axum::serve` listener that runs every handshake on a task of its
//!   own, so a storm of reconnecting nodes is absorbed in parallel and a slow or silent client
//!   never holds up the next one, and that hands each connection's verified identity on;
//! - [`ServerTls`]: each connection, on rustls's unbuffered API, its records decrypted in one
//!   buffer per thread (`connection`);
//! - [`IdentifyPeers`]: puts that identity on every request of the connection as a [`Peer`]
//!   extension, read once per connection, never per request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use axum::extract::Request;
use axum::serve::IncomingStream;
use parking_lot::RwLock;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::fleet_identity::{identify, PeerIdentity};
use crate::unknown_fields::Caller;

mod connection;

pub use connection::ServerTls;

/// Why TLS could not be set up from the given certificates.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("{what}: no PEM certificate in it")]
    NoCertificate { what: &'static str },
    #[error("{what}: not a PEM certificate: {error}")]
    Certificate {
        what: &'static str,
        error: rustls::pki_types::pem::Error,
    },
    #[error("{what}: not a PEM private key: {error}")]
    Key {
        what: &'static str,
        error: rustls::pki_types::pem::Error,
    },
    #[error("{what}: {error}")]
    Rustls {
        what: &'static str,
        error: rustls::Error,
    },
    #[error("the fleet CA: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("the fleet CA, to check servers with: {0}")]
    ServerVerifier(String),
}

/// Every certificate of a PEM text, in order.
pub fn certificates_of(
    pem: &str,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsSetupError::Certificate { what, error })?;
    if certs.is_empty() {
        return Err(TlsSetupError::NoCertificate { what });
    }
    Ok(certs)
}

/// A certificate chain (leaf first) and its private key, both PEM, ready to serve.
pub fn certified_key(
    chain_pem: &str,
    key_pem: &str,
    what: &'static str,
) -> Result<Arc<CertifiedKey>, TlsSetupError> {
    let chain = certificates_of(chain_pem, what)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|error| TlsSetupError::Key { what, error })?;
    crate::tls::install_crypto_provider();
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|error| TlsSetupError::Rustls { what, error })?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|error| TlsSetupError::Rustls { what, error })?;
    Ok(Arc::new(certified))
}

/// The server certificate, swapped in place on renewal: new handshakes get the new one,
/// established connections keep theirs.
#[derive(Debug)]
pub struct ReloadableCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadableCert {
    pub fn new(first: Arc<CertifiedKey>) -> Arc<ReloadableCert> {
        Arc::new(ReloadableCert {
            current: RwLock::new(first),
        })
    }

    pub fn replace(&self, next: Arc<CertifiedKey>) {
        *self.current.write() = next;
    }
}

impl ResolvesServerCert for ReloadableCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

/// Whether a client must present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCerts {
    /// A certificate, when given, must chain to the fleet CA; none is fine (the route decides).
    Optional,
    /// No handshake completes without a certificate from the fleet CA.
    Required,
}

/// rustls' server settings: `cert` served, client certificates checked against `client_ca_pem`,
/// and against `legacy`'s CA until its date (the controller CA's node certificates of a
/// release of one CA, `FleetCa::legacy_trust`): the date is checked on each handshake, so the
/// window closes on time in a server that runs for months.
pub fn server_config(
    cert: Arc<ReloadableCert>,
    client_ca_pem: &str,
    legacy: Option<(&str, SystemTime)>,
    clients: ClientCerts,
) -> Result<Arc<rustls::ServerConfig>, TlsSetupError> {
    crate::tls::install_crypto_provider();
    let current = client_verifier(client_ca_pem, clients)?;
    let verifier = match legacy {
        None => current,
        Some((legacy_pem, until)) => {
            let legacy = client_verifier(legacy_pem, clients)?;
            let hints = [current.root_hint_subjects(), legacy.root_hint_subjects()].concat();
            Arc::new(WithLegacy {
                current,
                legacy,
                until,
                hints,
            })
        }
    };
    let mut config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cert);
    // axum serves HTTP/1.1 only.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn client_verifier(
    ca_pem: &str,
    clients: ClientCerts,
) -> Result<Arc<dyn ClientCertVerifier>, TlsSetupError> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in certificates_of(ca_pem, "the fleet CA")? {
        roots.add(ca).map_err(|error| TlsSetupError::Rustls {
            what: "the fleet CA",
            error,
        })?;
    }
    let verifier = WebPkiClientVerifier::builder(Arc::new(roots));
    Ok(match clients {
        ClientCerts::Optional => verifier.allow_unauthenticated().build()?,
        ClientCerts::Required => verifier.build()?,
    })
}

/// Client certificates of `current`'s CA, and of `legacy`'s until `until`: past it, one of
/// `legacy` alone is refused in the handshake and logged with what to do (docs/security.md,
/// "Upgrading a fleet of one CA").
#[derive(Debug)]
struct WithLegacy {
    current: Arc<dyn ClientCertVerifier>,
    legacy: Arc<dyn ClientCertVerifier>,
    until: SystemTime,
    hints: Vec<rustls::DistinguishedName>,
}

impl ClientCertVerifier for WithLegacy {
    fn offer_client_auth(&self) -> bool {
        self.current.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.current.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let refused = match self
            .current
            .verify_client_cert(end_entity, intermediates, now)
        {
            Ok(verified) => return Ok(verified),
            Err(refused) => refused,
        };
        let verified = self
            .legacy
            .verify_client_cert(end_entity, intermediates, now)
            .map_err(|_| refused)?;
        if SystemTime::UNIX_EPOCH + Duration::from_secs(now.as_secs()) < self.until {
            return Ok(verified);
        }
        let until = chrono::DateTime::<chrono::Utc>::from(self.until)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let (node_id, serial) = match identify(end_entity) {
            Some(PeerIdentity::Node {
                node_id,
                serial_hex,
            }) => (node_id, serial_hex),
            _ => (String::new(), String::new()),
        };
        tracing::warn!(
            node_id,
            serial,
            until,
            "refused a node certificate of the fleet CA (ca.pem): node certificates of a release of one CA are taken only until the end of the last one the store knew when it recorded the node CA, and every node renews into one of the node CA (node-ca.pem) before; enroll this node again with a new bootstrap token (docs/security.md, \"Upgrading a fleet of one CA\")"
        );
        Err(rustls::Error::General(format!(
            "a node certificate of the fleet CA, taken only until {until}"
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.current.supported_verify_schemes()
    }
}

/// The connection a request came on: who its client certificate names (`None`: no
/// certificate, or one that names nobody of the fleet) and where it came from.
#[derive(Debug, Clone)]
pub struct Peer {
    pub address: SocketAddr,
    pub identity: Option<Arc<PeerIdentity>>,
}

/// How long a client gets to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for the server to take them.
const HANDSHAKE_QUEUE: usize = 1024;
/// Connections accepted and not yet taken by the server (in their handshake, or finished and
/// queued): more wait in the listen backlog, where they hold no descriptor. When all are in
/// use, the oldest still in its handshake is told to give up for the newcomer, so connections
/// that say nothing cannot keep a node's fresh connection out (issue 28); it gives up only if
/// it is the client that owes the next bytes ([`Handshake`]).
const ACCEPTED_UNSERVED: usize = 128;

/// A TLS listener for `axum::serve`: TCP connections are accepted by a task of their own and
/// each handshake runs on its own task; finished ones are handed to the server in the order
/// they finish. Dropping the listener stops accepting.
pub struct TlsListener {
    local: SocketAddr,
    finished: mpsc::Receiver<(ServerTls, Peer)>,
    acceptor_task: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, finished) = mpsc::channel(HANDSHAKE_QUEUE);
        let acceptor_task = tokio::spawn(accept_loop(tcp, config, tx));
        Ok(TlsListener {
            local,
            finished,
            acceptor_task,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor_task.abort();
    }
}

/// A handshake under way, as the accept loop sees it.
///
/// In TLS 1.3 a client takes the handshake as done once it has sent its last flight (its
/// certificate and `Finished`), before the server has read it: a node goes on to send its
/// request. A handshake asked to give up for a newcomer therefore first reads what has arrived
/// (and finishes if that completes it), and gives up only when the client owes the next bytes;
/// while bytes of the client wait unread in its socket it declines, and may be asked again
/// later. Under a burst of handshakes the server can fall behind its clients (issue 27: 3,000
/// nodes connecting 64 at a time on a busy machine left the controller over 128 client flights
/// behind); dropping the oldest of those unread reset connections their nodes held as open.
struct Handshake {
    task: tokio::task::AbortHandle,
    state: Arc<HandshakeState>,
}

#[derive(Default)]
struct HandshakeState {
    /// Set once the handshake is over: it is not asked to give up (it may be a node's,
    /// waiting for the server to take it).
    done: AtomicBool,
    /// Asked to give up, and not declined since.
    asked: AtomicBool,
    give_up: tokio::sync::Notify,
}

impl Handshake {
    fn in_progress(&self) -> bool {
        !self.task.is_finished() && !self.state.done.load(Ordering::Relaxed)
    }
}

/// How long the accept loop waits for the handshake it asked to give up (or any other to end)
/// before it asks the next oldest.
const ASK_NEXT_AFTER: Duration = Duration::from_millis(100);

/// Whether bytes of the client wait unread in `tcp` (the kernel's count: the runtime's
/// readiness lags until its reactor has looked).
fn unread_bytes(tcp: &TcpStream) -> bool {
    rustix::io::ioctl_fionread(tcp).is_ok_and(|unread| unread > 0)
}

/// A permit of [`ACCEPTED_UNSERVED`]; when none is free, the oldest connection still in its
/// handshake is asked to give up, then the next oldest every [`ASK_NEXT_AFTER`], until a
/// permit is freed (theirs, or that of a handshake that finished meanwhile).
async fn unserved_permit(
    budget: &Arc<tokio::sync::Semaphore>,
    handshakes: &mut std::collections::VecDeque<Handshake>,
) -> tokio::sync::OwnedSemaphorePermit {
    if let Ok(permit) = budget.clone().try_acquire_owned() {
        return permit;
    }
    loop {
        handshakes.retain(Handshake::in_progress);
        if let Some(oldest) = handshakes
            .iter()
            .find(|handshake| !handshake.state.asked.swap(true, Ordering::Relaxed))
        {
            oldest.state.give_up.notify_one();
        }
        if let Ok(permit) =
            tokio::time::timeout(ASK_NEXT_AFTER, budget.clone().acquire_owned()).await
        {
            return permit.expect("the semaphore is never closed");
        }
    }
}

/// Runs the handshake of `tcp`: what has arrived is read before a request to give up for a
/// newcomer is heard ([`Handshake`]), as it may finish the handshake.
async fn handshake(
    config: Arc<rustls::ServerConfig>,
    tcp: TcpStream,
    state: &HandshakeState,
) -> Result<Result<ServerTls, connection::HandshakeEnd>, tokio::time::error::Elapsed> {
    tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        connection::accept(
            tcp,
            config,
            || state.give_up.notified(),
            |tcp| !unread_bytes(tcp),
            // The client's bytes are here, the runtime has not yet seen them: the server owes
            // the next step. Declined; it may be asked again.
            || state.asked.store(false, Ordering::Relaxed),
        ),
    )
    .await
}

async fn accept_loop(
    tcp: TcpListener,
    config: Arc<rustls::ServerConfig>,
    finished: mpsc::Sender<(ServerTls, Peer)>,
) {
    let budget = Arc::new(tokio::sync::Semaphore::new(ACCEPTED_UNSERVED));
    let mut handshakes = std::collections::VecDeque::new();
    loop {
        let permit = unserved_permit(&budget, &mut handshakes).await;
        let (stream, address) = match tcp.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors and the like: wait rather than spin (as axum does).
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if finished.is_closed() {
            return;
        }
        // Answers go out as soon as they are written (no Nagle delay).
        let _ = stream.set_nodelay(true);
        let config = config.clone();
        let finished = finished.clone();
        let state = Arc::new(HandshakeState::default());
        let task_state = state.clone();
        let task = tokio::spawn(async move {
            // Held until the server takes the connection (or it is dropped).
            let _permit = permit;
            match handshake(config, stream, &task_state).await {
                Ok(Ok(tls)) => {
                    task_state.done.store(true, Ordering::Relaxed);
                    let identity = tls
                        .peer_certificates()
                        .and_then(|chain| chain.first())
                        .and_then(|leaf| identify(leaf))
                        .map(Arc::new);
                    let _ = finished.send((tls, Peer { address, identity })).await;
                }
                // A stranger's certificate, plain HTTP on the TLS port, a scanner: the client
                // was told by the TLS alert; nothing for the server's log above debug.
                Ok(Err(connection::HandshakeEnd::Failed(error))) => {
                    tracing::debug!(%address, %error, "TLS handshake refused")
                }
                Err(_) => tracing::debug!(%address, "TLS handshake timed out"),
                Ok(Err(connection::HandshakeEnd::GaveUp)) => tracing::debug!(
                    %address,
                    "dropped the oldest unfinished TLS handshake (waiting on its client) for a new connection"
                ),
            }
        });
        handshakes.push_back(Handshake {
            task: task.abort_handle(),
            state,
        });
        if handshakes.len() > 2 * ACCEPTED_UNSERVED {
            handshakes.retain(Handshake::in_progress);
        }
    }
}

/// A connection over TLS without a fleet certificate (an operator's client, or a stranger) is
/// served within the strangers' share of the connections; one with a certificate takes a slot,
/// shedding the longest idle connection at the cap (`http_serve`).
impl crate::http_serve::Admission for Peer {
    fn waits_for_a_slot(&self) -> bool {
        self.identity.is_some()
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = ServerTls;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.finished.recv().await {
            Some(connection) => connection,
            // The accept task only ends when it is aborted, which is when this is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(Peer {
            address: self.local,
            identity: None,
        })
    }
}

/// The make-service for [`TlsListener`]: serves `service` on every connection, with the
/// connection's [`Peer`] on each request.
#[derive(Clone)]
pub struct IdentifyPeers<S> {
    service: S,
}

impl<S> IdentifyPeers<S> {
    pub fn new(service: S) -> Self {
        IdentifyPeers { service }
    }
}

impl<S: Clone> tower::Service<IncomingStream<'_, TlsListener>> for IdentifyPeers<S> {
    type Response = WithPeer<S>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<WithPeer<S>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, incoming: IncomingStream<'_, TlsListener>) -> Self::Future {
        std::future::ready(Ok(WithPeer::new(
            self.service.clone(),
            incoming.remote_addr().clone(),
        )))
    }
}

/// `service`, with `peer` put on each request, and who it is as the [`Caller`] its body's
/// unknown fields are charged to (an operator route names the operator instead).
#[derive(Clone)]
pub struct WithPeer<S> {
    service: S,
    peer: Peer,
    caller: Caller,
}

impl<S> WithPeer<S> {
    /// `service` for the connection of `peer` (what `crate::http_serve::serve` makes per
    /// connection; [`IdentifyPeers`] is the same for `axum::serve`).
    pub fn new(service: S, peer: Peer) -> Self {
        let caller = Caller(Arc::from(match peer.identity.as_deref() {
            Some(PeerIdentity::Node { node_id, .. }) => format!("node {node_id}"),
            Some(PeerIdentity::Controller) => "the controller".to_string(),
            None => format!("client {}", peer.address.ip()),
        }));
        WithPeer {
            service,
            peer,
            caller,
        }
    }
}

impl<S: tower::Service<Request>> tower::Service<Request> for WithPeer<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.service.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        request.extensions_mut().insert(self.peer.clone());
        request.extensions_mut().insert(self.caller.clone());
        self.service.call(request)
    }
}

/// Who the connection of `request` is, if it came over TLS with a fleet certificate.
pub fn identity_of(request: &Request) -> Option<&PeerIdentity> {
    request
        .extensions()
        .get::<Peer>()
        .and_then(|peer| peer.identity.as_deref())
}
