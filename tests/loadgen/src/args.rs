//! `fleetwire-loadgen`'s flags, and what they come to once checked together ([`Plan`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;

use fleetwire::cli_values::parse_duration;

/// The environment variable an operator token can come in instead of `--operator-token-file`.
/// Not a clap `env`: clap prints an `env` value in `--help`, and a token is never printed
/// (docs/security.md).
pub const OPERATOR_TOKEN_ENV: &str = "FLEETWIRE_LOADGEN_OPERATOR_TOKEN";

/// Simulate many nodes heartbeating against a controller and report throughput and latency.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "fleetwire-loadgen", version)]
pub struct LoadgenArgs {
    /// The controller's base URL: `http://` for plain HTTP, `https://` for mTLS (every
    /// simulated node enrolls with a bootstrap token and heartbeats with its own certificate).
    #[arg(
        long,
        env = "FLEETWIRE_LOADGEN_URL",
        default_value = "http://127.0.0.1:9203"
    )]
    pub url: String,
    /// The fleet CA's certificate (`<data-dir>/ca/ca.pem` of the controller), the only one
    /// trusted for the controller's HTTPS certificate. Required with an `https://` URL.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// A file holding an admin operator token and nothing else, for minting the simulated
    /// nodes' bootstrap tokens and reading `GET /v1/fleet`; or the token in
    /// `FLEETWIRE_LOADGEN_OPERATOR_TOKEN`. Required with an `https://` URL.
    #[arg(long)]
    pub operator_token_file: Option<PathBuf>,
    /// Simulated nodes; each gets its own node id, and all are enrolled before measuring.
    #[arg(long, default_value_t = 10_000)]
    pub nodes: usize,
    /// Keep-alive connections sending heartbeats back to back (without
    /// `--connection-per-node`; with it, they carry the plain-HTTP enrolment only).
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Give every simulated node a keep-alive connection of its own, on which it sends only
    /// its own heartbeats, back to back, as a real fleet's nodes do. Implied by `https://`: a
    /// TLS connection speaks for the one node whose certificate it presented.
    #[arg(long)]
    pub connection_per_node: bool,
    /// After the measured phase, close every node's connection at once, reconnect them all at
    /// once (a full TCP and TLS handshake each, no session resumption) and send one heartbeat
    /// each: how long until the last one is answered. Needs a connection per node; a node
    /// that does not reconnect fails the run.
    #[arg(long)]
    pub reconnect_storm: bool,
    /// How long to measure.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// How long the heartbeats run before measuring starts, so that the measured phase is the
    /// steady state: every node has been seen since its enrolment, and the controller's
    /// first full batches after it are written.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Give every heartbeat a new `ram_used_mb`, as a live host's would, so that each one
    /// changes the node's record (and its stored row) instead of only its contact time.
    #[arg(long)]
    pub changing_figures: bool,
    /// Threads sending heartbeats (each runs its share of the connections).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Cap on heartbeats per second over all connections (unlimited when absent).
    #[arg(long)]
    pub rate: Option<u64>,
    /// VMs each simulated node reports in its heartbeats.
    #[arg(long, default_value_t = 1)]
    pub vms_per_node: usize,
    /// How often `GET /v1/fleet` is read (and timed) while the heartbeats run; `0s` for never.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub fleet_every: Duration,
    /// `GET /v1/fleet` requests timed after the heartbeat phase.
    #[arg(long, default_value_t = 20)]
    pub fleet_samples: usize,
}

/// How the load generator reaches the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Plain,
    /// HTTPS; nodes present client certificates, operators bearer tokens.
    Mtls,
}

impl Transport {
    pub fn label(self) -> &'static str {
        match self {
            Transport::Plain => "plain HTTP",
            Transport::Mtls => "mTLS",
        }
    }
}

/// The flags checked together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub transport: Transport,
    pub per_node: bool,
    /// Connections carrying the heartbeats of the measured phase.
    pub connections: usize,
}

impl LoadgenArgs {
    pub fn plan(&self) -> anyhow::Result<Plan> {
        if self.nodes == 0 || self.connections == 0 {
            bail!("--nodes and --connections must be above 0");
        }
        let transport = if self.url.starts_with("https://") {
            Transport::Mtls
        } else {
            Transport::Plain
        };
        match transport {
            Transport::Mtls if self.ca_file.is_none() => {
                bail!("an https:// URL needs --ca-file (the controller's <data-dir>/ca/ca.pem)")
            }
            Transport::Plain if self.ca_file.is_some() || self.operator_token_file.is_some() => {
                bail!("--ca-file and --operator-token-file are for an https:// URL only")
            }
            _ => {}
        }
        let per_node = self.connection_per_node || transport == Transport::Mtls;
        if self.reconnect_storm && !per_node {
            bail!("--reconnect-storm needs --connection-per-node (or an https:// URL)");
        }
        Ok(Plan {
            transport,
            per_node,
            connections: if per_node {
                self.nodes
            } else {
                self.connections
            },
        })
    }
}
