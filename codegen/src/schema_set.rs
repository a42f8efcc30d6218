//! The schema set's one version and its hash (docs/versioning.md).
//!
//! `schemas/schema-set.json` states the set's name and semver version, once: the API
//! document's `info.version`, the `fleetwire-types` crate's version, the generated
//! `SCHEMA_SET_VERSION` and the site's version line all follow it. The hash names the exact
//! files a page, a crate or a document was generated from.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The manifest under `schemas/`.
pub const MANIFEST_FILE: &str = "schema-set.json";

/// What the manifest says, and the hash of the files it describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaSet {
    pub name: String,
    pub version: semver::Version,
    /// SHA-256 (lowercase hex) of the set's files: see [`hash_files`].
    pub hash: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    name: String,
    version: String,
    #[serde(default, rename = "$comment")]
    _comment: Option<String>,
}

/// Reads `dir/schema-set.json` and hashes the set (the manifest and the files `is_member`
/// names, see [`hash_files`]); `None` when the folder has no manifest (a folder of schemas
/// without a version: nothing can be said about its releases).
pub fn load(dir: &Path, is_member: impl Fn(&str) -> bool) -> Result<Option<SchemaSet>> {
    let path = dir.join(MANIFEST_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let manifest: Manifest = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: expected {{\"name\": …, \"version\": \"MAJOR.MINOR.PATCH\"}}",
            path.display()
        )
    })?;
    let version = semver::Version::parse(&manifest.version).with_context(|| {
        format!(
            "{}: /version `{}` is not a semver version",
            path.display(),
            manifest.version
        )
    })?;
    if manifest.name.trim().is_empty() {
        bail!("{}: /name is empty", path.display());
    }
    Ok(Some(SchemaSet {
        name: manifest.name,
        version,
        hash: hash_files(dir, is_member)?,
    }))
}

/// SHA-256 over the set's files (the manifest and the files `is_member` names: for `Bundle`,
/// every `*.schema.json` and the API description), sorted by name, each as `name`, a newline,
/// its length in bytes in decimal, a newline and its bytes. Examples are not part of it: they
/// document, they do not define.
pub fn hash_files(dir: &Path, is_member: impl Fn(&str) -> bool) -> Result<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n == MANIFEST_FILE || is_member(n))
        .collect();
    names.sort();
    let mut hasher = Sha256::new();
    for name in names {
        let path = dir.join(&name);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        hasher.update(format!("{name}\n{}\n", bytes.len()));
        hasher.update(&bytes);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Whether going from `base` to `head` is a major release in cargo's reading of semver: the
/// major number grows, or, below 1.0.0, the minor (0.1.x → 0.2.0), or, below 0.1.0, the patch.
pub fn is_major_bump(base: &semver::Version, head: &semver::Version) -> bool {
    let key = |v: &semver::Version| match (v.major, v.minor) {
        (0, 0) => (0, 0, v.patch),
        (0, minor) => (0, minor, 0),
        (major, _) => (major, 0, 0),
    };
    key(head) > key(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> semver::Version {
        semver::Version::parse(s).unwrap()
    }

    #[test]
    fn a_minor_bump_below_one_is_major_as_cargo_reads_it() {
        assert!(is_major_bump(&v("0.1.3"), &v("0.2.0")));
        assert!(!is_major_bump(&v("0.1.3"), &v("0.1.4")));
        assert!(is_major_bump(&v("0.1.3"), &v("1.0.0")));
        assert!(!is_major_bump(&v("1.2.0"), &v("1.3.0")));
        assert!(is_major_bump(&v("1.2.0"), &v("2.0.0")));
        assert!(is_major_bump(&v("0.0.1"), &v("0.0.2")));
        assert!(!is_major_bump(&v("0.2.0"), &v("0.2.0")));
    }
}
