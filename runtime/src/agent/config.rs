//! The agent's environment contract (docs/agent.md, "Environment contract": PPN's `VM_*`
//! variables plus fleetwire's own), checked once at start: a missing or malformed setting
//! stops the agent with one line naming it.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use fleetwire_types::{BootstrapToken, HostId, Ipv4Address, NodeId};

use super::args::{AgentArgs, SecretText};
use super::identity::CA_FILE;
use crate::drivers::qemu_settings::{Accel, QemuSettings};
use crate::runtimes::Runtime;

/// The agent's settings, every one checked.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The controller's base URL, without a trailing slash.
    pub fleet_endpoint: String,
    /// `VM_NODE_ID` as the fleet knows the node (heartbeats, registration, VM records).
    pub node_id: NodeId,
    /// The node's id in the documents nibrunner reads (reported.json, desired.json,
    /// meters.json): `node_id` itself when it is narrow enough, else its mapping
    /// (`crate::ids`).
    pub host_id: HostId,
    pub wg_ip: Ipv4Address,
    pub heartbeat_interval: Duration,
    pub spawn_port: u16,
    pub reserved: bool,
    pub state_dir: PathBuf,
    /// Which runtime driver runs the machines.
    pub runtime: Runtime,
    /// Base URL of the runtime's API (smolvm driver), without a trailing slash. `https://`
    /// means smolvm's fleet mode: mTLS with the node certificate.
    pub runtime_address: String,
    /// Base URL of the runtime's `/health` and `/capacity` (the loopback door in fleet mode).
    pub runtime_local_address: String,
    /// The runtime's URL as the controller reaches it (registration's `smolvm_address`).
    pub runtime_advertise_address: String,
    /// Fleet mode: where the certificate, key and CA are kept for smolvm.
    pub runtime_tls: Option<RuntimeTlsExport>,
    pub listen_address: IpAddr,
    pub reconcile_interval: Duration,
    pub stop_timeout: Duration,
    /// The argv the process driver runs for a spawn request that names no command.
    pub default_command: Vec<String>,
    /// The qemu driver's settings (`VM_QEMU_*`, `VM_IMAGE_DIR`, ...): checked whatever the
    /// runtime, so a typo is found before the runtime is switched.
    pub qemu: QemuSettings,
    /// `VM_PLAIN_HTTP`: plain HTTP everywhere, no certificates, no tokens (today's wire);
    /// false is the secure mode: HTTPS to the controller, mTLS on the local API
    /// (docs/security.md).
    pub plain_http: bool,
    /// `VM_PLAIN_HTTP_ANY_ADDRESS`: plain mode may listen beyond VM_WG_IP and loopback.
    pub plain_http_any_address: bool,
    /// Where the bootstrap token for an enrollment comes from, if anywhere.
    pub bootstrap_token: Option<BootstrapTokenSource>,
    /// `VM_FLEET_CA_FILE`: the fleet CA trusted until the first enrollment pins one.
    pub fleet_ca_file: Option<PathBuf>,
}

/// A bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`). Its `Debug` shows only the public id, so
/// the secret half never reaches a log (docs/security.md).
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapSecret(BootstrapToken);

/// What a bootstrap token must look like, for messages that never show the value itself.
pub const BOOTSTRAP_TOKEN_SHAPE: &str =
    "six lower-case letters or digits, a dot, and sixteen more, as POST /v1/tokens issues it";

impl BootstrapSecret {
    /// `None` when `text` (surrounding whitespace aside) is not a bootstrap token.
    pub fn parse(text: &str) -> Option<BootstrapSecret> {
        text.trim().parse().ok().map(BootstrapSecret)
    }

    /// The public part before the dot: safe to log.
    pub fn id(&self) -> &str {
        self.0.split('.').next().unwrap_or_default()
    }

    /// The whole token, for the `Authorization` header and nothing else.
    pub fn expose(&self) -> &str {
        self.0.as_str()
    }
}

impl std::fmt::Debug for BootstrapSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BootstrapSecret({}.<redacted>)", self.id())
    }
}

/// `VM_BOOTSTRAP_TOKEN` (checked at start) or `VM_BOOTSTRAP_TOKEN_FILE` (read at every
/// enrollment attempt, so an operator can put a new token there while the agent retries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootstrapTokenSource {
    Value(BootstrapSecret),
    File(PathBuf),
}

/// Where the agent keeps the node certificate, its key and the fleet CA for smolvm's
/// `SMOLVM_SERVE_TLS_CERT`, `_KEY` and `_CLIENT_CA` (docs/agent.md, fleet mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeTlsExport {
    pub dir: PathBuf,
    /// The group given read access to the key (mode 0640); `None` keeps the agent's group.
    pub gid: Option<u32>,
}

/// A setting that stops the agent: which variable, and what was expected. Shown as
/// `VM_NODE_ID is required: ...` or `VM_NODE_ID="bad id" is not ...`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}{}{problem}", if problem.starts_with("is ") { " " } else { "=" })]
pub struct ConfigError {
    pub variable: &'static str,
    pub problem: String,
}

fn err(variable: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        variable,
        problem: problem.into(),
    }
}

fn required<'a>(
    value: &'a Option<String>,
    variable: &'static str,
    expected: &str,
) -> Result<&'a str, ConfigError> {
    match value.as_deref().map(str::trim) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(err(variable, format!("is required: {expected}"))),
    }
}

