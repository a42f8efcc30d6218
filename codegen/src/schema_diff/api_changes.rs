//! Compares the API documents' operations: routes, response statuses, parameters and the
//! body schemas they name (docs/versioning.md, "The rules").

use serde_json::Value;

use super::change::{Effect, Found, Rule};
use super::compare::{self, At};
use super::reach::{callers, METHODS};
use crate::wire::Party;

/// Which way the part of an operation that changed travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The request: from the callers to the controller.
    Request,
    /// The response: from the controller to the callers.
    Response,
    /// The operation as a whole (a route gone): both ways.
    Both,
}

/// One change to an operation.
pub struct OperationChange {
    /// `METHOD /path`.
    pub operation: String,
    pub callers: Vec<Party>,
    pub side: Side,
    pub found: Found,
}

fn operations(api: Option<&Value>) -> Vec<(String, String, &Value)> {
    let mut out = Vec::new();
    if let Some(paths) = api.and_then(|a| a.get("paths")).and_then(Value::as_object) {
        for (path, item) in paths {
            for method in METHODS {
                if let Some(op) = item.get(*method) {
                    out.push((path.clone(), method.to_string(), op));
                }
            }
        }
    }
    out
}

fn find<'a>(ops: &[(String, String, &'a Value)], p: &str, m: &str) -> Option<&'a Value> {
    ops.iter()
        .find(|(path, method, _)| path == p && method == m)
        .map(|(_, _, op)| *op)
}

/// Every change between the base's API document and the head's.
pub fn compare(base: Option<&Value>, head: Option<&Value>) -> Vec<OperationChange> {
    let (b_ops, h_ops) = (operations(base), operations(head));
    let mut out = Vec::new();
    for (path, method, b_op) in &b_ops {
        let label = format!("{} {path}", method.to_ascii_uppercase());
        let at = At::root().under("paths").under(path).under(method);
        let mut push = |side: Side, found: Found, op: &Value| {
            out.push(OperationChange {
                operation: label.clone(),
                callers: callers(op),
                side,
                found,
            })
        };
        let Some(h_op) = find(&h_ops, path, method) else {
            push(
                Side::Both,
                found(
                    &at,
                    Rule::OperationRemoved,
                    Effect::Incompatible,
                    format!("{label} was removed."),
                ),
                b_op,
            );
            continue;
        };
        let mut found_here = Vec::new();
        operation(b_op, h_op, &at, &label, &mut found_here);
        for (side, f) in found_here {
            push(side, f, h_op);
        }
    }
    for (path, method, h_op) in &h_ops {
        if find(&b_ops, path, method).is_none() {
            let label = format!("{} {path}", method.to_ascii_uppercase());
            let at = At::root().under("paths").under(path).under(method);
            out.push(OperationChange {
                operation: label.clone(),
                callers: callers(h_op),
                side: Side::Both,
                found: found(
                    &at,
                    Rule::OperationAdded,
                    Effect::Neutral,
                    format!("{label} was added."),
                ),
            });
        }
    }
    out
}

/// The members of the object `key` of `b` and `h` (responses by status, bodies by media type):
/// each name with its value on either side, the base's names first.
fn members<'a>(
    b: &'a Value,
    h: &'a Value,
    key: &str,
) -> Vec<(&'a String, Option<&'a Value>, Option<&'a Value>)> {
    let of = |v: &'a Value| v.get(key).and_then(Value::as_object);
    let (bm, hm) = (of(b), of(h));
    let names = bm.into_iter().flat_map(|m| m.keys());
    let new = hm
        .into_iter()
        .flat_map(|m| m.keys())
        .filter(|k| !bm.is_some_and(|m| m.contains_key(*k)));
    names
        .chain(new)
        .map(|k| (k, bm.and_then(|m| m.get(k)), hm.and_then(|m| m.get(k))))
        .collect()
}

fn found(at: &At, rule: Rule, effect: Effect, message: String) -> Found {
    Found {
        rule,
        effect,
        pointer: at.pointer.clone(),
        field: String::new(),
        message,
    }
}

