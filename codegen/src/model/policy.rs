//! fleetwire's unknown-field policy, per root document, for the reference site.
//!
//! The policy is one for every document (README "Unknown fields", docs/interop.md): read from a
//! peer, a field that a closed object's schema does not define is set aside and reported; the
//! strict reader refuses it; and what fleetwire writes never carries one. What differs per
//! document is where fleetwire reads it from and where it writes it, which the schemas do not
//! say, so this table does. A document missing from it gets the general statement.

use serde_json::Value;

/// Where fleetwire meets one document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFieldPolicy {
    /// The peers fleetwire reads it from, in words; empty when fleetwire only writes it.
    pub read_from: Vec<&'static str>,
    /// Where fleetwire writes it, in words; empty when fleetwire only reads it.
    pub written_to: Vec<&'static str>,
    /// Whether fleetwire reads it as an HTTP request body, so unknown fields are answered as
    /// `Warning` headers (otherwise they go to the log and the metric only).
    pub warns_in_answer: bool,
    /// Whether the document's own object is closed (`additionalProperties: false`); an open
    /// one takes extra fields as valid, and they are neither reported nor refused.
    pub closed: bool,
    /// The document is not in the table: the page states the general policy only.
    pub general: bool,
}

/// (document, read from, written to, answered with `Warning` headers).
type Entry = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    bool,
);

const TABLE: &[Entry] = &[
    (
        "RegisterNodeRequest",
        &["node agents, at POST /v1/nodes/register"],
        &["fleetwire's agent, registering with its controller"],
        true,
    ),
    (
        "RegisterNodeResponse",
        &["the controller, by fleetwire's agent as it registers"],
        &["the controller, answering a registration"],
        false,
    ),
    (
        "NodeHeartbeat",
        &["node agents (fleetwire's and PPN's), at POST /v1/nodes/heartbeat"],
        &["fleetwire's agent, to its controller"],
        true,
    ),
    (
        "NodeRecord",
        &["the controller's own store, when it starts (a record written by a newer controller)"],
        &["the controller's answers and its store"],
        false,
    ),
    ("FleetStatus", &[], &["the controller, at GET /v1/fleet"], false),
    (
        "CreateBootstrapTokenRequest",
        &["operators, at POST /v1/tokens"],
        &["`fleetwire token create --url`, asking a controller for a token"],
        true,
    ),
    (
        "BootstrapTokenIssued",
        &["the controller, by `fleetwire token create --url`"],
        &["the controller, answering POST /v1/tokens"],
        false,
    ),
    (
        "VmRecord",
        &["node agents (fleetwire's and PPN's), answering the controller's spawn call"],
        &["the controller's answers, fleetwire's agent answering a spawn, heartbeats"],
        false,
    ),
    (
        "HostPortMapping",
        &["node agents, inside the VmRecord of a heartbeat or a spawn answer"],
        &["inside every VmRecord fleetwire writes"],
        false,
    ),
    (
        "CreateVmRequest",
        &[
            "tenants, at POST /v1/vms",
            "controllers (fleetwire's and PPN's), at the agent's POST /v1/spawn",
        ],
        &["the controller, forwarding a placement to the chosen node's agent"],
        true,
    ),
    (
        "RuntimeHealth",
        &["the smolvm runtime, by fleetwire's agent"],
        &[],
        false,
    ),
    (
        "RuntimeCapacity",
        &["the smolvm runtime, by fleetwire's agent"],
        &["inside heartbeats, as the runtime answered"],
        false,
    ),
    (
        "RuntimeMachine",
        &["the smolvm runtime, by fleetwire's agent (create, start and stop answers)"],
        &[],
        false,
    ),
    (
        "RuntimeMachineList",
        &["the smolvm runtime, by fleetwire's agent (GET /api/v1/machines)"],
        &[],
        false,
    ),
    (
        "RuntimeDeleted",
        &["the smolvm runtime, by fleetwire's agent (DELETE /api/v1/machines/{name})"],
        &[],
        false,
    ),
    (
        "RuntimeError",
        &["the smolvm runtime, by fleetwire's agent"],
        &[],
        false,
    ),
    (
        "CreateMachineRequest",
        &[],
        &["fleetwire's agent, creating a machine in the smolvm runtime"],
        false,
    ),
    (
        "ApiError",
        &["fleetwire's own servers' refusals, by their clients"],
        &["every fleetwire server, for every refusal"],
        false,
    ),
    ("Health", &[], &["every fleetwire server, at /healthz and /readyz"], false),
    (
        "HostMeterLedger",
        &["the agent's own meters.json, when it starts"],
        &["fleetwire's agent, before each reported.json"],
        false,
    ),
    (
        "HostReportedState",
        &["reported.json from any writer (nibrunner's, or a newer fleetwire), by fleetwire validate and the agent at start-up"],
        &["fleetwire's agent: reported.json, GET /v1/reported"],
        false,
    ),
    (
        "HostDesiredState",
        &["control planes, at the agent's PUT /v1/desired and in desired.json"],
        &["fleetwire's agent, answering PUT and GET /v1/desired"],
        true,
    ),
];

/// The policy of the root document `name`, whose schema is `schema`.
pub fn of(name: &str, schema: &Value) -> UnknownFieldPolicy {
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    match TABLE.iter().find(|(n, ..)| *n == name) {
        Some((_, read_from, written_to, warns)) => UnknownFieldPolicy {
            read_from: read_from.to_vec(),
            written_to: written_to.to_vec(),
            warns_in_answer: *warns,
            closed,
            general: false,
        },
        None => general(schema),
    }
}

/// The general statement only, for a document the table does not describe (every document of
/// a schema set other than fleetwire's: the table is where fleetwire reads and writes its own).
pub fn general(schema: &Value) -> UnknownFieldPolicy {
    UnknownFieldPolicy {
        read_from: Vec::new(),
        written_to: Vec::new(),
        warns_in_answer: false,
        closed: schema.get("additionalProperties") == Some(&Value::Bool(false)),
        general: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_each_document_once() {
        let mut names: Vec<&str> = TABLE.iter().map(|(n, ..)| *n).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before);
        for (name, read_from, written_to, _) in TABLE {
            assert!(
                !read_from.is_empty() || !written_to.is_empty(),
                "{name}: neither read nor written"
            );
        }
    }

    #[test]
    fn a_document_not_in_the_table_gets_the_general_statement() {
        let p = of(
            "SomethingNew",
            &serde_json::json!({"additionalProperties": false}),
        );
        assert!(p.general && p.closed);
        let p = of(
            "NodeHeartbeat",
            &serde_json::json!({"additionalProperties": false}),
        );
        assert!(!p.general && p.warns_in_answer);
    }
}
