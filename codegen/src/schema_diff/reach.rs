//! Which root documents and API operations each definition travels in, and so in which
//! directions of the wire (writer → reader) a change to it is seen: from each root
//! document's `x-fleetwire-wire`, and from the API document (a request body goes from the
//! operation's callers to the controller, a response from the controller to them).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::change::Direction;
use crate::bundle::{collect_refs, ref_name, Bundle};
use crate::wire::{self, Party};

/// Where one definition travels.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    /// Root documents and operations (`POST /v1/nodes/heartbeat`) it is part of.
    pub documents: BTreeSet<String>,
    pub directions: BTreeSet<Direction>,
}

/// The HTTP methods an OpenAPI path item may hold.
pub const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Who calls an operation, from its `x-fleetwire-access` (docs/security.md): nodes call the
/// node routes; operators (and fleetwire's CLI) the others.
pub fn callers(operation: &Value) -> Vec<Party> {
    match operation.get("x-fleetwire-access").and_then(Value::as_str) {
        Some("node") => vec![Party::Agent],
        Some("admin" | "read") => vec![Party::Cli, Party::Operator],
        _ => vec![Party::Operator],
    }
}

/// Every definition reachable from `name`, itself included.
fn reachable(bundle: &Bundle, roots: impl IntoIterator<Item = String>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut pending: Vec<String> = roots.into_iter().collect();
    while let Some(name) = pending.pop() {
        if let Some(def) = bundle.defs.get(&name) {
            if seen.insert(name) {
                pending.extend(collect_refs(def).iter().map(|r| ref_name(r).to_string()));
            }
        }
    }
    seen
}

fn refs_in(value: &Value) -> Vec<String> {
    collect_refs(value)
        .iter()
        .map(|r| ref_name(r).to_string())
        .collect()
}

/// Adds, for every definition of `bundle`, where it travels. Root documents' parties come from
/// `wires` (the head's annotation, else the base's).
pub fn add(
    bundle: &Bundle,
    wires: &BTreeMap<String, wire::Wire>,
    out: &mut BTreeMap<String, Reach>,
) {
    for root in &bundle.roots {
        let Some(w) = wires.get(&root.name) else {
            continue;
        };
        let pairs: Vec<Direction> = w
            .writer_parties()
            .flat_map(|writer| {
                w.reader_parties()
                    .map(move |reader| Direction { writer, reader })
            })
            .collect();
        for def in reachable(bundle, [root.name.clone()]) {
            let reach = out.entry(def).or_default();
            reach.documents.insert(root.name.clone());
            reach.directions.extend(pairs.iter().copied());
        }
    }
    let Some(paths) = bundle
        .api
        .as_ref()
        .and_then(|a| a.get("paths"))
        .and_then(Value::as_object)
    else {
        return;
    };
    for (path, item) in paths {
        for method in METHODS {
            let Some(op) = item.get(*method) else {
                continue;
            };
            let label = format!("{} {path}", method.to_ascii_uppercase());
            let callers = callers(op);
            let request = op.get("requestBody").map(refs_in).unwrap_or_default();
            let response = op.get("responses").map(refs_in).unwrap_or_default();
            for (names, to_controller) in [(request, true), (response, false)] {
                for def in reachable(bundle, names) {
                    let reach = out.entry(def).or_default();
                    reach.documents.insert(label.clone());
                    for &caller in &callers {
                        reach.directions.insert(if to_controller {
                            Direction {
                                writer: caller,
                                reader: Party::Controller,
                            }
                        } else {
                            Direction {
                                writer: Party::Controller,
                                reader: caller,
                            }
                        });
                    }
                }
            }
        }
    }
}

/// Each root document's annotation, leniently (a base from before the annotations has none).
pub fn wires(bundle: &Bundle) -> BTreeMap<String, wire::Wire> {
    bundle
        .roots
        .iter()
        .filter_map(|r| {
            let w = wire::of(&r.name, &bundle.defs[&r.name]).ok().flatten()?;
            Some((r.name.clone(), w))
        })
        .collect()
}
