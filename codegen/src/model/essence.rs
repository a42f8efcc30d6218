//! A named type's essence: what a value of it is, in a few words, for every row whose type
//! names it ("string, matches `^…$`", "one of `tcp`, `udp`", "1 to 65535", "object with
//! `cpuMs`, `memoryBytes` and 3 more"), so a reader need not follow the link to learn it
//! (docs/reference-site.md, "What a page shows").

use super::words::{Phrase, Token};
use super::{Model, RowKind, TypeDoc, TypeKind};

/// How many enum values, fields or variants an essence names before it says "and N more".
const LISTED: usize = 6;

/// How many aliases (a definition that is just another one) an essence looks through.
const ALIAS_DEPTH: usize = 3;

fn text(s: impl Into<String>) -> Token {
    Token::Text(s.into())
}

fn code(s: impl Into<String>) -> Token {
    Token::Code(s.into())
}

/// `a`, `b` or `c` (`last` is "or" for alternatives, "and" for fields); past [`LISTED`]
/// names, "and 4 more".
fn listed(names: &[String], last: &str, out: &mut Phrase) {
    for (i, n) in names.iter().take(LISTED).enumerate() {
        if i > 0 {
            out.push(text(if i + 1 == names.len() {
                format!(" {last} ")
            } else {
                ", ".to_string()
            }));
        }
        out.push(code(n.clone()));
    }
    if names.len() > LISTED {
        out.push(text(format!(" and {} more", names.len() - LISTED)));
    }
}

impl Model {
    /// The essence of definition `name`, or `None` when it is not a definition.
    pub fn essence(&self, name: &str) -> Option<Phrase> {
        self.essence_at(name, 0)
    }

    fn essence_at(&self, name: &str, depth: usize) -> Option<Phrase> {
        let t = self.type_doc(name)?;
        let mut out = match t.kind {
            TypeKind::Enum => {
                let mut out = vec![text("one of ")];
                listed(&t.values, "or", &mut out);
                out
            }
            TypeKind::Object => object_essence(t),
            TypeKind::Variants => {
                let mut out = vec![text(format!("{} of the variants ", t.variant_rule?))];
                let names: Vec<String> = t.variants.iter().map(|v| v.name.clone()).collect();
                listed(&names, "or", &mut out);
                out
            }
            TypeKind::Value => self.value_essence(t, depth),
        };
        if t.nullable {
            out.push(text(" or null"));
        }
        Some(out)
    }

    /// A constrained value: its type, then each constraint. A definition that is only another
    /// one (`"$ref"` and nothing else) shows that one's essence.
    fn value_essence(&self, t: &TypeDoc, depth: usize) -> Phrase {
        if let [Token::Type(target)] = t.summary.as_slice() {
            if depth < ALIAS_DEPTH && t.constraints.is_empty() {
                if let Some(inner) = self.essence_at(target, depth + 1) {
                    return inner;
                }
            }
        }
        let mut out = t.summary.clone();
        let mut constraints: Vec<&Phrase> = t.constraints.iter().collect();
        // A format says in words what its pattern spells out; the section shows both.
        let has_format = constraints.iter().any(|c| {
            c.iter()
                .any(|t| matches!(t, Token::Text(s) if s == " (format "))
        });
        if has_format {
            constraints.retain(|c| c.first() != Some(&text("matches ")));
        }
        // "array of 1 to 8 X" rather than "array of X, 1 to 8 items".
        if let Some(Token::Text(lead)) = out.first() {
            if lead == "array of " {
                let count = constraints.iter().position(|c| {
                    matches!(c.as_slice(), [Token::Text(s)] if s.ends_with(" item") || s.ends_with(" items"))
                });
                if let Some(i) = count {
                    if let [Token::Text(s)] = constraints.remove(i).as_slice() {
                        let bound = s.trim_end_matches('s').trim_end_matches(" item");
                        out[0] = text(format!("array of {bound} "));
                    }
                }
            }
        }
        for c in constraints {
            out.push(text(", "));
            out.extend(c.iter().cloned());
        }
        if let Some(d) = &t.default {
            out.push(text(", default "));
            out.push(code(d.clone()));
        }
        out
    }
}

/// An object: the names of its own fields.
fn object_essence(t: &TypeDoc) -> Phrase {
    let names: Vec<String> = t
        .rows
        .iter()
        .filter(|r| r.depth == 0 && r.kind == RowKind::Field)
        .map(|r| r.name.clone())
        .collect();
    if names.is_empty() {
        return vec![text("object")];
    }
    let mut out = vec![text(if names.len() == 1 {
        "object with field "
    } else {
        "object with fields "
    })];
    listed(&names, "and", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::bundle::{Bundle, SchemaFile};

    fn shown(phrase: &Phrase) -> String {
        phrase
            .iter()
            .map(|t| match t {
                Token::Text(s) => s.clone(),
                Token::Code(s) => format!("`{s}`"),
                Token::Type(s) => format!("[{s}]"),
            })
            .collect()
    }

    #[test]
    fn every_kind_of_definition_reads_in_a_few_words() {
        let value = json!({"title": "Doc", "type": "object", "additionalProperties": false,
            "properties": {"x": {"$ref": "#/$defs/Port"}},
            "$defs": {
                "Port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "Alias": {"$ref": "#/$defs/Port"},
                "Proto": {"type": "string", "enum": ["tcp", "udp"]},
                "Id": {"type": ["string", "null"], "pattern": "^[a-z]+$", "maxLength": 8},
                "When": {"type": "string", "format": "date-time", "pattern": "^[0-9]{4}-"},
                "Ports": {"type": "array", "items": {"$ref": "#/$defs/Port"}, "minItems": 1, "maxItems": 8},
                "Many": {"type": "object", "additionalProperties": false, "properties": {
                    "a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"},
                    "d": {"type": "string"}, "e": {"type": "string"}, "f": {"type": "string"},
                    "g": {"type": "string"}}},
                "Exit": {"oneOf": [
                    {"title": "code", "type": "object", "properties": {"code": {"type": "integer"}}, "required": ["code"], "additionalProperties": false},
                    {"title": "signal", "type": "object", "properties": {"signal": {"type": "integer"}}, "required": ["signal"], "additionalProperties": false}
                ]}
            }
        });
        let bundle = Bundle::from_files(
            vec![SchemaFile {
                name: "a.schema.json".into(),
                path: "a.schema.json".into(),
                value,
            }],
            None,
        )
        .unwrap();
        let space = crate::rust::type_space(&bundle).unwrap();
        let m = Model::build(&bundle, &space, Path::new("/nonexistent")).unwrap();
        let e = |n: &str| shown(&m.essence(n).unwrap());
        assert_eq!(e("Port"), "integer, 1 to 65535");
        assert_eq!(e("Alias"), "integer, 1 to 65535");
        assert_eq!(e("Proto"), "one of `tcp` or `udp`");
        assert_eq!(
            e("Id"),
            "string, at most 8 characters, matches `^[a-z]+$` or null"
        );
        assert_eq!(
            e("When"),
            "string, an RFC 3339 date and time (format `date-time`)"
        );
        assert_eq!(e("Ports"), "array of 1 to 8 [Port]");
        assert_eq!(
            e("Many"),
            "object with fields `a`, `b`, `c`, `d`, `e`, `f` and 1 more"
        );
        assert_eq!(e("Exit"), "exactly one of the variants `code` or `signal`");
        assert_eq!(m.essence("Nowhere"), None);
    }
}
