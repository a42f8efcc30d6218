//! `fleetwire token`: bootstrap tokens for enrolling nodes (`create`, `list`, `delete`) and
//! operator bearer tokens (`operator`), see docs/security.md.
//!
//! `create` mints a token in the controller's database on the controller host, or asks a
//! running controller for one over `POST /v1/tokens` with `--url`. Whatever is a secret (a
//! bootstrap token, an operator token) goes to stdout alone, so `TOKEN=$(fleetwire token ...)`
//! takes it; everything else goes to stderr and names tokens by id or name only.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use fleetwire_client::operations::CREATE_BOOTSTRAP_TOKEN;
use fleetwire_types::{BootstrapTokenIssued, CreateBootstrapTokenRequest, NodeId};

use crate::cli_values::parse_duration;
use crate::controller::trust::operator_tokens::{
    generate_token, valid_name, OperatorScope, OperatorTokens,
};
use crate::store::open::{open_tokens, parse_db, Database};
use crate::store::tokens::BootstrapTokenStore;

/// Shortest and longest bootstrap-token lifetimes, as `POST /v1/tokens` takes them.
pub const MIN_TTL: Duration = Duration::from_secs(60);
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// `fleetwire token`.
#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Mint a single-use bootstrap token for one node id; prints the token alone on stdout.
    Create(CreateArgs),
    /// List the bootstrap tokens in the controller's database (ids, never secrets).
    List(DatabaseArgs),
    /// Delete a bootstrap token from the controller's database, by its id.
    Delete(DeleteArgs),
    /// Add an operator bearer token to a token file; prints the token alone on stdout.
    Operator(OperatorArgs),
}

/// Where the controller's database is, as `fleetwire controller` finds it.
#[derive(Debug, Clone, clap::Args)]
pub struct DatabaseArgs {
    /// The controller's state directory.
    #[arg(long, env = "FLEETWIRE_DATA_DIR", default_value = "/var/lib/fleetwire")]
    pub data_dir: PathBuf,
    /// The controller's database, as its --db: a SQLite file or a postgres:// URL [default:
    /// <data-dir>/controller.sqlite3].
    /// Text, parsed by [`DatabaseArgs::db_path`] (clap's refusal would quote a password).
    #[arg(long, env = "FLEETWIRE_DB")]
    pub db: Option<String>,
}

impl DatabaseArgs {
    fn db_path(&self) -> Result<Database, Failure> {
        parse_db(self.db.as_deref(), &self.data_dir).map_err(Failure::Usage)
    }
}

/// `fleetwire token create`.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The only node id the token enrolls (the agent's VM_NODE_ID).
    #[arg(long, value_parser = parse_node_id)]
    pub node_id: NodeId,
    /// How long the token stays usable, from 1m to 7d.
    #[arg(long, default_value = "1h", value_parser = parse_ttl)]
    pub ttl: Duration,
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// The node CA's directory, for the hint printed [default: <data-dir>/ca].
    #[arg(long, env = "FLEETWIRE_CA_DIR")]
    pub ca_dir: Option<PathBuf>,
    /// Ask a running controller instead (https://HOST:9203), with an admin operator token.
    #[arg(long, conflicts_with = "db")]
    pub url: Option<String>,
    /// With --url: a file holding just the operator token (not the controller's
    /// `token,name,scope` file) [else env FLEETWIRE_OPERATOR_TOKEN].
    #[arg(long, requires = "url")]
    pub bearer_file: Option<PathBuf>,
    /// With --url: the CA certificate(s), PEM, that the controller's certificate chains to (the
    /// controller's <data-dir>/ca/ca.pem). Only these are trusted, never the system's roots.
    #[arg(long, requires = "url")]
    pub ca_file: Option<PathBuf>,
}

/// `fleetwire token delete`.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// The token's id: the 6 characters before the dot.
    pub token_id: String,
    #[command(flatten)]
    pub database: DatabaseArgs,
}

