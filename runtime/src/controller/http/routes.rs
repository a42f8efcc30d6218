//! The controller's routes, from ONE table of the API's operations (checked against the
//! generated OpenAPI document by a test), plus the reference site, fallbacks and the
//! middleware every request goes through (metrics, timeout, body limit).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, MethodRouter};
use axum::Router;
use fleetwire_types::ApiErrorCode;

use crate::controller::http::api;
use crate::controller::http::docs;
use crate::controller::http::operator_access::{self, Access};
use crate::controller::shared::Controller;
use crate::http::{unknown_route, wrong_method, ApiFailure, MAX_BODY_BYTES};

/// The heartbeat route's path, as the API document writes it: routed here, and served ahead
/// of the router by `heartbeat_route`.
pub const HEARTBEAT_PATH: &str = "/v1/nodes/heartbeat";

/// One operation of the API document.
pub struct ApiRoute {
    pub method: Method,
    /// The path as the API document writes it (axum's syntax is the same).
    pub path: &'static str,
    pub operation_id: &'static str,
    /// Who may call it: the document's `x-fleetwire-access`, enforced by `operator_access`.
    pub access: Access,
    pub handler: fn() -> MethodRouter<Arc<Controller>>,
}

/// Every operation the controller serves.
pub const API: &[ApiRoute] = &[
    ApiRoute {
        method: Method::POST,
        path: "/v1/nodes/register",
        operation_id: "register_node",
        access: Access::Node,
        handler: || post(api::register_node),
    },
    ApiRoute {
        method: Method::POST,
        path: HEARTBEAT_PATH,
        operation_id: "post_heartbeat",
        access: Access::Node,
        handler: || post(api::post_heartbeat),
    },
    ApiRoute {
        method: Method::GET,
        path: "/v1/nodes",
        operation_id: "list_nodes",
        access: Access::Read,
        handler: || get(api::list_nodes),
    },
    ApiRoute {
        method: Method::GET,
        path: "/v1/nodes/{node_id}",
        operation_id: "get_node",
        access: Access::Read,
        handler: || get(api::get_node),
    },
    ApiRoute {
        method: Method::DELETE,
        path: "/v1/nodes/{node_id}",
        operation_id: "delete_node",
        access: Access::Admin,
        handler: || delete(api::delete_node),
    },
    ApiRoute {
        method: Method::POST,
        path: "/v1/nodes/{node_id}/cordon",
        operation_id: "cordon_node",
        access: Access::Admin,
        handler: || post(api::cordon_node),
    },
    ApiRoute {
        method: Method::POST,
        path: "/v1/nodes/{node_id}/uncordon",
        operation_id: "uncordon_node",
        access: Access::Admin,
        handler: || post(api::uncordon_node),
    },
    ApiRoute {
        method: Method::POST,
        path: "/v1/nodes/{node_id}/drain",
        operation_id: "drain_node",
        access: Access::Admin,
        handler: || post(api::drain_node),
    },
    ApiRoute {
        method: Method::GET,
        path: "/v1/fleet",
        operation_id: "get_fleet",
        access: Access::Read,
        handler: || get(api::get_fleet),
    },
    ApiRoute {
        method: Method::POST,
        path: "/v1/vms",
        operation_id: "create_vm",
        access: Access::Admin,
        handler: || post(api::create_vm),
    },
    ApiRoute {
        method: Method::GET,
        path: "/v1/vms",
        operation_id: "list_vms",
        access: Access::Read,
        handler: || get(api::list_vms),
    },
    ApiRoute {
        method: Method::GET,
        path: "/v1/vms/{vm_id}",
        operation_id: "get_vm",
        access: Access::Read,
        handler: || get(api::get_vm),
    },
    ApiRoute {
        method: Method::DELETE,
        path: "/v1/vms/{vm_id}",
        operation_id: "delete_vm",
        access: Access::Admin,
        handler: || delete(api::delete_vm),
    },
    ApiRoute {
        method: Method::POST,
        path: "/v1/tokens",
        operation_id: "create_bootstrap_token",
        access: Access::Admin,
        handler: || post(api::create_bootstrap_token),
    },
    ApiRoute {
        method: Method::GET,
        path: "/healthz",
        operation_id: "get_healthz",
        access: Access::Open,
        handler: || get(api::get_healthz),
    },
    ApiRoute {
        method: Method::GET,
        path: "/readyz",
        operation_id: "get_readyz",
        access: Access::Open,
        handler: || get(api::get_readyz),
    },
    ApiRoute {
        method: Method::GET,
        path: "/metrics",
        operation_id: "get_metrics",
        access: Access::Metrics,
        handler: || get(api::get_metrics),
    },
];

