//! The whole comparison: every definition, every root document and every operation of two
//! schema sets, each change given the directions it crosses, and the release verdict.

use std::collections::BTreeMap;

use serde::Serialize;

use super::api_changes::{self, Side};
use super::change::{Change, Direction, DirectionVerdict, Effect, Found, Rule};
use super::compare::{self, escape, At};
use super::reach::{self, Reach};
use crate::bundle::{Bundle, API_FILE};
use crate::schema_set::is_major_bump;
use crate::wire::Party;

/// One side of the comparison, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct SetInfo {
    /// The git revision, or `working tree`, or a release's version.
    pub label: String,
    pub version: Option<String>,
    pub hash: Option<String>,
}

/// What `diff` found, and whether the head's version allows it.
#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    pub base: SetInfo,
    pub head: SetInfo,
    pub changes: Vec<Change>,
    pub verdict: Verdict,
}

/// Whether the head may ship with its version.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub ok: bool,
    pub breaking: usize,
    pub message: String,
}

impl Diff {
    pub fn breaking(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(|c| c.breaking)
    }
}

/// `name`'s place in its file: `file#/$defs/Name`, or `file#` for a file's root document.
fn def_pointer(bundle: &Bundle, name: &str, inner: &str) -> String {
    let file = bundle.def_files.get(name).cloned().unwrap_or_default();
    let file_root = bundle
        .files
        .iter()
        .any(|f| f.name == file && f.value.get("title").and_then(|t| t.as_str()) == Some(name));
    if file_root {
        format!("{file}#{inner}")
    } else {
        format!("{file}#/$defs/{}{inner}", escape(name))
    }
}

fn verdicts(
    directions: impl IntoIterator<Item = Direction>,
    effect: Effect,
) -> Vec<DirectionVerdict> {
    directions
        .into_iter()
        .map(|d| DirectionVerdict {
            writer: d.writer,
            reader: d.reader,
            breaking: d.breaks(effect),
        })
        .collect()
}

