//! Released schema sets, kept under `schemas/releases/<version>/` (docs/versioning.md,
//! "Releasing"): copies of the set's files as they were released, written by
//! `fleetwire-codegen release` and never by hand. The site's changelog compares each release
//! with the one before, and the working schemas with the last release, so building it needs
//! no git history.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::bundle::{is_set_file, Bundle};
use crate::schema_diff::{self, Diff};
use crate::schema_set::{self, MANIFEST_FILE};
use crate::wire;

/// The folder under `schemas/` that holds the releases.
pub const RELEASES_DIR: &str = "releases";

/// The git tag a release's commit carries.
pub fn tag(version: &semver::Version) -> String {
    format!("schemas-v{version}")
}

/// Every release under `schemas_dir`, oldest first; a folder whose name is not its
/// manifest's version is refused.
pub fn list(schemas_dir: &Path) -> Result<Vec<(semver::Version, PathBuf)>> {
    let dir = schemas_dir.join(RELEASES_DIR);
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if !path.is_dir() {
            continue;
        }
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let version = semver::Version::parse(&name).with_context(|| {
            format!(
                "{}: a release folder is named by its version",
                path.display()
            )
        })?;
        let set = schema_set::load(&path, is_set_file)?
            .with_context(|| format!("{}: no {MANIFEST_FILE}", path.display()))?;
        if set.version != version {
            bail!(
                "{}: its {MANIFEST_FILE} says {}, not {version}",
                path.display(),
                set.version
            );
        }
        out.push((version, path));
    }
    out.sort();
    Ok(out)
}

/// What [`release`] did.
pub enum Released {
    /// The version is released already, with the same files.
    Already(semver::Version),
    Written {
        version: semver::Version,
        dir: PathBuf,
        /// The comparison with the previous release, if there is one.
        diff: Option<Box<Diff>>,
    },
}

/// Copies the schema set under `schemas_dir` into `releases/<version>/`, after checking it
/// against the previous release (`diff`'s verdict must pass).
pub fn release(schemas_dir: &Path) -> Result<Released> {
    let head = Bundle::load(schemas_dir)?;
    wire::of_roots(&head)?;
    let set = head.set.clone().with_context(|| {
        format!(
            "{} has no {MANIFEST_FILE}: nothing to release",
            schemas_dir.display()
        )
    })?;
    let releases = list(schemas_dir)?;
    if let Some((_, dir)) = releases.iter().find(|(v, _)| *v == set.version) {
        if schema_set::hash_files(dir, is_set_file)? == set.hash {
            return Ok(Released::Already(set.version));
        }
        bail!(
            "{} is released already, with other files ({}): raise the version in {MANIFEST_FILE}",
            set.version,
            dir.display()
        );
    }
    if let Some((newer, _)) = releases.iter().find(|(v, _)| *v > set.version) {
        bail!("{} is older than the released {newer}", set.version);
    }
    let diff = match releases.last() {
        Some((version, dir)) => {
            let base = Bundle::load(dir)?;
            let diff =
                schema_diff::diff(&base, &head, &version.to_string(), &set.version.to_string());
            if !diff.verdict.ok {
                bail!(
                    "{}\nnot released: {}",
                    schema_diff::text(&diff),
                    diff.verdict.message
                );
            }
            Some(Box::new(diff))
        }
        None => None,
    };
    let target = schemas_dir.join(RELEASES_DIR).join(set.version.to_string());
    std::fs::create_dir_all(&target).with_context(|| format!("creating {}", target.display()))?;
    for entry in std::fs::read_dir(schemas_dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_file() && (is_set_file(&name) || name == MANIFEST_FILE) {
            std::fs::copy(entry.path(), target.join(&name))
                .with_context(|| format!("copying {name} into {}", target.display()))?;
        }
    }
    Ok(Released::Written {
        version: set.version,
        dir: target,
        diff,
    })
}

/// One entry of the changelog: a release (or the unreleased working set) and what changed
/// since the release before it.
#[derive(Debug, Clone)]
pub struct HistoryEntry {
    /// The version, or `None` for the unreleased changes.
    pub version: Option<semver::Version>,
    pub hash: String,
    /// Against the previous release; `None` for the first release.
    pub diff: Option<Diff>,
}

/// The changelog's entries, newest first: the unreleased changes (when the working set differs
/// from the last release), then every release against the one before it.
pub fn history(schemas_dir: &Path, current: &Bundle) -> Result<Vec<HistoryEntry>> {
    let mut entries = Vec::new();
    let mut previous: Option<(semver::Version, Bundle)> = None;
    for (version, dir) in list(schemas_dir)? {
        let bundle = Bundle::load(&dir)?;
        let hash = bundle
            .set
            .as_ref()
            .map(|s| s.hash.clone())
            .unwrap_or_default();
        let diff = previous.as_ref().map(|(v, base)| {
            schema_diff::diff(base, &bundle, &v.to_string(), &version.to_string())
        });
        entries.push(HistoryEntry {
            version: Some(version.clone()),
            hash,
            diff,
        });
        previous = Some((version, bundle));
    }
    let hash = current
        .set
        .as_ref()
        .map(|s| s.hash.clone())
        .unwrap_or_default();
    if let Some((version, base)) = &previous {
        if entries.last().is_some_and(|e| e.hash != hash) {
            entries.push(HistoryEntry {
                version: None,
                hash,
                diff: Some(schema_diff::diff(
                    base,
                    current,
                    &version.to_string(),
                    "unreleased",
                )),
            });
        }
    }
    entries.reverse();
    Ok(entries)
}
