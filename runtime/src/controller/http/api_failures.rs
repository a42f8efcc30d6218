//! The controller's domain errors as HTTP answers: each becomes its `ApiFailure` (status,
//! `ApiError` code and message) here and nowhere else, so handlers pass them on with `?`.

use axum::http::StatusCode;
use fleetwire_types::{ApiErrorCode, Rejection, Violation};

use crate::controller::fleet::enrollment::EnrollmentError;
use crate::controller::fleet::heartbeat::HeartbeatError;
use crate::controller::fleet::placement::PlacementError;
use crate::controller::trust::node_identity::NodeIdentityError;
use crate::http::ApiFailure;
use crate::store::error::StoreError;
use crate::store::tokens::TokenRefusal;

/// `503 store_unavailable`: whatever the store's trouble, the request may be retried.
impl From<StoreError> for ApiFailure {
    fn from(error: StoreError) -> ApiFailure {
        ApiFailure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ApiErrorCode::StoreUnavailable,
            format!("the controller's store failed: {error}"),
        )
    }
}

/// `401` when the sender proved nothing (or a certificate no longer current), `403` when it
/// proved to be another node.
impl From<NodeIdentityError> for ApiFailure {
    fn from(error: NodeIdentityError) -> ApiFailure {
        let (status, code) = match error {
            NodeIdentityError::NoCertificate | NodeIdentityError::NotCurrent { .. } => {
                (StatusCode::UNAUTHORIZED, ApiErrorCode::Unauthorized)
            }
            NodeIdentityError::OtherNode { .. } => (StatusCode::FORBIDDEN, ApiErrorCode::Forbidden),
        };
        ApiFailure::new(status, code, error.to_string())
    }
}

impl From<HeartbeatError> for ApiFailure {
    fn from(error: HeartbeatError) -> ApiFailure {
        match error {
            HeartbeatError::Identity(error) => error.into(),
            // The agent's cue to register again, as for a node the controller forgot.
            HeartbeatError::NotEnrolled(_) => ApiFailure::not_found(error.to_string()),
            HeartbeatError::OutsideCertificate { pointer, .. } => {
                let message = error.to_string();
                let mut failure =
                    ApiFailure::new(StatusCode::FORBIDDEN, ApiErrorCode::Forbidden, &message);
                failure.body.violations = vec![Violation {
                    instance_path: pointer.parse().expect("a JSON pointer"),
                    schema_path: format!("/$defs/NodeHeartbeat/properties{pointer}")
                        .parse()
                        .expect("a JSON pointer"),
                    keyword: "x-fleetwire-certified".into(),
                    message,
                }];
                failure
            }
            HeartbeatError::ReservedNodeId { node_id, why } => {
                ApiFailure::reserved_node_id("NodeHeartbeat", &node_id, why)
            }
            HeartbeatError::Store(error) => error.into(),
        }
    }
}

/// `400 invalid_document` with one violation of `RegisterNodeRequest`'s `csr_pem`, found at
/// `instance_path` (the field, or the document for a missing one).
fn csr_violation(
    message: String,
    instance_path: &str,
    keyword: &str,
    violation: String,
) -> ApiFailure {
    let mut failure = ApiFailure::new(
        StatusCode::BAD_REQUEST,
        ApiErrorCode::InvalidDocument,
        message,
    );
    failure.body.violations = vec![Violation {
        instance_path: instance_path.parse().expect("a JSON pointer"),
        schema_path: "/$defs/RegisterNodeRequest/properties/csr_pem"
            .parse()
            .expect("a JSON pointer"),
        keyword: keyword.into(),
        message: violation,
    }];
    failure
}

impl From<EnrollmentError> for ApiFailure {
    fn from(error: EnrollmentError) -> ApiFailure {
        let message = error.to_string();
        match error {
            EnrollmentError::UnknownRuntime { .. } => ApiFailure::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ApiErrorCode::UnknownRuntime,
                message,
            ),
            // Answered as the document's own violations, at their pointers.
            EnrollmentError::CsrRejected(rejected) => {
                csr_violation(message, "/csr_pem", "format", rejected.to_string())
            }
            EnrollmentError::CsrRequired => csr_violation(
                message,
                "",
                "required",
                "csr_pem is required by a controller in mTLS mode".into(),
            ),
            EnrollmentError::NoCredential => ApiFailure::new(
                StatusCode::UNAUTHORIZED,
                ApiErrorCode::Unauthorized,
                message,
            ),
            EnrollmentError::Identity(error) => error.into(),
            EnrollmentError::Token(TokenRefusal::OtherNode { .. }) => {
                ApiFailure::new(StatusCode::FORBIDDEN, ApiErrorCode::Forbidden, message)
            }
            EnrollmentError::Token(_) => ApiFailure::new(
                StatusCode::UNAUTHORIZED,
                ApiErrorCode::Unauthorized,
                message,
            ),
            EnrollmentError::ReservedNodeId { node_id, why } => {
                ApiFailure::reserved_node_id("RegisterNodeRequest", &node_id, why)
            }
            EnrollmentError::SigningTask(_) => ApiFailure::internal(message),
            EnrollmentError::Store(error) => error.into(),
        }
    }
}