/// The router: the API table, the docs site, `ApiError` fallbacks for unknown routes (404)
/// and wrong methods (405), and the request middleware.
pub fn router(controller: Arc<Controller>) -> Router {
    let mut router: Router<Arc<Controller>> = Router::new();
    let mut paths: Vec<&str> = API.iter().map(|r| r.path).collect();
    paths.sort_unstable();
    paths.dedup();
    for path in paths {
        let mut methods: MethodRouter<Arc<Controller>> = MethodRouter::new();
        for route in API.iter().filter(|r| r.path == path) {
            let access = middleware::from_fn_with_state(
                (controller.clone(), route.access),
                operator_access::require,
            );
            methods = methods.merge((route.handler)().layer(access));
        }
        router = router.route(path, methods);
    }
    docs::routes(router)
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(middleware::from_fn(
            crate::unknown_fields::answer_with_warnings,
        ))
        .layer(middleware::from_fn_with_state(controller.clone(), observe))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(controller)
}

/// The route label for metrics: the table's own string for a matched path.
fn route_label(matched: &str) -> &'static str {
    API.iter()
        .map(|r| r.path)
        .chain(docs::ROUTES.iter().copied())
        .find(|p| *p == matched)
        .unwrap_or("unmatched")
}

fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// The middleware of routed requests: [`answer_in_time`] under the matched route's label.
async fn observe(
    State(controller): State<Arc<Controller>>,
    request: Request,
    next: Next,
) -> Response {
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |m| route_label(m.as_str()));
    answer_in_time(&controller, method, route, next.run(request)).await
}

/// Runs `work` under `--request-timeout` (answering `503 timeout` past it) and counts the
/// answer in the request metrics: what every request gets, routed or not.
pub async fn answer_in_time(
    controller: &Controller,
    method: &'static str,
    route: &'static str,
    work: impl std::future::Future<Output = Response>,
) -> Response {
    let started = Instant::now();
    let limit = controller.settings.request_timeout;
    let response = match tokio::time::timeout(limit, work).await {
        Ok(response) => response,
        Err(_) => ApiFailure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ApiErrorCode::Timeout,
            format!("the request did not finish within {limit:?}"),
        )
        .into_response(),
    };
    controller.metrics.observe_request(
        method,
        route,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn document() -> serde_json::Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../generated/openapi/fleet-api.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn the_route_table_lists_exactly_the_operations_of_the_api_document_with_their_access() {
        let doc = document();
        let mut documented = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                if ["get", "post", "put", "delete", "patch", "head", "options"]
                    .contains(&method.as_str())
                {
                    documented.insert((
                        method.to_uppercase(),
                        path.clone(),
                        operation["operationId"].as_str().unwrap().to_string(),
                        operation["x-fleetwire-access"]
                            .as_str()
                            .unwrap_or("(none)")
                            .to_string(),
                    ));
                }
            }
        }
        let served: BTreeSet<_> = API
            .iter()
            .map(|r| {
                (
                    r.method.to_string(),
                    r.path.to_string(),
                    r.operation_id.to_string(),
                    r.access.as_str().to_string(),
                )
            })
            .collect();
        assert_eq!(served.len(), API.len(), "an operation is listed twice");
        assert_eq!(served, documented);
        for route in API {
            assert_ne!(route_label(route.path), "unmatched");
        }
    }
}