/// Present and not blank, else `None` (an optional setting then takes its default).
fn optional(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn http_url(variable: &'static str, raw: &str, expected: &str) -> Result<String, ConfigError> {
    let lower = raw.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => {
            Ok(raw.trim_end_matches('/').to_string())
        }
        _ => Err(err(
            variable,
            format!("{raw:?} is not an http:// or https:// URL: {expected}"),
        )),
    }
}

fn number<T: std::str::FromStr>(
    variable: &'static str,
    value: &Option<String>,
    default: T,
    expected: &str,
    ok: impl Fn(&T) -> bool,
) -> Result<T, ConfigError> {
    match optional(value) {
        None => Ok(default),
        Some(raw) => match raw.parse::<T>() {
            Ok(n) if ok(&n) => Ok(n),
            _ => Err(err(variable, format!("{raw:?} is not {expected}"))),
        },
    }
}

/// `true`/`1` (any case) mean true, `false`/`0` false, as PPN agents read `VM_RESERVED`.
fn boolean(variable: &'static str, value: &Option<String>) -> Result<bool, ConfigError> {
    match optional(value).map(str::to_ascii_lowercase).as_deref() {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(other) => Err(err(
            variable,
            format!("{other:?} is not a boolean: use true or 1, false or 0 (any case)"),
        )),
    }
}

impl AgentConfig {
    /// Checks every setting in the order of the contract: the required three first.
    pub fn from_args(args: &AgentArgs) -> Result<AgentConfig, ConfigError> {
        let endpoint_expected = "the fleet controller's URL, e.g. https://10.0.0.1:9203";
        let fleet_endpoint = http_url(
            "VM_FLEET_ENDPOINT",
            required(&args.fleet_endpoint, "VM_FLEET_ENDPOINT", endpoint_expected)?,
            endpoint_expected,
        )?;

        let id_expected = "the node's fleet-unique id, e.g. a host name: a letter or digit, then up to 252 letters, digits, '.', '_' or '-'";
        let raw_id = required(&args.node_id, "VM_NODE_ID", id_expected)?;
        let node_id: NodeId = raw_id
            .parse()
            .map_err(|_| err("VM_NODE_ID", format!("{raw_id:?} is not {id_expected}")))?;

        let ip_expected = "the node's WireGuard IPv4 address, e.g. 10.8.0.12";
        let raw_ip = required(&args.wg_ip, "VM_WG_IP", ip_expected)?;
        let wg_ip: Ipv4Address = raw_ip
            .parse::<Ipv4Addr>()
            .ok()
            .and_then(|ip| ip.to_string().parse().ok())
            .ok_or_else(|| err("VM_WG_IP", format!("{raw_ip:?} is not {ip_expected}")))?;

        let plain_http = boolean("VM_PLAIN_HTTP", &args.plain_http)?;
        endpoint_scheme(&fleet_endpoint, plain_http)?;

        let heartbeat_s = number(
            "VM_HEARTBEAT_INTERVAL_S",
            &args.heartbeat_interval_s,
            10u64,
            "a whole number of seconds from 1 to 3600",
            |n| (1..=3600).contains(n),
        )?;
        let spawn_port = number(
            "VM_SPAWN_PORT",
            &args.spawn_port,
            9204u16,
            "a TCP port from 1 to 65535",
            |n| *n >= 1,
        )?;
        let reserved = boolean("VM_RESERVED", &args.reserved)?;

        let state_dir = match optional(&args.state_dir) {
            Some(dir) => PathBuf::from(dir),
            // systemd's StateDirectory= hands the directory over in $STATE_DIRECTORY.
            None => match std::env::var("STATE_DIRECTORY") {
                Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
                _ => PathBuf::from(".fleetwire").join(format!("agent-{}", node_id.as_str())),
            },
        };

        let runtime = match optional(&args.runtime).map(str::to_ascii_lowercase) {
            None => Runtime::Process,
            Some(name) => name.parse::<Runtime>().map_err(|_| {
                err(
                    "VM_RUNTIME",
                    format!(
                        "{name:?} is not a runtime this agent drives: use {}",
                        crate::runtimes::KNOWN.join(", ")
                    ),
                )
            })?,
        };
        let address_expected = "the runtime API's URL, e.g. http://127.0.0.1:8080";
        let runtime_address = http_url(
            "VM_RUNTIME_ADDRESS",
            optional(&args.runtime_address).unwrap_or("http://127.0.0.1:8080"),
            address_expected,
        )?;

        let (runtime_local_address, runtime_advertise_address, runtime_tls) =
            runtime_urls(args, &runtime_address, &wg_ip, node_id.as_str(), &state_dir)?;

        let listen_address = match optional(&args.listen_address) {
            None => IpAddr::V4(wg_ip.0),
            Some(raw) => raw.parse().map_err(|_| {
                err(
                    "VM_LISTEN_ADDRESS",
                    format!("{raw:?} is not an IP address to listen on, e.g. 10.8.0.12"),
                )
            })?,
        };
        let plain_http_any_address =
            boolean("VM_PLAIN_HTTP_ANY_ADDRESS", &args.plain_http_any_address)?;
        // Plain mode serves the local API to whoever reaches it: only the WireGuard network
        // (or this host) unless the operator says otherwise in so many words
        // (docs/security.md).
        if plain_http
            && !plain_http_any_address
            && !listen_address.is_loopback()
            && listen_address != IpAddr::V4(wg_ip.0)
        {
            return Err(err(
                "VM_LISTEN_ADDRESS",
                format!(
                    "\"{listen_address}\" would serve the local API without authentication (VM_PLAIN_HTTP=true) beyond \
                     VM_WG_IP ({}) and loopback: listen on one of them, or set VM_PLAIN_HTTP_ANY_ADDRESS=true to allow it",
                    wg_ip.0
                ),
            ));
        }
        let bootstrap_token = bootstrap_token(args)?;
        let fleet_ca_file = fleet_ca_file(args, plain_http, &state_dir)?;
        let reconcile_ms = number(
            "VM_RECONCILE_INTERVAL_MS",
            &args.reconcile_interval_ms,
            1000u64,
            "a whole number of milliseconds from 10 to 600000",
            |n| (10..=600_000).contains(n),
        )?;
        let stop_timeout_ms = number(
            "VM_STOP_TIMEOUT_MS",
            &args.stop_timeout_ms,
            10_000u64,
            "a whole number of milliseconds from 0 to 600000",
            |n| *n <= 600_000,
        )?;
        let qemu = qemu_settings(args)?;
        // None unless set: a spawn that names no command is refused rather than given a
        // placeholder to run (issue 30).
        let default_command: Vec<String> = optional(&args.default_command)
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();

        Ok(AgentConfig {
            fleet_endpoint,
            host_id: crate::ids::host_id(&node_id),
            node_id,
            wg_ip,
            heartbeat_interval: Duration::from_secs(heartbeat_s),
            spawn_port,
            reserved,
            state_dir,
            runtime,
            runtime_address,
            runtime_local_address,
            runtime_advertise_address,
            runtime_tls,
            listen_address,
            reconcile_interval: Duration::from_millis(reconcile_ms),
            stop_timeout: Duration::from_millis(stop_timeout_ms),
            default_command,
            qemu,
            plain_http,
            plain_http_any_address,
            bootstrap_token,
            fleet_ca_file,
        })
    }
}

