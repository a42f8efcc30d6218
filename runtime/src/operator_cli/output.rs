//! How the operator commands print what the controller answered: a table for people (as
//! `kubectl get` prints one: upper-case headers, aligned columns, no borders; `-o wide` with
//! more columns), the answer's own document with `-o json` or `-o yaml` for scripts, or
//! `kind/id` per record with `-o name`. States are coloured (`paint`); the colours are
//! stripped off a terminal.

use chrono::{DateTime, Utc};
use comfy_table::{presets::NOTHING, CellAlignment, ContentArrangement, Table};
use fleetwire_types::{FleetStatus, HostState, NodeRecord, Timestamp, VmRecord};
use serde::Serialize;

use super::paint;

/// `-o`: the output format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    #[default]
    Table,
    /// The table with more columns (ports, message, versions).
    Wide,
    /// The controller's answer as a JSON document (for lists: the array).
    Json,
    /// The controller's answer as a YAML document.
    Yaml,
    /// `node/ID` or `vm/ID`, one record a line.
    Name,
}

/// How a value reads for people: a table (or a description), wide or not, and the names of
/// the records it holds.
pub struct View<'a, T> {
    pub table: &'a dyn Fn(&T, bool) -> String,
    pub names: &'a dyn Fn(&T) -> Vec<String>,
}

// By hand: a derive would ask `T: Copy`, and a view holds only references.
impl<T> Clone for View<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for View<'_, T> {}

/// A value rendered in the chosen format.
pub fn render<T: Serialize>(format: Format, value: &T, view: View<'_, T>) -> String {
    match format {
        Format::Table => (view.table)(value, false),
        Format::Wide => (view.table)(value, true),
        Format::Json => {
            let mut text = serde_json::to_string_pretty(value).expect("a typed value serializes");
            text.push('\n');
            text
        }
        Format::Yaml => serde_norway::to_string(value).expect("a typed value serializes"),
        Format::Name => (view.names)(value)
            .into_iter()
            .map(|name| name + "\n")
            .collect(),
    }
}

pub fn node_name(node: &NodeRecord) -> String {
    format!("node/{}", node.node_id.as_str())
}

pub fn vm_name(vm: &VmRecord) -> String {
    format!("vm/{}", vm.vm_id.as_str())
}

/// Columns whose words are coloured by what they say (`paint::word`).
const PAINTED: &[&str] = &["STATUS", "STATE"];

fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut table = Table::new();
    table
        .load_preset(NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(headers.to_vec());
    for row in &rows {
        table.add_row(row.clone());
    }
    // Numbers read best right-aligned, as in `kubectl top`.
    for (i, header) in headers.iter().enumerate() {
        if NUMERIC.contains(header) {
            if let Some(column) = table.column_mut(i) {
                column.set_cell_alignment(CellAlignment::Right);
            }
        }
    }
    // comfy-table pads every cell by one space on each side: drop the first column's left pad
    // and trailing blanks, so lines start at the margin.
    let lines: Vec<String> = table
        .lines()
        .map(|line| {
            line.strip_prefix(' ')
                .unwrap_or(&line)
                .trim_end()
                .to_string()
        })
        .collect();
    // Colours go in after the layout, so escape codes never count as width: each painted
    // column's cells start where its header does (they are left-aligned).
    let painted: Vec<(usize, usize)> = headers
        .iter()
        .enumerate()
        .filter(|(_, h)| PAINTED.contains(h))
        .filter_map(|(i, h)| Some((i, lines.first()?.find(h)?)))
        .collect();
    let mut text = String::new();
    for (n, mut line) in lines.into_iter().enumerate() {
        if n > 0 {
            for &(column, at) in painted.iter().rev() {
                let Some(word) = rows.get(n - 1).and_then(|row| row.get(column)) else {
                    continue;
                };
                if line.get(at..at + word.len()) == Some(word.as_str()) {
                    line.replace_range(at..at + word.len(), &paint::word(word));
                }
            }
        }
        text.push_str(&line);
        text.push('\n');
    }
    if text.is_empty() {
        text.push('\n');
    }
    text
}

