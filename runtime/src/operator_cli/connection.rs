//! Where the operator commands find the controller and their credentials: each setting from
//! its flag, else its environment variable, else the config file, else its default
//! (docs/operator-cli.md, "Connecting").

use std::path::{Path, PathBuf};

use fleetwire_client::{BearerToken, Client};
use serde::Deserialize;

/// The controller's default address, as the controller listens by default.
pub const DEFAULT_URL: &str = "https://localhost:9203";

/// The connection flags every operator command takes (`fleetwire nodes|vms|fleet`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConnectionArgs {
    /// The controller (https://HOST:9203; http:// only for a --plain-http controller).
    #[arg(long, env = "FLEETWIRE_URL")]
    pub url: Option<String>,
    /// The fleet CA's certificate (PEM), the only root the controller's certificate is
    /// checked against.
    #[arg(long, env = "FLEETWIRE_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// A file holding the operator bearer token (the token alone, as `fleetwire token
    /// operator --file` and `fleetwire up` write it); never given on the command line.
    #[arg(long, env = "FLEETWIRE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// The config file [default: $XDG_CONFIG_HOME/fleetwire/config.toml, or
    /// ~/.config/fleetwire/config.toml].
    #[arg(long, env = "FLEETWIRE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Speak plain HTTP to a controller started with --plain-http (PPN's mode: no TLS, no
    /// token); the URL must then be http://.
    #[arg(long, env = "FLEETWIRE_PLAIN_HTTP")]
    pub plain_http: bool,
}

/// The config file: the same three settings. Relative paths are relative to the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    url: Option<String>,
    ca_file: Option<PathBuf>,
    token_file: Option<PathBuf>,
    #[serde(default)]
    plain_http: bool,
}

/// What the commands connect with, resolved.
#[derive(Debug, Clone)]
pub struct Connection {
    pub url: reqwest::Url,
    /// The fleet CA (PEM); `None` over plain HTTP only.
    pub ca_pem: Option<String>,
    /// The operator token; `None` when none is configured (a plain-HTTP controller takes none).
    pub token: Option<BearerToken>,
}

impl Connection {
    /// The typed client for these settings.
    pub fn client(&self) -> Result<Client, fleetwire_client::BuildError> {
        let mut builder = Client::builder(self.url.as_str());
        builder = match &self.ca_pem {
            Some(ca) => builder.fleet_ca_pem(ca.clone()),
            None => builder.plain_http(),
        };
        if let Some(token) = &self.token {
            builder = builder.operator_token(token.clone());
        }
        // A mistyped field is refused by name, never set aside (issue 30).
        builder
            .field_validation(fleetwire_types::FieldValidation::Strict)
            .build()
    }
}

/// Why the settings do not make a connection; each names the setting and where it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("config file {path}: {reason}")]
    Config { path: PathBuf, reason: String },
    #[error("controller URL {url:?} ({from}): {reason}")]
    Url {
        url: String,
        from: &'static str,
        reason: String,
    },
    #[error("{what} {path} ({from}): {reason}")]
    File {
        what: &'static str,
        path: PathBuf,
        from: &'static str,
        reason: String,
    },
    #[error(
        "{0} is https://, which needs the fleet CA: give --ca-file (or FLEETWIRE_CA_FILE, or \
         ca_file in the config file)"
    )]
    NoCa(reqwest::Url),
    #[error(
        "{0} is plain http://, which only a --plain-http controller speaks: choose it with \
         --plain-http (or FLEETWIRE_PLAIN_HTTP=true, or plain_http = true in the config file)"
    )]
    PlainHttpNotChosen(reqwest::Url),
    #[error("--plain-http was chosen, but {0} is not an http:// address")]
    PlainHttpScheme(reqwest::Url),
    #[error(
        "{0} is plain http://: the operator token is never sent over plain HTTP (a --plain-http \
         controller takes no token); use https:// or leave the token out"
    )]
    TokenOverPlainHttp(reqwest::Url),
}

