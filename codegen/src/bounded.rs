//! Bounds that typify does not turn into types: number ranges and array lengths.
//!
//! typify maps `{"type": "number", "minimum": 0}` to a bare `f64` and an array with `minItems`
//! to a bare `Vec`, so the bound would be checked by the schema only. Instead, every such
//! schema is mapped (with typify's `with_conversion`) to a type that checks it when it is built
//! or deserialized: a generated newtype per distinct number range, and `BoundedVec<T, MIN, MAX>`
//! (in `fleetwire-types`) for lengths. A value of a generated type then always serializes to a
//! valid document, and reading one needs no schema pass.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use serde_json::{Map, Value};

use crate::target::Target;

/// Keywords that annotate a schema without constraining an instance (besides the extensions,
/// see [`is_annotation`]).
const ANNOTATIONS: &[&str] = &[
    "description",
    "title",
    "default",
    "examples",
    "readOnly",
    "writeOnly",
    "deprecated",
    "$comment",
];

/// Whether `keyword` annotates a schema without constraining an instance: one of
/// [`ANNOTATIONS`], or an extension (`x-…`), which the validator ignores and which only
/// fleetwire's own code reads: `x-upstream` (peer-check), `x-fleetwire-wire` (the site and
/// `diff`), `x-fleetwire-invalid-items` (how the heartbeat's reader treats a bad entry,
/// `heartbeat_entries`). docs/codegen.md, "Extensions start with `x-` and are annotations".
pub fn is_annotation(keyword: &str) -> bool {
    ANNOTATIONS.contains(&keyword) || keyword.starts_with("x-")
}

/// A number schema with a range and nothing else that constrains it.
#[derive(Debug, Clone, PartialEq)]
pub struct NumberRange {
    /// `f32` for `format: float`, otherwise `f64`.
    pub single: bool,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub exclusive_minimum: Option<f64>,
    pub exclusive_maximum: Option<f64>,
}

impl NumberRange {
    /// A type name that says the range: `F64Min0`, `F32Min0Max100`, `F64ExclusiveMin0`.
    pub fn type_name(&self) -> String {
        let mut name = String::from(if self.single { "F32" } else { "F64" });
        let mut part = |label: &str, bound: Option<f64>| {
            if let Some(b) = bound {
                let text = format!("{b}").replace('-', "Neg").replace('.', "_");
                name.push_str(&format!("{label}{text}"));
            }
        };
        part("Min", self.minimum);
        part("ExclusiveMin", self.exclusive_minimum);
        part("Max", self.maximum);
        part("ExclusiveMax", self.exclusive_maximum);
        name
    }

    fn words(&self) -> String {
        let mut parts = Vec::new();
        if let Some(b) = self.minimum {
            parts.push(format!("at least {b}"));
        }
        if let Some(b) = self.exclusive_minimum {
            parts.push(format!("greater than {b}"));
        }
        if let Some(b) = self.maximum {
            parts.push(format!("at most {b}"));
        }
        if let Some(b) = self.exclusive_maximum {
            parts.push(format!("less than {b}"));
        }
        parts.join(" and ")
    }
}

/// The range of `schema` when it is a plain bounded number (not nullable, no `multipleOf`).
pub fn number_range(schema: &Map<String, Value>) -> Option<NumberRange> {
    if schema.get("type").and_then(Value::as_str) != Some("number") {
        return None;
    }
    let format = schema.get("format").and_then(Value::as_str);
    if !matches!(format, None | Some("float") | Some("double")) {
        return None;
    }
    let allowed = [
        "type",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
    ];
    if schema
        .keys()
        .any(|k| !allowed.contains(&k.as_str()) && !is_annotation(k))
    {
        return None;
    }
    let get = |k: &str| schema.get(k).and_then(Value::as_f64);
    let range = NumberRange {
        single: format == Some("float"),
        minimum: get("minimum"),
        maximum: get("maximum"),
        exclusive_minimum: get("exclusiveMinimum"),
        exclusive_maximum: get("exclusiveMaximum"),
    };
    let bounded = range.minimum.is_some()
        || range.maximum.is_some()
        || range.exclusive_minimum.is_some()
        || range.exclusive_maximum.is_some();
    bounded.then_some(range)
}

