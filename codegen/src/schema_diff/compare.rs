//! Compares one schema of the base with the head's, keyword by keyword, and says what each
//! difference does to the documents it accepts (docs/versioning.md, "The rules"). A `$ref`
//! is compared by name: the definition it names is compared on its own.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::change::{Effect, Found, Rule};
use crate::bundle::{ref_name, required_names as required};

/// Keywords that say nothing about which documents are accepted.
const ANNOTATIONS: &[&str] = &[
    "title",
    "$comment",
    "examples",
    "readOnly",
    "writeOnly",
    "deprecated",
    "$schema",
    "$id",
];

/// Keywords this module compares itself (everything else that differs is reported as a
/// change it cannot judge, which breaks).
const HANDLED: &[&str] = &[
    "$ref",
    "type",
    "enum",
    "const",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "multipleOf",
    "pattern",
    "format",
    "default",
    "description",
    "uniqueItems",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "oneOf",
    "anyOf",
    "allOf",
];

/// Where the walk is: the pointer inside the definition and the field's data path.
#[derive(Clone)]
pub struct At {
    pub pointer: String,
    pub field: String,
}

impl At {
    pub fn root() -> At {
        At {
            pointer: String::new(),
            field: String::new(),
        }
    }

    pub fn under(&self, segment: &str) -> At {
        At {
            pointer: format!("{}/{}", self.pointer, escape(segment)),
            field: self.field.clone(),
        }
    }

    fn property(&self, name: &str) -> At {
        At {
            pointer: format!("{}/properties/{}", self.pointer, escape(name)),
            field: if self.field.is_empty() {
                name.to_string()
            } else {
                format!("{}.{name}", self.field)
            },
        }
    }

    fn found_as(&self, (rule, effect): (Rule, Effect), message: String) -> Found {
        self.found(rule, effect, message)
    }

    fn found(&self, rule: Rule, effect: Effect, message: String) -> Found {
        Found {
            rule,
            effect,
            pointer: self.pointer.clone(),
            field: self.field.clone(),
            message,
        }
    }

    /// The field's name for messages.
    fn what(&self) -> String {
        if self.field.is_empty() {
            "the definition".to_string()
        } else {
            format!("`{}`", self.field)
        }
    }
}

/// The rule and effect of a change that makes the schema accept less (`tighter`) or more.
fn tightened_or_loosened(tighter: bool, (tight, loose): (Rule, Rule)) -> (Rule, Effect) {
    if tighter {
        (tight, Effect::Tightened)
    } else {
        (loose, Effect::Loosened)
    }
}

const CONSTRAINT: (Rule, Rule) = (Rule::ConstraintTightened, Rule::ConstraintLoosened);

