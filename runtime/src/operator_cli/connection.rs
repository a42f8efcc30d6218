//! Where the operator commands find the controller and their credentials: each setting from
//! its flag, else its environment variable, else the config file (found as
//! `crate::operator_config` finds it for every command), else its default
//! (docs/operator-cli.md, "Connecting").

use std::path::PathBuf;

use fleetwire_client::{BearerToken, Client};

use crate::operator_config::{self, ConfigError};

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
    /// The config file [default: ./.fleetwire/operator.toml, which `fleetwire up` writes, when
    /// it is there; else $XDG_CONFIG_HOME/fleetwire/config.toml, or
    /// ~/.config/fleetwire/config.toml].
    #[arg(long, env = "FLEETWIRE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Speak plain HTTP to a controller started with --plain-http (PPN's mode: no TLS, no
    /// token); the URL must then be http://.
    #[arg(long, env = "FLEETWIRE_PLAIN_HTTP")]
    pub plain_http: bool,
}

/// What the commands connect with, resolved.
#[derive(Debug, Clone)]
pub struct Connection {
    pub url: reqwest::Url,
    /// The fleet CA (PEM); `None` over plain HTTP only.
    pub ca_pem: Option<String>,
    /// The operator token; `None` when none is configured (a plain-HTTP controller takes none).
    pub token: Option<BearerToken>,
    /// The file the fleet CA was read from and where that was set, for messages.
    pub ca_file: Option<(PathBuf, String)>,
}

impl Connection {
    /// The typed client for these settings.
    /// A CA file that holds no certificate is named, with where it was set.
    pub fn client(&self) -> Result<Client, ConnectionError> {
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
            .map_err(|e| match (e, &self.ca_file) {
                (fleetwire_client::BuildError::FleetCa(reason), Some((path, from))) => {
                    ConnectionError::File {
                        what: "CA file",
                        path: path.clone(),
                        from: from.clone(),
                        reason: format!(
                        "{reason}: give the fleet CA's certificate (ca.pem in the controller's \
                         CA directory, <data-dir>/ca/ca.pem)"
                    ),
                    }
                }
                (other, _) => ConnectionError::Client(other),
            })
    }
}

/// Why the settings do not make a connection; each names the setting and where it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("controller URL {url:?} ({from}): {reason}")]
    Url {
        url: String,
        from: String,
        reason: String,
    },
    #[error("{what} {path} ({from}): {reason}")]
    File {
        what: &'static str,
        path: PathBuf,
        from: String,
        reason: String,
    },
    #[error(
        "{url} is https://, which needs the fleet CA: give --ca-file (or FLEETWIRE_CA_FILE, or \
         ca_file in the config file); {config}"
    )]
    NoCa { url: reqwest::Url, config: String },
    /// An http:// URL without --plain-http: what the controller at that address speaks was
    /// asked (`super::transport::plain_or_tls`), so the advice fits it.
    #[error("{0}")]
    PlainHttpNotChosen(String),
    #[error("--plain-http was chosen, but {0} is not an http:// address")]
    PlainHttpScheme(reqwest::Url),
    #[error(
        "{0} is plain http://: the operator token is never sent over plain HTTP (a --plain-http \
         controller takes no token); use https:// or leave the token out"
    )]
    TokenOverPlainHttp(reqwest::Url),
    #[error("{0}")]
    Client(fleetwire_client::BuildError),
}

/// A setting and where it came from, for error messages.
struct Setting<T> {
    value: T,
    from: String,
}

fn pick<T>(flag: Option<T>, file: Option<T>, origin: &str) -> Option<Setting<T>> {
    // clap reads both the flag and its environment variable into the same field.
    flag.map(|value| Setting {
        value,
        from: "flag or environment".to_string(),
    })
    .or_else(|| {
        file.map(|value| Setting {
            value,
            from: origin.to_string(),
        })
    })
}

impl ConnectionArgs {
    /// Resolves the settings: flags and environment first, then the config file.
    pub fn resolve(&self) -> Result<Connection, ConnectionError> {
        let found = operator_config::load(self.config.as_deref())?;
        let origin = found.origin();
        let file = found.file;
        let url = pick(self.url.clone(), file.url, &origin).unwrap_or(Setting {
            value: DEFAULT_URL.to_string(),
            from: "default".to_string(),
        });
        let ca = pick(self.ca_file.clone(), file.ca_file, &origin);
        let token = pick(self.token_file.clone(), file.token_file, &origin);
        let parsed = parse_url(&url)?;
        let plain = parsed.scheme() == "http";
        match (plain, self.plain_http || file.plain_http) {
            (true, false) => {
                return Err(ConnectionError::PlainHttpNotChosen(
                    super::transport::plain_or_tls(&parsed),
                ))
            }
            (false, true) => return Err(ConnectionError::PlainHttpScheme(parsed)),
            _ => {}
        }
        let ca_pem = match (plain, &ca) {
            (true, _) => None,
            (false, None) => {
                let config = match &found.path {
                    Some(path) => format!("the config file used is {}", path.display()),
                    None => "no config file was found (neither ./.fleetwire/operator.toml, \
                             which `fleetwire up` writes, nor the user's)"
                        .to_string(),
                };
                return Err(ConnectionError::NoCa {
                    url: parsed,
                    config,
                });
            }
            (false, Some(ca)) => Some(read_text("CA file", ca)?),
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
            ca_file: ca.map(|ca| (ca.value, ca.from)),
        })
    }
}

fn parse_url(url: &Setting<String>) -> Result<reqwest::Url, ConnectionError> {
    let invalid = |reason: String| ConnectionError::Url {
        url: url.value.clone(),
        from: url.from.clone(),
        reason,
    };
    // `127.0.0.1:9203` is no URL at all ("relative URL without a base") and `localhost:9203`
    // one of the scheme `localhost`: both lack the scheme, which is what to say.
    let no_scheme = |error: String| {
        invalid(format!(
            "it has no scheme: write https://{} (http:// only for a controller started with \
             --plain-http) ({error})",
            url.value
        ))
    };
    let parsed = match reqwest::Url::parse(&url.value) {
        Ok(parsed) => parsed,
        Err(e) if !url.value.contains("://") => return Err(no_scheme(e.to_string())),
        Err(e) => return Err(invalid(e.to_string())),
    };
    if !url.value.contains("://") {
        return Err(no_scheme(format!("read as the scheme {}", parsed.scheme())));
    }
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
        from: file.from.clone(),
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
            from: file.from.clone(),
            reason: "it must hold the token alone, on one line".to_string(),
        });
    }
    Ok(BearerToken::new(token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
        assert!(matches!(https_without_ca, ConnectionError::NoCa { .. }));
        assert!(https_without_ca.to_string().contains("config.toml"));

        let no_scheme = ConnectionArgs {
            url: Some("127.0.0.1:9203".into()),
            ..args(dir.path())
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(
            no_scheme.contains("write https://127.0.0.1:9203")
                && no_scheme.contains("relative URL without a base"),
            "{no_scheme}"
        );
        let host_as_scheme = ConnectionArgs {
            url: Some("localhost:9203".into()),
            ..args(dir.path())
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(
            host_as_scheme.contains("https://localhost:9203"),
            "{host_as_scheme}"
        );

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