/// An operator token's scope on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScopeArg {
    Admin,
    ReadOnly,
}

impl From<ScopeArg> for OperatorScope {
    fn from(scope: ScopeArg) -> OperatorScope {
        match scope {
            ScopeArg::Admin => OperatorScope::Admin,
            ScopeArg::ReadOnly => OperatorScope::ReadOnly,
        }
    }
}

/// `fleetwire token operator`.
#[derive(Debug, clap::Args)]
pub struct OperatorArgs {
    /// Who the token is for (1 to 64 of A-Z, a-z, 0-9, '.', '_', '-'); shown in the
    /// controller's logs.
    #[arg(long)]
    pub name: String,
    /// What the token may do.
    #[arg(long, value_enum)]
    pub scope: ScopeArg,
    /// The token file (`fleetwire controller --operator-token-file`): created 0600 if missing,
    /// its lines kept.
    #[arg(long)]
    pub file: PathBuf,
}

fn parse_node_id(text: &str) -> Result<NodeId, String> {
    let node_id: NodeId = text
        .parse()
        .map_err(|e| format!("{text:?} is not a node id: {e}"))?;
    match crate::ids::reserved_node_id(text) {
        Some(why) => Err(format!("{text:?} is reserved: {why}")),
        None => Ok(node_id),
    }
}

/// A bootstrap token's lifetime: a duration from [`MIN_TTL`] to [`MAX_TTL`].
pub fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = parse_duration(text).map_err(|e| e.to_string())?;
    if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
        return Err(format!("{text:?} is not between 1m and 7d"));
    }
    Ok(ttl)
}

