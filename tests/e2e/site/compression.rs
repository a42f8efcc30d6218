//! The controller serves the reference site compressed (docs/reference-site.md, "Building and
//! serving it"): a real `fleetwire controller`, asked for a page with `Accept-Encoding: gzip`
//! or `br`, answers it compressed, and the decoded bytes are the page as compiled in; a client
//! that sends no `Accept-Encoding` gets the page as it is.

use std::io::Read;

use crate::support::controller_harness::{client, ControllerProcess};

/// The served answer to `path` with `accept` as its `Accept-Encoding` (none when `None`):
/// (content encoding, vary, body as sent).
async fn fetch(
    controller: &ControllerProcess,
    path: &str,
    accept: Option<&str>,
) -> (Option<String>, Option<String>, Vec<u8>) {
    let mut request = client().get(controller.url(path));
    if let Some(accept) = accept {
        request = request.header("accept-encoding", accept);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "{path} ({accept:?})");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    };
    let (encoding, vary) = (header("content-encoding"), header("vary"));
    (encoding, vary, response.bytes().await.unwrap().to_vec())
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .expect("a gzip body");
    out
}

fn unbrotli(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    brotli::Decompressor::new(bytes, 4096)
        .read_to_end(&mut out)
        .expect("a brotli body");
    out
}

#[tokio::test]
async fn the_site_is_served_compressed_when_asked_and_plain_otherwise() {
    let controller = ControllerProcess::start(&[]);
    for page in [
        "HostReportedState.html",
        "api.html",
        "search-index.js",
        "site.css",
    ] {
        let compiled = fleetwire::reference_site::get(page)
            .unwrap_or_else(|| panic!("the site has no {page}"))
            .bytes;
        let path = format!("/docs/{page}");

        let (encoding, _, plain) = fetch(&controller, &path, None).await;
        assert_eq!(
            encoding, None,
            "{page}: compressed for a client that did not ask"
        );
        assert_eq!(plain, compiled, "{page}: the plain answer is not the page");

        let (encoding, vary, gz) = fetch(&controller, &path, Some("gzip")).await;
        assert_eq!(encoding.as_deref(), Some("gzip"), "{page}");
        assert!(
            vary.is_some_and(|v| v.to_ascii_lowercase().contains("accept-encoding")),
            "{page}: caches are not told the answer varies with Accept-Encoding"
        );
        assert_eq!(
            gunzip(&gz),
            compiled,
            "{page}: gzip decodes to another page"
        );
        assert!(
            gz.len() * 3 < compiled.len(),
            "{page}: {} of {} bytes",
            gz.len(),
            compiled.len()
        );

        let (encoding, _, br) = fetch(&controller, &path, Some("br")).await;
        assert_eq!(encoding.as_deref(), Some("br"), "{page}");
        assert_eq!(
            unbrotli(&br),
            compiled,
            "{page}: brotli decodes to another page"
        );

        // Only what the client accepts: gzip refused outright leaves brotli.
        let (encoding, _, _) = fetch(&controller, &path, Some("gzip;q=0, br")).await;
        assert_eq!(encoding.as_deref(), Some("br"), "{page}");
        let (encoding, _, body) = fetch(&controller, &path, Some("identity")).await;
        assert_eq!(encoding, None, "{page}");
        assert_eq!(body, compiled, "{page}");
    }
    // The API keeps its plain answers.
    let response = client()
        .get(controller.url("/v1/fleet"))
        .header("accept-encoding", "gzip, br")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers().get("content-encoding").is_none());
}
