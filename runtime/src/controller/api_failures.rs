//! The controller's domain errors as HTTP answers: each becomes its `ApiFailure` (status,
//! `ApiError` code and message) here and nowhere else, so handlers pass them on with `?`.

use axum::http::StatusCode;
use fleetwire_types::{ApiErrorCode, Rejection, Violation};

use super::enrollment::EnrollmentError;
use super::placement::PlacementError;
use crate::http::ApiFailure;
use crate::store::error::StoreError;

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

impl From<EnrollmentError> for ApiFailure {
    fn from(error: EnrollmentError) -> ApiFailure {
        let message = error.to_string();
        match error {
            EnrollmentError::UnknownRuntime { .. } => ApiFailure::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ApiErrorCode::UnknownRuntime,
                message,
            ),
            // Answered as the document's own violation, at its pointer.
            EnrollmentError::CsrRejected(rejected) => {
                let mut failure = ApiFailure::new(
                    StatusCode::BAD_REQUEST,
                    ApiErrorCode::InvalidDocument,
                    message,
                );
                failure.body.violations = vec![Violation {
                    instance_path: "/csr_pem".parse().expect("a JSON pointer"),
                    schema_path: "/$defs/RegisterNodeRequest/properties/csr_pem"
                        .parse()
                        .expect("a JSON pointer"),
                    keyword: "format".into(),
                    message: rejected.to_string(),
                }];
                failure
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