/// `(minItems, maxItems)` when `schema` is an array bounded by length and nothing else.
pub fn array_length(schema: &Map<String, Value>) -> Option<(u64, Option<u64>)> {
    if schema.get("type").and_then(Value::as_str) != Some("array") || !schema.contains_key("items")
    {
        return None;
    }
    let allowed = ["type", "items", "minItems", "maxItems"];
    if schema
        .keys()
        .any(|k| !allowed.contains(&k.as_str()) && !is_annotation(k))
    {
        return None;
    }
    let min = schema.get("minItems").and_then(Value::as_u64);
    let max = schema.get("maxItems").and_then(Value::as_u64);
    (min.is_some() || max.is_some()).then_some((min.unwrap_or(0), max))
}

/// What the typify pass needs: the definitions (with the items of bounded arrays hoisted into
/// definitions of their own, so they have a name), and the conversions to register.
pub struct Prepared {
    pub defs: Map<String, Value>,
    /// (schema, Rust type) pairs for `with_conversion`.
    pub conversions: Vec<(Value, String)>,
    /// Every distinct number range, by generated type name.
    pub ranges: BTreeMap<String, NumberRange>,
    /// Where each type made here is documented: (Rust type, the site anchor of the definition
    /// or field it first came from, e.g. `NodeHeartbeat.cpu_usage`).
    pub anchors: Vec<(String, String)>,
}

/// Hoists and records the bounded numbers and arrays of `defs`; the conversions name the
/// generated types and `BoundedVec` as `target` says (by their defining module, not by a
/// crate root's re-exports).
pub fn prepare(defs: &Map<String, Value>, target: &Target) -> Result<Prepared> {
    let paths = Paths {
        types: &target.types_module,
        bounded_vec: &target.bounded_vec(),
    };
    let mut out = Prepared {
        defs: defs.clone(),
        conversions: Vec::new(),
        ranges: BTreeMap::new(),
        anchors: Vec::new(),
    };
    let names: Vec<String> = defs.keys().cloned().collect();
    for name in names {
        let mut schema = out.defs[&name].clone();
        let mut hoisted = Vec::new();
        visit(&mut schema, &name, &name, &paths, &mut out, &mut hoisted)?;
        out.defs.insert(name, schema);
        for (item_name, item) in hoisted {
            out.defs.insert(item_name, item);
        }
    }
    Ok(out)
}

/// `context`: a name for types made here (`NodeHeartbeatCpuUsage`); `anchor`: where the site
/// documents this schema (`NodeHeartbeat.cpu_usage`).
/// How the conversions name the generated types' module and `BoundedVec`.
struct Paths<'a> {
    types: &'a str,
    bounded_vec: &'a str,
}