/// A setting and where it came from, for error messages.
struct Setting<T> {
    value: T,
    from: &'static str,
}

fn pick<T>(flag: Option<T>, file: Option<T>) -> Option<Setting<T>> {
    // clap reads both the flag and its environment variable into the same field.
    flag.map(|value| Setting {
        value,
        from: "flag or environment",
    })
    .or_else(|| {
        file.map(|value| Setting {
            value,
            from: "config file",
        })
    })
}

impl ConnectionArgs {
    /// Resolves the settings: flags and environment first, then the config file.
    pub fn resolve(&self) -> Result<Connection, ConnectionError> {
        let (file, file_dir) = self.config_file()?;
        let url = pick(self.url.clone(), file.url).unwrap_or(Setting {
            value: DEFAULT_URL.to_string(),
            from: "default",
        });
        let ca = pick(self.ca_file.clone(), file.ca_file.map(|p| file_dir.join(p)));
        let token = pick(
            self.token_file.clone(),
            file.token_file.map(|p| file_dir.join(p)),
        );
        let parsed = parse_url(&url)?;
        let plain = parsed.scheme() == "http";
        match (plain, self.plain_http || file.plain_http) {
            (true, false) => return Err(ConnectionError::PlainHttpNotChosen(parsed)),
            (false, true) => return Err(ConnectionError::PlainHttpScheme(parsed)),
            _ => {}
        }
        let ca_pem = match (plain, ca) {
            (true, _) => None,
            (false, None) => return Err(ConnectionError::NoCa(parsed)),
            (false, Some(ca)) => Some(read_text("CA file", &ca)?),
        };
        let token = match token {
            None => None,
            Some(_) if plain => return Err(ConnectionError::TokenOverPlainHttp(parsed)),
            Some(file) => Some(read_token(&file)?),
        };
        Ok(Connection {
            url: parsed,
            ca_pem,
            token,
        })
    }

    /// The config file's settings and the folder its relative paths start from. A file named
    /// explicitly must exist; the default one may be missing.
    fn config_file(&self) -> Result<(ConfigFile, PathBuf), ConnectionError> {
        let (path, explicit) = match &self.config {
            Some(path) => (path.clone(), true),
            None => match default_config_path() {
                Some(path) => (path, false),
                None => return Ok((ConfigFile::default(), PathBuf::new())),
            },
        };
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((ConfigFile::default(), dir));
            }
            Err(e) => {
                return Err(ConnectionError::Config {
                    path,
                    reason: e.to_string(),
                })
            }
        };
        let file = toml::from_str(&text).map_err(|e| ConnectionError::Config {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        Ok((file, dir))
    }
}

fn default_config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("fleetwire").join("config.toml"))
}

fn parse_url(url: &Setting<String>) -> Result<reqwest::Url, ConnectionError> {
    let invalid = |reason: String| ConnectionError::Url {
        url: url.value.clone(),
        from: url.from,
        reason,
    };
    let parsed = reqwest::Url::parse(&url.value).map_err(|e| invalid(e.to_string()))?;
    match parsed.scheme() {
        "https" | "http" if parsed.host().is_some() => Ok(parsed),
        "https" | "http" => Err(invalid("it names no host".into())),
        other => Err(invalid(format!("the scheme is {other}, not https or http"))),
    }
}

fn read_text(what: &'static str, file: &Setting<PathBuf>) -> Result<String, ConnectionError> {
    std::fs::read_to_string(&file.value).map_err(|e| ConnectionError::File {
        what,
        path: file.value.clone(),
        from: file.from,
        reason: e.to_string(),
    })
}

