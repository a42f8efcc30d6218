//! What a generated page says it was made from: the schema set's name, version and hash, and
//! the commit (docs/reference-site.md, "Version line").

use std::path::Path;

use crate::bundle::Bundle;
use crate::git_revision;

/// The variable that names the commit when the build has no git checkout (a source tarball,
/// a container build): `FLEETWIRE_COMMIT=…`.
pub const COMMIT_ENV: &str = "FLEETWIRE_COMMIT";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stamp {
    pub name: String,
    /// The schema set's version, or `unversioned` without a manifest.
    pub version: String,
    /// SHA-256 of the schema set's files (empty without a manifest).
    pub hash: String,
    /// The commit: git's at build time (`+changes` when `schemas/` differs from it), else
    /// `FLEETWIRE_COMMIT`, else `unknown`.
    pub commit: String,
}

impl Stamp {
    /// The hash's first 12 digits, as the pages print it (the whole is in the title).
    pub fn short_hash(&self) -> &str {
        self.hash.get(..12).unwrap_or(&self.hash)
    }
}

/// The stamp of the schema set `bundle`, read from `schemas_dir` (inside `workspace`).
pub fn of(schemas_dir: &Path, bundle: &Bundle) -> Stamp {
    let commit = git_revision::head_commit(schemas_dir)
        .or_else(|| {
            std::env::var(COMMIT_ENV)
                .ok()
                .filter(|c| !c.trim().is_empty())
        })
        .unwrap_or_else(|| "unknown".to_string());
    match &bundle.set {
        Some(set) => Stamp {
            name: set.name.clone(),
            version: set.version.to_string(),
            hash: set.hash.clone(),
            commit,
        },
        None => Stamp {
            name: "schemas".into(),
            version: "unversioned".into(),
            hash: String::new(),
            commit,
        },
    }
}
