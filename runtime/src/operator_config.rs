//! Where every command that reads a fleet's config or state finds it (docs/operator-cli.md,
//! "Connecting"), one resolution for all: the file named by `--config` or `FLEETWIRE_CONFIG`,
//! else `./.fleetwire/operator.toml` (what `fleetwire up` writes into its directory, found
//! from the directory it ran in), else the user's `$XDG_CONFIG_HOME/fleetwire/config.toml`.
//! The operator commands (`nodes`, `vms`, `fleet`) take their connection from it, `fleetwire
//! token` the controller's state directory and operator token file; a flag or its environment
//! variable wins over the file for each setting.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The file `fleetwire up` writes into its directory.
pub const FILE_NAME: &str = "operator.toml";
/// `fleetwire up`'s directory by default, relative to where it runs.
pub const UP_DIR: &str = ".fleetwire";

/// The settings a config file may hold; relative paths are relative to the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The controller (https://HOST:9203).
    pub url: Option<String>,
    /// The fleet CA's certificate (PEM).
    pub ca_file: Option<PathBuf>,
    /// A file holding the operator bearer token alone.
    pub token_file: Option<PathBuf>,
    #[serde(default)]
    pub plain_http: bool,
    /// The controller's state directory (its `--data-dir`), on the controller host.
    pub data_dir: Option<PathBuf>,
    /// The controller's `--operator-token-file`, which `fleetwire token operator` adds to.
    pub operator_token_file: Option<PathBuf>,
}

/// The config file found, and how.
#[derive(Debug, Default)]
pub struct Found {
    pub file: ConfigFile,
    /// Where it is; `None` when there is none (no flag, none here, none of the user's).
    pub path: Option<PathBuf>,
}

impl Found {
    /// Where a setting read from the file comes from, for messages.
    pub fn origin(&self) -> String {
        match &self.path {
            Some(path) => format!("config file {}", path.display()),
            None => "config file".to_string(),
        }
    }
}

/// Why the config file cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("config file {path}: {reason}")]
pub struct ConfigError {
    pub path: PathBuf,
    pub reason: String,
}

/// The config file: `explicit` (from `--config` or `FLEETWIRE_CONFIG`, which must exist),
/// else `./.fleetwire/operator.toml`, else the user's (each may be missing).
pub fn load(explicit: Option<&Path>) -> Result<Found, ConfigError> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => match std::env::current_dir()
            .ok()
            .and_then(|cwd| discovered_in(&cwd))
            .or_else(user_config_path)
        {
            Some(path) => path,
            None => return Ok(Found::default()),
        },
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if explicit.is_none() && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Found::default());
        }
        Err(e) => {
            return Err(ConfigError {
                path,
                reason: e.to_string(),
            })
        }
    };
    let mut file: ConfigFile = toml::from_str(&text).map_err(|e| ConfigError {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    for setting in [
        &mut file.ca_file,
        &mut file.token_file,
        &mut file.data_dir,
        &mut file.operator_token_file,
    ] {
        if let Some(relative) = setting.take() {
            *setting = Some(dir.join(relative));
        }
    }
    Ok(Found {
        file,
        path: Some(path),
    })
}

/// `DIR/.fleetwire/operator.toml`, when `fleetwire up` ran in `dir` (the file exists).
pub fn discovered_in(dir: &Path) -> Option<PathBuf> {
    let path = dir.join(UP_DIR).join(FILE_NAME);
    path.is_file().then(|| path.canonicalize().unwrap_or(path))
}

/// `$XDG_CONFIG_HOME/fleetwire/config.toml`, or `~/.config/fleetwire/config.toml`.
fn user_config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("fleetwire").join("config.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_in_the_file_are_relative_to_it_and_unknown_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.toml");
        std::fs::write(
            &path,
            "url = \"https://c:9203\"\nca_file = \"ca.pem\"\ndata_dir = \"/srv/fw\"\n",
        )
        .unwrap();
        let found = load(Some(&path)).unwrap();
        assert_eq!(found.file.ca_file, Some(dir.path().join("ca.pem")));
        assert_eq!(found.file.data_dir, Some(PathBuf::from("/srv/fw")));
        assert!(found.origin().contains("fleet.toml"));

        std::fs::write(&path, "colour = \"blue\"\n").unwrap();
        let err = load(Some(&path)).unwrap_err().to_string();
        assert!(
            err.contains("colour") && err.contains("fleet.toml"),
            "{err}"
        );
        let missing = load(Some(&dir.path().join("nope.toml"))).unwrap_err();
        assert!(missing.to_string().contains("nope.toml"));
    }

    #[test]
    fn up_s_directory_is_found_from_where_up_ran() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(discovered_in(dir.path()), None);
        std::fs::create_dir(dir.path().join(UP_DIR)).unwrap();
        std::fs::write(dir.path().join(UP_DIR).join(FILE_NAME), "").unwrap();
        assert_eq!(
            discovered_in(dir.path()),
            Some(
                dir.path()
                    .join(UP_DIR)
                    .join(FILE_NAME)
                    .canonicalize()
                    .unwrap()
            )
        );
    }
}