/// A JSON pointer segment (RFC 6901).
pub fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Every difference between `base` and `head`, found at `at` and below.
pub fn schemas(base: &Value, head: &Value, at: &At, out: &mut Vec<Found>) {
    let empty = Map::new();
    let (b, h) = (base.as_object(), head.as_object());
    if b.is_none() || h.is_none() {
        if base != head {
            out.push(at.found(
                Rule::TypeChanged,
                Effect::Incompatible,
                format!("{} changed from `{base}` to `{head}`.", at.what()),
            ));
        }
        return;
    }
    let (b, h) = (b.unwrap_or(&empty), h.unwrap_or(&empty));

    let (b_ref, h_ref) = (ref_of(b), ref_of(h));
    if b_ref != h_ref {
        let name = |r: Option<&str>| r.map_or("an inline schema".to_string(), |r| format!("`{r}`"));
        out.push(at.found(
            Rule::TypeChanged,
            Effect::Incompatible,
            format!(
                "{}'s type changed from {} to {}.",
                at.what(),
                name(b_ref),
                name(h_ref)
            ),
        ));
        return;
    }

    types(b, h, at, out);
    enums(b, h, at, out);
    for (key, lower_bound) in [
        ("minimum", true),
        ("exclusiveMinimum", true),
        ("minLength", true),
        ("minItems", true),
        ("minProperties", true),
        ("maximum", false),
        ("exclusiveMaximum", false),
        ("maxLength", false),
        ("maxItems", false),
        ("maxProperties", false),
    ] {
        bound(b, h, key, lower_bound, at, out);
    }
    for key in ["pattern", "multipleOf"] {
        unordered(b, h, key, CONSTRAINT, at, out);
    }
    let format = (Rule::FormatAdded, Rule::FormatRemoved);
    unordered(b, h, "format", format, at, out);
    if b.get("uniqueItems") != h.get("uniqueItems") {
        let tighter = h.get("uniqueItems") == Some(&Value::Bool(true));
        out.push(at.found_as(
            tightened_or_loosened(tighter, CONSTRAINT),
            format!(
                "{} {} unique items.",
                at.what(),
                if tighter {
                    "now needs"
                } else {
                    "no longer needs"
                }
            ),
        ));
    }
    if b.get("default") != h.get("default") {
        let show = |v: Option<&Value>| v.map_or("none".to_string(), |v| format!("`{v}`"));
        out.push(at.found(
            Rule::DefaultChanged,
            Effect::Incompatible,
            format!(
                "{}'s default changed from {} to {}: a document without it means something else now.",
                at.what(),
                show(b.get("default")),
                show(h.get("default"))
            ),
        ));
    }
    if b.get("description") != h.get("description") {
        out.push(at.found(
            Rule::DescriptionChanged,
            Effect::Neutral,
            format!("{}'s description changed.", at.what()),
        ));
    }
    properties(b, h, at, out);
    additional_properties(b, h, at, out);
    if let (Some(bi), Some(hi)) = (b.get("items"), h.get("items")) {
        schemas(bi, hi, &at.under("items"), out);
    } else if b.get("items") != h.get("items") {
        out.push(at.found(
            Rule::TypeChanged,
            Effect::Incompatible,
            format!("{}'s item schema was added or removed.", at.what()),
        ));
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        alternatives(b, h, key, at, out);
    }
    for (key, value) in b.iter().chain(h.iter()) {
        let key = key.as_str();
        if HANDLED.contains(&key) || ANNOTATIONS.contains(&key) || key.starts_with("x-") {
            continue;
        }
        if b.get(key) != h.get(key) && b.get(key).is_none_or(|bv| bv == value) {
            out.push(at.found(
                Rule::ConstraintChanged,
                Effect::Incompatible,
                format!(
                    "{}'s `{key}` changed, which `diff` does not judge: taken as breaking.",
                    at.what()
                ),
            ));
        }
    }
}

fn ref_of(obj: &Map<String, Value>) -> Option<&str> {
    obj.get("$ref").and_then(Value::as_str).map(ref_name)
}

/// The JSON types a schema allows; `None` when it says none (any type).
fn type_set(obj: &Map<String, Value>) -> Option<BTreeSet<String>> {
    match obj.get("type")? {
        Value::String(t) => Some([t.clone()].into()),
        Value::Array(ts) => Some(
            ts.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        ),
        _ => None,
    }
}

/// Whether every value of type set `inner` is allowed by `outer` (`integer` is a `number`).
fn covers(outer: &Option<BTreeSet<String>>, inner: &Option<BTreeSet<String>>) -> bool {
    match (outer, inner) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(o), Some(i)) => i
            .iter()
            .all(|t| o.contains(t) || (t == "integer" && o.contains("number"))),
    }
}

fn types(b: &Map<String, Value>, h: &Map<String, Value>, at: &At, out: &mut Vec<Found>) {
    let (bt, ht) = (type_set(b), type_set(h));
    if bt == ht {
        return;
    }
    let show = |t: &Option<BTreeSet<String>>| match t {
        None => "any type".to_string(),
        Some(t) => t.iter().cloned().collect::<Vec<_>>().join(" or "),
    };
    let (rule, effect) = match (covers(&bt, &ht), covers(&ht, &bt)) {
        (true, false) => (Rule::TypeNarrowed, Effect::Tightened),
        (false, true) => (Rule::TypeWidened, Effect::Loosened),
        _ => (Rule::TypeChanged, Effect::Incompatible),
    };
    out.push(at.found(
        rule,
        effect,
        format!(
            "{}'s type changed from {} to {}.",
            at.what(),
            show(&bt),
            show(&ht)
        ),
    ));
}

