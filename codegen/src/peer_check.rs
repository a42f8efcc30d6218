//! The peer check: our schemas of a peer's API against the peer's own OpenAPI document.
//!
//! A definition that describes part of a peer's API names the upstream schema in its
//! `x-upstream` annotation (`{program, version, schema, direction}`; see
//! `schemas/smolvm.schema.json`). For each, the check walks both schemas side by side and reports
//! every field whose name, JSON type, integer range or requiredness disagrees in a way that
//! breaks the wire:
//!
//! - `read` (the peer sends it, fleetwire reads it): every field we declare must exist upstream;
//!   we may require only what upstream requires; we must accept every type and value upstream
//!   allows (including `null`); a closed object of ours must list every upstream field.
//! - `send` (fleetwire sends it, the peer reads it): every field we send must exist upstream
//!   with a type and range upstream accepts; every field upstream requires we must require.
//!
//! Patterns, lengths and enums are not compared: upstream's document states none for the
//! fields we use. Where the server is known to differ from its document, the difference is a
//! deliberate [`EXCEPTIONS`] entry with its reason; an entry that no longer matches anything
//! is itself reported, so the list stays true.

use std::collections::BTreeSet;

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

use crate::bundle::{ref_name, required_names, Bundle};

/// One deliberate disagreement with the peer's OpenAPI document.
#[derive(Debug, Clone, Copy)]
pub struct Exception {
    /// The definition and the field's path in it, as reported (`RuntimeMachine/pid`).
    pub at: &'static str,
    /// Why our schema is right and the document is not, for the server we talk to.
    pub why: &'static str,
}

/// Where smolvm 1.9.2's server is narrower than its OpenAPI document says, from its source
/// (`src/api/types.rs`) and observed answers (`docs/interop.md`).
pub const EXCEPTIONS: &[Exception] = &[
    Exception {
        at: "RuntimeMachine/pid",
        why: "the document says int32 with no minimum; the server fills it from a live process id, never negative, and fleetwire reads /proc by it",
    },
    Exception {
        at: "RuntimeCapacity/used_cpus",
        why: "the document states no minimum; the server computes a CPU-time delta over a wall-time delta (ApiState::real_utilization), never negative",
    },
    Exception {
        at: "RuntimePortSpec/host",
        why: "the document says int32 from 0; the server's PortSpec holds a u16",
    },
    Exception {
        at: "RuntimePortSpec/guest",
        why: "the document says int32 from 0; the server's PortSpec holds a u16",
    },
];

/// What `x-upstream` says about a definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub program: String,
    pub version: String,
    pub schema: String,
    pub send: bool,
}

/// One field on which we and the peer's document disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// `Definition/field/field…` (`[]` for array items).
    pub at: String,
    pub what: String,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.what)
    }
}

/// The outcome of a check: disagreements not covered by an exception, and exceptions that
/// matched nothing.
#[derive(Debug, Default)]
pub struct Report {
    pub checked: Vec<(String, Upstream)>,
    pub disagreements: Vec<Disagreement>,
    pub unused_exceptions: Vec<&'static str>,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.disagreements.is_empty() && self.unused_exceptions.is_empty()
    }
}

/// Every definition of the bundle that describes `program`'s API, with its annotation.
pub fn upstream_defs(bundle: &Bundle, program: &str) -> Result<Vec<(String, Upstream)>> {
    let mut out = Vec::new();
    for (name, def) in &bundle.defs {
        let Some(note) = def.get("x-upstream") else {
            continue;
        };
        let field = |k: &str| -> Result<String> {
            note.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .with_context(|| format!("{name}: x-upstream needs a string `{k}`"))
        };
        let direction = field("direction")?;
        let upstream = Upstream {
            program: field("program")?,
            version: field("version")?,
            schema: field("schema")?,
            send: match direction.as_str() {
                "send" => true,
                "read" => false,
                other => bail!("{name}: x-upstream direction is `send` or `read`, not `{other}`"),
            },
        };
        if upstream.program == program {
            out.push((name.clone(), upstream));
        }
    }
    Ok(out)
}