/// A file name in `VM_IMAGE_DIR`, as the schemas' `ImageFileName` spells one.
fn image_file_name(variable: &'static str, raw: &str) -> Result<String, ConfigError> {
    raw.parse::<fleetwire_types::ImageFileName>()
        .map(|n| n.to_string())
        .map_err(|_| {
            err(
                variable,
                format!(
                    "{raw:?} is not a file name in VM_IMAGE_DIR (no '/', not starting with '.')"
                ),
            )
        })
}

fn qemu_settings(args: &AgentArgs) -> Result<QemuSettings, ConfigError> {
    let defaults = QemuSettings::default();
    let accel = match optional(&args.qemu_accel) {
        None => defaults.accel,
        Some(raw) => raw
            .to_ascii_lowercase()
            .parse::<Accel>()
            .map_err(|_| err("VM_QEMU_ACCEL", format!("{raw:?} is not auto, kvm or tcg")))?,
    };
    let range_expected = "a range of TCP ports FIRST-LAST, e.g. 20000-20999";
    let host_ports = match optional(&args.host_port_range) {
        None => defaults.host_ports,
        Some(raw) => raw
            .split_once('-')
            .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)))
            .filter(|(a, b)| *a >= 1 && a <= b)
            .map(|(a, b)| a..=b)
            .ok_or_else(|| {
                err(
                    "VM_HOST_PORT_RANGE",
                    format!("{raw:?} is not {range_expected}"),
                )
            })?,
    };
    // An interface name, as the kernel takes one (IFNAMSIZ): 1 to 15 bytes, no '/', no space.
    let bridge = optional(&args.bridge)
        .map(|raw| {
            let fits = (1..=15).contains(&raw.len())
                && raw != "."
                && raw != ".."
                && !raw.chars().any(|c| c == '/' || c == ':' || c.is_whitespace());
            fits.then(|| raw.to_string()).ok_or_else(|| {
                err(
                    "VM_BRIDGE",
                    format!("{raw:?} is not a network interface name (1 to 15 bytes, no '/', ':' or spaces)"),
                )
            })
        })
        .transpose()?;
    let boot_timeout_s = number(
        "VM_GUEST_BOOT_TIMEOUT_S",
        &args.guest_boot_timeout_s,
        defaults.boot_timeout.as_secs(),
        "a whole number of seconds from 1 to 3600",
        |n| (1..=3600).contains(n),
    )?;
    Ok(QemuSettings {
        binary: optional(&args.qemu_binary).map(PathBuf::from),
        image_dir: optional(&args.image_dir).map_or(defaults.image_dir, PathBuf::from),
        base_image: optional(&args.base_image)
            .map(|raw| image_file_name("VM_BASE_IMAGE", raw))
            .transpose()?,
        ssh_pubkey: optional(&args.ssh_pubkey).map(str::to_string),
        host_ports,
        bridge,
        accel,
        probe_kernel: optional(&args.qemu_probe_kernel)
            .map(|raw| image_file_name("VM_QEMU_PROBE_KERNEL", raw))
            .transpose()?,
        boot_timeout: Duration::from_secs(boot_timeout_s),
    })
}

