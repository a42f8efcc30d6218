//! `POST /v1/nodes/heartbeat` served ahead of the router.
//!
//! Every node calls this route every few seconds; everything else is rare. Going through the
//! router (route matching, the middleware stack, extractors, boxed services) cost about 8 % of
//! the machine at full heartbeat load (measured with the `heartbeat_floor` example, see
//! docs/performance.md), so the HTTP service checks for this one route first and serves it
//! with the same pieces the router would use: the JSON content-type check (`415`), the body
//! limit (`413`) and deadline (`408`), the validated reader (`400` with pointers; unknown fields answered as
//! `Warning` headers; bad entries of `vms` alone are set aside by [`heartbeat_entries`]
//! instead), [`take_heartbeat_with`], the request timeout, and the request metrics. Every
//! other request goes to the router.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower::ServiceExt;

use super::heartbeat_answer;
use super::node_identity::NodeIdentityError;
use super::routes::{self, HEARTBEAT_PATH};
use super::shared::Controller;
use crate::fleet_identity::PeerIdentity;
use crate::http::{read_body_bytes, require_json, ApiFailure};
use crate::tls_server::Peer;

/// The controller's HTTP service: the heartbeat route, then the router.
#[derive(Clone)]
pub struct HeartbeatFirst {
    controller: Arc<Controller>,
    router: Router,
}

impl HeartbeatFirst {
    pub fn new(controller: Arc<Controller>) -> HeartbeatFirst {
        HeartbeatFirst {
            router: routes::router(controller.clone()),
            controller,
        }
    }
}

impl tower::Service<Request> for HeartbeatFirst {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Both the heartbeat route and the router are always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if request.method() == Method::POST && request.uri().path() == HEARTBEAT_PATH {
            let controller = self.controller.clone();
            Box::pin(async move { Ok(serve(controller, request).await) })
        } else {
            Box::pin(self.router.clone().oneshot(request))
        }
    }
}

async fn serve(controller: Arc<Controller>, request: Request) -> Response {
    routes::answer_in_time(
        &controller,
        "POST",
        HEARTBEAT_PATH,
        take(&controller, request),
    )
    .await
}

async fn take(controller: &Controller, request: Request) -> Response {
    if let Err(failure) = require_json(request.headers()) {
        return failure.into_response();
    }
    let presented = request
        .extensions()
        .get::<Peer>()
        .and_then(|peer| peer.identity.clone());
    // mTLS mode: a caller without a node certificate is refused before its body is read
    // (issue 28); whether it is the body's node, and its current certificate, is checked on.
    if !controller.settings.plain_http
        && !matches!(presented.as_deref(), Some(PeerIdentity::Node { .. }))
    {
        return ApiFailure::from(NodeIdentityError::NoCertificate).into_response();
    }
    let body = match read_body_bytes(request.into_body()).await {
        Ok(body) => body,
        Err(failure) => return failure.into_response(),
    };
    heartbeat_answer::answer(controller, &body, presented.as_deref())
        .await
        .unwrap_or_else(IntoResponse::into_response)
}
