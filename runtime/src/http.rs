//! What every fleetwire HTTP server shares: request bodies read through the generated validated
//! reader, and every failure answered as the schema's `ApiError`.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use fleetwire_types::{
    Accepted, ApiError, ApiErrorCode, ApiErrorMessage, FieldValidation, JsonPointer, Rejection,
    WireDocument,
};

/// The largest request body any fleetwire server reads (a heartbeat with many VMs fits easily).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// How long a whole request body may take to arrive once its head has: a client that dribbles
/// it (a byte a second) is answered `408` and its connection closed. A 1 MiB body needs only
/// 52 KB/s to make it (docs/reliability/hostile-input.md).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(20);

/// A failed request: an HTTP status and the `ApiError` body that explains it.
#[derive(Debug, Clone)]
pub struct ApiFailure {
    pub status: StatusCode,
    pub body: ApiError,
}

impl ApiFailure {
    pub fn new(status: StatusCode, code: ApiErrorCode, message: impl Into<String>) -> Self {
        ApiFailure {
            status,
            body: ApiError {
                code,
                message: ApiErrorMessage::truncated(&message.into()),
                violations: Vec::new(),
            },
        }
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ApiErrorCode::NotFound, what)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ApiErrorCode::Internal,
            message,
        )
    }

    /// `400 invalid_document` for a `document` whose `node_id` is reserved
    /// (`ids::reserved_node_id` says `why`), with its pointer.
    pub fn reserved_node_id(document: &str, node_id: &str, why: &str) -> Self {
        let message = format!("not a valid {document}: /node_id: {node_id:?} is reserved: {why}");
        let mut failure = Self::new(
            StatusCode::BAD_REQUEST,
            ApiErrorCode::InvalidDocument,
            &message,
        );
        failure.body.violations = vec![fleetwire_types::Violation {
            instance_path: "/node_id".parse().expect("a JSON pointer"),
            schema_path: format!("/$defs/{document}/properties/node_id")
                .parse()
                .expect("a JSON pointer"),
            keyword: "x-fleetwire-reserved".into(),
            message,
        }];
        failure
    }

    /// `400` for a body the validated reader refused, listing every violation with its pointer.
    pub fn rejected(document: &str, rejection: Rejection) -> Self {
        match rejection {
            Rejection::Malformed(v) => {
                let mut failure = Self::new(
                    StatusCode::BAD_REQUEST,
                    ApiErrorCode::MalformedJson,
                    v.message.to_string(),
                );
                failure.body.violations = vec![v];
                failure
            }
            Rejection::Invalid(violations) => {
                let summary = fleetwire_types::summarize(&violations);
                let mut failure = Self::new(
                    StatusCode::BAD_REQUEST,
                    ApiErrorCode::InvalidDocument,
                    format!("not a valid {document}: {summary}"),
                );
                failure.body.violations = violations;
                failure
            }
        }
    }
}

impl IntoResponse for ApiFailure {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body)).into_response();
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // The rest of a body that came too slowly is not waited for: the connection ends
            // with the answer (RFC 9110, 408).
            response.headers_mut().insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

/// A request body read through `fleetwire_types::read`: `415` unless it is `application/json`,
/// `413` past [`MAX_BODY_BYTES`] (set the limit with `axum::extract::DefaultBodyLimit`), and
/// `400` with every violation's JSON pointer when it is not a valid `T`. Fields the schema does
/// not define are handled as the request's `fieldValidation` says ([`field_validation`]):
/// `Strict` refuses them (`400`, each by its pointer); `Warn`, the default, sets them aside and
/// reports them (README "Unknown fields"): counted and logged by
/// [`crate::unknown_fields::note`], and answered as `Warning` headers when the router has the
/// [`crate::unknown_fields::answer_with_warnings`] middleware; `Ignore` sets them aside with
/// no header.
#[derive(Debug, Clone)]
pub struct Valid<T>(pub T);

