//! The reference site generated from the schemas, compiled into the binary and served under
//! `/docs/`. It is documentation, not part of the API document. Its pages are served gzip- or
//! brotli-compressed to a client whose `Accept-Encoding` asks for it, and as they are to any
//! other (docs/reference-site.md, "Building and serving it").

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use tower_http::compression::CompressionLayer;

use crate::http::ApiFailure;

/// The routes the site is served on (kept out of the API table on purpose).
pub const ROUTES: &[&str] = &["/docs", "/docs/", "/docs/{*path}"];

pub fn routes<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    let site = Router::new()
        .route(ROUTES[0], get(|| async { Redirect::permanent("/docs/") }))
        .route(ROUTES[1], get(|| async { file(String::new()) }))
        .route(
            ROUTES[2],
            get(|Path(path): Path<String>| async move { file(path) }),
        )
        // Only the site: API answers keep their plain bodies (and `Warning` headers) as PPN
        // clients expect them.
        .layer(CompressionLayer::new().gzip(true).br(true));
    router.merge(site)
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
