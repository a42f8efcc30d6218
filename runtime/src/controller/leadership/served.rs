//! The HTTP service of a controller that may lead or stand by ([`Served`]): the role's
//! service, swapped in place when the role changes, so the port stays bound and open
//! connections carry on (their next request meets the new role).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use axum::Router;
use parking_lot::RwLock;
use tower::ServiceExt;

use crate::controller::http::heartbeat_route::HeartbeatFirst;

/// The service of the current role.
#[derive(Clone)]
enum Current {
    Leader(HeartbeatFirst),
    Standby(Router),
}

/// What the listener serves: the current role's service.
#[derive(Clone)]
pub struct Served {
    current: Arc<RwLock<Current>>,
}

impl Served {
    pub fn standby(router: Router) -> Served {
        Served {
            current: Arc::new(RwLock::new(Current::Standby(router))),
        }
    }

    pub fn leading(service: HeartbeatFirst) -> Served {
        Served {
            current: Arc::new(RwLock::new(Current::Leader(service))),
        }
    }

    pub fn lead(&self, service: HeartbeatFirst) {
        *self.current.write() = Current::Leader(service);
    }

    pub fn stand_by(&self, router: Router) {
        *self.current.write() = Current::Standby(router);
    }
}

impl tower::Service<Request> for Served {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Both roles' services are always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let current = self.current.read().clone();
        match current {
            Current::Leader(mut service) => tower::Service::call(&mut service, request),
            Current::Standby(router) => Box::pin(router.oneshot(request)),
        }
    }
}