/// `enum` and `const` (a one-value enum); `None` when the schema lists no values.
fn values(obj: &Map<String, Value>) -> Option<Vec<Value>> {
    if let Some(Value::Array(values)) = obj.get("enum") {
        return Some(values.clone());
    }
    obj.get("const").map(|v| vec![v.clone()])
}

fn enums(b: &Map<String, Value>, h: &Map<String, Value>, at: &At, out: &mut Vec<Found>) {
    match (values(b), values(h)) {
        (None, None) => {}
        (Some(_), None) => out.push(at.found(
            Rule::ConstraintLoosened,
            Effect::Loosened,
            format!("{} no longer lists its values.", at.what()),
        )),
        (None, Some(_)) => out.push(at.found(
            Rule::ConstraintTightened,
            Effect::Tightened,
            format!("{} now takes listed values only.", at.what()),
        )),
        (Some(bv), Some(hv)) => {
            for v in bv.iter().filter(|v| !hv.contains(v)) {
                out.push(at.found(
                    Rule::EnumValueRemoved,
                    Effect::Tightened,
                    format!("{} no longer takes the value {v}.", at.what()),
                ));
            }
            for v in hv.iter().filter(|v| !bv.contains(v)) {
                out.push(at.found(
                    Rule::EnumValueAdded,
                    Effect::Loosened,
                    format!("{} takes a new value, {v}.", at.what()),
                ));
            }
        }
    }
}

/// A lower bound (`lower_bound`) tightens when it rises or appears; an upper one when it falls
/// or appears.
fn bound(
    b: &Map<String, Value>,
    h: &Map<String, Value>,
    key: &str,
    lower_bound: bool,
    at: &At,
    out: &mut Vec<Found>,
) {
    let (bv, hv) = (b.get(key), h.get(key));
    if bv == hv {
        return;
    }
    let tighter = match (bv.and_then(Value::as_f64), hv.and_then(Value::as_f64)) {
        (None, Some(_)) => true,
        (Some(_), None) => false,
        (Some(x), Some(y)) => (y > x) == lower_bound,
        (None, None) => return,
    };
    let show = |v: Option<&Value>| v.map_or("none".to_string(), Value::to_string);
    out.push(at.found_as(
        tightened_or_loosened(tighter, CONSTRAINT),
        format!(
            "{}'s `{key}` changed from {} to {}.",
            at.what(),
            show(bv),
            show(hv)
        ),
    ));
}

/// Keywords whose values cannot be ordered (a pattern, `multipleOf`, a format): added tightens
/// (`added`), removed loosens (`removed`), changed is incompatible.
fn unordered(
    b: &Map<String, Value>,
    h: &Map<String, Value>,
    key: &str,
    (added, removed): (Rule, Rule),
    at: &At,
    out: &mut Vec<Found>,
) {
    let what = at.what();
    let (rule, effect, message) = match (b.get(key), h.get(key)) {
        (x, y) if x == y => return,
        (None, Some(v)) => (
            added,
            Effect::Tightened,
            format!("{what} now has `{key}` {v}."),
        ),
        (Some(v), None) => (
            removed,
            Effect::Loosened,
            format!("{what} no longer has `{key}` {v}."),
        ),
        (Some(x), Some(y)) => (
            Rule::ConstraintChanged,
            Effect::Incompatible,
            format!("{what}'s `{key}` changed from {x} to {y}."),
        ),
        (None, None) => return,
    };
    out.push(at.found(rule, effect, message));
}