/// The one upstream version `program`'s definitions describe.
pub fn upstream_version(bundle: &Bundle, program: &str) -> Result<String> {
    let versions: BTreeSet<String> = upstream_defs(bundle, program)?
        .into_iter()
        .map(|(_, u)| u.version)
        .collect();
    match versions.len() {
        1 => Ok(versions.into_iter().next().expect("one")),
        0 => bail!("no definition describes {program}'s API (x-upstream)"),
        _ => bail!("{program}'s definitions describe several versions: {versions:?}"),
    }
}

/// Compares `program`'s definitions with its OpenAPI document, applying `exceptions`.
pub fn check(
    bundle: &Bundle,
    program: &str,
    openapi: &Value,
    exceptions: &[Exception],
) -> Result<Report> {
    let components = openapi
        .pointer("/components/schemas")
        .and_then(Value::as_object)
        .context("the peer's document has no components.schemas")?;
    let mut report = Report {
        checked: upstream_defs(bundle, program)?,
        ..Report::default()
    };
    let mut found = Vec::new();
    for (name, upstream) in &report.checked {
        let Some(theirs) = components.get(&upstream.schema) else {
            found.push(Disagreement {
                at: name.clone(),
                what: format!("upstream has no schema `{}`", upstream.schema),
            });
            continue;
        };
        let walk = Walk {
            bundle,
            components,
            send: upstream.send,
        };
        walk.compare(&bundle.defs[name], theirs, name, &mut found, 0);
    }
    let mut used = BTreeSet::new();
    for d in found {
        match exceptions.iter().find(|e| e.at == d.at) {
            Some(e) => {
                used.insert(e.at);
            }
            None => report.disagreements.push(d),
        }
    }
    report.unused_exceptions = exceptions
        .iter()
        .map(|e| e.at)
        .filter(|at| !used.contains(at))
        .collect();
    Ok(report)
}

/// A schema seen through references and `X | null` alternatives.
struct Shape<'a> {
    /// JSON types it accepts (`integer` implied by `number`); `None` for any.
    types: Option<BTreeSet<String>>,
    /// The non-null object/array/scalar schema holding properties, items and bounds.
    core: Option<&'a Map<String, Value>>,
}

struct Walk<'a> {
    bundle: &'a Bundle,
    components: &'a Map<String, Value>,
    send: bool,
}

const MAX_DEPTH: usize = 16;