/// Entry point of `fleetwire token`. Exit codes: 0 done, 1 failed, 2 bad arguments.
pub fn run(args: TokenArgs) -> ExitCode {
    let (command, result) = match args.command {
        TokenCommand::Create(args) => ("create", create(&args)),
        TokenCommand::List(args) => ("list", list(&args)),
        TokenCommand::Delete(args) => ("delete", delete(&args)),
        TokenCommand::Operator(args) => ("operator", operator(&args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("fleetwire token {command}: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Failed(message)) => {
            eprintln!("fleetwire token {command}: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Why a subcommand failed; never holds a secret.
enum Failure {
    /// The arguments cannot work (exit 2).
    Usage(String),
    /// They could, and something failed (exit 1).
    Failed(String),
}

fn failed(message: impl std::fmt::Display) -> Failure {
    Failure::Failed(message.to_string())
}

fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn create(args: &CreateArgs) -> Result<(), Failure> {
    let (issued, ca_pem) = match &args.url {
        None => {
            let db = args.database.db_path()?;
            let store = open_existing(&db)?;
            let issued = store
                .create(&args.node_id, args.ttl, Utc::now())
                .map_err(|e| failed(format!("{db}: {e}")))?;
            let ca_dir = args
                .ca_dir
                .clone()
                .unwrap_or_else(|| args.database.data_dir.join("ca"));
            (issued.to_wire(), ca_dir.join("ca.pem"))
        }
        Some(url) => {
            let issued = create_over_api(args, url)?;
            let ca_pem = args.ca_file.clone().expect("create_over_api requires it");
            (issued, ca_pem)
        }
    };
    println!("{}", issued.token.as_str());
    eprintln!(
        "bootstrap token {} for node {} (single use) expires at {}.\n\
         On that node, give it to the agent as VM_BOOTSTRAP_TOKEN=<token>, or write it to a \
         file only the agent may read (0600) named by VM_BOOTSTRAP_TOKEN_FILE; copy {} to the \
         node and name it with VM_FLEET_CA_FILE; and set VM_FLEET_ENDPOINT=https://<controller \
         host>:9203.",
        issued.token_id.as_str(),
        issued.node_id.as_str(),
        time(issued.expires_at.utc()),
        ca_pem.display(),
    );
    Ok(())
}

/// The operator token for `--url`: the file's content, else `FLEETWIRE_OPERATOR_TOKEN`.
fn operator_token(args: &CreateArgs) -> Result<String, Failure> {
    let token = match &args.bearer_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| {
                failed(format!(
                    "cannot read the operator token file {}: {e}",
                    path.display()
                ))
            })?
            .trim()
            .to_string(),
        None => std::env::var("FLEETWIRE_OPERATOR_TOKEN")
            .map(|t| t.trim().to_string())
            .unwrap_or_default(),
    };
    if token.is_empty() {
        return Err(Failure::Usage(match &args.bearer_file {
            Some(path) => format!("the operator token file {} is empty", path.display()),
            None => "--url needs an operator token: --bearer-file FILE or \
                     FLEETWIRE_OPERATOR_TOKEN"
                .to_string(),
        }));
    }
    Ok(token)
}

fn create_over_api(args: &CreateArgs, url: &str) -> Result<BootstrapTokenIssued, Failure> {
    let base = reqwest::Url::parse(url)
        .map_err(|e| Failure::Usage(format!("--url {url:?} is not a URL: {e}")))?;
    if base.scheme() != "https" {
        return Err(Failure::Usage(format!(
            "--url {url:?} must be https://: the operator token must not cross the network in clear"
        )));
    }
    let Some(ca_file) = &args.ca_file else {
        return Err(Failure::Usage(
            "--url needs --ca-file, the CA the controller's certificate chains to \
             (<data-dir>/ca/ca.pem on the controller host)"
                .to_string(),
        ));
    };
    let token = operator_token(args)?;
    let pem = std::fs::read_to_string(ca_file)
        .map_err(|e| failed(format!("cannot read --ca-file {}: {e}", ca_file.display())))?;
    let endpoint = format!(
        "{}{}",
        url.trim_end_matches('/'),
        CREATE_BOOTSTRAP_TOKEN.path
    );
    let request = CreateBootstrapTokenRequest {
        node_id: args.node_id.clone(),
        ttl_s: Some(args.ttl.as_secs() as i64),
    };
    // Only the fleet CA, and only a server with the controller's mark (docs/security.md).
    let client = fleetwire_client::Client::builder(url)
        .fleet_ca_pem(pem)
        .operator_token(token)
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| match e {
            fleetwire_client::BuildError::FleetCa(why) => {
                failed(format!("--ca-file {}: {why}", ca_file.display()))
            }
            other => failed(format!("cannot build the HTTPS client: {other}")),
        })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(format!("cannot start the async runtime: {e}")))?;
    let answer = runtime.block_on(client.create_bootstrap_token(&request));
    // The errors show no body a secret could be in: an ApiError's code and message, or the
    // pointers and keywords of what broke the answer's schema.
    let issued = answer
        .map_err(|e| match &e {
            fleetwire_client::Error::Api { status, error, .. } => failed(format!(
                "{} {}: {}",
                status.as_u16(),
                error.code,
                error.message.as_str()
            )),
            fleetwire_client::Error::InvalidResponse { status, .. } if status.is_success() => {
                failed(format!("POST {endpoint} answered {status} with a body that is not a BootstrapTokenIssued: {e}"))
            }
            _ => failed(format!("POST {endpoint}: {e}")),
        })?
        .into_inner();
    if issued.node_id != args.node_id {
        return Err(failed(format!(
            "POST {endpoint} answered with a token for node {}, not {}: not printed",
            issued.node_id.as_str(),
            args.node_id.as_str()
        )));
    }
    Ok(issued)
}

fn list(args: &DatabaseArgs) -> Result<(), Failure> {
    let db = args.db_path()?;
    let tokens = open_existing(&db)?
        .list()
        .map_err(|e| failed(format!("{db}: {e}")))?;
    let now = Utc::now();
    println!("TOKEN_ID  NODE_ID  CREATED  EXPIRES  STATE");
    for token in tokens {
        let state = match token.used_at {
            Some(at) => format!("used at {}", time(at)),
            None if token.expires_at <= now => "expired".to_string(),
            None => "unused".to_string(),
        };
        println!(
            "{}  {}  {}  {}  {state}",
            token.token_id,
            token.node_id,
            time(token.created_at),
            time(token.expires_at)
        );
    }
    Ok(())
}

/// The token store of an existing database. Never a new one: made by this command (run as
/// root on the controller host) it would be root's, and a controller running as its own user
/// (packaging/fleetwire-controller.service) could not write it. SQLite gives the WAL files it
/// makes as root to the database's owner.
fn open_existing(db: &Database) -> Result<Arc<dyn BootstrapTokenStore>, Failure> {
    if let Database::Sqlite(path) = db {
        if !path.exists() {
            return Err(failed(format!(
                "no controller database at {} (--data-dir or --db): start the controller once, \
                 it creates it",
                path.display()
            )));
        }
    }
    open_tokens(db).map_err(failed)
}

fn delete(args: &DeleteArgs) -> Result<(), Failure> {
    // Not quoted: it might be a whole token pasted in.
    if args
        .token_id
        .parse::<fleetwire_types::BootstrapTokenId>()
        .is_err()
    {
        return Err(Failure::Usage(
            "that is not a token id: give the 6 lower-case letters and digits before the \
             token's dot (`fleetwire token list` shows them)"
                .to_string(),
        ));
    }
    let db = args.database.db_path()?;
    let deleted = open_existing(&db)?
        .delete(&args.token_id)
        .map_err(|e| failed(format!("{db}: {e}")))?;
    if !deleted {
        return Err(failed(format!(
            "no bootstrap token {} in {db}",
            args.token_id,
        )));
    }
    eprintln!("deleted bootstrap token {}", args.token_id);
    Ok(())
}

fn operator(args: &OperatorArgs) -> Result<(), Failure> {
    if !valid_name(&args.name) {
        return Err(Failure::Usage(format!(
            "--name {:?}: a name is 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-'",
            args.name
        )));
    }
    let path = &args.file;
    let mut content = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(failed(format!("cannot read {}: {e}", path.display()))),
    };
    // The file as it stands must be sound before a line is added to it.
    let existing = OperatorTokens::parse(path, &content).map_err(failed)?;
    if existing.has_name(&args.name) {
        return Err(failed(format!(
            "{} already has a token named {:?}: pick another name, or remove its line first",
            path.display(),
            args.name
        )));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| failed(format!("cannot create {}: {e}", dir.display())))?;
    }
    if !content.is_empty() && !content.ends_with('\n') {
        content.push('\n');
    }
    let token = generate_token();
    let scope = OperatorScope::from(args.scope);
    content.push_str(&format!("{token},{},{scope}\n", args.name));
    crate::atomic_file::write(path, content.as_bytes(), 0o600)
        .map_err(|e| failed(format!("cannot write {}: {e}", path.display())))?;
    println!("{token}");
    eprintln!(
        "added operator token {:?} ({scope}) to {} (mode 0600); the controller reads the file \
         named by --operator-token-file / FLEETWIRE_OPERATOR_TOKEN_FILE",
        args.name,
        path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_are_from_a_minute_to_a_week() {
        assert_eq!(parse_ttl("1m").unwrap(), MIN_TTL);
        assert_eq!(parse_ttl("7d").unwrap(), MAX_TTL);
        assert_eq!(parse_ttl("1h").unwrap(), Duration::from_secs(3600));
        for bad in ["59s", "7d 1s", "8d", "soon"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_node_id_is_checked_against_the_schema() {
        assert_eq!(parse_node_id("gpu-01.dc1").unwrap().as_str(), "gpu-01.dc1");
        assert!(parse_node_id("-bad").is_err());
    }
}