impl<S: Send + Sync, T: WireDocument> FromRequest<S> for Valid<T> {
    type Rejection = ApiFailure;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let mode = field_validation(req.uri().query())?;
        let slot = req
            .extensions()
            .get::<crate::unknown_fields::WarningSlot>()
            .cloned();
        let caller = crate::unknown_fields::Caller::of(req.extensions());
        let JsonBody(bytes) = JsonBody::from_request(req, state).await?;
        let accepted = read_body::<T>(&bytes, &caller)?;
        unknown_fields_as_asked::<T>(mode, &bytes, &accepted.unknown_fields, slot.as_ref())?;
        Ok(Valid(accepted.value))
    }
}

/// The request's `fieldValidation` (Kubernetes' name and values): `Warn` when it does not say,
/// `400 invalid_query` for another value.
pub fn field_validation(query: Option<&str>) -> Result<FieldValidation, ApiFailure> {
    let asked = query.and_then(|query| {
        form_urlencoded::parse(query.as_bytes())
            .find(|(name, _)| name == "fieldValidation")
            .map(|(_, value)| value.into_owned())
    });
    match asked {
        None => Ok(FieldValidation::Warn),
        Some(value) => value.parse().map_err(|_| {
            ApiFailure::new(
                StatusCode::BAD_REQUEST,
                ApiErrorCode::InvalidQuery,
                format!("fieldValidation: {value:?} is not one of Strict, Warn, Ignore"),
            )
        }),
    }
}

/// What `mode` asks done with the unknown `fields` of `body` (a `T`): refused (`Strict`: `400`
/// with each by its pointer, keyword `additionalProperties`, as the strict reader refuses
/// them), named in the answer's `Warning` headers through `slot` (`Warn`), or nothing
/// (`Ignore`).
pub fn unknown_fields_as_asked<T: WireDocument>(
    mode: FieldValidation,
    body: &[u8],
    fields: &[JsonPointer],
    slot: Option<&crate::unknown_fields::WarningSlot>,
) -> Result<(), ApiFailure> {
    if fields.is_empty() {
        return Ok(());
    }
    match mode {
        FieldValidation::Strict => match fleetwire_types::read_strict::<T>(body) {
            Err(rejection) => Err(ApiFailure::rejected(T::INFO.name, rejection)),
            Ok(_) => Ok(()),
        },
        FieldValidation::Warn => {
            if let Some(slot) = slot {
                slot.put(fields);
            }
            Ok(())
        }
        FieldValidation::Ignore => Ok(()),
    }
}

/// A request body said to be JSON, not yet read as any document: `415` unless it is
/// `application/json`, `413` past the body limit, `400` when it cannot be read. [`Valid`] reads
/// it on; a route that reads its document its own way (the heartbeat's, which sets bad `vms`
/// entries aside) takes this.
#[derive(Debug, Clone)]
pub struct JsonBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiFailure;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let _ = state;
        require_json(req.headers())?;
        read_body_bytes(req.into_body()).await.map(JsonBody)
    }
}

/// A request body, whole: `413` past [`MAX_BODY_BYTES`] (at once when its `Content-Length`
/// says so, else as soon as that much came), `408` when it has not all come within
/// [`BODY_READ_TIMEOUT`], `400` when the connection failed under it.
pub async fn read_body_bytes(body: Body) -> Result<Bytes, ApiFailure> {
    use http_body_util::{BodyExt, LengthLimitError, Limited};
    // A `Content-Length` past the limit is refused before a byte of the body is read.
    if axum::body::HttpBody::size_hint(&body).lower() > MAX_BODY_BYTES as u64 {
        return Err(too_large());
    }
    match tokio::time::timeout(
        BODY_READ_TIMEOUT,
        Limited::new(body, MAX_BODY_BYTES).collect(),
    )
    .await
    {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(error)) => Err(unreadable_body(format!("reading the body: {error}"))),
        Err(_) => Err(too_slow()),
    }
}

