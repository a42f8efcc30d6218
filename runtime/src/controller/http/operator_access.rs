//! Who may call each route (docs/security.md): every operation of the API document carries
//! its `x-fleetwire-access`, which the route table repeats (`routes::API`, checked against the
//! document by a test) and this module enforces for the operator routes. Node routes check
//! their caller themselves (`node_identity`), since the body says which node is meant.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fleetwire_types::ApiErrorCode;

use crate::controller::config::arguments::MetricsAuth;
use crate::controller::shared::Controller;
use crate::controller::trust::node_identity::NodeIdentityError;
use crate::controller::trust::operator_tokens::OperatorScope;
use crate::fleet_identity::PeerIdentity;
use crate::http::ApiFailure;
use crate::tls_server::Peer;

/// Who may call a route: the API document's `x-fleetwire-access`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, in every mode (`/healthz`, `/readyz`).
    Open,
    /// A node, as itself: checked by the route (`node_identity`).
    Node,
    /// An operator token of either scope.
    Read,
    /// An operator token with the admin scope.
    Admin,
    /// An operator token of either scope, unless `--metrics-auth none`.
    Metrics,
}

impl Access {
    /// The document's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Open => "open",
            Access::Node => "node",
            Access::Read => "read",
            Access::Admin => "admin",
            Access::Metrics => "metrics",
        }
    }
}

/// The token of an `Authorization: Bearer` header, if the request has one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn unauthorized(message: &str) -> ApiFailure {
    ApiFailure::new(
        StatusCode::UNAUTHORIZED,
        ApiErrorCode::Unauthorized,
        message.to_string(),
    )
}

/// `--plain-http` without operator tokens: a route that changes the fleet answers only a
/// client on this host (issue 28); with `--operator-token-file` it takes an admin token as in
/// mTLS mode. Reading stays open, as PPN has it.
fn plain_admin(peer: Option<&Peer>) -> Result<Option<String>, ApiFailure> {
    match peer {
        Some(peer) if peer.address.ip().to_canonical().is_loopback() => Ok(None),
        _ => Err(ApiFailure::new(
            StatusCode::FORBIDDEN,
            ApiErrorCode::Forbidden,
            "this route changes the fleet: a --plain-http controller without --operator-token-file serves it only to clients on its own host (loopback); give the controller an operator token file to allow admin tokens from elsewhere",
        )),
    }
}

/// The name of the operator a request comes from, or why it may not call a route of `access`.
/// `Ok(None)`: the route asks for nobody. `peer`: the connection's.
pub fn authorize(
    controller: &Controller,
    access: Access,
    headers: &HeaderMap,
    peer: Option<&Peer>,
) -> Result<Option<String>, ApiFailure> {
    let plain = controller.settings.plain_http;
    let needed = match access {
        Access::Open => return Ok(None),
        Access::Node if plain => return Ok(None),
        // Who calls is known before the body is read (issue 28): the route checks that the
        // certificate is the body's node, or judges the bootstrap token.
        Access::Node => {
            let node = peer
                .is_some_and(|p| matches!(p.identity.as_deref(), Some(PeerIdentity::Node { .. })));
            return match node || bearer(headers).is_some() {
                true => Ok(None),
                false => Err(NodeIdentityError::NoCertificate.into()),
            };
        }
        Access::Admin if plain && controller.credentials.operators.is_empty() => {
            return plain_admin(peer)
        }
        Access::Read | Access::Metrics if plain => return Ok(None),
        Access::Metrics if controller.settings.metrics_auth == MetricsAuth::None => {
            return Ok(None)
        }
        Access::Read | Access::Metrics => OperatorScope::ReadOnly,
        Access::Admin => OperatorScope::Admin,
    };
    let presented = bearer(headers).ok_or_else(|| {
        unauthorized("this route takes an operator token: send `Authorization: Bearer <token>` with a token of the controller's --operator-token-file")
    })?;
    let operator = controller
        .credentials
        .operators
        .find(presented)
        .ok_or_else(|| {
            unauthorized("the bearer token is not one of the controller's operator tokens")
        })?;
    if needed == OperatorScope::Admin && !operator.scope.may_write() {
        return Err(ApiFailure::new(
            StatusCode::FORBIDDEN,
            ApiErrorCode::Forbidden,
            format!(
                "operator token {:?} is read-only; this route changes the fleet and takes an admin token",
                operator.name
            ),
        ));
    }
    Ok(Some(operator.name.clone()))
}

/// The middleware of one route: answers `401`/`403` for a caller `access` refuses, and logs
/// each change an operator makes, by the token's name (never the token).
pub async fn require(
    State((controller, access)): State<(Arc<Controller>, Access)>,
    request: Request,
    next: Next,
) -> Response {
    let peer = request.extensions().get::<Peer>();
    match authorize(&controller, access, request.headers(), peer) {
        Ok(Some(operator)) if access == Access::Admin => {
            tracing::info!(
                operator,
                method = %request.method(),
                path = request.uri().path(),
                "operator request"
            );
            next.run(request).await
        }
        Ok(_) => next.run(request).await,
        Err(failure) => failure.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_bearer_token_is_read_from_the_authorization_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer(&headers), None);
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer(&headers), Some("abc"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  abc "),
        );
        assert_eq!(bearer(&headers), Some("abc"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&headers), None);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&headers), None);
    }
}