impl<'a> Walk<'a> {
    fn resolve(&self, target: &str) -> Option<&'a Value> {
        let name = ref_name(target);
        if target.starts_with("#/components/schemas/") {
            self.components.get(name)
        } else {
            self.bundle.defs.get(name)
        }
    }

    /// The definition `schema` refers to (directly or as `X | null`) when it carries its own
    /// `x-upstream`, with the upstream schema it names.
    fn annotated_ref(&self, schema: &'a Value) -> Option<(&'a str, &'a str)> {
        refs_of(schema).into_iter().find_map(|target| {
            let name = ref_name(target);
            let named = self
                .bundle
                .defs
                .get(name)?
                .pointer("/x-upstream/schema")?
                .as_str()?;
            Some((name, named))
        })
    }

    fn shape(&self, schema: &'a Value, depth: usize) -> Shape<'a> {
        let Some(obj) = schema.as_object() else {
            return Shape {
                types: None,
                core: None,
            };
        };
        if depth > MAX_DEPTH {
            return Shape {
                types: None,
                core: Some(obj),
            };
        }
        if let Some(target) = obj.get("$ref").and_then(Value::as_str) {
            return match self.resolve(target) {
                Some(def) => self.shape(def, depth + 1),
                None => Shape {
                    types: None,
                    core: None,
                },
            };
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(variants) = obj.get(key).and_then(Value::as_array) {
                let mut types = Some(BTreeSet::new());
                let mut core = None;
                for v in variants {
                    let s = self.shape(v, depth + 1);
                    match (&mut types, s.types) {
                        (Some(all), Some(these)) => {
                            if !(these.len() == 1 && these.contains("null")) {
                                core = core.or(s.core);
                            }
                            all.extend(these);
                        }
                        _ => types = None,
                    }
                }
                return Shape { types, core };
            }
        }
        let types = match obj.get("type") {
            Some(Value::String(t)) => Some(BTreeSet::from([t.clone()])),
            Some(Value::Array(ts)) => Some(
                ts.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect(),
            ),
            _ => None,
        };
        Shape {
            types,
            core: Some(obj),
        }
    }

    fn compare(
        &self,
        ours: &'a Value,
        theirs: &'a Value,
        at: &str,
        out: &mut Vec<Disagreement>,
        depth: usize,
    ) {
        let (ours_raw, theirs_raw) = (ours, theirs);
        let ours = self.shape(ours, depth);
        let theirs = self.shape(theirs, depth);
        let mut say = |what: String| {
            out.push(Disagreement {
                at: at.to_string(),
                what,
            })
        };
        // The side that must accept everything the other may put on the wire.
        let (writer, reader, writer_name, reader_name) = if self.send {
            (&ours, &theirs, "fleetwire sends", "upstream")
        } else {
            (&theirs, &ours, "upstream sends", "fleetwire")
        };
        if let Some(written) = &writer.types {
            for t in written {
                if !accepts(reader.types.as_ref(), t) {
                    say(format!(
                        "{writer_name} {t}; {reader_name} accepts only {}",
                        type_list(reader.types.as_ref())
                    ));
                }
            }
        }
        // A definition with its own `x-upstream` is checked on its own: here it only has to
        // stand for the same upstream schema.
        if let Some((def, named)) = self.annotated_ref(ours_raw) {
            let theirs_name = upstream_ref(theirs_raw);
            if theirs_name != Some(named) {
                say(format!(
                    "fleetwire's `{def}` describes upstream `{named}`; upstream has {} here",
                    theirs_name.map_or("no reference".to_string(), |n| format!("`{n}`"))
                ));
            }
            return;
        }
        let (Some(o), Some(t)) = (ours.core, theirs.core) else {
            return;
        };
        let is_integer = |s: &Shape| s.types.as_ref().is_some_and(|ts| ts.contains("integer"));
        let is_number = |s: &Shape| s.types.as_ref().is_some_and(|ts| ts.contains("number"));
        if is_integer(&ours) || is_number(&ours) {
            let (w, r) = if self.send { (o, t) } else { (t, o) };
            let integer = is_integer(&ours) && !is_number(&ours);
            let (wl, wh) = range(w, integer);
            let (rl, rh) = range(r, integer);
            if wl < rl || wh > rh {
                say(format!(
                    "{writer_name} values in [{}, {}]; {reader_name} accepts [{}, {}]",
                    show(wl),
                    show(wh),
                    show(rl),
                    show(rh)
                ));
            }
        }
        static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
        let props = |m: &'a Map<String, Value>| -> &'a Map<String, Value> {
            m.get("properties")
                .and_then(Value::as_object)
                .unwrap_or(&EMPTY)
        };
        let (our_props, their_props) = (props(o), props(t));
        let (our_req, their_req) = (required_names(o), required_names(t));
        for (field, schema) in our_props {
            let here = format!("{at}/{field}");
            let Some(their_schema) = their_props.get(field) else {
                out.push(Disagreement {
                    at: here,
                    what: format!(
                        "fleetwire {} `{field}`; upstream has no such field",
                        if self.send { "sends" } else { "reads" }
                    ),
                });
                continue;
            };
            if !self.send && our_req.contains(field) && !their_req.contains(field) {
                out.push(Disagreement {
                    at: here.clone(),
                    what: "fleetwire requires it; upstream marks it optional".into(),
                });
            }
            if self.send && their_req.contains(field) && !our_req.contains(field) {
                out.push(Disagreement {
                    at: here.clone(),
                    what: "upstream requires it; fleetwire may leave it out".into(),
                });
            }
            self.compare(schema, their_schema, &here, out, depth + 1);
        }
        if self.send {
            for field in their_req.iter().filter(|f| !our_props.contains_key(*f)) {
                out.push(Disagreement {
                    at: format!("{at}/{field}"),
                    what: "upstream requires it; fleetwire never sends it".into(),
                });
            }
        } else if o.contains_key("properties")
            && o.get("additionalProperties") != Some(&Value::Bool(false))
        {
            // Fields upstream sends that fleetwire does not define are set aside and reported by
            // the reader (README "Unknown fields"), which needs the object closed; an open one
            // would take them silently.
            out.push(Disagreement {
                at: at.to_string(),
                what: "fleetwire's object is open: fields it does not read would be taken silently instead of reported".into(),
            });
        }
        if let (Some(oi), Some(ti)) = (o.get("items"), t.get("items")) {
            self.compare(oi, ti, &format!("{at}/[]"), out, depth + 1);
        }
    }
}

