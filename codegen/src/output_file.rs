//! Writing a generated file only when its content changed, so cargo (and anything watching
//! the file's time) sees no needless change. Every writer of generated output uses it.

use std::path::Path;

use anyhow::{Context, Result};

/// Writes `content` unless the file already holds it (so cargo sees no needless change).
pub fn write_if_changed(path: &Path, content: impl AsRef<[u8]>) -> Result<bool> {
    let content = content.as_ref();
    if std::fs::read(path).is_ok_and(|c| c == content) {
        return Ok(false);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, content).with_context(|| format!("writing {}", path.display()))?;
    Ok(true)
}
