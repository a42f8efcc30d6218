//! `fleetwire controller`'s command line: every setting a flag with a `FLEETWIRE_*`
//! environment fallback ([`ControllerArgs`]), as given; `Settings::from_args` checks them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli_values::parse_duration;
use crate::store::open::{parse_db, Database};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Whether `GET /metrics` asks for an operator token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsAuth {
    /// An operator token of either scope (secure mode; --plain-http asks for nothing).
    Token,
    /// Open to anyone who reaches the port, as `/healthz` is.
    None,
}

/// `fleetwire controller`: every setting is a flag with a `FLEETWIRE_*` environment fallback.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    /// Address to serve the API on (the PPN controller port is 9203).
    #[arg(long, env = "FLEETWIRE_LISTEN", default_value = "0.0.0.0:9203")]
    pub listen: SocketAddr,
    /// Directory for the controller's state (the default database lives here).
    #[arg(long, env = "FLEETWIRE_DATA_DIR", default_value = "/var/lib/fleetwire")]
    pub data_dir: PathBuf,
    /// The database: a SQLite file, or postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=…]
    /// for PostgreSQL (docs/controller.md, "The database") [default:
    /// <data-dir>/controller.sqlite3].
    /// Text, parsed by [`ControllerArgs::database`]: clap's own refusal would quote the value,
    /// password and all.
    #[arg(long, env = "FLEETWIRE_DB")]
    pub db: Option<String>,
    /// On PostgreSQL: how long the leader's lease lasts unrenewed (renewed every fifth of it);
    /// a standby takes over at most this long after a leader stops renewing, at once when its
    /// connection is gone.
    #[arg(long, env = "FLEETWIRE_LEASE_TTL", default_value = "5s", value_parser = parse_duration)]
    pub lease_ttl: Duration,
    /// On PostgreSQL: the URL other controllers redirect requests to while this one leads
    /// [default: https:// (http:// with --plain-http) this host's name and --listen's port].
    #[arg(long, env = "FLEETWIRE_ADVERTISE_URL")]
    pub advertise_url: Option<reqwest::Url>,
    /// Serve plain HTTP and authenticate nobody, exactly as a PPN controller does: for fleets
    /// of unmodified PPN agents. Without it the controller serves HTTPS, takes nodes only with
    /// the certificates it issued them and operators only with bearer tokens (docs/security.md).
    #[arg(long, env = "FLEETWIRE_PLAIN_HTTP")]
    pub plain_http: bool,
    /// Directory of the node CA (ca.pem, ca.key), created on first use, or an operator's own CA
    /// placed there [default: <data-dir>/ca; with --plain-http, none: no node certificates].
    #[arg(long, env = "FLEETWIRE_CA_DIR")]
    pub ca_dir: Option<PathBuf>,
    /// Operator bearer tokens, one `token,name,scope` line each (scope `admin` or `read-only`),
    /// in a file only its owner may read; `fleetwire token operator` adds one. Without it every
    /// operator route answers 401 (secure mode).
    #[arg(long, env = "FLEETWIRE_OPERATOR_TOKEN_FILE")]
    pub operator_token_file: Option<PathBuf>,
    /// Whether `GET /metrics` asks for an operator token.
    #[arg(
        long,
        env = "FLEETWIRE_METRICS_AUTH",
        value_enum,
        default_value = "token"
    )]
    pub metrics_auth: MetricsAuth,
    /// More names (DNS names or IP addresses) for the controller's HTTPS certificate, besides
    /// this host's name, `localhost` and every address of its interfaces.
    #[arg(long = "tls-name", env = "FLEETWIRE_TLS_NAMES", value_delimiter = ',')]
    pub tls_names: Vec<String>,
    /// Validity of the node certificates the CA issues.
    #[arg(long, env = "FLEETWIRE_CERT_VALIDITY", default_value = "30d", value_parser = parse_duration)]
    pub cert_validity: Duration,
    /// Validity of the controller's own certificates (its HTTPS server certificate and its
    /// client certificate towards the agents), renewed at two thirds of it.
    #[arg(long, env = "FLEETWIRE_OWN_CERT_VALIDITY", default_value = "30d", value_parser = parse_duration)]
    pub own_cert_validity: Duration,
    /// A node silent this long (by the controller's receive time) becomes "unreachable".
    #[arg(long, env = "FLEETWIRE_STALE_AFTER", default_value = "30s", value_parser = parse_duration)]
    pub stale_after: Duration,
    /// An unreachable node silent this long is deleted.
    #[arg(long, env = "FLEETWIRE_FORGET_AFTER", default_value = "24h", value_parser = parse_duration)]
    pub forget_after: Duration,
    /// Disk-cordon a node whose reported free disk drops below this many GB.
    #[arg(long, env = "FLEETWIRE_DISK_CORDON_BELOW", default_value_t = 20)]
    pub disk_cordon_below: u64,
    /// Clear the disk cordon once free disk is back at this many GB or more (must be higher).
    #[arg(long, env = "FLEETWIRE_DISK_UNCORDON_ABOVE", default_value_t = 40)]
    pub disk_uncordon_above: u64,
    /// Disk reservations on a node may reach total_disk_gb times this.
    #[arg(long, env = "FLEETWIRE_DISK_OVERCOMMIT_RATIO", default_value_t = 2.0)]
    pub disk_overcommit_ratio: f64,
    /// Longest time a request may take before it is answered with `timeout`.
    #[arg(long, env = "FLEETWIRE_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Longest time a call to a node agent or runtime may take.
    #[arg(long, env = "FLEETWIRE_AGENT_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub agent_timeout: Duration,
    /// How often the staleness sweep runs.
    #[arg(long, env = "FLEETWIRE_SWEEP_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub sweep_interval: Duration,
    /// How often the disk ledger is recomputed from the VM records.
    #[arg(long, env = "FLEETWIRE_SELF_HEAL_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub self_heal_interval: Duration,
    /// How often each node's runtime is probed for its engine version.
    #[arg(long, env = "FLEETWIRE_PROBE_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub probe_interval: Duration,
    /// Heartbeat-derived changes are written at most this long after they happen, plus the
    /// time of the write itself, which the write-behind queue's budget keeps under half of
    /// this (at most 600ms, so a change reaches the store within 1 s).
    #[arg(long, env = "FLEETWIRE_FLUSH_INTERVAL", default_value = "500ms", value_parser = parse_duration)]
    pub flush_interval: Duration,
    /// Threads that serve requests and run the periodic jobs (the async runtime's workers);
    /// by default one per CPU this process may use. Where other busy programs share the
    /// machine's cores, fewer workers than cores keep a worker from being preempted with
    /// requests queued on it: the tail latency that costs (docs/performance.md, "Three
    /// campaigns of 2026-12-04").
    #[arg(long, env = "FLEETWIRE_WORKER_THREADS",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub worker_threads: Option<u16>,
    /// Port of the agents' local API for a node that never says which (PPN agents do not):
    /// spawn and delete calls go to wg_ip on this port. 9220 is what PPN controllers call and
    /// PPN's host setup runs its agents on; the variable is PPN's own, so a PPN controller's
    /// environment carries over (docs/controller.md).
    #[arg(long, env = "VM_HOST_SPAWN_PORT", default_value_t = 9220,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub default_spawn_port: u16,
    /// Log format.
    #[arg(long, env = "FLEETWIRE_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

impl ControllerArgs {
    /// The defaults, as `fleetwire controller` with no flags would have them.
    pub fn defaults() -> ControllerArgs {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: ControllerArgs,
        }
        <Wrapper as clap::Parser>::try_parse_from(["controller"])
            .expect("the defaults parse")
            .args
    }
}

impl ControllerArgs {
    /// The database `--db` names (the data directory's SQLite file when unset), or why it
    /// names none (any password shown as `***`).
    pub fn database(&self) -> Result<Database, String> {
        parse_db(self.db.as_deref(), &self.data_dir)
    }
}
