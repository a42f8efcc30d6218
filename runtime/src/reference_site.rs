//! The reference site (docs/reference-site.md), rendered from the schemas by this crate's build
//! script and compiled in: the controller serves it under `/docs` (`controller::http::docs`).

/// One file of the site.
#[derive(Debug, Clone, Copy)]
pub struct SiteFile {
    /// Path relative to the site root, `/`-separated, e.g. `index.html`.
    pub path: &'static str,
    pub content_type: &'static str,
    pub bytes: &'static [u8],
    /// The bytes gzip-compressed at build time, where that is smaller.
    pub gzip: Option<&'static [u8]>,
    /// The bytes brotli-compressed at build time, where that is smaller.
    pub brotli: Option<&'static [u8]>,
}

include!(concat!(env!("OUT_DIR"), "/site_files.rs"));

/// The file at `path` (relative to the site root; empty means `index.html`).
pub fn get(path: &str) -> Option<&'static SiteFile> {
    let path = path.trim_start_matches('/');
    let path = if path.is_empty() { "index.html" } else { path };
    FILES.iter().find(|f| f.path == path)
}
