//! The reference site generated from the schemas, compiled into the binary and served under
//! `/docs/`. It is documentation, not part of the API document.

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use crate::http::ApiFailure;

/// The routes the site is served on (kept out of the API table on purpose).
pub const ROUTES: &[&str] = &["/docs", "/docs/", "/docs/{*path}"];

pub fn routes<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router
        .route(ROUTES[0], get(|| async { Redirect::permanent("/docs/") }))
        .route(ROUTES[1], get(|| async { file(String::new()) }))
        .route(
            ROUTES[2],
            get(|Path(path): Path<String>| async move { file(path) }),
        )
}

fn file(path: String) -> Response {
    match crate::reference_site::get(&path) {
        Some(file) => (
            [
                (header::CONTENT_TYPE, file.content_type),
                (header::CACHE_CONTROL, "public, max-age=300"),
            ],
            file.bytes,
        )
            .into_response(),
        None => ApiFailure::not_found(format!("no page /docs/{path}")).into_response(),
    }
}
