//! How the operator commands print what the controller answered: a table for people (as
//! `kubectl get` prints one: upper-case headers, aligned columns, no borders), or the answer's
//! own JSON document with `-o json`, for scripts.

use chrono::{DateTime, Utc};
use comfy_table::{presets::NOTHING, CellAlignment, ContentArrangement, Table};
use fleetwire_types::{FleetStatus, NodeRecord, Timestamp, VmRecord};
use serde::Serialize;

/// `-o`: the output format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    #[default]
    Table,
    /// The controller's answer as a JSON document (one per line for lists: the array).
    Json,
}

/// A value rendered in the chosen format.
pub fn render<T: Serialize>(format: Format, value: &T, table: impl FnOnce(&T) -> String) -> String {
    match format {
        Format::Table => table(value),
        Format::Json => {
            let mut text = serde_json::to_string_pretty(value).expect("a typed value serializes");
            text.push('\n');
            text
        }
    }
}

fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut table = Table::new();
    table
        .load_preset(NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(headers.to_vec());
    for row in rows {
        table.add_row(row);
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
    let mut text: String = table
        .lines()
        .map(|line| {
            let line = line
                .strip_prefix(' ')
                .unwrap_or(&line)
                .trim_end()
                .to_string();
            line + "\n"
        })
        .collect();
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

pub fn nodes_table(nodes: &[NodeRecord], now: DateTime<Utc>) -> String {
    let rows = nodes
        .iter()
        .map(|node| {
            vec![
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
            ]
        })
        .collect();
    table(
        &[
            "NODE",
            "STATUS",
            "RUNTIME",
            "WG IP",
            "VMS",
            "CPUS",
            "MEMORY MB",
            "DISK GB",
            "LAST SEEN",
        ],
        rows,
    )
}

/// One node in detail: every field the record has, as `kubectl describe` lists them.
pub fn node_details(node: &NodeRecord, now: DateTime<Utc>) -> String {
    let mut fields = vec![
        ("Node", node.node_id.to_string()),
        ("Status", node_state(node)),
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

pub fn vms_table(vms: &[VmRecord], now: DateTime<Utc>) -> String {
    let rows = vms
        .iter()
        .map(|vm| {
            let workload = match (&vm.image, &vm.command) {
                (Some(image), _) => image.to_string(),
                (None, Some(command)) => command
                    .iter()
                    .map(|arg| arg.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
                (None, None) => "-".to_string(),
            };
            vec![
                vm.vm_id.to_string(),
                or_dash(vm.node_id.as_ref().map(|v| v.as_str())),
                vm.state.to_string(),
                vm.vm_type.to_string(),
                vm.vcpu_count.to_string(),
                vm.ram_alloc_mb.to_string(),
                or_dash(vm.tenant_id.as_ref().map(|v| v.as_str())),
                workload,
                vm.created_at
                    .as_ref()
                    .or(vm.started_at.as_ref())
                    .map_or_else(|| "-".to_string(), |at| age(at, now)),
            ]
        })
        .collect();
    table(
        &[
            "VM",
            "NODE",
            "STATE",
            "TYPE",
            "VCPUS",
            "MEMORY MB",
            "TENANT",
            "WORKLOAD",
            "AGE",
        ],
        rows,
    )
}

pub fn fleet_summary(fleet: &FleetStatus, now: DateTime<Utc>) -> String {
    let counts = fleet.counts.as_ref().map_or_else(
        || format!("{} nodes", fleet.nodes.len()),
        |c| {
            format!(
                "{} ready, {} registering, {} draining, {} unreachable",
                c.ready, c.registering, c.draining, c.unreachable
            )
        },
    );
    format!(
        "Fleet at {}: {counts}\n\n{}",
        fleet.last_updated,
        nodes_table(&fleet.nodes, now)
    )
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
        let text = nodes_table(&[node.clone(), node.clone()], now);
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
        let text = render(Format::Json, &node, |_| unreachable!());
        let back = fleetwire_types::read_strict::<NodeRecord>(text.as_bytes()).unwrap();
        assert_eq!(back, node);
    }
}
