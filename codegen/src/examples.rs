//! Example documents: the fixtures `schemas/examples/<Document>/valid/*.json` that the test
//! suite already checks against the validators, so every example shown is known to be valid.
//! The reference site shows them and the OpenAPI documents carry them as their bodies'
//! `examples`.

use std::path::Path;

use anyhow::{Context, Result};

pub use crate::config::EXAMPLES_DIR;

/// One example document, shown on its document's page and published beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    pub document: String,
    /// The fixture's file name, e.g. `minimal.json`.
    pub file: String,
    /// The fixture's name without `.json`, e.g. `minimal`.
    pub name: String,
    /// The fixture's text, exactly as in the repository.
    pub text: String,
}

impl Example {
    /// Where the example is published, relative to the site root.
    pub fn site_path(&self) -> String {
        format!("examples/{}/{}", self.document, self.file)
    }
}

/// The valid fixtures of `document`, sorted by file name; none when the folder is missing.
pub fn load(examples_dir: &Path, document: &str) -> Result<Vec<Example>> {
    let dir = examples_dir.join(document).join("valid");
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let path = dir.join(&file);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str::<serde_json::Value>(&text)
                .with_context(|| format!("{} is not JSON", path.display()))?;
            Ok(Example {
                document: document.to_string(),
                name: file.trim_end_matches(".json").to_string(),
                file,
                text,
            })
        })
        .collect()
}