/// `$ref` targets of a schema and of its `oneOf`/`anyOf` variants.
fn refs_of(schema: &Value) -> Vec<&str> {
    let mut out: Vec<&str> = schema
        .get("$ref")
        .and_then(Value::as_str)
        .into_iter()
        .collect();
    for key in ["oneOf", "anyOf"] {
        for v in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out.extend(v.get("$ref").and_then(Value::as_str));
        }
    }
    out
}

/// The upstream component a schema refers to, if it refers to one.
fn upstream_ref(schema: &Value) -> Option<&str> {
    refs_of(schema).into_iter().next().map(ref_name)
}

fn accepts(types: Option<&BTreeSet<String>>, t: &str) -> bool {
    match types {
        None => true,
        Some(ts) => ts.contains(t) || (t == "integer" && ts.contains("number")),
    }
}

fn type_list(types: Option<&BTreeSet<String>>) -> String {
    match types {
        None => "anything".into(),
        Some(ts) => ts.iter().cloned().collect::<Vec<_>>().join(", "),
    }
}

/// The closed range a number schema allows, from its format and bounds. An integer without a
/// format is taken as at most 64 bits wide, as every JSON reader of either side parses it.
fn range(schema: &Map<String, Value>, integer: bool) -> (f64, f64) {
    let (mut low, mut high) = match schema.get("format").and_then(Value::as_str) {
        Some("int8") => (i8::MIN as f64, i8::MAX as f64),
        Some("uint8") => (0.0, u8::MAX as f64),
        Some("int16") => (i16::MIN as f64, i16::MAX as f64),
        Some("uint16") => (0.0, u16::MAX as f64),
        Some("int32") => (i32::MIN as f64, i32::MAX as f64),
        Some("uint32") => (0.0, u32::MAX as f64),
        Some("int64") => (i64::MIN as f64, i64::MAX as f64),
        Some("uint64") => (0.0, u64::MAX as f64),
        _ if integer => (i64::MIN as f64, u64::MAX as f64),
        _ => (f64::NEG_INFINITY, f64::INFINITY),
    };
    if let Some(m) = schema.get("minimum").and_then(Value::as_f64) {
        low = low.max(m);
    }
    if let Some(m) = schema.get("maximum").and_then(Value::as_f64) {
        high = high.min(m);
    }
    (low, high)
}