/// A schema without the words: what a renamed field must keep to count as renamed.
fn shape(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "description" && !ANNOTATIONS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), shape(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn properties(b: &Map<String, Value>, h: &Map<String, Value>, at: &At, out: &mut Vec<Found>) {
    let empty = Map::new();
    let bp = b
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let hp = h
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let (br, hr) = (required(b), required(h));
    let added: Vec<&String> = hp.keys().filter(|k| !bp.contains_key(*k)).collect();
    let mut renamed_to: BTreeSet<&String> = BTreeSet::new();
    for (name, schema) in bp.iter().filter(|(k, _)| !hp.contains_key(*k)) {
        let here = at.property(name);
        // A field gone and one of the same shape and requiredness new: a rename.
        let twin = added.iter().find(|n| {
            !renamed_to.contains(**n)
                && shape(&hp[n.as_str()]) == shape(schema)
                && hr.contains(n.as_str()) == br.contains(name)
        });
        match twin {
            Some(new) => {
                renamed_to.insert(new);
                out.push(here.found(
                    Rule::FieldRenamed,
                    Effect::Incompatible,
                    format!("{} was renamed to `{new}`.", here.what()),
                ));
            }
            None => out.push(here.found(
                Rule::FieldRemoved,
                Effect::Incompatible,
                format!("{} was removed.", here.what()),
            )),
        }
    }
    for name in added.into_iter().filter(|n| !renamed_to.contains(n)) {
        let here = at.property(name);
        if hr.contains(name) {
            out.push(here.found(
                Rule::RequiredFieldAdded,
                Effect::Tightened,
                format!(
                    "{} was added, required: older writers do not send it.",
                    here.what()
                ),
            ));
        } else {
            out.push(here.found(
                Rule::FieldAdded,
                Effect::Neutral,
                format!("{} was added, optional.", here.what()),
            ));
        }
    }
    for (name, bs) in bp {
        let Some(hs) = hp.get(name) else { continue };
        let here = at.property(name);
        match (br.contains(name), hr.contains(name)) {
            (false, true) => out.push(here.found(
                Rule::MadeRequired,
                Effect::Tightened,
                format!("{} is now required.", here.what()),
            )),
            (true, false) => out.push(here.found(
                Rule::MadeOptional,
                Effect::Loosened,
                format!("{} is now optional: older readers require it.", here.what()),
            )),
            _ => {}
        }
        schemas(bs, hs, &here, out);
    }
}

fn additional_properties(
    b: &Map<String, Value>,
    h: &Map<String, Value>,
    at: &At,
    out: &mut Vec<Found>,
) {
    let (bv, hv) = (b.get("additionalProperties"), h.get("additionalProperties"));
    let closed = |v: Option<&Value>| v == Some(&Value::Bool(false));
    match (closed(bv), closed(hv)) {
        (false, true) => out.push(at.found(
            Rule::AdditionalPropertiesClosed,
            Effect::Tightened,
            format!("{} now refuses fields it does not define.", at.what()),
        )),
        (true, false) => out.push(at.found(
            Rule::AdditionalPropertiesOpened,
            Effect::Loosened,
            format!("{} now takes fields it does not define.", at.what()),
        )),
        _ => {
            if let (Some(x @ Value::Object(_)), Some(y @ Value::Object(_))) = (bv, hv) {
                schemas(x, y, &at.under("additionalProperties"), out);
            } else if bv != hv && !(bv.is_none() && hv == Some(&Value::Bool(true))) {
                // true/absent against a schema for the extra fields.
                let tighter = hv.is_some_and(Value::is_object);
                out.push(at.found_as(
                    tightened_or_loosened(tighter, CONSTRAINT),
                    format!("{}'s schema for extra fields changed.", at.what()),
                ));
            }
        }
    }
}

fn alternatives(
    b: &Map<String, Value>,
    h: &Map<String, Value>,
    key: &str,
    at: &At,
    out: &mut Vec<Found>,
) {
    let none = Vec::new();
    let bv = b.get(key).and_then(Value::as_array).unwrap_or(&none);
    let hv = h.get(key).and_then(Value::as_array).unwrap_or(&none);
    let here = at.under(key);
    for (i, (x, y)) in bv.iter().zip(hv).enumerate() {
        schemas(x, y, &here.under(&i.to_string()), out);
    }
    // Another alternative accepts more; another `allOf` member accepts less.
    let all = key == "allOf";
    for i in hv.len()..bv.len() {
        out.push(here.under(&i.to_string()).found_as(
            tightened_or_loosened(!all, (Rule::VariantRemoved, Rule::ConstraintLoosened)),
            format!("{}'s `{key}` lost its member {i}.", at.what()),
        ));
    }
    for i in bv.len()..hv.len() {
        out.push(here.under(&i.to_string()).found_as(
            tightened_or_loosened(all, (Rule::ConstraintTightened, Rule::VariantAdded)),
            format!("{}'s `{key}` has a new member {i}.", at.what()),
        ));
    }
}
