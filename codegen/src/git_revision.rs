//! A schema set as committed at a git revision, for `diff --base REV` (docs/versioning.md):
//! the top-level files of `schemas/` at that revision, written into a temporary folder that
//! `Bundle::load` reads like any other.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

fn git(workspace: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(workspace)
        .args(args)
        .output()
        .context("running git (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// The full commit id `rev` names in the repository holding `workspace`.
pub fn resolve(workspace: &Path, rev: &str) -> Result<String> {
    let spec = format!("{rev}^{{commit}}");
    let out = git(workspace, &["rev-parse", "--verify", "--quiet", &spec]).with_context(|| {
        format!(
            "`{rev}` is not a commit of the repository at {}",
            workspace.display()
        )
    })?;
    Ok(String::from_utf8_lossy(&out).trim().to_string())
}

/// Writes `schemas/`'s top-level files at `rev` into a new temporary folder.
pub fn schemas_at(workspace: &Path, rev: &str) -> Result<tempfile::TempDir> {
    let commit = resolve(workspace, rev)?;
    let listing = git(workspace, &["ls-tree", &commit, "./schemas/"])?;
    let dir = tempfile::tempdir().context("creating a temporary folder")?;
    let mut any = false;
    for line in String::from_utf8_lossy(&listing).lines() {
        // `<mode> <type> <object>\t<path>`
        let Some((meta, path)) = line.split_once('\t') else {
            continue;
        };
        if meta.split(' ').nth(1) != Some("blob") {
            continue;
        }
        let name = Path::new(path).file_name().context("a file name")?;
        let bytes = git(workspace, &["show", &format!("{commit}:./{path}")])?;
        std::fs::write(dir.path().join(name), bytes)?;
        any = true;
    }
    if !any {
        bail!("`{rev}` ({commit}) has no schemas/ folder");
    }
    Ok(dir)
}

/// The commit the checkout holding `schemas_dir` is at, with `+changes` when the folder
/// differs from it; `None` outside a git checkout.
pub fn head_commit(schemas_dir: &Path) -> Option<String> {
    let commit = resolve(schemas_dir, "HEAD").ok()?;
    let short = commit.get(..12).unwrap_or(&commit).to_string();
    let dirty = Command::new("git")
        .arg("-C")
        .arg(schemas_dir)
        .args(["status", "--porcelain", "--", "."])
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    Some(if dirty {
        format!("{short}+changes")
    } else {
        short
    })
}