fn visit(
    schema: &mut Value,
    context: &str,
    anchor: &str,
    paths: &Paths<'_>,
    out: &mut Prepared,
    hoisted: &mut Vec<(String, Value)>,
) -> Result<()> {
    let Some(obj) = schema.as_object_mut() else {
        return Ok(());
    };
    if let Some(range) = number_range(obj) {
        let name = range.type_name();
        out.conversions.push((
            Value::Object(obj.clone()),
            format!("{}::{name}", paths.types),
        ));
        out.anchors.push((name.clone(), anchor.to_string()));
        out.ranges.insert(name, range);
        return Ok(());
    }
    if let Some((min, max)) = array_length(obj) {
        let items = obj.get_mut("items").context("checked above")?;
        let item_type = match items.get("$ref").and_then(Value::as_str) {
            Some(target) if items.as_object().is_some_and(|m| m.len() == 1) => {
                crate::bundle::ref_name(target).to_string()
            }
            _ => {
                // Give the item schema a name of its own so typify generates it.
                let mut item_name = format!("{context}Item");
                while out.defs.contains_key(&item_name)
                    || hoisted.iter().any(|(n, _)| n == &item_name)
                {
                    item_name.push('_');
                }
                let mut item = items.take();
                visit(&mut item, &item_name, anchor, paths, out, hoisted)?;
                out.anchors.push((item_name.clone(), anchor.to_string()));
                hoisted.push((item_name.clone(), item));
                *items = serde_json::json!({ "$ref": format!("#/$defs/{item_name}") });
                item_name
            }
        };
        let max = max
            .map(|m| m.to_string())
            .unwrap_or_else(|| "{ usize::MAX }".into());
        out.conversions.push((
            Value::Object(obj.clone()),
            format!(
                "{}<{}::{item_type}, {min}, {max}>",
                paths.bounded_vec, paths.types
            ),
        ));
        return Ok(());
    }
    for (key, value) in obj.iter_mut() {
        match key.as_str() {
            "properties" => {
                if let Some(props) = value.as_object_mut() {
                    for (prop, schema) in props.iter_mut() {
                        visit(
                            schema,
                            &format!("{context}{}", pascal(prop)),
                            &format!("{anchor}.{prop}"),
                            paths,
                            out,
                            hoisted,
                        )?;
                    }
                }
            }
            "items" | "additionalProperties" => visit(value, context, anchor, paths, out, hoisted)?,
            "oneOf" | "anyOf" | "allOf" => {
                if let Some(variants) = value.as_array_mut() {
                    for (i, v) in variants.iter_mut().enumerate() {
                        visit(
                            v,
                            &format!("{context}Variant{i}"),
                            anchor,
                            paths,
                            out,
                            hoisted,
                        )?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn pascal(name: &str) -> String {
    let mut out = String::new();
    let mut upper = true;
    for c in name.chars() {
        if c == '_' || c == '-' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The Rust code of every number-range type.
pub fn range_types(ranges: &BTreeMap<String, NumberRange>) -> TokenStream {
    ranges
        .iter()
        .map(|(name, range)| {
            let name = format_ident!("{name}");
            let float = format_ident!("{}", if range.single { "f32" } else { "f64" });
            // Each bound as the schema gives it, spelled as `{:?}` spells an f64 (`0.0`, `1e-7`).
            let checks = [
                (range.minimum, quote!(>=)),
                (range.exclusive_minimum, quote!(>)),
                (range.maximum, quote!(<=)),
                (range.exclusive_maximum, quote!(<)),
            ]
            .into_iter()
            .filter_map(|(bound, op)| {
                // A JSON number is finite, and a finite f64's `{:?}` is a float literal.
                let bound: Literal = format!("{:?}", bound?)
                    .parse()
                    .expect("a finite number spells a literal");
                Some(quote!(value #op #bound as #float &&))
            });
            let words = range.words();
            let about = format!("A number ({float}) {words}: the range a schema gives it, checked whenever one is built.");
            let new_doc = format!("`Some` when `value` is {words}.");
            let refusal = format!("{{value}} is not {words}");
            quote! {
                #[doc = #about]
                #[derive(::serde::Serialize, Clone, Copy, Debug, PartialEq, PartialOrd)]
                #[serde(transparent)]
                pub struct #name(#float);
                impl #name {
                    #[doc = #new_doc]
                    pub fn new(value: #float) -> ::std::option::Option<Self> {
                        (#(#checks)* true).then_some(Self(value))
                    }
                    pub fn get(self) -> #float {
                        self.0
                    }
                }
                impl ::std::convert::TryFrom<#float> for #name {
                    type Error = self::error::ConversionError;
                    fn try_from(value: #float) -> ::std::result::Result<Self, Self::Error> {
                        Self::new(value).ok_or_else(|| ::std::format!(#refusal).into())
                    }
                }
                impl ::std::convert::From<#name> for #float {
                    fn from(value: #name) -> #float {
                        value.0
                    }
                }
                impl ::std::ops::Deref for #name {
                    type Target = #float;
                    fn deref(&self) -> &#float {
                        &self.0
                    }
                }
                impl ::std::fmt::Display for #name {
                    fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        self.0.fmt(f)
                    }
                }
                impl ::std::str::FromStr for #name {
                    type Err = self::error::ConversionError;
                    fn from_str(value: &str) -> ::std::result::Result<Self, Self::Err> {
                        let parsed: #float = value.parse().map_err(|_| ::std::format!("{value:?} is not a number"))?;
                        Self::try_from(parsed)
                    }
                }
                impl<'de> ::serde::Deserialize<'de> for #name {
                    fn deserialize<D>(deserializer: D) -> ::std::result::Result<Self, D::Error>
                    where
                        D: ::serde::Deserializer<'de>,
                    {
                        let value = <#float as ::serde::Deserialize>::deserialize(deserializer)?;
                        Self::try_from(value).map_err(|e| <D::Error as ::serde::de::Error>::custom(e.to_string()))
                    }
                }
            }
        })
        .collect()
}
