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
    /// Which release this is (`release 0.2.0`), or that it is unreleased work after which
    /// release (`unreleased work after release 0.1.0`); empty without a manifest.
    pub release: String,
}

impl Stamp {
    /// The hash's first 12 digits, as the pages print it (the whole is in the title).
    pub fn short_hash(&self) -> &str {
        self.hash.get(..12).unwrap_or(&self.hash)
    }

    /// Whether the pages describe work not (yet) released as their version.
    pub fn unreleased(&self) -> bool {
        self.release.starts_with("unreleased")
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
            release: release_line(schemas_dir, &set.version),
        },
        None => Stamp {
            name: "schemas".into(),
            version: "unversioned".into(),
            hash: String::new(),
            commit,
            release: String::new(),
        },
    }
}

/// `release V` when `version` is released (its copy is under `schemas/releases/`), else
/// `unreleased work after release L`, L the latest release before it (docs/versioning.md,
/// "One version").
pub fn release_line(schemas_dir: &Path, version: &semver::Version) -> String {
    let releases = crate::releases::list(schemas_dir).unwrap_or_default();
    if releases.iter().any(|(released, _)| released == version) {
        return format!("release {version}");
    }
    match releases
        .iter()
        .map(|(released, _)| released)
        .filter(|released| *released < version)
        .max()
    {
        Some(last) => format!("unreleased work after release {last}"),
        None => "unreleased: no release yet".to_string(),
    }
}
