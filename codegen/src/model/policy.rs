//! fleetwire's unknown-field policy, per root document, for the reference site.
//!
//! The policy is one for every document (README "Unknown fields", docs/interop.md): read from a
//! peer, a field that a closed object's schema does not define is set aside and reported; the
//! strict reader refuses it; and what fleetwire writes never carries one. What differs per
//! document is where fleetwire reads it from and where it writes it: each root document's
//! `x-fleetwire-wire` annotation says so (`crate::wire`; generation refuses a root document
//! without one). A document without it gets the general statement.

use serde_json::Value;

use crate::wire::{self, Entry};

/// Where fleetwire meets one document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFieldPolicy {
    /// The peers fleetwire reads it from, in words; empty when fleetwire only writes it.
    pub read_from: Vec<String>,
    /// Where fleetwire writes it, in words; empty when fleetwire only reads it.
    pub written_to: Vec<String>,
    /// Every party that writes it, and every party that reads it (`wire::Party` names).
    pub writers: Vec<&'static str>,
    pub readers: Vec<&'static str>,
    /// Whether fleetwire reads it as an HTTP request body, so unknown fields are answered as
    /// `Warning` headers (otherwise they go to the log and the metric only).
    pub warns_in_answer: bool,
    /// Whether the document's own object is closed (`additionalProperties: false`); an open
    /// one takes extra fields as valid, and they are neither reported nor refused.
    pub closed: bool,
    /// The document has no annotation: the page states the general policy only.
    pub general: bool,
}

/// The policy of the root document `name`, whose schema is `schema`.
pub fn of(name: &str, schema: &Value) -> UnknownFieldPolicy {
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    // A malformed annotation is refused at generation (`wire::of_roots`), before the model.
    match wire::of(name, schema).ok().flatten() {
        Some(wire) => {
            let words = |entries: &[Entry]| -> Vec<String> {
                entries
                    .iter()
                    .filter(|e| e.party.is_fleetwire())
                    .filter_map(|e| e.words.clone())
                    .collect()
            };
            let names = |entries: &[Entry]| entries.iter().map(|e| e.party.as_str()).collect();
            UnknownFieldPolicy {
                read_from: words(&wire.readers),
                written_to: words(&wire.writers),
                writers: names(&wire.writers),
                readers: names(&wire.readers),
                warns_in_answer: wire.read_as_request,
                closed,
                general: false,
            }
        }
        None => general(schema),
    }
}

/// The general statement only, for a document without the annotation (every document of a
/// schema set other than fleetwire's: the annotation says where fleetwire reads and writes).
pub fn general(schema: &Value) -> UnknownFieldPolicy {
    UnknownFieldPolicy {
        read_from: Vec::new(),
        written_to: Vec::new(),
        writers: Vec::new(),
        readers: Vec::new(),
        warns_in_answer: false,
        closed: schema.get("additionalProperties") == Some(&Value::Bool(false)),
        general: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_gives_the_words_and_a_document_without_it_the_general_statement() {
        let p = of(
            "SomethingNew",
            &serde_json::json!({"additionalProperties": false}),
        );
        assert!(p.general && p.closed);
        let p = of(
            "NodeHeartbeat",
            &serde_json::json!({
                "additionalProperties": false,
                "x-fleetwire-wire": {
                    "writers": {"agent": "fleetwire's agent", "operator": true},
                    "readers": {"controller": "node agents", "smolvm": "not fleetwire's words"},
                    "readAsRequest": true
                }
            }),
        );
        assert!(!p.general && p.warns_in_answer);
        assert_eq!(p.read_from, ["node agents"]);
        assert_eq!(p.written_to, ["fleetwire's agent"]);
        assert_eq!(p.writers, ["agent", "operator"]);
        assert_eq!(p.readers, ["controller", "smolvm"]);
    }
}
