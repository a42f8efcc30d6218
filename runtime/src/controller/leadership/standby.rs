//! What a standby serves ([`router`]): `/healthz`, `/readyz` (503, role "standby", the
//! leader's URL) and its own `/metrics`; every other request is redirected to the leader with
//! `307 Temporary Redirect` (the method and body are kept), or answered `503 not_leader` with
//! `Retry-After` while no controller leads (docs/controller.md, "Several controllers").

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use fleetwire_types::{
    ApiErrorCode, ControllerRole, Health, HealthStatus, RuntimeUrl, SemVer, TransportSecurity,
};
use tokio::sync::watch;

use super::lease::Role;
use crate::controller::config::arguments::MetricsAuth;
use crate::controller::http::operator_access::bearer;
use crate::controller::metrics::Metrics;
use crate::controller::trust::operator_tokens::OperatorTokens;
use crate::http::ApiFailure;

/// What a standby knows.
pub struct Standby {
    pub role: watch::Receiver<Role>,
    pub transport: TransportSecurity,
    pub metrics_auth: MetricsAuth,
    pub operators: OperatorTokens,
    /// Its own metrics: a standby runs no jobs, so their counters stay at zero here.
    pub metrics: Metrics,
    /// How long to wait before asking again when no controller leads: a lease renewal period.
    pub retry_after_secs: u64,
}

/// The standby's routes.
pub fn router(standby: Arc<Standby>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(redirect)
        .with_state(standby)
}

fn version() -> Option<SemVer> {
    SemVer::try_from(env!("CARGO_PKG_VERSION")).ok()
}

impl Standby {
    fn leader_url(&self) -> Option<String> {
        match &*self.role.borrow() {
            Role::Standby { leader_url } => leader_url.clone(),
            // Switching over: the leader's router takes the next request.
            Role::Leader { .. } => None,
        }
    }
}

async fn healthz(State(standby): State<Arc<Standby>>) -> Json<Health> {
    Json(Health {
        status: HealthStatus::Ok,
        store: None,
        version: version(),
        transport: Some(standby.transport),
        role: Some(ControllerRole::Standby),
        leader_url: None,
    })
}

async fn readyz(State(standby): State<Arc<Standby>>) -> (StatusCode, Json<Health>) {
    let leader_url = standby
        .leader_url()
        .and_then(|url| RuntimeUrl::try_from(url).ok());
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(Health {
            status: HealthStatus::Unavailable,
            store: None,
            version: version(),
            transport: Some(standby.transport),
            role: Some(ControllerRole::Standby),
            leader_url,
        }),
    )
}

async fn metrics(State(standby): State<Arc<Standby>>, request: Request) -> Response {
    // The leader's rule (`operator_access`): an operator token of either scope, unless
    // `--metrics-auth none` or `--plain-http`.
    if standby.transport == TransportSecurity::Mtls && standby.metrics_auth == MetricsAuth::Token {
        let known = bearer(request.headers()).is_some_and(|t| standby.operators.find(t).is_some());
        if !known {
            return ApiFailure::new(
                StatusCode::UNAUTHORIZED,
                ApiErrorCode::Unauthorized,
                "this route takes an operator token: send `Authorization: Bearer <token>` with a token of the controller's --operator-token-file",
            )
            .into_response();
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        standby.metrics.render(),
    )
        .into_response()
}

async fn redirect(State(standby): State<Arc<Standby>>, request: Request) -> Response {
    let Some(leader) = standby.leader_url() else {
        let mut response = ApiFailure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ApiErrorCode::NotLeader,
            "this controller is a standby and no controller leads at the moment: retry shortly",
        )
        .into_response();
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(standby.retry_after_secs),
        );
        return response;
    };
    let path_and_query = request.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let location = format!("{}{path_and_query}", leader.trim_end_matches('/'));
    match HeaderValue::try_from(location) {
        Ok(location) => (
            StatusCode::TEMPORARY_REDIRECT,
            [(header::LOCATION, location)],
        )
            .into_response(),
        Err(_) => ApiFailure::internal("the leader's URL is not a header value").into_response(),
    }
}
