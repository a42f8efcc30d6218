//! Enrollment by registration (`POST /v1/nodes/register`): who may register (in mTLS mode, a
//! bootstrap token for the node, or the node's current certificate: docs/security.md), the
//! runtime check, the node CA's signature of the node's CSR, the token spent, the registration
//! applied to the node (enrolling it when new), and its commit; and why a registration is
//! refused ([`EnrollmentError`]). A refused registration changes nothing.

use std::sync::Arc;
use std::time::Instant;

use fleetwire_types::{
    CertSerial, PemCertificate, RegisterNodeRequest, RegisterNodeResponse, Timestamp,
};

use crate::controller::rules::nodes;
use crate::controller::shared::Controller;
use crate::controller::table::node_state::WhenStored;
use crate::controller::table::node_table::DirtyNode;
use crate::controller::trust::certs::CsrRejected;
use crate::controller::trust::node_identity::{self, NodeCaller, NodeIdentityError};
use crate::fleet_identity::PeerIdentity;
use crate::runtimes;
use crate::store::error::StoreError;
use crate::store::tokens::{BootstrapTokenStore, Redeemed, TokenRefusal};

/// Why a registration was refused; nothing about the node changed.
#[derive(Debug, thiserror::Error)]
pub enum EnrollmentError {
    /// No driver runs the runtime the node declared.
    #[error(
        "no driver for runtime {runtime:?}; known runtimes: {}",
        runtimes::KNOWN.join(", ")
    )]
    UnknownRuntime { runtime: String },
    /// The node CA refused the node's certificate signing request.
    #[error("not a valid RegisterNodeRequest: /csr_pem: {0}")]
    CsrRejected(#[source] CsrRejected),
    /// mTLS mode: the node's certificate comes from its CSR, so there must be one.
    #[error("not a valid RegisterNodeRequest: /csr_pem: required by a controller in mTLS mode (the node's certificate is signed from it)")]
    CsrRequired,
    /// mTLS mode: neither a bootstrap token nor a node certificate came with the request.
    #[error("registering takes a bootstrap token for this node (`Authorization: Bearer <token>`, from `fleetwire token create`) or the node's current certificate; the request has neither")]
    NoCredential,
    /// The certificate presented is another node's, or not this node's current one.
    #[error(transparent)]
    Identity(#[from] NodeIdentityError),
    /// The bootstrap token presented was refused.
    #[error("the bootstrap token was refused: {0}")]
    Token(#[source] TokenRefusal),
    /// The node id is reserved (`ids::reserved_node_id`).
    #[error("not a valid RegisterNodeRequest: /node_id: {node_id:?} is reserved: {why}")]
    ReservedNodeId { node_id: String, why: &'static str },
    /// The signing or token task did not finish.
    #[error("the signing task failed: {0}")]
    SigningTask(#[source] tokio::task::JoinError),
    /// The registration could not be committed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a registration in mTLS mode proved.
enum Credential<'a> {
    /// `--plain-http`: nothing asked.
    Unchecked,
    /// A bootstrap token, spent once the CSR is signed.
    Token(&'a str),
    /// The node's current certificate (or the one its last renewal replaced): a restart or
    /// a renewal. The serial presented.
    Certificate(&'a str),
}

/// Who is registering: a bootstrap token wins over a certificate, so that a node whose
/// certificate is no longer current (unenrolled, replaced) enrolls again with a new token.
fn credential<'a>(
    controller: &Controller,
    request: &RegisterNodeRequest,
    presented: Option<&'a PeerIdentity>,
    bearer: Option<&'a str>,
) -> Result<Credential<'a>, EnrollmentError> {
    let caller = controller.node_caller(presented);
    if let NodeCaller::Unchecked = caller {
        return Ok(Credential::Unchecked);
    }
    // Who asks is judged before what is asked: a stranger learns nothing about the body
    // (401, not 400), as on every other route (docs/security.md).
    let credential = who_registers(controller, request, caller, bearer)?;
    if request.csr_pem.is_none() {
        return Err(EnrollmentError::CsrRequired);
    }
    Ok(credential)
}

/// mTLS mode: the bootstrap token or the node's current certificate the registration comes
/// with.
fn who_registers<'a>(
    controller: &Controller,
    request: &RegisterNodeRequest,
    caller: NodeCaller<'a>,
    bearer: Option<&'a str>,
) -> Result<Credential<'a>, EnrollmentError> {
    if let Some(token) = bearer {
        return Ok(Credential::Token(token));
    }
    let node_id = request.node_id.as_str();
    let serial = match node_identity::claim(caller, node_id) {
        Ok(Some(serial)) => serial,
        Ok(None) => return Err(EnrollmentError::NoCredential),
        Err(NodeIdentityError::NoCertificate) => return Err(EnrollmentError::NoCredential),
        Err(other) => return Err(other.into()),
    };
    let (recorded, replaced) = controller.table.get(node_id).map_or((None, None), |slot| {
        let state = slot.lock();
        (
            state.record.cert_serial.clone(),
            state.replaced_cert_serial.clone(),
        )
    });
    node_identity::current(node_id, serial, recorded.as_ref(), replaced.as_ref())?;
    Ok(Credential::Certificate(serial))
}

/// Registers the node: checks who asks, signs its CSR (a CSR that cannot be signed refuses the
/// registration and changes nothing), spends the bootstrap token, applies the registration,
/// and answers once it is committed.
pub async fn register(
    controller: &Arc<Controller>,
    request: RegisterNodeRequest,
    presented: Option<&PeerIdentity>,
    bearer: Option<&str>,
) -> Result<RegisterNodeResponse, EnrollmentError> {
    let credential = credential(controller, &request, presented, bearer)?;
    // A token is judged before any work is spent on the request; it is spent only after.
    if let Credential::Token(token) = credential {
        judge_token(controller, token, request.node_id.as_str()).await?;
    }
    if let Some(why) = crate::ids::reserved_node_id(request.node_id.as_str()) {
        return Err(EnrollmentError::ReservedNodeId {
            node_id: request.node_id.to_string(),
            why,
        });
    }
    if !runtimes::is_known(&request.runtime) {
        return Err(EnrollmentError::UnknownRuntime {
            runtime: request.runtime.as_str().to_string(),
        });
    }
    let issued = match (&controller.ca, &request.csr_pem) {
        (Some(_), Some(csr)) => {
            let csr = csr.to_string();
            let node_id = request.node_id.to_string();
            let wg_ip = request.wg_ip.0;
            let addresses: Vec<_> = request.addresses.iter().map(|a| a.0).collect();
            let signer = controller.clone();
            let signed = tokio::task::spawn_blocking(move || {
                signer
                    .ca
                    .as_ref()
                    .expect("checked above")
                    .sign(&csr, &node_id, wg_ip, &addresses)
            })
            .await
            .map_err(EnrollmentError::SigningTask)?;
            Some(signed.map_err(EnrollmentError::CsrRejected)?)
        }
        _ => None,
    };
    let node_id = request.node_id.to_string();
    let token_id = match credential {
        Credential::Token(token) => Some(redeem(controller, token, &node_id).await?),
        Credential::Unchecked | Credential::Certificate(_) => None,
    };
    let probe = request.smolvm_address.is_some();
    let now = Instant::now();
    let received = Timestamp::now();
    let (slot, new) = match credential {
        // A renewal never brings back a node unenrolled since its certificate was checked.
        Credential::Certificate(serial) => match controller.table.get(&node_id) {
            Some(slot) => (slot, false),
            None => {
                return Err(NodeIdentityError::NotCurrent {
                    node_id,
                    presented: serial.to_string(),
                }
                .into())
            }
        },
        Credential::Unchecked | Credential::Token(_) => {
            controller.table.get_or_insert(&node_id, || {
                nodes::enroll_by_registration(&request, received)
            })
        }
    };
    let (record, outcome, change) = {
        let mut state = slot.lock();
        if let Credential::Certificate(serial) = credential {
            // Checked again under the node's lock: a renewal that raced another is refused.
            node_identity::current(
                &node_id,
                serial,
                state.record.cert_serial.as_ref(),
                state.replaced_cert_serial.as_ref(),
            )?;
        }
        let outcome = nodes::apply_registration(
            &mut state,
            request,
            now,
            received,
            controller.settings.stale_after,
        );
        if let Some(issued) = &issued {
            // A renewal over a certificate keeps that one good until the new one is presented
            // (its answer may be lost); a token's enrollment retires every earlier one.
            state.replaced_cert_serial = match credential {
                Credential::Certificate(serial) => CertSerial::try_from(serial).ok(),
                Credential::Unchecked | Credential::Token(_) => None,
            };
            state.record.cert_serial =
                Some(CertSerial::try_from(issued.serial_hex.as_str()).expect("a hex serial"));
            state.record.cert_not_after = Some(Timestamp::from(issued.not_after));
        }
        let node = DirtyNode::Id(node_id.clone());
        let change = controller.node_changed(node, &mut state, WhenStored::BeforeAnswer);
        (state.record.clone(), outcome, change)
    };
    change.stored().await?;
    tracing::info!(
        node_id,
        new,
        runtime_restarted = outcome.runtime_restarted,
        certificate = issued.as_ref().map(|i| i.serial_hex.as_str()),
        bootstrap_token = token_id.as_deref(),
        "node registered"
    );
    if probe {
        controller.probe_soon(&node_id);
    }
    let pem = |text: String| PemCertificate::try_from(text).expect("rcgen writes PEM certificates");
    let (cert_pem, ca_pem) = match issued {
        Some(issued) => (Some(pem(issued.cert_pem)), Some(pem(issued.ca_pem))),
        None => (None, None),
    };
    Ok(RegisterNodeResponse {
        ca_pem,
        cert_pem,
        node: record,
    })
}

/// Whether `token` would enroll `node_id`, changing nothing.
async fn judge_token(
    controller: &Arc<Controller>,
    token: &str,
    node_id: &str,
) -> Result<String, EnrollmentError> {
    with_tokens(controller, token, node_id, |tokens, token, node_id, now| {
        tokens.check(token, node_id, now)
    })
    .await
}

/// Spends `token` for `node_id`: single use, whatever else is redeeming at the same time.
/// Returns the token's id (public, for the log).
async fn redeem(
    controller: &Arc<Controller>,
    token: &str,
    node_id: &str,
) -> Result<String, EnrollmentError> {
    with_tokens(controller, token, node_id, |tokens, token, node_id, now| {
        tokens.redeem(token, node_id, now)
    })
    .await
}

/// The question a registration asks the bootstrap-token store.
type TokenQuestion = fn(
    &dyn BootstrapTokenStore,
    &str,
    &str,
    chrono::DateTime<chrono::Utc>,
) -> Result<Redeemed, TokenRefusal>;

/// Asks the bootstrap-token store `ask` about `token`, off the async threads.
async fn with_tokens(
    controller: &Arc<Controller>,
    token: &str,
    node_id: &str,
    ask: TokenQuestion,
) -> Result<String, EnrollmentError> {
    let Some(tokens) = controller.credentials.bootstrap_tokens.clone() else {
        return Err(EnrollmentError::Token(TokenRefusal::Unknown));
    };
    let token = token.to_string();
    let node_id = node_id.to_string();
    let redeemed = tokio::task::spawn_blocking(move || {
        ask(tokens.as_ref(), &token, &node_id, chrono::Utc::now())
    })
    .await
    .map_err(EnrollmentError::SigningTask)?;
    match redeemed {
        Ok(redeemed) => Ok(redeemed.token_id),
        Err(TokenRefusal::Store(error)) => Err(EnrollmentError::Store(error)),
        Err(refusal) => Err(EnrollmentError::Token(refusal)),
    }
}