/// Compares `base` with `head` (labelled for the report).
pub fn diff(base: &Bundle, head: &Bundle, base_label: &str, head_label: &str) -> Diff {
    // Who writes and reads each root document: the head's word, else the base's (a removed
    // document, or a base from before the annotations).
    let mut wires = reach::wires(base);
    wires.extend(reach::wires(head));
    let mut reaches: BTreeMap<String, Reach> = BTreeMap::new();
    reach::add(base, &wires, &mut reaches);
    reach::add(head, &wires, &mut reaches);

    let mut changes = Vec::new();
    let mut names: Vec<&String> = head.defs.keys().collect();
    names.extend(base.defs.keys().filter(|n| !head.defs.contains_key(*n)));
    for name in names {
        let (b, h) = (base.defs.get(name), head.defs.get(name));
        let (b_root, h_root) = (base.is_root(name), head.is_root(name));
        let mut found = Vec::new();
        let whole = |rule, effect, message: String| Found {
            rule,
            effect,
            pointer: String::new(),
            field: String::new(),
            message,
        };
        match (b, h) {
            (Some(b), Some(h)) => {
                if b_root && !h_root {
                    found.push(whole(
                        Rule::DocumentRemoved,
                        Effect::Incompatible,
                        format!("`{name}` is no longer a root document."),
                    ));
                } else if h_root && !b_root {
                    found.push(whole(
                        Rule::DocumentAdded,
                        Effect::Neutral,
                        format!("`{name}` is a new root document."),
                    ));
                }
                compare::schemas(b, h, &At::root(), &mut found);
            }
            (None, Some(_)) if h_root => found.push(whole(
                Rule::DocumentAdded,
                Effect::Neutral,
                format!("The root document `{name}` was added."),
            )),
            (None, Some(_)) => found.push(whole(
                Rule::DefinitionAdded,
                Effect::Neutral,
                format!("The definition `{name}` was added."),
            )),
            (Some(_), None) if b_root => found.push(whole(
                Rule::DocumentRemoved,
                Effect::Incompatible,
                format!("The root document `{name}` was removed."),
            )),
            (Some(_), None) => found.push(whole(
                Rule::DefinitionRemoved,
                Effect::Neutral,
                format!("The definition `{name}` was removed (nothing refers to it any more)."),
            )),
            (None, None) => {}
        }
        let reach = reaches.get(name.as_str()).cloned().unwrap_or_default();
        let in_head = h.is_some();
        for f in found {
            let directions = verdicts(reach.directions.iter().copied(), f.effect);
            let breaking = if directions.is_empty() {
                // On no annotated wire: only a root document of its own can break a reader.
                f.effect != Effect::Neutral && (b_root || h_root)
            } else {
                directions.iter().any(|d| d.breaking)
            };
            changes.push(Change {
                rule: f.rule,
                effect: f.effect,
                breaking,
                subject: name.clone(),
                documents: reach.documents.iter().cloned().collect(),
                pointer: def_pointer(if in_head { head } else { base }, name, &f.pointer),
                field: f.field,
                directions,
                message: format!("{name}: {}", f.message),
            });
        }
    }

    for op in api_changes::compare(base.api.as_ref(), head.api.as_ref()) {
        let pairs: Vec<Direction> = op
            .callers
            .iter()
            .flat_map(|&caller| {
                let request = Direction {
                    writer: caller,
                    reader: Party::Controller,
                };
                let response = Direction {
                    writer: Party::Controller,
                    reader: caller,
                };
                match op.side {
                    Side::Request => vec![request],
                    Side::Response => vec![response],
                    Side::Both => vec![request, response],
                }
            })
            .collect();
        let directions = verdicts(pairs, op.found.effect);
        changes.push(Change {
            rule: op.found.rule,
            effect: op.found.effect,
            breaking: directions.iter().any(|d| d.breaking),
            subject: op.operation.clone(),
            documents: vec![op.operation],
            pointer: format!("{API_FILE}#{}", op.found.pointer),
            field: op.found.field,
            directions,
            message: op.found.message,
        });
    }

    let info = |bundle: &Bundle, label: &str| SetInfo {
        label: label.to_string(),
        version: bundle.set.as_ref().map(|s| s.version.to_string()),
        hash: bundle.set.as_ref().map(|s| s.hash.clone()),
    };
    let breaking = changes.iter().filter(|c| c.breaking).count();
    let verdict = verdict(base, head, breaking);
    Diff {
        base: info(base, base_label),
        head: info(head, head_label),
        changes,
        verdict,
    }
}

fn verdict(base: &Bundle, head: &Bundle, breaking: usize) -> Verdict {
    let versions = (
        base.set.as_ref().map(|s| &s.version),
        head.set.as_ref().map(|s| &s.version),
    );
    let (ok, message) = match versions {
        _ if breaking == 0 => (true, "no breaking change".to_string()),
        (Some(b), Some(h)) if is_major_bump(b, h) => (
            true,
            format!("{breaking} breaking change(s), released as a major version ({b} → {h})"),
        ),
        (Some(b), Some(h)) => (
            false,
            format!(
                "{breaking} breaking change(s) without a major version bump ({b} → {h}): raise schemas/schema-set.json's version to {} (below 1.0.0 a minor bump is major, as cargo reads semver) or make the change compatible",
                next_major(b)
            ),
        ),
        (None, Some(h)) => (
            true,
            format!("{breaking} breaking change(s) against a base without a schema-set version: {h} is the first versioned set"),
        ),
        (_, None) => (
            false,
            format!("{breaking} breaking change(s), and the head has no schemas/schema-set.json to bump"),
        ),
    };
    Verdict {
        ok,
        breaking,
        message,
    }
}

/// The smallest version that is a major bump over `v` in cargo's reading.
pub fn next_major(v: &semver::Version) -> semver::Version {
    match (v.major, v.minor) {
        (0, 0) => semver::Version::new(0, 0, v.patch + 1),
        (0, minor) => semver::Version::new(0, minor + 1, 0),
        (major, _) => semver::Version::new(major + 1, 0, 0),
    }
}