/// `408 timeout`: the body did not all arrive within [`BODY_READ_TIMEOUT`].
pub fn too_slow() -> ApiFailure {
    ApiFailure::new(
        StatusCode::REQUEST_TIMEOUT,
        ApiErrorCode::Timeout,
        format!(
            "the body did not arrive within {} s",
            BODY_READ_TIMEOUT.as_secs()
        ),
    )
}

/// `415` unless the request says its body is JSON (`application/json` or `*/*+json`).
pub fn require_json(headers: &axum::http::HeaderMap) -> Result<(), ApiFailure> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| {
            let mime = mime.trim();
            mime.eq_ignore_ascii_case("application/json")
                || mime.to_ascii_lowercase().ends_with("+json")
        });
    if is_json {
        Ok(())
    } else {
        Err(ApiFailure::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiErrorCode::UnsupportedMediaType,
            "the body must be sent with Content-Type: application/json",
        ))
    }
}

/// `413`: the body is past [`MAX_BODY_BYTES`].
pub fn too_large() -> ApiFailure {
    ApiFailure::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        ApiErrorCode::PayloadTooLarge,
        format!("the body exceeds the limit of {MAX_BODY_BYTES} bytes"),
    )
}

/// `400`: the body could not be read off the connection.
pub fn unreadable_body(message: String) -> ApiFailure {
    ApiFailure::new(
        StatusCode::BAD_REQUEST,
        ApiErrorCode::MalformedJson,
        message,
    )
}

/// A `T` through the validated reader, or `400` with every violation's pointer. Unknown fields
/// are counted and logged here, charged to `caller` (`unknown_fields::Caller`); the caller
/// answers them (`Warning` headers).
pub fn read_body<T: WireDocument>(bytes: &[u8], caller: &str) -> Result<Accepted<T>, ApiFailure> {
    match fleetwire_types::read::<T>(bytes) {
        Ok(accepted) => {
            crate::unknown_fields::note(&accepted, caller);
            Ok(accepted)
        }
        Err(rejection) => Err(ApiFailure::rejected(T::INFO.name, rejection)),
    }
}

/// Router fallback: `404` as an `ApiError`.
pub async fn unknown_route(uri: axum::http::Uri) -> ApiFailure {
    ApiFailure::not_found(format!("no route {}", uri.path()))
}

/// Method fallback: `405` as an `ApiError`.
pub async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiFailure {
    ApiFailure::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ApiErrorCode::MethodNotAllowed,
        format!("{} does not accept {method}", uri.path()),
    )
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::routing::post;
    use axum::Router;
    use fleetwire_types::CreateVmRequest;
    use tower::ServiceExt;

    use super::*;

    async fn post_to(router: Router, body: &str) -> Response {
        router
            .oneshot(
                Request::post("/vms")
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(body.to_string()))
                    .unwrap(),
            )
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn valid_sets_unknown_fields_aside_and_the_middleware_answers_them() {
        async fn handler(Valid(request): Valid<CreateVmRequest>) -> String {
            request.vm_type.to_string()
        }
        let router = Router::new()
            .route("/vms", post(handler))
            .layer(axum::middleware::from_fn(
                crate::unknown_fields::answer_with_warnings,
            ));
        let answer = post_to(
            router.clone(),
            r#"{"vm_type": "web", "ram_mb": 1.0, "vcpu_count": 1, "x": {"y": 1}}"#,
        )
        .await;
        assert_eq!(answer.status(), StatusCode::OK);
        let warnings: Vec<_> = answer.headers().get_all(header::WARNING).iter().collect();
        assert_eq!(warnings, ["299 - \"unknown field /x\""]);
        let answer = post_to(
            router,
            r#"{"vm_type": "web", "ram_mb": 1, "vcpu_count": 1}"#,
        )
        .await;
        assert_eq!(answer.status(), StatusCode::OK);
        assert!(answer.headers().get(header::WARNING).is_none());
    }
}