/// Secure mode speaks HTTPS to the controller, plain mode HTTP: the URL must say the same.
fn endpoint_scheme(endpoint: &str, plain_http: bool) -> Result<(), ConfigError> {
    let https = endpoint.to_ascii_lowercase().starts_with("https://");
    match (plain_http, https) {
        (false, false) => Err(err(
            "VM_FLEET_ENDPOINT",
            format!(
                "{endpoint:?} is not an https:// URL: the agent reaches the controller over HTTPS only; \
                 use https://, or set VM_PLAIN_HTTP=true for plain HTTP without certificates"
            ),
        )),
        (true, true) => Err(err(
            "VM_FLEET_ENDPOINT",
            format!(
                "{endpoint:?} is not an http:// URL, which plain mode (VM_PLAIN_HTTP=true) needs: \
                 use http://, or leave VM_PLAIN_HTTP unset for HTTPS"
            ),
        )),
        _ => Ok(()),
    }
}

/// `VM_BOOTSTRAP_TOKEN` or `VM_BOOTSTRAP_TOKEN_FILE`, never both. The token's value is never
/// part of a message.
fn bootstrap_token(args: &AgentArgs) -> Result<Option<BootstrapTokenSource>, ConfigError> {
    let value = args
        .bootstrap_token
        .as_ref()
        .map(|SecretText(text)| text.trim())
        .filter(|text| !text.is_empty());
    let file = optional(&args.bootstrap_token_file);
    match (value, file) {
        (Some(_), Some(_)) => Err(err(
            "VM_BOOTSTRAP_TOKEN",
            "is set together with VM_BOOTSTRAP_TOKEN_FILE: set only one of them",
        )),
        (Some(text), None) => match BootstrapSecret::parse(text) {
            Some(secret) => Ok(Some(BootstrapTokenSource::Value(secret))),
            None => Err(err(
                "VM_BOOTSTRAP_TOKEN",
                format!(
                    "is not a bootstrap token (its value is not shown): {BOOTSTRAP_TOKEN_SHAPE}"
                ),
            )),
        },
        (None, Some(path)) => Ok(Some(BootstrapTokenSource::File(PathBuf::from(path)))),
        (None, None) => Ok(None),
    }
}

/// The fleet CA trusted before the first enrollment. Secure mode needs one until the state
/// directory has the pinned `ca.crt`, which wins from then on.
fn fleet_ca_file(
    args: &AgentArgs,
    plain_http: bool,
    state_dir: &std::path::Path,
) -> Result<Option<PathBuf>, ConfigError> {
    let file = optional(&args.fleet_ca_file).map(PathBuf::from);
    let pinned = state_dir.join(CA_FILE).exists();
    if plain_http || pinned {
        return Ok(file);
    }
    let Some(path) = file else {
        return Err(err(
            "VM_FLEET_CA_FILE",
            format!(
                "is required: the fleet CA's certificate (PEM; the controller's <data dir>/ca/ca.pem) to trust \
                 the controller before the first enrollment ({} has no {CA_FILE} yet), or VM_PLAIN_HTTP=true",
                state_dir.display()
            ),
        ));
    };
    let pem = std::fs::read_to_string(&path).map_err(|e| {
        err(
            "VM_FLEET_CA_FILE",
            format!("{:?} cannot be read: {e}", path.display().to_string()),
        )
    })?;
    crate::tls_server::certificates_of(&pem, "VM_FLEET_CA_FILE").map_err(|e| {
        err(
            "VM_FLEET_CA_FILE",
            format!(
                "{:?} is not the fleet CA's PEM certificate: {e}",
                path.display().to_string()
            ),
        )
    })?;
    Ok(Some(path))
}

/// The runtime's loopback door, the address the controller reaches it at, and (fleet mode,
/// an `https://` VM_RUNTIME_ADDRESS) where its TLS files are kept.
fn runtime_urls(
    args: &AgentArgs,
    runtime_address: &str,
    wg_ip: &Ipv4Address,
    node_id: &str,
    state_dir: &std::path::Path,
) -> Result<(String, String, Option<RuntimeTlsExport>), ConfigError> {
    let url = reqwest::Url::parse(runtime_address).map_err(|e| {
        err(
            "VM_RUNTIME_ADDRESS",
            format!("{runtime_address:?} is not a URL: {e}"),
        )
    })?;
    let fleet_mode = url.scheme() == "https";
    let port = url.port_or_known_default().unwrap_or(80);
    if fleet_mode {
        // The agent checks smolvm's certificate like any TLS client: by the name in the URL,
        // which must be one the controller put in the node certificate.
        let host = url.host_str().unwrap_or_default();
        if host != wg_ip.0.to_string() && !host.eq_ignore_ascii_case(node_id) {
            return Err(err(
                "VM_RUNTIME_ADDRESS",
                format!(
                    "{runtime_address:?} names {host:?}: in fleet mode (https://) smolvm serves the node certificate, \
                     which names only VM_WG_IP ({}) and VM_NODE_ID ({node_id}); use one of them",
                    wg_ip.0
                ),
            ));
        }
    }
    let local_expected = "the runtime's plain loopback door, e.g. http://127.0.0.1:8444";
    let runtime_local_address = match optional(&args.runtime_local_address) {
        Some(raw) => http_url("VM_RUNTIME_LOCAL_ADDRESS", raw, local_expected)?,
        None if fleet_mode => {
            // smolvm's loopback door: 127.0.0.1 on the --listen port + 1.
            let door = port.checked_add(1).ok_or_else(|| {
                err(
                    "VM_RUNTIME_LOCAL_ADDRESS",
                    format!("is required: VM_RUNTIME_ADDRESS's port {port} has no port + 1 for the loopback door"),
                )
            })?;
            format!("http://127.0.0.1:{door}")
        }
        None => runtime_address.to_string(),
    };
    let advertise_expected =
        "the runtime's URL as the controller reaches it, e.g. https://10.8.0.12:8443";
    let runtime_advertise_address = match optional(&args.runtime_advertise_address) {
        Some(raw) => http_url("VM_RUNTIME_ADVERTISE_ADDRESS", raw, advertise_expected)?,
        None => format!("{}://{}:{port}", url.scheme(), wg_ip.0),
    };
    let runtime_tls = if fleet_mode {
        let gid = match optional(&args.runtime_tls_gid) {
            None => None,
            Some(raw) => Some(raw.parse::<u32>().map_err(|_| {
                err(
                    "VM_RUNTIME_TLS_GID",
                    format!("{raw:?} is not a numeric group id, e.g. 65534"),
                )
            })?),
        };
        let dir = optional(&args.runtime_tls_dir)
            .map(PathBuf::from)
            .unwrap_or_else(|| state_dir.join("runtime-tls"));
        Some(RuntimeTlsExport { dir, gid })
    } else {
        None
    };
    Ok((
        runtime_local_address,
        runtime_advertise_address,
        runtime_tls,
    ))
}