fn operation(b: &Value, h: &Value, at: &At, label: &str, out: &mut Vec<(Side, Found)>) {
    // Parameters, by (name, location).
    let params = |op: &Value| -> Vec<(String, String, Value)> {
        op.get("parameters")
            .and_then(Value::as_array)
            .map(|ps| {
                ps.iter()
                    .map(|p| {
                        (
                            p["name"].as_str().unwrap_or_default().to_string(),
                            p["in"].as_str().unwrap_or_default().to_string(),
                            p.clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (bp, hp) = (params(b), params(h));
    let required = |p: &Value| p.get("required") == Some(&Value::Bool(true));
    for (i, (name, location, bv)) in bp.iter().enumerate() {
        let here = at.under("parameters").under(&i.to_string());
        match hp.iter().find(|(n, l, _)| n == name && l == location) {
            None => out.push((
                Side::Request,
                found(
                    &here,
                    Rule::ParameterRemoved,
                    Effect::Incompatible,
                    format!("{label}: the {location} parameter `{name}` was removed."),
                ),
            )),
            Some((_, _, hv)) => {
                if !required(bv) && required(hv) {
                    out.push((
                        Side::Request,
                        found(
                            &here,
                            Rule::MadeRequired,
                            Effect::Tightened,
                            format!("{label}: the {location} parameter `{name}` is now required."),
                        ),
                    ));
                }
                if required(bv) && !required(hv) {
                    out.push((
                        Side::Request,
                        found(
                            &here,
                            Rule::MadeOptional,
                            Effect::Loosened,
                            format!("{label}: the {location} parameter `{name}` is now optional."),
                        ),
                    ));
                }
                let what = format!("{label}, parameter `{name}`");
                schema_of(bv, hv, &here, &what, Side::Request, out);
            }
        }
    }
    for (i, (name, location, hv)) in hp.iter().enumerate() {
        if !bp.iter().any(|(n, l, _)| n == name && l == location) {
            let here = at.under("parameters").under(&i.to_string());
            let (rule, effect) = if required(hv) {
                (Rule::RequiredParameterAdded, Effect::Tightened)
            } else {
                (Rule::ParameterAdded, Effect::Neutral)
            };
            out.push((
                Side::Request,
                found(
                    &here,
                    rule,
                    effect,
                    format!(
                        "{label}: the {location} parameter `{name}` was added{}.",
                        if required(hv) { ", required" } else { "" }
                    ),
                ),
            ));
        }
    }
    // The request body.
    let (bb, hb) = (b.get("requestBody"), h.get("requestBody"));
    let here = at.under("requestBody");
    match (bb, hb) {
        (Some(x), Some(y)) => {
            if !required(x) && required(y) {
                out.push((
                    Side::Request,
                    found(
                        &here,
                        Rule::BodyMadeRequired,
                        Effect::Tightened,
                        format!("{label}: the request body is now required."),
                    ),
                ));
            }
            contents(x, y, &here, label, Side::Request, out);
        }
        (None, Some(_)) | (Some(_), None) => out.push((
            Side::Request,
            found(
                &here,
                Rule::TypeChanged,
                Effect::Incompatible,
                format!(
                    "{label}: the request body was {}.",
                    if bb.is_none() { "added" } else { "removed" }
                ),
            ),
        )),
        (None, None) => {}
    }
    // Responses, by status.
    for (status, bv, hv) in members(b, h, "responses") {
        let here = at.under("responses").under(status);
        let (rule, effect, message) = match (bv, hv) {
            (Some(bv), Some(hv)) => {
                contents(bv, hv, &here, label, Side::Response, out);
                continue;
            }
            (Some(_), None) => (
                Rule::StatusRemoved,
                Effect::Incompatible,
                format!("{label}: the {status} response was removed."),
            ),
            _ => (
                Rule::StatusAdded,
                Effect::Neutral,
                format!("{label}: a {status} response was added."),
            ),
        };
        out.push((Side::Response, found(&here, rule, effect, message)));
    }
}

/// Compares the `schema` of a parameter or a body; each change's sentence starts with `what`.
fn schema_of(b: &Value, h: &Value, at: &At, what: &str, side: Side, out: &mut Vec<(Side, Found)>) {
    let mut inner = Vec::new();
    compare::schemas(
        b.get("schema").unwrap_or(&Value::Null),
        h.get("schema").unwrap_or(&Value::Null),
        &at.under("schema"),
        &mut inner,
    );
    out.extend(inner.into_iter().map(|mut f| {
        f.message = format!("{what}: {}", f.message);
        (side, f)
    }));
}

/// The body schemas of a request body or a response, by media type.
fn contents(b: &Value, h: &Value, at: &At, label: &str, side: Side, out: &mut Vec<(Side, Found)>) {
    for (media, bv, hv) in members(b, h, "content") {
        let here = at.under("content").under(media);
        let (rule, effect, message) = match (bv, hv) {
            (Some(bv), Some(hv)) => {
                schema_of(bv, hv, &here, &format!("{label} ({media})"), side, out);
                continue;
            }
            (Some(_), None) => (
                Rule::TypeChanged,
                Effect::Incompatible,
                format!("{label}: the {media} body was removed."),
            ),
            // Another media type is more a body may be: new to a reader of the older version.
            _ => (
                Rule::VariantAdded,
                Effect::Loosened,
                format!("{label}: a {media} body was added."),
            ),
        };
        out.push((side, found(&here, rule, effect, message)));
    }
}