const NUMERIC: &[&str] = &["VMS", "VCPUS", "MEMORY MB", "DISK GB", "CPUS"];

/// "3m", "2h", "5d": how long ago, as `kubectl` shows ages.
pub fn age(at: &Timestamp, now: DateTime<Utc>) -> String {
    let seconds = (now - at.utc()).num_seconds().max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn of(available: Option<u64>, total: Option<u64>) -> String {
    match (available, total) {
        (Some(a), Some(t)) => format!("{a}/{t}"),
        (Some(a), None) => a.to_string(),
        _ => "-".to_string(),
    }
}

/// A node's state in one word: its status, and whether placements avoid it.
fn node_state(node: &NodeRecord) -> String {
    let mut state = node.status.to_string();
    if node.cordoned_at.is_some() {
        state.push_str(",cordoned");
    }
    if node.disk_cordoned_at.is_some() {
        state.push_str(",disk-cordoned");
    }
    state
}

pub fn nodes_table(nodes: &[NodeRecord], wide: bool, now: DateTime<Utc>) -> String {
    let rows = nodes
        .iter()
        .map(|node| {
            let mut row = vec![
                node.node_id.to_string(),
                node_state(node),
                node.runtime.to_string(),
                node.wg_ip.to_string(),
                node.vm_count.to_string(),
                of(
                    node.available_cpus.map(u64::from),
                    node.total_cpus.map(u64::from),
                ),
                of(
                    node.available_memory_mb.or(Some(node.ram_available_mb)),
                    node.total_memory_mb,
                ),
                of(node.available_disk_gb, node.total_disk_gb),
                age(&node.last_heartbeat, now),
            ];
            if wide {
                row.extend([
                    node.hostname.to_string(),
                    or_dash(node.engine_version.as_ref().map(|v| v.as_str())),
                    or_dash(node.agent_version.as_ref().map(|v| v.as_str())),
                    node.kvm_available.to_string(),
                ]);
            }
            row
        })
        .collect();
    let mut headers = vec![
        "NODE",
        "STATUS",
        "RUNTIME",
        "WG IP",
        "VMS",
        "CPUS",
        "MEMORY MB",
        "DISK GB",
        "LAST SEEN",
    ];
    if wide {
        headers.extend(["HOSTNAME", "ENGINE", "AGENT", "KVM"]);
    }
    table(&headers, rows)
}

/// One node in detail: every field the record has, as `kubectl describe` lists them.
pub fn node_details(node: &NodeRecord, now: DateTime<Utc>) -> String {
    let mut fields = vec![
        ("Node", node.node_id.to_string()),
        ("Status", paint::word(&node_state(node))),
        ("Hostname", node.hostname.to_string()),
        ("WireGuard IP", node.wg_ip.to_string()),
        ("Runtime", node.runtime.to_string()),
        (
            "Engine version",
            or_dash(node.engine_version.as_ref().map(|v| v.as_str())),
        ),
        (
            "Agent version",
            or_dash(node.agent_version.as_ref().map(|v| v.as_str())),
        ),
        ("KVM", node.kvm_available.to_string()),
        ("VMs", node.vm_count.to_string()),
        (
            "CPUs (available/total)",
            of(
                node.available_cpus.map(u64::from),
                node.total_cpus.map(u64::from),
            ),
        ),
        (
            "Memory MB (available/total)",
            of(
                node.available_memory_mb.or(Some(node.ram_available_mb)),
                node.total_memory_mb,
            ),
        ),
        (
            "Disk GB (available/total)",
            of(node.available_disk_gb, node.total_disk_gb),
        ),
        ("Disk reserved GB", node.reserved_disk_gb.to_string()),
        (
            "Last heartbeat",
            format!(
                "{} ({} ago)",
                node.last_heartbeat,
                age(&node.last_heartbeat, now)
            ),
        ),
        ("Registered", or_dash(node.registered_at.as_ref())),
    ];
    if let Some(at) = &node.cordoned_at {
        let reason = node
            .cordon_reason
            .as_ref()
            .map(|r| format!(": {}", r.as_str()));
        fields.push(("Cordoned", format!("{at}{}", reason.unwrap_or_default())));
    }
    if let Some(at) = &node.disk_cordoned_at {
        fields.push(("Disk-cordoned", at.to_string()));
    }
    if let Some(problem) = &node.engine_version_problem {
        fields.push(("Engine problem", problem.as_str().to_string()));
    }
    if let Some(not_after) = &node.cert_not_after {
        fields.push(("Certificate expires", not_after.to_string()));
    }
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    fields
        .into_iter()
        .map(|(key, value)| format!("{:<width$} {value}\n", format!("{key}:")))
        .collect()
}

/// What a VM runs: its image, else its command line.
fn workload(vm: &VmRecord) -> String {
    match (&vm.image, &vm.command) {
        (Some(image), _) => image.to_string(),
        (None, Some(command)) => command
            .iter()
            .map(|arg| arg.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        (None, None) => "-".to_string(),
    }
}

fn ports(vm: &VmRecord) -> String {
    if vm.host_ports.is_empty() {
        return "-".to_string();
    }
    vm.host_ports
        .iter()
        .map(|p| format!("{}->{}/{}", p.host_port.0, p.guest_port, p.protocol))
        .collect::<Vec<_>>()
        .join(",")
}

pub fn vms_table(vms: &[VmRecord], wide: bool, now: DateTime<Utc>) -> String {
    let rows = vms
        .iter()
        .map(|vm| {
            let mut row = vec![
                vm.vm_id.to_string(),
                or_dash(vm.node_id.as_ref().map(|v| v.as_str())),
                vm.state.to_string(),
                vm.vm_type.to_string(),
                vm.vcpu_count.to_string(),
                vm.ram_alloc_mb.to_string(),
                or_dash(vm.tenant_id.as_ref().map(|v| v.as_str())),
                workload(vm),
                vm.created_at
                    .as_ref()
                    .or(vm.started_at.as_ref())
                    .map_or_else(|| "-".to_string(), |at| age(at, now)),
            ];
            if wide {
                row.extend([
                    ports(vm),
                    vm.restart_count.unwrap_or(0).to_string(),
                    or_dash(vm.message.as_ref().map(|m| m.as_str())),
                ]);
            }
            row
        })
        .collect();
    let mut headers = vec![
        "VM",
        "NODE",
        "STATE",
        "TYPE",
        "VCPUS",
        "MEMORY MB",
        "TENANT",
        "WORKLOAD",
        "AGE",
    ];
    if wide {
        headers.extend(["PORTS", "RESTARTS", "MESSAGE"]);
    }
    table(&headers, rows)
}

/// One VM as `kubectl describe` shows a pod: where it runs, what it runs, its ports, its
/// restarts and why it is in its state, then what happened to it, oldest first.
pub fn vm_details(vm: &VmRecord, now: DateTime<Utc>) -> String {
    let ago = |at: &Timestamp| format!("{at} ({} ago)", age(at, now));
    let fields = vec![
        ("VM", vm.vm_id.to_string()),
        ("Node", or_dash(vm.node_id.as_ref().map(|v| v.as_str()))),
        ("State", paint::word(&vm.state.to_string())),
        ("Type", vm.vm_type.to_string()),
        ("vCPUs", vm.vcpu_count.to_string()),
        ("Memory MB", vm.ram_alloc_mb.to_string()),
        ("Disk GB", or_dash(vm.disk_gb)),
        ("Tenant", or_dash(vm.tenant_id.as_ref().map(|v| v.as_str()))),
        ("Workload", workload(vm)),
        ("Ports", ports(vm)),
        ("Restarts", vm.restart_count.unwrap_or(0).to_string()),
        ("Message", or_dash(vm.message.as_ref().map(|m| m.as_str()))),
        ("Created", or_dash(vm.created_at.as_ref().map(ago))),
        ("Started", or_dash(vm.started_at.as_ref().map(ago))),
    ];
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut text: String = fields
        .into_iter()
        .map(|(key, value)| format!("{:<width$} {value}\n", format!("{key}:")))
        .collect();
    let mut events: Vec<(&Timestamp, String)> = Vec::new();
    if let Some(at) = &vm.created_at {
        events.push((at, "accepted by the controller".to_string()));
    }
    if let Some(at) = &vm.started_at {
        events.push((at, "started".to_string()));
    }
    if let Some(at) = &vm.last_restart_at {
        let count = vm.restart_count.unwrap_or(1);
        events.push((at, format!("restarted (restart {count})")));
    }
    events.sort_by_key(|(at, _)| at.utc());
    text.push_str("Events:\n");
    for (at, what) in &events {
        text.push_str(&format!("  {:>6} ago  {what}\n", age(at, now)));
    }
    let now_line = match &vm.message {
        Some(message) => format!("{}: {}", vm.state, message.as_str()),
        None => vm.state.to_string(),
    };
    text.push_str(&format!("  {:>6}      {now_line}\n", "now"));
    text
}

/// The fleet: its counts, then every node the controller knows, the unreachable ones too
/// (marked by their status, and last seen long ago), which `GET /v1/fleet` leaves out as PPN
/// does.
pub fn fleet_summary(
    fleet: &FleetStatus,
    every_node: &[NodeRecord],
    wide: bool,
    now: DateTime<Utc>,
) -> String {
    let counts = fleet.counts.as_ref().map_or_else(
        || format!("{} nodes", every_node.len()),
        |c| {
            format!(
                "{} ready, {} registering, {} draining, {} unreachable",
                c.ready, c.registering, c.draining, c.unreachable
            )
        },
    );
    let unreachable = every_node
        .iter()
        .filter(|n| n.status == HostState::Unreachable)
        .count();
    let mut text = format!("Fleet at {}: {counts}\n\n", fleet.last_updated);
    text.push_str(&nodes_table(every_node, wide, now));
    if unreachable > 0 {
        text.push_str(&format!(
            "\n{unreachable} unreachable: no heartbeat within the staleness limit; `fleetwire nodes get NODE` says when each was last seen\n"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeRecord {
        let text = include_str!("../../../schemas/examples/NodeRecord/valid/full.json");
        fleetwire_types::read::<NodeRecord>(text.as_bytes())
            .expect("the fixture is valid")
            .value
    }

    #[test]
    fn a_node_table_has_aligned_columns_from_the_margin() {
        let node = node();
        let now = node.last_heartbeat.utc() + chrono::Duration::seconds(95);
        let painted = nodes_table(&[node.clone(), node.clone()], false, now);
        assert!(
            painted.contains(&paint::word(&node_state(&node))),
            "{painted:?}"
        );
        // As a file or a pipe gets it: the colours stripped, the columns still aligned.
        let text = anstream::adapter::strip_str(&painted).to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NODE "), "{text}");
        assert!(lines[1].starts_with(node.node_id.as_str()), "{text}");
        assert!(lines[1].ends_with("95s"), "{text}");
        let status_column = lines[0].find("STATUS").unwrap();
        assert_eq!(
            lines[1].find(&node_state(&node)),
            Some(status_column),
            "{text}"
        );
    }

    #[test]
    fn ages_read_as_kubectl_shows_them() {
        let at: Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        let now = at.utc();
        assert_eq!(age(&at, now + chrono::Duration::seconds(5)), "5s");
        assert_eq!(age(&at, now + chrono::Duration::minutes(5)), "5m");
        assert_eq!(age(&at, now + chrono::Duration::hours(5)), "5h");
        assert_eq!(age(&at, now + chrono::Duration::days(5)), "5d");
        assert_eq!(age(&at, now - chrono::Duration::seconds(5)), "0s");
    }

    #[test]
    fn json_output_is_the_answer_itself() {
        let node = node();
        let view = View {
            table: &|_: &NodeRecord, _| unreachable!(),
            names: &|n: &NodeRecord| vec![node_name(n)],
        };
        let text = render(Format::Json, &node, view);
        let back = fleetwire_types::read_strict::<NodeRecord>(text.as_bytes()).unwrap();
        assert_eq!(back, node);
    }
}