impl AgentConfig {
    /// `VM_SPAWN_PORT` as the schemas' `HostPort` (the configuration refuses 0).
    pub fn spawn_host_port(&self) -> fleetwire_types::HostPort {
        fleetwire_types::HostPort(
            std::num::NonZeroU16::new(self.spawn_port).expect("VM_SPAWN_PORT is at least 1"),
        )
    }

    /// The settings in force, one `VM_NAME=value` line each, as `--check` prints them.
    pub fn describe(&self) -> String {
        let lines = [
            ("VM_FLEET_ENDPOINT", self.fleet_endpoint.clone()),
            ("VM_NODE_ID", self.node_id.to_string()),
            ("VM_WG_IP", self.wg_ip.0.to_string()),
            (
                "VM_HEARTBEAT_INTERVAL_S",
                self.heartbeat_interval.as_secs().to_string(),
            ),
            ("VM_SPAWN_PORT", self.spawn_port.to_string()),
            ("VM_RESERVED", self.reserved.to_string()),
            ("VM_STATE_DIR", self.state_dir.display().to_string()),
            ("VM_RUNTIME", self.runtime.to_string()),
            ("VM_RUNTIME_ADDRESS", self.runtime_address.clone()),
            (
                "VM_RUNTIME_LOCAL_ADDRESS",
                self.runtime_local_address.clone(),
            ),
            (
                "VM_RUNTIME_ADVERTISE_ADDRESS",
                self.runtime_advertise_address.clone(),
            ),
            (
                "VM_RUNTIME_TLS_DIR",
                self.runtime_tls
                    .as_ref()
                    .map_or(String::new(), |t| t.dir.display().to_string()),
            ),
            (
                "VM_RUNTIME_TLS_GID",
                self.runtime_tls
                    .as_ref()
                    .and_then(|t| t.gid)
                    .map_or(String::new(), |g| g.to_string()),
            ),
            ("VM_LISTEN_ADDRESS", self.listen_address.to_string()),
            (
                "VM_RECONCILE_INTERVAL_MS",
                self.reconcile_interval.as_millis().to_string(),
            ),
            (
                "VM_STOP_TIMEOUT_MS",
                self.stop_timeout.as_millis().to_string(),
            ),
            ("VM_DEFAULT_COMMAND", self.default_command.join(" ")),
            (
                "VM_QEMU_BINARY",
                self.qemu
                    .binary
                    .as_ref()
                    .map_or(String::new(), |p| p.display().to_string()),
            ),
            (
                "VM_QEMU_ACCEL",
                match self.qemu.accel {
                    Accel::Auto => "auto",
                    Accel::Kvm => "kvm",
                    Accel::Tcg => "tcg",
                }
                .to_string(),
            ),
            (
                "VM_QEMU_PROBE_KERNEL",
                self.qemu.probe_kernel.clone().unwrap_or_default(),
            ),
            ("VM_IMAGE_DIR", self.qemu.image_dir.display().to_string()),
            (
                "VM_BASE_IMAGE",
                self.qemu.base_image.clone().unwrap_or_default(),
            ),
            (
                "VM_SSH_PUBKEY",
                if self.qemu.ssh_pubkey.is_some() {
                    "<set>"
                } else {
                    ""
                }
                .to_string(),
            ),
            (
                "VM_HOST_PORT_RANGE",
                format!(
                    "{}-{}",
                    self.qemu.host_ports.start(),
                    self.qemu.host_ports.end()
                ),
            ),
            ("VM_BRIDGE", self.qemu.bridge.clone().unwrap_or_default()),
            (
                "VM_GUEST_BOOT_TIMEOUT_S",
                self.qemu.boot_timeout.as_secs().to_string(),
            ),
            ("VM_PLAIN_HTTP", self.plain_http.to_string()),
            (
                "VM_PLAIN_HTTP_ANY_ADDRESS",
                self.plain_http_any_address.to_string(),
            ),
            (
                "VM_BOOTSTRAP_TOKEN",
                match &self.bootstrap_token {
                    Some(BootstrapTokenSource::Value(_)) => "<set>".to_string(),
                    _ => String::new(),
                },
            ),
            (
                "VM_BOOTSTRAP_TOKEN_FILE",
                match &self.bootstrap_token {
                    Some(BootstrapTokenSource::File(path)) => path.display().to_string(),
                    _ => String::new(),
                },
            ),
            (
                "VM_FLEET_CA_FILE",
                self.fleet_ca_file
                    .as_ref()
                    .map_or(String::new(), |p| p.display().to_string()),
            ),
        ];
        lines.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> AgentArgs {
        AgentArgs {
            fleet_endpoint: Some("http://127.0.0.1:9203/".into()),
            node_id: Some("n1".into()),
            wg_ip: Some("10.0.0.1".into()),
            plain_http: Some("true".into()),
            ..AgentArgs::default()
        }
    }

    const TOKEN: &str = "abc123.0123456789abcdef";

    /// Secure mode, with a fleet CA file and a fresh state directory.
    fn secure(dir: &std::path::Path) -> AgentArgs {
        let ca = dir.join("fleet-ca.pem");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(&ca, cert.pem()).unwrap();
        AgentArgs {
            fleet_endpoint: Some("https://ctl.example:9203".into()),
            node_id: Some("n1".into()),
            wg_ip: Some("10.0.0.1".into()),
            state_dir: Some(dir.join("state").display().to_string()),
            fleet_ca_file: Some(ca.display().to_string()),
            ..AgentArgs::default()
        }
    }

    fn refusal(a: &AgentArgs) -> String {
        AgentConfig::from_args(a).unwrap_err().to_string()
    }

    #[test]
    fn secure_mode_is_the_default_and_needs_https() {
        let dir = tempfile::tempdir().unwrap();
        let c = AgentConfig::from_args(&secure(dir.path())).unwrap();
        assert!(!c.plain_http);
        // The local API listens on the WireGuard address unless told otherwise.
        assert_eq!(c.listen_address, "10.0.0.1".parse::<IpAddr>().unwrap());
        let mut a = secure(dir.path());
        a.fleet_endpoint = Some("http://ctl.example:9203".into());
        assert_eq!(
            refusal(&a),
            "VM_FLEET_ENDPOINT=\"http://ctl.example:9203\" is not an https:// URL: the agent reaches the controller \
             over HTTPS only; use https://, or set VM_PLAIN_HTTP=true for plain HTTP without certificates"
        );
        let mut a = args();
        a.fleet_endpoint = Some("https://ctl.example:9203".into());
        assert_eq!(
            refusal(&a),
            "VM_FLEET_ENDPOINT=\"https://ctl.example:9203\" is not an http:// URL, which plain mode (VM_PLAIN_HTTP=true) \
             needs: use http://, or leave VM_PLAIN_HTTP unset for HTTPS"
        );
        a.plain_http = Some("yes".into());
        assert_eq!(
            AgentConfig::from_args(&a).unwrap_err().variable,
            "VM_PLAIN_HTTP"
        );
    }

    #[test]
    fn secure_mode_needs_a_fleet_ca_until_one_is_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = secure(dir.path());
        a.fleet_ca_file = None;
        let state = dir.path().join("state");
        assert_eq!(
            refusal(&a),
            format!(
                "VM_FLEET_CA_FILE is required: the fleet CA's certificate (PEM; the controller's <data dir>/ca/ca.pem) \
                 to trust the controller before the first enrollment ({} has no ca.crt yet), or VM_PLAIN_HTTP=true",
                state.display()
            )
        );
        let missing = dir.path().join("missing.pem");
        a.fleet_ca_file = Some(missing.display().to_string());
        let e = refusal(&a);
        assert!(
            e.starts_with(&format!(
                "VM_FLEET_CA_FILE={:?} cannot be read: ",
                missing.display().to_string()
            )),
            "{e}"
        );
        std::fs::write(&missing, "not PEM").unwrap();
        let e = refusal(&a);
        assert!(e.contains("is not the fleet CA's PEM certificate"), "{e}");
        // Once enrolled, the pinned CA is enough (and wins: trust::trusted_ca).
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join(CA_FILE), "pinned").unwrap();
        a.fleet_ca_file = None;
        assert!(AgentConfig::from_args(&a).is_ok());
    }

    #[test]
    fn plain_mode_listens_only_on_the_wireguard_address_or_loopback_unless_told() {
        let mut a = args();
        let c = AgentConfig::from_args(&a).unwrap();
        assert_eq!(c.listen_address, "10.0.0.1".parse::<IpAddr>().unwrap());
        for ok in ["127.0.0.1", "::1", "10.0.0.1"] {
            a.listen_address = Some(ok.into());
            assert!(AgentConfig::from_args(&a).is_ok(), "{ok}");
        }
        a.listen_address = Some("0.0.0.0".into());
        assert_eq!(
            refusal(&a),
            "VM_LISTEN_ADDRESS=\"0.0.0.0\" would serve the local API without authentication (VM_PLAIN_HTTP=true) beyond \
             VM_WG_IP (10.0.0.1) and loopback: listen on one of them, or set VM_PLAIN_HTTP_ANY_ADDRESS=true to allow it"
        );
        a.plain_http_any_address = Some("true".into());
        assert!(AgentConfig::from_args(&a).is_ok());
        // Secure mode takes only the controller's certificate: any address is fine.
        let dir = tempfile::tempdir().unwrap();
        let mut a = secure(dir.path());
        a.listen_address = Some("0.0.0.0".into());
        assert!(AgentConfig::from_args(&a).is_ok());
    }

    #[test]
    fn the_bootstrap_token_is_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = secure(dir.path());
        a.bootstrap_token = Some(SecretText(format!(" {TOKEN}\n")));
        let c = AgentConfig::from_args(&a).unwrap();
        let Some(BootstrapTokenSource::Value(secret)) = &c.bootstrap_token else {
            panic!("{:?}", c.bootstrap_token)
        };
        assert_eq!(secret.expose(), TOKEN);
        for shown in [format!("{c:?}"), format!("{a:?}"), c.describe()] {
            assert!(!shown.contains("0123456789abcdef"), "{shown}");
        }
        assert!(format!("{c:?}").contains("abc123.<redacted>"));
        assert!(c.describe().contains("VM_BOOTSTRAP_TOKEN=<set>\n"));

        a.bootstrap_token = Some(SecretText("abc123.SECRETSECRETSECRE".into()));
        let e = refusal(&a);
        assert!(!e.contains("SECRET"), "{e}");
        assert_eq!(
            e,
            format!("VM_BOOTSTRAP_TOKEN is not a bootstrap token (its value is not shown): {BOOTSTRAP_TOKEN_SHAPE}")
        );
        a.bootstrap_token = Some(SecretText(TOKEN.into()));
        a.bootstrap_token_file = Some("/etc/fleetwire/token".into());
        assert_eq!(
            refusal(&a),
            "VM_BOOTSTRAP_TOKEN is set together with VM_BOOTSTRAP_TOKEN_FILE: set only one of them"
        );
        a.bootstrap_token = None;
        let c = AgentConfig::from_args(&a).unwrap();
        assert_eq!(
            c.bootstrap_token,
            Some(BootstrapTokenSource::File("/etc/fleetwire/token".into()))
        );
        assert!(c.describe().contains("VM_BOOTSTRAP_TOKEN=\n"));
        assert!(c
            .describe()
            .contains("VM_BOOTSTRAP_TOKEN_FILE=/etc/fleetwire/token\n"));
    }

    #[test]
    fn a_refusal_is_one_line_naming_its_variable() {
        let mut a = args();
        a.node_id = None;
        assert_eq!(
            AgentConfig::from_args(&a).unwrap_err().to_string(),
            "VM_NODE_ID is required: the node's fleet-unique id, e.g. a host name: a letter or digit, then up to 252 letters, digits, '.', '_' or '-'"
        );
        a.node_id = Some("n1".into());
        a.runtime = Some("Docker".into());
        assert_eq!(
            AgentConfig::from_args(&a).unwrap_err().to_string(),
            "VM_RUNTIME=\"docker\" is not a runtime this agent drives: use smolvm, process, qemu"
        );
        a.runtime = Some("qemu".into());
        a.host_port_range = Some("30000-2000".into());
        assert_eq!(
            AgentConfig::from_args(&a).unwrap_err().to_string(),
            "VM_HOST_PORT_RANGE=\"30000-2000\" is not a range of TCP ports FIRST-LAST, e.g. 20000-20999"
        );
        a.host_port_range = Some("20000-20009".into());
        a.base_image = Some("../etc/passwd".into());
        assert!(AgentConfig::from_args(&a)
            .unwrap_err()
            .to_string()
            .starts_with("VM_BASE_IMAGE=\"../etc/passwd\" is not a file name in VM_IMAGE_DIR"));
        a.base_image = Some("debian-12.qcow2".into());
        a.qemu_accel = Some("hvf".into());
        assert_eq!(
            AgentConfig::from_args(&a).unwrap_err().to_string(),
            "VM_QEMU_ACCEL=\"hvf\" is not auto, kvm or tcg"
        );
        a.qemu_accel = Some("TCG".into());
        a.bridge = Some("br/0".into());
        assert_eq!(
            AgentConfig::from_args(&a).unwrap_err().to_string(),
            "VM_BRIDGE=\"br/0\" is not a network interface name (1 to 15 bytes, no '/', ':' or spaces)"
        );
        a.bridge = Some("br-fleetwire-too-long".into());
        assert!(AgentConfig::from_args(&a).is_err());
        a.bridge = Some("br0".into());
        let c = AgentConfig::from_args(&a).unwrap();
        assert_eq!(c.qemu.bridge.as_deref(), Some("br0"));
        assert_eq!(c.runtime, Runtime::Qemu);
        assert_eq!(c.qemu.host_ports, 20000..=20009);
        assert_eq!(c.qemu.accel, Accel::Tcg);
        assert_eq!(c.qemu.base_image.as_deref(), Some("debian-12.qcow2"));
    }

    #[test]
    fn defaults_apply() {
        let c = AgentConfig::from_args(&args()).unwrap();
        assert_eq!(c.fleet_endpoint, "http://127.0.0.1:9203");
        assert_eq!(c.heartbeat_interval, Duration::from_secs(10));
        assert_eq!(c.spawn_port, 9204);
        assert!(!c.reserved);
        assert_eq!(c.runtime, Runtime::Process);
        assert!(c.default_command.is_empty());
    }

    #[test]
    fn node_ids_are_dns_names_and_map_to_a_narrow_host_id() {
        let mut a = args();
        a.node_id = Some("gpu-01.dc1.example.org".into());
        let c = AgentConfig::from_args(&a).unwrap();
        assert_eq!(c.node_id.as_str(), "gpu-01.dc1.example.org");
        assert_eq!(
            c.host_id.as_str(),
            crate::ids::local_id("gpu-01.dc1.example.org")
        );
        // A narrow id stays itself in reported.json.
        assert_eq!(
            AgentConfig::from_args(&args()).unwrap().host_id.as_str(),
            "n1"
        );
        // 253 characters is the limit, as for DNS names.
        a.node_id = Some(format!("a{}", ".b".repeat(126)));
        assert!(AgentConfig::from_args(&a).is_ok());
        a.node_id = Some(format!("a{}", ".b".repeat(127)));
        assert_eq!(
            AgentConfig::from_args(&a).unwrap_err().variable,
            "VM_NODE_ID"
        );
    }

    #[test]
    fn reserved_accepts_ppn_spellings() {
        for (raw, want) in [("TRUE", true), ("1", true), ("False", false), ("0", false)] {
            let mut a = args();
            a.reserved = Some(raw.into());
            assert_eq!(AgentConfig::from_args(&a).unwrap().reserved, want, "{raw}");
        }
        let mut a = args();
        a.reserved = Some("maybe".into());
        assert_eq!(
            AgentConfig::from_args(&a).unwrap_err().variable,
            "VM_RESERVED"
        );
    }

    #[test]
    fn the_runtime_addresses_follow_the_mode() {
        // Plain mode: one listener; the controller reaches it on the WireGuard address.
        let mut a = args();
        a.runtime = Some("smolvm".into());
        let c = AgentConfig::from_args(&a).unwrap();
        assert_eq!(c.runtime_address, "http://127.0.0.1:8080");
        assert_eq!(c.runtime_local_address, "http://127.0.0.1:8080");
        assert_eq!(c.runtime_advertise_address, "http://10.0.0.1:8080");
        assert_eq!(c.runtime_tls, None);

        // Fleet mode: mTLS on the WireGuard address, the loopback door on port + 1, and the
        // TLS files for smolvm in the state directory unless placed elsewhere.
        a.runtime_address = Some("https://10.0.0.1:8443".into());
        let c = AgentConfig::from_args(&a).unwrap();
        assert_eq!(c.runtime_local_address, "http://127.0.0.1:8444");
        assert_eq!(c.runtime_advertise_address, "https://10.0.0.1:8443");
        let tls = c.runtime_tls.unwrap();
        assert_eq!(tls.dir, c.state_dir.join("runtime-tls"));
        assert_eq!(tls.gid, None);

        a.runtime_tls_dir = Some("/etc/smolvm/tls".into());
        a.runtime_tls_gid = Some("997".into());
        a.runtime_local_address = Some("http://127.0.0.1:9000".into());
        a.runtime_advertise_address = Some("https://10.0.0.1:443".into());
        let c = AgentConfig::from_args(&a).unwrap();
        assert_eq!(
            c.runtime_tls,
            Some(RuntimeTlsExport {
                dir: "/etc/smolvm/tls".into(),
                gid: Some(997)
            })
        );
        assert_eq!(c.runtime_local_address, "http://127.0.0.1:9000");
        assert_eq!(c.runtime_advertise_address, "https://10.0.0.1:443");
        // The node id is the certificate's other name.
        a.runtime_address = Some("https://n1:8443".into());
        assert!(AgentConfig::from_args(&a).is_ok());
    }

    #[test]
    fn fleet_mode_refuses_a_runtime_address_the_certificate_does_not_name() {
        let mut a = args();
        a.runtime = Some("smolvm".into());
        a.runtime_address = Some("https://127.0.0.1:8443".into());
        let e = AgentConfig::from_args(&a).unwrap_err();
        assert_eq!(e.variable, "VM_RUNTIME_ADDRESS");
        assert!(e.problem.contains("VM_WG_IP (10.0.0.1)"), "{e}");
        let mut a = args();
        a.runtime_address = Some("https://10.0.0.1:8443".into());
        a.runtime_tls_gid = Some("staff".into());
        assert_eq!(
            AgentConfig::from_args(&a).unwrap_err().variable,
            "VM_RUNTIME_TLS_GID"
        );
    }

    #[test]
    fn malformed_values_name_their_variable() {
        type Case = (fn(&mut AgentArgs), &'static str);
        let cases: [Case; 5] = [
            (
                |a| a.fleet_endpoint = Some("ftp://x".into()),
                "VM_FLEET_ENDPOINT",
            ),
            (|a| a.node_id = Some("bad id".into()), "VM_NODE_ID"),
            (|a| a.wg_ip = Some("10.0.0.300".into()), "VM_WG_IP"),
            (|a| a.spawn_port = Some("0".into()), "VM_SPAWN_PORT"),
            (
                |a| a.heartbeat_interval_s = Some("ten".into()),
                "VM_HEARTBEAT_INTERVAL_S",
            ),
        ];
        for (set, variable) in cases {
            let mut a = args();
            set(&mut a);
            assert_eq!(AgentConfig::from_args(&a).unwrap_err().variable, variable);
        }
    }
}
