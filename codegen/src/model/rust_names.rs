//! Which anchor documents each Rust type typify generates.
//!
//! A definition's type is documented by its section. typify also names types for inline
//! schemas (`ApiError.message` becomes `ApiErrorMessage`, the items of `Command` become
//! `CommandItem`); those are found by walking typify's own type graph from each definition's
//! type, so the site follows whatever typify generates rather than guessing its naming rules.

use std::collections::{BTreeMap, VecDeque};

use typify::{Type, TypeDetails, TypeEnumVariant, TypeId, TypeSpace};

use crate::bundle::Bundle;
use crate::rust::RustTypes;

/// A generated Rust type and the anchor (section or field) that documents it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RustType {
    pub name: String,
    pub anchor: String,
}

/// The path a reader uses for a definition's Rust type, if it has one: under the crate the
/// generated types are used from (`fleetwire_types`).
pub fn rust_path(rust: &RustTypes, def: &str) -> Option<String> {
    let krate = &rust.target.crate_name;
    if rust.target.is_replaced(def) {
        return Some(format!("{krate}::{def}"));
    }
    named_types(&rust.space)
        .contains_key(def)
        .then(|| format!("{krate}::{def}"))
}

/// Every struct, enum and newtype typify generates, by name.
fn named_types(space: &TypeSpace) -> BTreeMap<String, Type<'_>> {
    space
        .iter_types()
        .filter(|t| {
            matches!(
                t.details(),
                TypeDetails::Struct(_) | TypeDetails::Enum(_) | TypeDetails::Newtype(_)
            )
        })
        .map(|t| (t.name(), t))
        .collect()
}

fn children(details: &TypeDetails<'_>) -> Vec<TypeId> {
    match details {
        TypeDetails::Struct(s) => s.properties().map(|(_, id)| id).collect(),
        TypeDetails::Newtype(n) => vec![n.inner()],
        TypeDetails::Enum(e) => e
            .variants()
            .flat_map(|(_, v)| match v {
                TypeEnumVariant::Simple => Vec::new(),
                TypeEnumVariant::Tuple(ids) => ids,
                TypeEnumVariant::Struct(props) => props.into_iter().map(|(_, id)| id).collect(),
            })
            .collect(),
        TypeDetails::Option(id)
        | TypeDetails::Vec(id)
        | TypeDetails::Set(id)
        | TypeDetails::Box(id)
        | TypeDetails::Array(id, _) => vec![id.clone()],
        TypeDetails::Map(k, v) => vec![k.clone(), v.clone()],
        _ => Vec::new(),
    }
}

/// The named types inside a type id, looking through `Option`, `Vec`, maps and the like.
fn named_inside(space: &TypeSpace, id: &TypeId) -> Vec<String> {
    let Ok(t) = space.get_type(id) else {
        return Vec::new();
    };
    let found = match t.details() {
        TypeDetails::Struct(_) | TypeDetails::Enum(_) | TypeDetails::Newtype(_) => vec![t.name()],
        TypeDetails::Tuple(ids) => ids.flat_map(|id| named_inside(space, &id)).collect(),
        details => children(&details)
            .iter()
            .flat_map(|id| named_inside(space, id))
            .collect(),
    };
    found
}

/// `hostId`, `host_id` and `r#type`/`type_` compare equal.
fn normalise(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Finds, for every generated type, the anchor documenting it, among `known` (every anchor a
/// field or variant of the site has). The list comes in the order the anchors were settled:
/// the types typify names, by name, then the range types.
pub fn assign(rust: &RustTypes, bundle: &Bundle, known: &[String]) -> Vec<RustType> {
    let space = &rust.space;
    let named = named_types(space);
    let mut anchors: BTreeMap<String, String> = BTreeMap::new();
    let mut queue: VecDeque<(String, String)> = VecDeque::new();
    for def in bundle.defs.keys() {
        if named.contains_key(def) {
            anchors.insert(def.clone(), def.clone());
            queue.push_back((def.clone(), def.clone()));
        }
    }
    // Types the code generator made outside typify's graph (hoisted array items) start there too.
    for (name, anchor) in &rust.anchors {
        if named.contains_key(name) && !anchors.contains_key(name) {
            anchors.insert(name.clone(), anchor.clone());
            queue.push_back((name.clone(), anchor.clone()));
        }
    }
    let child_anchor = |parent: &str, rust_name: &str| -> Option<String> {
        let prefix = format!("{parent}.");
        known
            .iter()
            .find(|a| {
                a.strip_prefix(&prefix).is_some_and(|rest| {
                    !rest.contains('.') && normalise(rest) == normalise(rust_name)
                })
            })
            .cloned()
    };
    while let Some((name, anchor)) = queue.pop_front() {
        let Some(t) = named.get(&name) else { continue };
        let mut found: Vec<(String, String)> = Vec::new();
        match t.details() {
            TypeDetails::Struct(s) => {
                for (prop, id) in s.properties() {
                    let place = child_anchor(&anchor, prop).unwrap_or_else(|| anchor.clone());
                    found.extend(
                        named_inside(space, &id)
                            .into_iter()
                            .map(|n| (n, place.clone())),
                    );
                }
            }
            TypeDetails::Newtype(n) => {
                found.extend(
                    named_inside(space, &n.inner())
                        .into_iter()
                        .map(|n| (n, anchor.clone())),
                );
            }
            TypeDetails::Enum(e) => {
                for (variant, details) in e.variants() {
                    let place = child_anchor(&anchor, variant).unwrap_or_else(|| anchor.clone());
                    // A struct variant's fields sit under the variant's anchor.
                    let ids: Vec<(TypeId, String)> = match details {
                        TypeEnumVariant::Simple => Vec::new(),
                        TypeEnumVariant::Tuple(ids) => {
                            ids.into_iter().map(|id| (id, place.clone())).collect()
                        }
                        TypeEnumVariant::Struct(props) => props
                            .into_iter()
                            .map(|(prop, id)| {
                                (
                                    id,
                                    child_anchor(&place, prop).unwrap_or_else(|| place.clone()),
                                )
                            })
                            .collect(),
                    };
                    for (id, at) in ids {
                        found.extend(
                            named_inside(space, &id)
                                .into_iter()
                                .map(|n| (n, at.clone())),
                        );
                    }
                }
            }
            _ => {}
        }
        for (inner, place) in found {
            if !anchors.contains_key(&inner) {
                anchors.insert(inner.clone(), place.clone());
                queue.push_back((inner, place));
            }
        }
    }
    // Types never reached from a definition still need a place; they keep none, which the
    // site's drift test reports.
    let mut out = Vec::new();
    for name in named.keys() {
        if let Some(anchor) = anchors.get(name) {
            out.push(RustType {
                name: name.clone(),
                anchor: anchor.clone(),
            });
        }
    }
    // The range types (`F64Min0`) sit on the first field that has them.
    for (name, anchor) in &rust.anchors {
        if !named.contains_key(name) && !out.iter().any(|r: &RustType| &r.name == name) {
            out.push(RustType {
                name: name.clone(),
                anchor: anchor.clone(),
            });
        }
    }
    out
}
