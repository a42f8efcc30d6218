//! Who writes and who reads each root document: its `x-fleetwire-wire` annotation
//! (docs/versioning.md, "Directions").
//!
//! ```json
//! "x-fleetwire-wire": {
//!   "writers": {"agent": "fleetwire's agent, to its controller"},
//!   "readers": {"controller": "node agents, at POST /v1/nodes/heartbeat"},
//!   "readAsRequest": true
//! }
//! ```
//!
//! Each party maps to `true` or to words: for fleetwire's own programs (controller, agent,
//! cli), a reader's words say where fleetwire reads the document from and a writer's where it
//! writes it (the site's unknown-field section prints them). `readAsRequest`: fleetwire reads
//! it as an HTTP request body, so unknown fields are answered as `Warning` headers. The site
//! and `diff` read it; generation refuses a root document without it.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::bundle::Bundle;

/// The annotation's key on a root document.
pub const ANNOTATION: &str = "x-fleetwire-wire";

/// A party on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Party {
    /// fleetwire's controller (and PPN's, on the same wire).
    Controller,
    /// The node agent (fleetwire's, and PPN's on the controller's wire).
    Agent,
    /// fleetwire's command-line tools (`fleetwire token`, `fleetwire validate`, the operator CLI).
    Cli,
    /// Operators' and tenants' own tools: scripts, dashboards, crates pinned on fleetwire-types.
    Operator,
    /// The smolvm runtime on each host.
    Smolvm,
    /// nibrunner and other control planes on the host (desired.json, reported.json).
    Nibrunner,
}

impl Party {
    pub const ALL: [Party; 6] = [
        Party::Controller,
        Party::Agent,
        Party::Cli,
        Party::Operator,
        Party::Smolvm,
        Party::Nibrunner,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Party::Controller => "controller",
            Party::Agent => "agent",
            Party::Cli => "cli",
            Party::Operator => "operator",
            Party::Smolvm => "smolvm",
            Party::Nibrunner => "nibrunner",
        }
    }

    fn parse(s: &str) -> Option<Party> {
        Party::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// One of fleetwire's own programs (whose words the site prints).
    pub fn is_fleetwire(self) -> bool {
        matches!(self, Party::Controller | Party::Agent | Party::Cli)
    }

    /// Whether the party's code follows the schema set's releases, so that an old and a new
    /// version of it meet on the wire (everything but the peers whose behaviour our schemas
    /// only describe: smolvm, nibrunner). Such a reader must accept what older writers send,
    /// and such a writer must send only what older readers accept.
    pub fn is_versioned(self) -> bool {
        !matches!(self, Party::Smolvm | Party::Nibrunner)
    }
}

/// One party's entry: the party, and the words the site prints for it (if any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub party: Party,
    pub words: Option<String>,
}

/// What the annotation says about one root document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wire {
    pub writers: Vec<Entry>,
    pub readers: Vec<Entry>,
    pub read_as_request: bool,
}

impl Wire {
    pub fn writer_parties(&self) -> impl Iterator<Item = Party> + '_ {
        self.writers.iter().map(|e| e.party)
    }

    pub fn reader_parties(&self) -> impl Iterator<Item = Party> + '_ {
        self.readers.iter().map(|e| e.party)
    }
}

/// The annotation of the definition `name`, if it has one; an error, with the pointer, when it
/// is malformed.
pub fn of(name: &str, schema: &Value) -> Result<Option<Wire>> {
    let Some(note) = schema.get(ANNOTATION) else {
        return Ok(None);
    };
    let at = format!("{name}: /{ANNOTATION}");
    let note = note
        .as_object()
        .with_context(|| format!("{at} must be an object"))?;
    for key in note.keys() {
        if !["writers", "readers", "readAsRequest"].contains(&key.as_str()) {
            bail!("{at}/{key}: unknown key (writers, readers, readAsRequest)");
        }
    }
    let entries = |key: &str| -> Result<Vec<Entry>> {
        let map = note
            .get(key)
            .and_then(Value::as_object)
            .with_context(|| format!("{at}/{key} must be an object of party → true or words"))?;
        if map.is_empty() {
            bail!("{at}/{key} names no party");
        }
        map.iter()
            .map(|(party, words)| {
                let party_at = format!("{at}/{key}/{party}");
                let party = Party::parse(party).with_context(|| {
                    let known: Vec<&str> = Party::ALL.iter().map(|p| p.as_str()).collect();
                    format!("{party_at}: unknown party (one of {})", known.join(", "))
                })?;
                let words = match words {
                    Value::Bool(true) => None,
                    Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
                    _ => bail!("{party_at} must be `true` or words"),
                };
                Ok(Entry { party, words })
            })
            .collect()
    };
    let read_as_request = match note.get("readAsRequest") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => bail!("{at}/readAsRequest must be a boolean"),
    };
    Ok(Some(Wire {
        writers: entries("writers")?,
        readers: entries("readers")?,
        read_as_request,
    }))
}

/// Every root document's annotation; refuses, naming them, root documents without one.
pub fn of_roots(bundle: &Bundle) -> Result<BTreeMap<String, Wire>> {
    let mut out = BTreeMap::new();
    let mut missing = Vec::new();
    for root in &bundle.roots {
        match of(&root.name, &bundle.defs[&root.name])? {
            Some(wire) => {
                out.insert(root.name.clone(), wire);
            }
            None => missing.push(format!("{} ({})", root.name, root.file)),
        }
    }
    if !missing.is_empty() {
        bail!(
            "root documents without `{ANNOTATION}` (who writes and reads them; docs/versioning.md): {}",
            missing.join(", ")
        );
    }
    Ok(out)
}
