//! The operator commands' arguments: `fleetwire nodes`, `fleetwire vms`, `fleetwire fleet`,
//! `fleetwire completion`.

use std::path::PathBuf;
use std::time::Duration;

use fleetwire_types::{NodeId, NodeStatusFilter, StateMessage, TenantId, VmId};

use super::connection::ConnectionArgs;
use super::output::Format;

/// What every operator command takes: where the controller is, and how to print.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// The output format: a table for people (wide: with more columns), the controller's answer
    /// as JSON or YAML, or each record's kind/id (name).
    #[arg(
        short = 'o',
        long = "output",
        global = true,
        value_enum,
        default_value_t
    )]
    pub format: Format,
}

/// `fleetwire nodes`.
#[derive(Debug, clap::Args)]
pub struct NodesArgs {
    #[command(subcommand)]
    pub command: NodesCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum NodesCommand {
    /// List the nodes (the live ones unless --status says otherwise).
    #[command(visible_alias = "ls")]
    List {
        /// live (every node but the unreachable), all, or one phase (registering, ready,
        /// draining, unreachable).
        #[arg(long, value_parser = parse::<NodeStatusFilter>)]
        status: Option<NodeStatusFilter>,
        #[command(flatten)]
        watch: WatchArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Show one node's record.
    Get {
        #[arg(value_parser = parse::<NodeId>)]
        node_id: NodeId,
        #[command(flatten)]
        watch: WatchArgs,
        #[command(flatten)]
        absent: AbsentArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Stop placing VMs on a node; its running VMs stay.
    Cordon {
        #[arg(value_parser = parse::<NodeId>)]
        node_id: NodeId,
        /// Why, kept on the node's record as its cordon_reason.
        #[arg(long, value_parser = parse::<StateMessage>)]
        reason: Option<StateMessage>,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Place VMs on a cordoned node again.
    Uncordon {
        #[arg(value_parser = parse::<NodeId>)]
        node_id: NodeId,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Drain a node: no new VMs; its VMs are moved to other nodes (or stopped, with --stop),
    /// and the command waits until none is left on it.
    Drain(DrainArgs),
    /// Unenroll a node: forget its record and its VMs' (it enrolls again only with a new
    /// bootstrap token).
    #[command(visible_alias = "rm")]
    Delete {
        #[arg(value_parser = parse::<NodeId>)]
        node_id: NodeId,
        #[command(flatten)]
        absent: AbsentArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
}

/// `fleetwire nodes drain`: as `kubectl drain` does it, from the client: the node is marked
/// draining (no new VMs), then each of its VMs is moved or stopped.
#[derive(Debug, Clone, clap::Args)]
pub struct DrainArgs {
    #[arg(value_parser = parse::<NodeId>)]
    pub node_id: NodeId,
    /// Stop (delete) the node's VMs instead of moving them to other nodes.
    #[arg(long)]
    pub stop: bool,
    /// How long to wait for the node to be empty before giving up (exit 6).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub deadline: Duration,
    /// Mark the node draining and return at once; its VMs stay until moved or deleted.
    #[arg(long, conflicts_with = "stop")]
    pub detach: bool,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// `--watch`: print again whenever the answer changes, until interrupted.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct WatchArgs {
    /// Keep watching: print the answer again whenever it changes (Ctrl-C ends it).
    #[arg(short = 'w', long)]
    pub watch: bool,
}

/// `--ignore-not-found`, as kubectl takes it on get and delete.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct AbsentArgs {
    /// A node or VM that does not exist is no error: nothing is printed, exit 0.
    #[arg(long)]
    pub ignore_not_found: bool,
}

/// `fleetwire vms`.
#[derive(Debug, clap::Args)]
pub struct VmsArgs {
    #[command(subcommand)]
    pub command: VmsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum VmsCommand {
    /// List the VMs (of one tenant with --tenant).
    #[command(visible_alias = "ls")]
    List {
        #[arg(long, value_parser = parse::<TenantId>)]
        tenant: Option<TenantId>,
        #[command(flatten)]
        watch: WatchArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Describe one VM: its node, ports, restarts, message and events.
    Get {
        #[arg(value_parser = parse::<VmId>)]
        vm_id: VmId,
        #[command(flatten)]
        watch: WatchArgs,
        #[command(flatten)]
        absent: AbsentArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Print a VM's output (its workload's stdout and stderr, kept by its node's agent).
    Logs {
        #[arg(value_parser = parse::<VmId>)]
        vm_id: VmId,
        /// Keep printing what the VM writes (Ctrl-C ends it).
        #[arg(short = 'f', long)]
        follow: bool,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Place a VM and start it: from flags, or a CreateVmRequest document with -f.
    Create(Box<CreateArgs>),
    /// Delete a VM on its node and forget it.
    #[command(visible_alias = "rm")]
    Delete {
        #[arg(value_parser = parse::<VmId>)]
        vm_id: VmId,
        #[command(flatten)]
        absent: AbsentArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
}

/// `fleetwire vms create`: the fields of a `CreateVmRequest`, or the document itself.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// A CreateVmRequest document (JSON; - for standard input); the flags below are then not
    /// taken.
    #[arg(short = 'f', long = "file", conflicts_with_all = ["vm_type", "memory_mb", "vcpus", "image", "command"])]
    pub file: Option<PathBuf>,
    /// The VM type (vm_type), as PPN fleets name them.
    #[arg(long = "type", required_unless_present = "file")]
    pub vm_type: Option<String>,
    /// Memory in MB (ram_mb).
    #[arg(long, required_unless_present = "file")]
    pub memory_mb: Option<u64>,
    /// Virtual CPUs (vcpu_count).
    #[arg(long, required_unless_present = "file")]
    pub vcpus: Option<u64>,
    /// An OCI image to run (smolvm nodes).
    #[arg(long)]
    pub image: Option<String>,
    /// Disk in GB (disk_gb).
    #[arg(long)]
    pub disk_gb: Option<u64>,
    /// The VM's id (vm_id); the controller makes one when absent.
    #[arg(long)]
    pub vm_id: Option<String>,
    /// The tenant the VM belongs to (tenant_id).
    #[arg(long)]
    pub tenant: Option<String>,
    /// The node to prefer (preferred_node).
    #[arg(long)]
    pub node: Option<String>,
    /// Prefer nodes with KVM (prefer_kvm).
    #[arg(long)]
    pub prefer_kvm: bool,
    /// Give the VM network access (network).
    #[arg(long)]
    pub network: bool,
    /// The command to run, after `--` (process nodes without an image; or the image's command).
    #[arg(last = true)]
    pub command: Vec<String>,
    /// Wait until the VM runs or fails, showing progress (the default).
    #[arg(long, overrides_with = "no_wait")]
    pub wait: bool,
    /// Return once the node has answered, whatever the VM's state.
    #[arg(long, overrides_with = "wait")]
    pub no_wait: bool,
    /// How long to wait for the VM to run before giving up (exit 6).
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// `fleetwire fleet`.
#[derive(Debug, clap::Args)]
pub struct FleetArgs {
    #[command(flatten)]
    pub watch: WatchArgs,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// A command-line value checked as its schema type checks it.
fn parse<T>(text: &str) -> Result<T, String>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    text.parse::<T>().map_err(|e| e.to_string())
}

impl NodesCommand {
    pub fn common(&self) -> &CommonArgs {
        match self {
            NodesCommand::Drain(drain) => &drain.common,
            NodesCommand::List { common, .. }
            | NodesCommand::Get { common, .. }
            | NodesCommand::Cordon { common, .. }
            | NodesCommand::Uncordon { common, .. }
            | NodesCommand::Delete { common, .. } => common,
        }
    }
}

impl VmsCommand {
    pub fn common(&self) -> &CommonArgs {
        match self {
            VmsCommand::Create(create) => &create.common,
            VmsCommand::List { common, .. }
            | VmsCommand::Get { common, .. }
            | VmsCommand::Logs { common, .. }
            | VmsCommand::Delete { common, .. } => common,
        }
    }
}

/// `fleetwire completion SHELL`: the shell's completion script, on standard output.
#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// bash, zsh or fish (also elvish and powershell).
    pub shell: clap_complete::Shell,
}

impl CreateArgs {
    /// Whether to wait for the VM to run: `--wait` unless `--no-wait` (the last of the two
    /// given wins).
    pub fn waits(&self) -> bool {
        !self.no_wait
    }
}