fn show(x: f64) -> String {
    if x.is_infinite() {
        if x > 0.0 { "∞" } else { "-∞" }.into()
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn workspace() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
    }

    fn bundle() -> Bundle {
        Bundle::load(&workspace().join("schemas")).unwrap()
    }

    /// Where `.ci/run` finds the peer's document: beside the workspace, in `../shared`.
    fn smolvm_document(version: &str) -> Option<Value> {
        let path = workspace()
            .join("../shared/reference")
            .join(format!("smolvm-{version}.openapi.json"));
        let text = std::fs::read_to_string(&path).ok()?;
        Some(serde_json::from_str(&text).unwrap())
    }

    #[test]
    fn our_smolvm_schemas_agree_with_smolvm_s_own_openapi_document() {
        let b = bundle();
        let version = upstream_version(&b, "smolvm").unwrap();
        assert_eq!(version, "1.9.2");
        let Some(doc) = smolvm_document(&version) else {
            eprintln!(
                "SKIPPED: ../shared/reference/smolvm-{version}.openapi.json is absent; \
                 `.ci/run` runs `cargo run -p fleetwire-codegen -- peer-check` with it"
            );
            return;
        };
        let report = check(&b, "smolvm", &doc, EXCEPTIONS).unwrap();
        assert!(report.checked.len() >= 8, "{:?}", report.checked);
        assert!(
            report.is_clean(),
            "disagreements: {:#?}\nunused exceptions: {:?}",
            report.disagreements,
            report.unused_exceptions
        );
    }

    /// An upstream document and a bundle that differ in every way the check knows.
    fn mismatched() -> (Bundle, Value) {
        let ours = json!({"$defs": {
            "Answer": {"type": "object", "x-upstream": {"program": "p", "version": "1", "schema": "Answer", "direction": "read"},
                "properties": {
                    "count": {"type": "integer", "format": "uint32", "minimum": 0},
                    "name": {"type": "string"},
                    "gone": {"type": "string"},
                    "size": {"type": "integer", "format": "uint64", "minimum": 0}
                },
                "required": ["count", "name"], "additionalProperties": false},
            "Open": {"type": "object", "x-upstream": {"program": "p", "version": "1", "schema": "Open", "direction": "read"},
                "properties": {"name": {"type": "string"}}},
            "Ask": {"type": "object", "x-upstream": {"program": "p", "version": "1", "schema": "Ask", "direction": "send"},
                "properties": {"memMb": {"type": "integer", "format": "uint64", "minimum": 1}, "extra": {"type": "boolean"}},
                "required": ["memMb"]}
        }});
        let files = vec![crate::bundle::SchemaFile {
            name: "p.schema.json".into(),
            path: "p.schema.json".into(),
            value: ours,
        }];
        let theirs = json!({"components": {"schemas": {
            "Answer": {"type": "object", "properties": {
                "count": {"type": ["integer", "null"], "format": "int32", "minimum": 0},
                "name": {"type": "string"},
                "size": {"type": "string"},
                "more": {"type": "boolean"}
            }, "required": ["count"]},
            "Open": {"type": "object", "properties": {"name": {"type": "string"}, "more": {"type": "boolean"}}},
            "Ask": {"type": "object", "properties": {
                "memMb": {"type": "integer", "format": "int32", "minimum": 0},
                "cpus": {"type": "integer"}
            }, "required": ["cpus"]}
        }}});
        (Bundle::from_files(files, None).unwrap(), theirs)
    }

    #[test]
    fn the_check_catches_names_types_ranges_and_requiredness() {
        let (b, theirs) = mismatched();
        let report = check(&b, "p", &theirs, &[]).unwrap();
        let at: Vec<&str> = report.disagreements.iter().map(|d| d.at.as_str()).collect();
        for expected in [
            "Answer/count", // upstream may send null
            "Answer/name",  // we require what upstream marks optional
            "Answer/gone",  // we read a field upstream does not have
            "Answer/size",  // integer vs string
            "Open",         // an open object would take unknown fields silently
            "Ask/memMb",    // we send up to u64::MAX; upstream takes int32
            "Ask/extra",    // we send a field upstream's request lacks
            "Ask/cpus",     // upstream requires a field we never send
        ] {
            assert!(
                at.contains(&expected),
                "{expected} not reported: {:#?}",
                report.disagreements
            );
        }
        assert!(!report.is_clean());
    }

    #[test]
    fn an_exception_silences_its_field_only_and_a_stale_one_is_reported() {
        let (b, theirs) = mismatched();
        let exceptions = [
            Exception {
                at: "Answer/size",
                why: "test",
            },
            Exception {
                at: "Answer/nothing-wrong-here",
                why: "test",
            },
        ];
        let report = check(&b, "p", &theirs, &exceptions).unwrap();
        assert!(report.disagreements.iter().all(|d| d.at != "Answer/size"));
        assert!(report.disagreements.iter().any(|d| d.at == "Answer/count"));
        assert_eq!(report.unused_exceptions, vec!["Answer/nothing-wrong-here"]);
    }

    #[test]
    fn a_real_drift_in_smolvm_s_document_is_caught() {
        // smolvm's own document, with the list answer turned back into a bare array field
        // name and `memoryMb` made optional: the two mistakes issue 14 found.
        let b = bundle();
        let Some(mut doc) = smolvm_document("1.9.2") else {
            eprintln!("SKIPPED: ../shared/reference/smolvm-1.9.2.openapi.json is absent");
            return;
        };
        let schemas = doc.pointer_mut("/components/schemas").unwrap();
        let info = schemas["MachineInfo"].as_object_mut().unwrap();
        let req: Vec<Value> = info["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| *r != "memoryMb")
            .cloned()
            .collect();
        info.insert("required".into(), Value::Array(req));
        let list = schemas["ListMachinesResponse"].as_object_mut().unwrap();
        let props = list["properties"].as_object_mut().unwrap();
        let items = props.remove("machines").unwrap();
        props.insert("items".into(), items);
        let report = check(&b, "smolvm", &doc, EXCEPTIONS).unwrap();
        let at: Vec<&str> = report.disagreements.iter().map(|d| d.at.as_str()).collect();
        assert!(at.contains(&"RuntimeMachine/memoryMb"), "{at:?}");
        assert!(at.contains(&"RuntimeMachineList/machines"), "{at:?}");
    }
}
