//! `fleetwire agent`'s flags: each mirrors an environment variable of the contract
//! (docs/agent.md, "Environment contract") and falls back to it. `config` checks them.

use clap::Args;

/// Flags mirror the environment variables; each flag falls back to its variable.
#[derive(Args, Debug, Default, Clone)]
pub struct AgentArgs {
    /// The fleet controller's URL, e.g. https://10.0.0.1:9203 (required; http:// only with
    /// VM_PLAIN_HTTP=true).
    #[arg(long, env = "VM_FLEET_ENDPOINT", value_name = "URL")]
    pub fleet_endpoint: Option<String>,
    /// This node's fleet-unique id (required).
    #[arg(long, env = "VM_NODE_ID", value_name = "ID")]
    pub node_id: Option<String>,
    /// This node's WireGuard IPv4 address (required).
    #[arg(long, env = "VM_WG_IP", value_name = "IPV4")]
    pub wg_ip: Option<String>,
    /// Seconds between heartbeats [default: 10].
    #[arg(long, env = "VM_HEARTBEAT_INTERVAL_S", value_name = "SECONDS")]
    pub heartbeat_interval_s: Option<String>,
    /// Port of the local API [default: 9204].
    #[arg(long, env = "VM_SPAWN_PORT", value_name = "PORT")]
    pub spawn_port: Option<String>,
    /// Last-resort node for placement: true or 1 [default: false].
    #[arg(long, env = "VM_RESERVED", value_name = "BOOL")]
    pub reserved: Option<String>,
    /// Where desired.json, reported.json, meters.json, the node key and volumes live
    /// [default: $STATE_DIRECTORY, else ./.fleetwire/agent-<node id>].
    #[arg(long, env = "VM_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<String>,
    /// Runtime driver: process, smolvm or qemu [default: process].
    #[arg(long, env = "VM_RUNTIME", value_name = "NAME")]
    pub runtime: Option<String>,
    /// The runtime API's URL (smolvm) [default: http://127.0.0.1:8080].
    #[arg(long, env = "VM_RUNTIME_ADDRESS", value_name = "URL")]
    pub runtime_address: Option<String>,
    /// The runtime's plain loopback door, for /health and /capacity (smolvm fleet mode)
    /// [default: http://127.0.0.1:<port of VM_RUNTIME_ADDRESS + 1> in fleet mode, else
    /// VM_RUNTIME_ADDRESS].
    #[arg(long, env = "VM_RUNTIME_LOCAL_ADDRESS", value_name = "URL")]
    pub runtime_local_address: Option<String>,
    /// The runtime's URL as the controller reaches it, reported at registration and probed
    /// for the engine version [default: VM_RUNTIME_ADDRESS's scheme and port on VM_WG_IP].
    #[arg(long, env = "VM_RUNTIME_ADVERTISE_ADDRESS", value_name = "URL")]
    pub runtime_advertise_address: Option<String>,
    /// Where the agent keeps the node certificate, its key and the fleet CA for smolvm's
    /// SMOLVM_SERVE_TLS_* (fleet mode) [default: <state dir>/runtime-tls].
    #[arg(long, env = "VM_RUNTIME_TLS_DIR", value_name = "DIR")]
    pub runtime_tls_dir: Option<String>,
    /// Numeric group id given read access to the key in VM_RUNTIME_TLS_DIR (the runtime's
    /// group) [default: the agent's own group].
    #[arg(long, env = "VM_RUNTIME_TLS_GID", value_name = "GID")]
    pub runtime_tls_gid: Option<String>,
    /// Address the local API listens on [default: VM_WG_IP].
    #[arg(long, env = "VM_LISTEN_ADDRESS", value_name = "IP")]
    pub listen_address: Option<String>,
    /// Longest time between two reconcile passes, in ms [default: 1000].
    #[arg(long, env = "VM_RECONCILE_INTERVAL_MS", value_name = "MS")]
    pub reconcile_interval_ms: Option<String>,
    /// Grace between SIGTERM and SIGKILL when stopping a tenant, in ms [default: 10000].
    #[arg(long, env = "VM_STOP_TIMEOUT_MS", value_name = "MS")]
    pub stop_timeout_ms: Option<String>,
    /// Command the process driver runs for a spawn that names none [default: none: such a spawn
    /// is refused].
    #[arg(long, env = "VM_DEFAULT_COMMAND", value_name = "ARGV")]
    pub default_command: Option<String>,
    /// qemu: the QEMU program [default: qemu-system-x86_64 on PATH].
    #[arg(long, env = "VM_QEMU_BINARY", value_name = "PATH")]
    pub qemu_binary: Option<String>,
    /// qemu: accelerator, auto (KVM once a probe guest booted with it, else TCG), kvm or tcg
    /// [default: auto].
    #[arg(long, env = "VM_QEMU_ACCEL", value_name = "ACCEL")]
    pub qemu_accel: Option<String>,
    /// qemu: the kernel (a file name in VM_IMAGE_DIR) the KVM probe boots [default: the base
    /// image].
    #[arg(long, env = "VM_QEMU_PROBE_KERNEL", value_name = "FILE")]
    pub qemu_probe_kernel: Option<String>,
    /// qemu: the folder of kernels, initrds and base images VMs name [default:
    /// /var/lib/vm-fleet].
    #[arg(long, env = "VM_IMAGE_DIR", value_name = "DIR")]
    pub image_dir: Option<String>,
    /// qemu: the base image (a file name in VM_IMAGE_DIR) a spawn naming no boot source boots.
    #[arg(long, env = "VM_BASE_IMAGE", value_name = "FILE")]
    pub base_image: Option<String>,
    /// qemu: the SSH public key the guests' cloud-init seed authorizes.
    #[arg(long, env = "VM_SSH_PUBKEY", value_name = "KEY")]
    pub ssh_pubkey: Option<String>,
    /// qemu: the host ports guest ports are forwarded from, FIRST-LAST [default: 20000-20999].
    #[arg(long, env = "VM_HOST_PORT_RANGE", value_name = "RANGE")]
    pub host_port_range: Option<String>,
    /// qemu: a bridge to put each guest on, through a tap device of its own, instead of QEMU's
    /// user networking (no host ports are forwarded then) [default: user networking].
    #[arg(long, env = "VM_BRIDGE", value_name = "BRIDGE")]
    pub bridge: Option<String>,
    /// qemu: seconds a guest has to answer on its first guest port [default: 120].
    #[arg(long, env = "VM_GUEST_BOOT_TIMEOUT_S", value_name = "SECONDS")]
    pub guest_boot_timeout_s: Option<String>,
    /// Plain HTTP to the controller and on the local API, without certificates or tokens:
    /// true or 1 [default: false, i.e. HTTPS and mTLS (docs/security.md)].
    #[arg(long, env = "VM_PLAIN_HTTP", value_name = "BOOL")]
    pub plain_http: Option<String>,
    /// Plain mode only: let the local API listen on an address other than VM_WG_IP or
    /// loopback: true or 1 [default: false].
    #[arg(long, env = "VM_PLAIN_HTTP_ANY_ADDRESS", value_name = "BOOL")]
    pub plain_http_any_address: Option<String>,
    /// The single-use bootstrap token for the first enrollment (`POST /v1/tokens`). Prefer
    /// VM_BOOTSTRAP_TOKEN_FILE: a command line is visible to every user of the host.
    #[arg(
        long,
        env = "VM_BOOTSTRAP_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub bootstrap_token: Option<SecretText>,
    /// A file holding the bootstrap token, read again at every enrollment attempt.
    #[arg(long, env = "VM_BOOTSTRAP_TOKEN_FILE", value_name = "PATH")]
    pub bootstrap_token_file: Option<String>,
    /// The fleet CA (PEM, the controller's <data dir>/ca/ca.pem) trusted before the first
    /// enrollment; afterwards the CA pinned in the state directory (ca.crt) is used.
    #[arg(long, env = "VM_FLEET_CA_FILE", value_name = "PATH")]
    pub fleet_ca_file: Option<String>,
    /// Check the settings, print them one per line, and exit (0 when they are good).
    #[arg(long)]
    pub check: bool,
}

/// A secret setting as given: `Debug` never shows it, so neither a debug print of the
/// arguments nor of a value holding them leaks it (docs/security.md).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretText(pub String);

impl std::str::FromStr for SecretText {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<SecretText, Self::Err> {
        Ok(SecretText(text.to_string()))
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretText(<redacted>)")
    }
}