fn read_token(file: &Setting<PathBuf>) -> Result<BearerToken, ConnectionError> {
    let text = read_text("token file", file)?;
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err(ConnectionError::File {
            what: "token file",
            path: file.value.clone(),
            from: file.from,
            reason: "it must hold the token alone, on one line".to_string(),
        });
    }
    Ok(BearerToken::new(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(dir: &Path) -> ConnectionArgs {
        ConnectionArgs {
            config: Some(dir.join("config.toml")),
            ..ConnectionArgs::default()
        }
    }

    #[test]
    fn flags_win_over_the_config_file_whose_paths_are_relative_to_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), "file ca").unwrap();
        std::fs::write(dir.path().join("flag-ca.pem"), "flag ca").unwrap();
        std::fs::write(dir.path().join("token"), "secret-token\n").unwrap();
        std::fs::write(
            dir.path().join("config.toml"),
            "url = \"https://controller.example:9203\"\nca_file = \"ca.pem\"\ntoken_file = \"token\"\n",
        )
        .unwrap();
        let from_file = args(dir.path()).resolve().unwrap();
        assert_eq!(from_file.url.as_str(), "https://controller.example:9203/");
        assert_eq!(from_file.ca_pem.as_deref(), Some("file ca"));
        assert_eq!(from_file.token.unwrap().expose(), "secret-token");

        let flagged = ConnectionArgs {
            url: Some("https://other:9203".into()),
            ca_file: Some(dir.path().join("flag-ca.pem")),
            ..args(dir.path())
        }
        .resolve()
        .unwrap();
        assert_eq!(flagged.url.host_str(), Some("other"));
        assert_eq!(flagged.ca_pem.as_deref(), Some("flag ca"));
    }

    #[test]
    fn bad_settings_say_which_and_where() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), "url = 3\n").unwrap();
        let err = args(dir.path()).resolve().unwrap_err().to_string();
        assert!(err.contains("config.toml") && err.contains("url"), "{err}");

        std::fs::write(dir.path().join("config.toml"), "colour = \"blue\"\n").unwrap();
        let err = args(dir.path()).resolve().unwrap_err().to_string();
        assert!(err.contains("colour"), "{err}");

        std::fs::write(dir.path().join("config.toml"), "").unwrap();
        let https_without_ca = args(dir.path()).resolve().unwrap_err();
        assert!(matches!(https_without_ca, ConnectionError::NoCa(_)));

        let missing = ConnectionArgs {
            url: Some("https://c:9203".into()),
            ca_file: Some(dir.path().join("nope.pem")),
            ..args(dir.path())
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(
            missing.contains("nope.pem") && missing.contains("flag"),
            "{missing}"
        );

        let ftp = ConnectionArgs {
            url: Some("ftp://c".into()),
            ..args(dir.path())
        };
        assert!(ftp.resolve().unwrap_err().to_string().contains("ftp"));
    }

    #[test]
    fn the_token_is_never_sent_over_plain_http_nor_shown() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), "").unwrap();
        std::fs::write(dir.path().join("token"), "top-secret").unwrap();
        let plain_url = ConnectionArgs {
            url: Some("http://127.0.0.1:9203".into()),
            ..args(dir.path())
        };
        let unchosen = plain_url.resolve().unwrap_err();
        assert!(matches!(unchosen, ConnectionError::PlainHttpNotChosen(_)));
        let chosen = ConnectionArgs {
            plain_http: true,
            ..plain_url.clone()
        };
        assert!(chosen.resolve().unwrap().ca_pem.is_none());
        let plain = ConnectionArgs {
            token_file: Some(dir.path().join("token")),
            ..chosen
        }
        .resolve()
        .unwrap_err();
        assert!(matches!(plain, ConnectionError::TokenOverPlainHttp(_)));
        assert!(!plain.to_string().contains("top-secret"));

        std::fs::write(dir.path().join("token"), "two words").unwrap();
        std::fs::write(dir.path().join("ca.pem"), "ca").unwrap();
        let err = ConnectionArgs {
            url: Some("https://c:9203".into()),
            ca_file: Some(dir.path().join("ca.pem")),
            token_file: Some(dir.path().join("token")),
            ..args(dir.path())
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(err.contains("alone") && !err.contains("two words"), "{err}");
    }
}