impl From<PlacementError> for ApiFailure {
    fn from(error: PlacementError) -> ApiFailure {
        let message = error.to_string();
        let (status, code) = match error {
            PlacementError::InvalidRequest(violation) => {
                return ApiFailure::rejected("CreateVmRequest", Rejection::Invalid(vec![violation]))
            }
            PlacementError::Store(error) => return error.into(),
            PlacementError::NoSuchVm(_) => return ApiFailure::not_found(message),
            PlacementError::VmIdTaken(_) | PlacementError::Unenrolled { .. } => {
                (StatusCode::CONFLICT, ApiErrorCode::Conflict)
            }
            // Valid by the schema, so not 400: the document lists this 422.
            PlacementError::Unusable(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                ApiErrorCode::InvalidDocument,
            ),
            PlacementError::PreferredNodeUnsuitable { .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                ApiErrorCode::PreferredNodeUnsuitable,
            ),
            PlacementError::NoCapacity(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, ApiErrorCode::NoCapacity)
            }
            PlacementError::SpawnFailed { .. } | PlacementError::DeleteFailed { .. } => {
                (StatusCode::BAD_GATEWAY, ApiErrorCode::AgentFailed)
            }
        };
        ApiFailure::new(status, code, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::agent_client::AgentCallError;
    use crate::controller::fleet::placement::{NoCapacity, Unsuitable};
    use crate::controller::trust::certs::CsrRejected;
    use crate::workload::Workload;

    fn answer(failure: ApiFailure) -> (u16, serde_json::Value) {
        let body = serde_json::to_value(&failure.body).unwrap();
        (failure.status.as_u16(), body)
    }

    fn plain(status: u16, code: &str, message: &str) -> (u16, serde_json::Value) {
        let body = serde_json::json!({"code": code, "message": message});
        (status, body)
    }

    #[test]
    fn each_domain_error_is_answered_with_its_status_code_and_message() {
        let store = StoreError::WriterStopped;
        assert_eq!(
            answer(store.clone().into()),
            plain(
                503,
                "store_unavailable",
                "the controller's store failed: the store writer has stopped"
            )
        );
        let refused = AgentCallError::Refused {
            method: "POST",
            url: "http://10.0.0.1:9220/v1/spawn".into(),
            status: reqwest::StatusCode::INTERNAL_SERVER_ERROR,
            quoted: "full".into(),
        };
        let cases: Vec<(PlacementError, (u16, serde_json::Value))> = vec![
            (
                PlacementError::VmIdTaken("vm-1".parse().unwrap()),
                plain(409, "conflict", "a VM with id \"vm-1\" already exists"),
            ),
            (
                PlacementError::PreferredNodeUnsuitable {
                    node_id: "n1".into(),
                    why: Unsuitable::NoSuchNode,
                },
                plain(
                    422,
                    "preferred_node_unsuitable",
                    "preferred node \"n1\" cannot take the VM: no node has this id",
                ),
            ),
            (
                PlacementError::NoCapacity(NoCapacity {
                    ram_mb: 64,
                    disk_gb: 1,
                    checkpoint: true,
                    workload: Workload {
                        image: false,
                        command: true,
                        machine: false,
                    },
                }),
                plain(
                    503,
                    "no_capacity",
                    &format!(
                        "no ready node has room for 64 MB of memory (plus 512 MB headroom) and 1 GB \
                         of disk at the checkpoint's engine version or newer with a runtime that \
                         runs {}",
                        Workload {
                            image: false,
                            command: true,
                            machine: false,
                        }
                    ),
                ),
            ),
            (
                PlacementError::SpawnFailed {
                    node_id: "n1".into(),
                    error: refused.clone(),
                },
                plain(
                    502,
                    "agent_failed",
                    "node \"n1\" failed to start the VM: POST http://10.0.0.1:9220/v1/spawn \
                     answered 500 Internal Server Error: full",
                ),
            ),
            (
                PlacementError::DeleteFailed {
                    node_id: "n1".into(),
                    error: refused,
                },
                plain(
                    502,
                    "agent_failed",
                    "node \"n1\" failed to delete the VM: POST http://10.0.0.1:9220/v1/spawn \
                     answered 500 Internal Server Error: full",
                ),
            ),
            (
                PlacementError::Unenrolled {
                    node_id: "n1".into(),
                    vm_id: "vm-1".parse().unwrap(),
                },
                plain(
                    409,
                    "conflict",
                    "node \"n1\" was unenrolled while it started VM \"vm-1\"",
                ),
            ),
            (
                PlacementError::NoSuchVm("vm-2".into()),
                plain(404, "not_found", "no VM with id \"vm-2\""),
            ),
            (
                PlacementError::Store(store.clone()),
                answer(store.clone().into()),
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(answer(error.into()), expected);
        }
        assert_eq!(
            answer(
                EnrollmentError::UnknownRuntime {
                    runtime: "firecracker".into()
                }
                .into()
            ),
            plain(
                422,
                "unknown_runtime",
                &format!(
                    "no driver for runtime \"firecracker\"; known runtimes: {}",
                    crate::runtimes::KNOWN.join(", ")
                )
            )
        );
        let (status, body) =
            answer(EnrollmentError::CsrRejected(CsrRejected::Unusable("bad PEM".into())).into());
        assert_eq!((status, &body["code"]), (400, &"invalid_document".into()));
        assert_eq!(
            body["message"],
            "not a valid RegisterNodeRequest: /csr_pem: not a usable certificate signing \
             request: bad PEM"
        );
        assert_eq!(body["violations"][0]["instance_path"], "/csr_pem");
        assert_eq!(
            body["violations"][0]["message"],
            "not a usable certificate signing request: bad PEM"
        );
        assert_eq!(
            answer(EnrollmentError::Store(store.clone()).into()),
            answer(store.into())
        );
    }
}
