//! `POST /v1/nodes/heartbeat` served ahead of the router.
//!
//! Every node calls this route every few seconds; everything else is rare. Going through the
//! router (route matching, the middleware stack, extractors, boxed services) cost about 8 % of
//! the machine at full heartbeat load (measured with the `heartbeat_floor` example, see
//! docs/performance.md), so the HTTP service checks for this one route first and serves it
//! with the router's own handler for it, [`api::heartbeat`] (one door: the JSON content-type
//! check, who calls, the body limit and deadline, the validated reader, the heartbeat taken),
//! inside the request timeout and metrics the router's middleware would add
//! ([`routes::answer_in_time`]). Every other request goes to the router.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;
use axum::Router;
use tower::ServiceExt;

use crate::controller::http::api;
use crate::controller::http::routes::{self, HEARTBEAT_PATH};
use crate::controller::shared::Controller;

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
        api::heartbeat(&controller, request),
    )
    .await
}
