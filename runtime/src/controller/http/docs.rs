//! The reference site generated from the schemas, compiled into the binary and served under
//! `/docs/`. It is documentation, not part of the API document. Its text files are compressed
//! once, when the binary is built (gzip and brotli, `fleetwire_codegen::site::files_table`),
//! and served so to a client whose `Accept-Encoding` takes one, and as they are to any other
//! (docs/reference-site.md, "Building and serving it").

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use crate::http::ApiFailure;
use crate::reference_site::SiteFile;

/// The routes the site is served on (kept out of the API table on purpose).
pub const ROUTES: &[&str] = &["/docs", "/docs/", "/docs/{*path}"];

pub fn routes<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    let site = Router::new()
        .route(ROUTES[0], get(|| async { Redirect::permanent("/docs/") }))
        .route(
            ROUTES[1],
            get(|headers: HeaderMap| async move { file(String::new(), &headers) }),
        )
        .route(
            ROUTES[2],
            get(|Path(path): Path<String>, headers: HeaderMap| async move { file(path, &headers) }),
        );
    router.merge(site)
}

fn file(path: String, headers: &HeaderMap) -> Response {
    let Some(file) = crate::reference_site::get(&path) else {
        return ApiFailure::not_found(format!("no page /docs/{path}")).into_response();
    };
    let accepted = headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok());
    let (encoding, bytes) = match encoding_for(file, accepted) {
        Some((name, bytes)) => (Some(name), bytes),
        None => (None, file.bytes),
    };
    let mut response = (
        [
            (header::CONTENT_TYPE, file.content_type),
            (header::CACHE_CONTROL, "public, max-age=300"),
            // The answer depends on Accept-Encoding: caches keep one copy per encoding.
            (header::VARY, "accept-encoding"),
        ],
        bytes,
    )
        .into_response();
    if let Some(name) = encoding {
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static(name));
    }
    response
}

/// The compressed variant of `file` to send for these `Accept-Encoding` values (RFC 9110
/// §12.5.3): the one with the highest q-value the client gives, brotli on a tie (the smaller);
/// none when the client takes neither (`q=0`, or not named and no `*`), or the file has none.
fn encoding_for<'a>(
    file: &SiteFile,
    accepted: impl Iterator<Item = &'a str>,
) -> Option<(&'static str, &'static [u8])> {
    let (mut br, mut gzip, mut any) = (None::<f32>, None::<f32>, None::<f32>);
    for item in accepted.flat_map(|v| v.split(',')) {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q=").or(p.trim().strip_prefix("Q=")))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        match coding.as_str() {
            "br" => br = Some(q),
            "gzip" | "x-gzip" => gzip = Some(q),
            "*" => any = Some(q),
            _ => {}
        }
    }
    let br = br.or(any).unwrap_or(0.0);
    let gzip = gzip.or(any).unwrap_or(0.0);
    let pick_br = br > 0.0 && br >= gzip;
    match (pick_br, file.brotli, file.gzip) {
        (true, Some(bytes), _) => Some(("br", bytes)),
        (_, _, Some(bytes)) if gzip > 0.0 => Some(("gzip", bytes)),
        (false, Some(bytes), _) if br > 0.0 => Some(("br", bytes)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: SiteFile = SiteFile {
        path: "index.html",
        content_type: "text/html; charset=utf-8",
        bytes: b"plain",
        gzip: Some(b"gz"),
        brotli: Some(b"br"),
    };

    fn pick(accept: &str) -> Option<&'static str> {
        encoding_for(&FILE, std::iter::once(accept)).map(|(name, _)| name)
    }

    #[test]
    fn the_best_encoding_the_client_takes_is_sent() {
        assert_eq!(pick(""), None);
        assert_eq!(pick("identity"), None);
        assert_eq!(pick("gzip"), Some("gzip"));
        assert_eq!(pick("gzip, deflate, br"), Some("br"));
        assert_eq!(pick("br;q=0.5, gzip"), Some("gzip"));
        assert_eq!(pick("br;q=0, gzip;q=0"), None);
        assert_eq!(pick("*"), Some("br"));
        assert_eq!(pick("*;q=0.1, br;q=0"), Some("gzip"));
        assert_eq!(pick("GZIP ; q=0.8"), Some("gzip"));
    }

    #[test]
    fn a_file_without_a_variant_is_sent_as_it_is() {
        let image = SiteFile {
            gzip: None,
            brotli: None,
            ..FILE
        };
        assert_eq!(encoding_for(&image, std::iter::once("br, gzip")), None);
        let gzip_only = SiteFile {
            brotli: None,
            ..FILE
        };
        assert_eq!(
            encoding_for(&gzip_only, std::iter::once("br")).map(|(n, _)| n),
            None
        );
        assert_eq!(
            encoding_for(&gzip_only, std::iter::once("br, gzip")).map(|(n, _)| n),
            Some("gzip")
        );
    }
}
