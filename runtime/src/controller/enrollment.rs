//! Enrollment by registration (`POST /v1/nodes/register`): the runtime check, the node CA's
//! signature of the node's CSR, the registration applied to the node (enrolling it when new),
//! and its commit; and why a registration is refused ([`EnrollmentError`]).

use std::sync::Arc;
use std::time::Instant;

use fleetwire_types::{
    CertSerial, PemCertificate, RegisterNodeRequest, RegisterNodeResponse, Timestamp,
};

use super::certs::CsrRejected;
use super::nodes;
use super::shared::Controller;
use super::state::{DirtyNode, WhenStored};
use crate::runtimes;
use crate::store::error::StoreError;

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
    /// The signing task did not finish.
    #[error("the signing task failed: {0}")]
    SigningTask(#[source] tokio::task::JoinError),
    /// The registration could not be committed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Registers the node: signs its CSR first (a CSR that cannot be signed refuses the
/// registration and changes nothing), applies the registration, and answers once it is
/// committed.
pub async fn register(
    controller: &Arc<Controller>,
    request: RegisterNodeRequest,
) -> Result<RegisterNodeResponse, EnrollmentError> {
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
    let probe = request.smolvm_address.is_some();
    let now = Instant::now();
    let received = Timestamp::now();
    let (slot, new) = controller.table.get_or_insert(&node_id, || {
        nodes::enroll_by_registration(&request, received)
    });
    let (record, outcome, change) = {
        let mut state = slot.lock();
        let outcome = nodes::apply_registration(
            &mut state,
            request,
            now,
            received,
            controller.settings.stale_after,
        );
        if let Some(issued) = &issued {
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
        certificate = issued.is_some(),
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
