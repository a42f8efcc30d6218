//! The documentation model: what the reference site says about every definition, root document
//! and API operation, built from the same [`Bundle`] (and typify type space) as the Rust types.
//!
//! Anchors are dotted paths. A definition's section is `Name`; a field is `Type.field`, a field
//! of an inline object `Type.field.sub`, a named `oneOf` variant `Type.variant`. Besides these
//! canonical anchors, every field can also be reached by its data path from any definition that
//! contains it (`ReportedInstance.meters.cpuMs` lands on `UsageMeters.cpuMs`), and every Rust
//! type typify generates for an inline schema (e.g. `ApiErrorMessage`) is an anchor on the
//! field it came from.

mod api;
pub mod brand;
pub mod curl;
mod essence;
pub mod policy;
mod role;
mod rust_names;
pub mod words;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use crate::rust::RustTypes;
use anyhow::Result;
use serde_json::Value;

use crate::bundle::Bundle;
pub use crate::examples::Example;
pub use api::{ApiDoc, ApiGroup, Body, Content, Operation, Parameter, Response};
pub use role::DocumentRole;
pub use rust_names::RustType;
use words::{Phrase, Token};

/// The folder under `schemas/` whose `<Document>/valid/*.json` fixtures are shown as examples.
pub use crate::config::EXAMPLES_DIR;

/// The site's page file for a root document.
pub fn document_page(name: &str) -> String {
    format!("{name}.html")
}
/// The page with every API operation.
pub const API_PAGE: &str = "api.html";
/// The index page (also home to definitions no document or operation uses).
pub const INDEX_PAGE: &str = "index.html";

#[derive(Debug, Clone)]
pub struct Model {
    /// Every definition, in schema order.
    pub types: Vec<TypeDoc>,
    /// Every root document, in schema order.
    pub documents: Vec<DocumentDoc>,
    /// The controller's API, when `schemas/` describes one.
    pub api: Option<ApiDoc>,
    /// Definitions reachable from no document and no operation: shown on the index page.
    pub orphans: Vec<String>,
    /// Every type typify generates, with the anchor that documents it.
    pub rust_types: Vec<RustType>,
    /// The page each definition is documented on first (its link target from other pages).
    pub home: BTreeMap<String, String>,
    /// The schema files, by name, as published beside the pages.
    pub schema_files: Vec<(String, String)>,
    /// The bundled OpenAPI documents (3.0.3, 3.1.0), by file name, as published under
    /// `openapi/` beside the API page; filled in by `generate`, which builds them.
    pub openapi_files: Vec<(String, String)>,
    /// The version line every page shows; filled in by `generate`.
    pub stamp: crate::build_stamp::Stamp,
    /// The changelog page's entries, newest first (`releases::history`); filled in by
    /// `generate`.
    pub changelog: Vec<crate::releases::HistoryEntry>,
    /// Whose reference this is: the name the pages carry, the crate of the Rust types.
    pub brand: brand::Brand,
}

/// A root document's page: the document first, then every type it reaches, in the order a
/// reader meets them (breadth first, fields in schema order).
#[derive(Debug, Clone)]
pub struct DocumentDoc {
    pub name: String,
    pub file: String,
    pub types: Vec<String>,
    pub examples: Vec<Example>,
    /// Where fleetwire reads and writes it, for the unknown-field policy.
    pub unknown_fields: policy::UnknownFieldPolicy,
    /// What part it plays on the wire, for the index.
    pub role: DocumentRole,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeKind {
    /// An object with fields.
    Object,
    /// `oneOf` / `anyOf` alternatives, each named.
    Variants,
    /// A closed list of values.
    Enum,
    /// Anything else: a constrained string, number, array or map.
    Value,
}

/// Whether an object takes fields beyond those it lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtraFields {
    /// `additionalProperties: false`.
    Refused,
    /// Unlisted fields are accepted (and ignored by fleetwire's types).
    Accepted,
    /// Unlisted fields are accepted when their values have this type.
    Typed(Phrase),
}

#[derive(Debug, Clone)]
pub struct TypeDoc {
    pub name: String,
    /// The schema file that defines it.
    pub file: String,
    /// Whether it is a root document (a whole body or file with a validator of its own).
    pub root: bool,
    pub title: Option<String>,
    pub description: Option<String>,
    /// The Rust type that carries it, e.g. `fleetwire_types::NodeHeartbeat`.
    pub rust_path: Option<String>,
    pub kind: TypeKind,
    /// The type written out (`string`, `object`, `array of …`).
    pub summary: Phrase,
    pub nullable: bool,
    pub constraints: Vec<Phrase>,
    pub default: Option<String>,
    /// For enums: every value, as shown.
    pub values: Vec<String>,
    /// For objects: every field (and the fields of inline objects, flattened), in schema order.
    pub rows: Vec<Row>,
    pub extra: Option<ExtraFields>,
    /// For `oneOf`/`anyOf`: the alternatives, and how many of them a value matches.
    pub variants: Vec<Variant>,
    pub variant_rule: Option<&'static str>,
    /// Definitions named by the type itself (outside its fields), in order.
    pub refs: Vec<String>,
    /// Every field (and operation) that uses this definition.
    pub appears_in: Vec<BackRef>,
    /// Further anchors of the section: Rust type names generated for it.
    pub aliases: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Variant {
    pub name: String,
    pub anchor: String,
    pub description: Option<String>,
    pub summary: Phrase,
    pub constraints: Vec<Phrase>,
    pub rows: Vec<Row>,
    pub extra: Option<ExtraFields>,
    pub refs: Vec<String>,
    pub aliases: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    Field,
    /// A named alternative of a field's inline `oneOf`; its fields follow it.
    Variant,
}

/// One field of a type (or, flattened after it, of an inline object inside it).
#[derive(Debug, Clone)]
pub struct Row {
    pub kind: RowKind,
    /// The canonical anchor, e.g. `ReportedInstance.meters`.
    pub anchor: String,
    pub name: String,
    /// The dotted path of the enclosing inline object within the type (`resources.`), if any.
    pub parent: String,
    /// How deep in inline objects the field is (0 for the type's own fields).
    pub depth: usize,
    /// The field's place in a document of the owning type, dotted, without variant names.
    pub data_path: String,
    pub ty: Phrase,
    pub required: bool,
    pub nullable: bool,
    pub default: Option<String>,
    pub constraints: Vec<Phrase>,
    pub description: Option<String>,
    /// Definitions named by the field's type, in order.
    pub refs: Vec<String>,
    /// Further anchors of the row: data paths through other types, Rust type names.
    pub aliases: Vec<String>,
    /// The Rust type typify generated for this field's inline schema, if any.
    pub rust_type: Option<String>,
}

/// A place that uses a definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackRef {
    /// A field (or a type's own shape): the owning definition and the anchor.
    Field { owner: String, anchor: String },
    /// An API operation, with what in it uses the definition.
    Operation { id: String, label: String },
}

impl Model {
    /// Builds the model from the bundle, the type space typify built from it, and the example
    /// fixtures under `examples_dir` (missing folder: no examples).
    pub fn build(bundle: &Bundle, rust: &RustTypes, examples_dir: &Path) -> Result<Model> {
        let mut types: Vec<TypeDoc> = bundle
            .defs
            .iter()
            .map(|(name, schema)| {
                describe_type(
                    name,
                    schema,
                    bundle.def_files.get(name).cloned().unwrap_or_default(),
                    bundle.is_root(name),
                )
            })
            .collect();
        let api = match &bundle.api {
            Some(api) => Some(api::describe(api)?),
            None => None,
        };
        link_back(&mut types, api.as_ref());
        add_path_aliases(&mut types);
        // Every anchor a field or variant has, to match typify's property names against.
        let known: Vec<String> = types
            .iter()
            .flat_map(|t| {
                t.variants
                    .iter()
                    .map(|v| v.anchor.clone())
                    .chain(t.all_rows().map(|r| r.anchor.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut rust_types = rust_names::assign(rust, bundle, &known);
        // A type named after a definition is documented by its section; any other gets its name
        // recorded on the section or row that documents it (so it is an anchor too).
        for t in rust_types
            .iter()
            .filter(|t| !bundle.defs.contains_key(&t.name))
        {
            record(&mut types, &t.anchor, &t.name);
        }
        rust_types.sort_by(|a, b| a.name.cmp(&b.name));
        for t in &mut types {
            t.rust_path = rust_names::rust_path(rust, &t.name);
        }

        let by_name: BTreeMap<&str, &TypeDoc> =
            types.iter().map(|t| (t.name.as_str(), t)).collect();
        let mut home = BTreeMap::new();
        let mut documents = Vec::new();
        // Every definition an API body is or holds (HostPortMapping, inside VmRecord, too).
        let in_api: BTreeSet<String> = api
            .as_ref()
            .map(|api| reach(&by_name, &api.refs(), |_| true).into_iter().collect())
            .unwrap_or_default();
        for root in &bundle.roots {
            let reached = reach(&by_name, std::slice::from_ref(&root.name), |_| true);
            for name in &reached {
                // A root document is at home on its own page; others on the first page that has them.
                if name == &root.name || !bundle.is_root(name) {
                    home.entry(name.clone())
                        .or_insert_with(|| document_page(&root.name));
                }
            }
            documents.push(DocumentDoc {
                name: root.name.clone(),
                file: root.file.clone(),
                types: reached,
                examples: crate::examples::load(examples_dir, &root.name)?,
                unknown_fields: {
                    let schema = bundle.defs.get(&root.name).unwrap_or(&Value::Null);
                    if rust.target.is_fleetwire() {
                        policy::of(&root.name, schema)
                    } else {
                        policy::general(schema)
                    }
                },
                role: DocumentRole::of(
                    bundle.defs.get(&root.name).unwrap_or(&Value::Null),
                    in_api.contains(&root.name),
                ),
            });
        }
        let mut api = api;
        if let Some(api) = &mut api {
            // Definitions the API names that no document page shows get a section on the API page.
            let named: Vec<String> = api
                .refs()
                .into_iter()
                .filter(|n| !home.contains_key(n))
                .collect();
            api.types = reach(&by_name, &named, |n| !home.contains_key(n));
            for name in &api.types {
                home.entry(name.clone())
                    .or_insert_with(|| API_PAGE.to_string());
            }
        }
        let orphans: Vec<String> = types
            .iter()
            .filter(|t| !home.contains_key(&t.name))
            .map(|t| t.name.clone())
            .collect();
        for name in &orphans {
            home.insert(name.clone(), INDEX_PAGE.to_string());
        }
        let schema_files = bundle
            .files
            .iter()
            .map(|f| {
                let text = serde_json::to_string_pretty(&f.value).unwrap_or_default();
                (f.name.clone(), text + "\n")
            })
            .collect();
        Ok(Model {
            types,
            documents,
            api,
            orphans,
            rust_types,
            home,
            schema_files,
            openapi_files: Vec::new(),
            stamp: Default::default(),
            changelog: Vec::new(),
            brand: brand::Brand::of(bundle, &rust.target),
        })
    }

    pub fn type_doc(&self, name: &str) -> Option<&TypeDoc> {
        self.types.iter().find(|t| t.name == name)
    }

    /// For every field's canonical anchor, the dotted paths that reach it from each root
    /// document (`HostReportedState.instances.meters.cpuMs` for `UsageMeters.cpuMs`): a JSON
    /// pointer into the document without its array indices, as search accepts it.
    pub fn document_paths(&self) -> BTreeMap<String, Vec<String>> {
        let by_name: BTreeMap<String, TypeDoc> = self
            .types
            .iter()
            .map(|t| (t.name.clone(), t.clone()))
            .collect();
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for doc in &self.documents {
            let mut paths = Vec::new();
            data_paths(&by_name, &doc.name, &mut Vec::new(), &mut paths);
            for (path, anchor) in paths {
                let full = format!("{}.{path}", doc.name);
                let list = out.entry(anchor).or_default();
                if !list.contains(&full) {
                    list.push(full);
                }
            }
        }
        out
    }
}

/// The definitions reached from `start` (included), breadth first, following every reference
/// of every field in schema order; `follow` decides whether a reached definition is entered.
fn reach(
    by_name: &BTreeMap<&str, &TypeDoc>,
    start: &[String],
    follow: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let mut queue: VecDeque<String> = start.iter().cloned().collect();
    while let Some(name) = queue.pop_front() {
        if seen.contains(&name) || !follow(&name) {
            continue;
        }
        let Some(t) = by_name.get(name.as_str()) else {
            continue;
        };
        seen.push(name);
        queue.extend(t.all_refs());
    }
    seen
}

impl TypeDoc {
    /// Every definition this one names anywhere (own shape, fields, variants), in order.
    pub fn all_refs(&self) -> Vec<String> {
        let mut out: Vec<String> = self.refs.clone();
        for row in &self.rows {
            out.extend(row.refs.iter().cloned());
        }
        for v in &self.variants {
            out.extend(v.refs.iter().cloned());
            for row in &v.rows {
                out.extend(row.refs.iter().cloned());
            }
        }
        let mut seen = BTreeSet::new();
        out.retain(|n| seen.insert(n.clone()));
        out
    }

    /// Every row, the type's own and its variants'.
    pub fn all_rows(&self) -> impl Iterator<Item = &Row> {
        self.rows
            .iter()
            .chain(self.variants.iter().flat_map(|v| v.rows.iter()))
    }

    fn all_rows_mut(&mut self) -> impl Iterator<Item = &mut Row> {
        self.rows
            .iter_mut()
            .chain(self.variants.iter_mut().flat_map(|v| v.rows.iter_mut()))
    }
}

/// Puts `rust_name` on the section, variant or row whose anchor is `anchor`.
fn record(types: &mut [TypeDoc], anchor: &str, rust_name: &str) {
    for t in types.iter_mut() {
        if t.name == anchor {
            t.aliases.push(rust_name.to_string());
            return;
        }
        for v in &mut t.variants {
            if v.anchor == anchor {
                v.aliases.push(rust_name.to_string());
                return;
            }
        }
        for row in t
            .rows
            .iter_mut()
            .chain(t.variants.iter_mut().flat_map(|v| v.rows.iter_mut()))
        {
            if row.anchor == anchor {
                if row.rust_type.is_none() {
                    row.rust_type = Some(rust_name.to_string());
                } else {
                    row.aliases.push(rust_name.to_string());
                }
                return;
            }
        }
    }
}

fn description(schema: &Value) -> Option<String> {
    schema
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn default_text(schema: &Value) -> Option<String> {
    schema.get("default").map(|d| d.to_string())
}

fn phrase_refs(phrase: &Phrase) -> Vec<String> {
    phrase
        .iter()
        .filter_map(|t| match t {
            Token::Type(name) => Some(name.clone()),
            _ => None,
        })
        .collect()
}

fn extra_fields(core: &Value) -> Option<ExtraFields> {
    if !words::has_fields(core) && core.get("type").and_then(Value::as_str) != Some("object") {
        return None;
    }
    Some(match core.get("additionalProperties") {
        Some(Value::Bool(false)) => ExtraFields::Refused,
        Some(schema @ Value::Object(_)) if words::has_fields(core) => {
            let (schema, _) = words::strip_nullable(schema);
            ExtraFields::Typed(words::type_phrase(&schema))
        }
        Some(Value::Object(_)) => return None, // a map: its value type is the type itself
        _ => ExtraFields::Accepted,
    })
}

fn describe_type(name: &str, schema: &Value, file: String, root: bool) -> TypeDoc {
    let (core, nullable) = words::strip_nullable(schema);
    let core = words::unwrap_all_of(&core);
    let mut doc = TypeDoc {
        name: name.to_string(),
        file,
        root,
        title: schema
            .get("title")
            .and_then(Value::as_str)
            .map(str::to_string),
        description: description(schema),
        rust_path: None,
        kind: TypeKind::Value,
        summary: words::type_phrase(&core),
        nullable,
        constraints: words::constraints(&core),
        default: default_text(schema),
        values: Vec::new(),
        rows: Vec::new(),
        extra: extra_fields(&core),
        variants: Vec::new(),
        variant_rule: None,
        refs: Vec::new(),
        appears_in: Vec::new(),
        aliases: Vec::new(),
    };
    if words::has_fields(&core) {
        doc.kind = TypeKind::Object;
        doc.summary = vec![Token::Text("object".into())];
        object_rows(&core, name, "", "", 0, &mut doc.rows);
    } else if let Some((rule, members)) = words::variants(&core) {
        doc.kind = TypeKind::Variants;
        doc.variant_rule = Some(rule);
        doc.variants = members
            .iter()
            .enumerate()
            .map(|(i, m)| describe_variant(name, i, m))
            .collect();
        doc.constraints.clear();
    } else if let Some(Value::Array(values)) = core.get("enum") {
        doc.kind = TypeKind::Enum;
        doc.values = values.iter().map(words::literal).collect();
        doc.refs = phrase_refs(&doc.summary);
    } else {
        doc.refs = phrase_refs(&doc.summary);
    }
    doc
}

/// The name a `oneOf` member goes by: its `title`, the definition it refers to, or its
/// position when it has neither.
fn variant_name(index: usize, member: &Value) -> String {
    member
        .get("title")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| words::ref_target(member).map(str::to_string))
        .unwrap_or_else(|| format!("variant{}", index + 1))
}

fn describe_variant(owner: &str, index: usize, member: &Value) -> Variant {
    let (core, _) = words::strip_nullable(member);
    let core = words::unwrap_all_of(&core);
    let name = variant_name(index, member);
    let anchor = format!("{owner}.{name}");
    let mut rows = Vec::new();
    let summary = if words::has_fields(&core) {
        object_rows(&core, &anchor, "", "", 0, &mut rows);
        vec![Token::Text("object".into())]
    } else {
        words::type_phrase(&core)
    };
    Variant {
        refs: phrase_refs(&summary),
        constraints: if words::has_fields(&core) {
            Vec::new()
        } else {
            words::constraints(&core)
        },
        extra: extra_fields(&core),
        description: description(member),
        summary,
        anchor,
        name,
        rows,
        aliases: Vec::new(),
    }
}

/// Appends a row for every field of `object` (anchors under `base`), then, right after each
/// field, the fields of its inline object or inline variants.
fn object_rows(
    object: &Value,
    base: &str,
    parent: &str,
    data_base: &str,
    depth: usize,
    rows: &mut Vec<Row>,
) {
    let required = crate::nullability::required(object);
    let Some(properties) = object.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (field, schema) in properties {
        let (core, nullable) = words::strip_nullable(schema);
        let core = words::unwrap_all_of(&core);
        let anchor = format!("{base}.{field}");
        let data_path = format!("{data_base}{field}");
        let ty = words::type_phrase(&core);
        rows.push(Row {
            kind: RowKind::Field,
            anchor: anchor.clone(),
            name: field.clone(),
            parent: parent.to_string(),
            depth,
            data_path: data_path.clone(),
            refs: phrase_refs(&ty),
            ty,
            required: required.contains(field.as_str()),
            nullable,
            default: default_text(schema).or_else(|| default_text(&core)),
            constraints: words::constraints(&core),
            description: description(schema).or_else(|| {
                // `{"$ref": X}` with no description of its own says nothing here; an inline
                // schema's description is the field's.
                words::ref_target(&core)
                    .is_none()
                    .then(|| description(&core))
                    .flatten()
            }),
            aliases: Vec::new(),
            rust_type: None,
        });
        // An array of inline objects documents its items' fields under the field itself.
        let inner = match core.get("items") {
            Some(items) if core.get("type").and_then(Value::as_str) == Some("array") => {
                words::unwrap_all_of(&words::strip_nullable(items).0)
            }
            _ => core.clone(),
        };
        let child_parent = format!("{parent}{field}.");
        let child_data = format!("{data_path}.");
        if words::has_fields(&inner) {
            object_rows(&inner, &anchor, &child_parent, &child_data, depth + 1, rows);
        } else if let Some((_, members)) = words::variants(&inner) {
            if words::ref_target(&inner).is_none() {
                for (i, member) in members.iter().enumerate() {
                    let (member_core, _) = words::strip_nullable(member);
                    let name = variant_name(i, member);
                    let variant_anchor = format!("{anchor}.{name}");
                    let summary = words::type_phrase(&member_core);
                    rows.push(Row {
                        kind: RowKind::Variant,
                        anchor: variant_anchor.clone(),
                        name,
                        parent: child_parent.clone(),
                        depth: depth + 1,
                        data_path: data_path.clone(),
                        refs: phrase_refs(&summary),
                        ty: if words::has_fields(&member_core) {
                            vec![Token::Text("object".into())]
                        } else {
                            summary
                        },
                        required: false,
                        nullable: false,
                        default: None,
                        constraints: if words::has_fields(&member_core) {
                            Vec::new()
                        } else {
                            words::constraints(&member_core)
                        },
                        description: description(member),
                        aliases: Vec::new(),
                        rust_type: None,
                    });
                    if words::has_fields(&member_core) {
                        object_rows(
                            &member_core,
                            &variant_anchor,
                            &child_parent,
                            &child_data,
                            depth + 2,
                            rows,
                        );
                    }
                }
            }
        }
    }
}

/// Fills every definition's "appears in": the fields and operations that use it.
fn link_back(types: &mut [TypeDoc], api: Option<&ApiDoc>) {
    let mut found: BTreeMap<String, Vec<BackRef>> = BTreeMap::new();
    for t in types.iter() {
        for target in &t.refs {
            found
                .entry(target.clone())
                .or_default()
                .push(BackRef::Field {
                    owner: t.name.clone(),
                    anchor: t.name.clone(),
                });
        }
        for v in &t.variants {
            for target in &v.refs {
                found
                    .entry(target.clone())
                    .or_default()
                    .push(BackRef::Field {
                        owner: t.name.clone(),
                        anchor: v.anchor.clone(),
                    });
            }
        }
        for row in t.all_rows() {
            for target in &row.refs {
                found
                    .entry(target.clone())
                    .or_default()
                    .push(BackRef::Field {
                        owner: t.name.clone(),
                        anchor: row.anchor.clone(),
                    });
            }
        }
    }
    if let Some(api) = api {
        for (name, id, label) in api.uses() {
            found
                .entry(name)
                .or_default()
                .push(BackRef::Operation { id, label });
        }
    }
    for t in types.iter_mut() {
        let mut refs = found.remove(&t.name).unwrap_or_default();
        refs.dedup();
        t.appears_in = refs;
    }
}

/// Every place a document of type `name` can hold a field, as (data path relative to the type,
/// canonical anchor), following references into other definitions (each at most once per path).
fn data_paths(
    types: &BTreeMap<String, TypeDoc>,
    name: &str,
    visiting: &mut Vec<String>,
    out: &mut Vec<(String, String)>,
) {
    let Some(t) = types.get(name) else {
        return;
    };
    visiting.push(name.to_string());
    for row in t.all_rows() {
        if row.kind == RowKind::Field {
            out.push((row.data_path.clone(), row.anchor.clone()));
        }
        for target in &row.refs {
            if visiting.contains(target) {
                continue;
            }
            let mut inner = Vec::new();
            data_paths(types, target, visiting, &mut inner);
            out.extend(
                inner
                    .into_iter()
                    .map(|(path, anchor)| (format!("{}.{path}", row.data_path), anchor)),
            );
        }
    }
    for target in t
        .refs
        .iter()
        .chain(t.variants.iter().flat_map(|v| v.refs.iter()))
    {
        if !visiting.contains(target) {
            data_paths(types, target, visiting, out);
        }
    }
    visiting.pop();
}

/// Gives every field an extra anchor for each data path that reaches it from another
/// definition through a reference: `ReportedInstance.meters.cpuMs` for `UsageMeters.cpuMs`.
fn add_path_aliases(types: &mut [TypeDoc]) {
    let by_name: BTreeMap<String, TypeDoc> =
        types.iter().map(|t| (t.name.clone(), t.clone())).collect();
    let canonical: BTreeSet<String> = types
        .iter()
        .flat_map(|t| {
            std::iter::once(t.name.clone())
                .chain(t.variants.iter().map(|v| v.anchor.clone()))
                .chain(t.all_rows().map(|r| r.anchor.clone()))
        })
        .collect();
    let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut taken = canonical.clone();
    for t in types.iter() {
        let mut paths = Vec::new();
        data_paths(&by_name, &t.name, &mut Vec::new(), &mut paths);
        for (path, anchor) in paths {
            let alias = format!("{}.{path}", t.name);
            if taken.insert(alias.clone()) {
                aliases.entry(anchor).or_default().push(alias);
            }
        }
    }
    for t in types.iter_mut() {
        for row in t.all_rows_mut() {
            if let Some(list) = aliases.remove(&row.anchor) {
                row.aliases.extend(list);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn model(files: Vec<(&str, Value)>, api: Option<Value>) -> Model {
        let files = files
            .into_iter()
            .map(|(name, value)| crate::bundle::SchemaFile {
                name: name.into(),
                path: name.into(),
                value,
            })
            .collect();
        let bundle = Bundle::from_files(files, api).unwrap();
        let space = crate::rust::type_space(&bundle).unwrap();
        Model::build(&bundle, &space, Path::new("/nonexistent")).unwrap()
    }

    #[test]
    fn fields_paths_backrefs_and_orphans() {
        let m = model(
            vec![(
                "a.schema.json",
                json!({
                    "title": "Doc",
                    "type": "object",
                    "properties": {
                        "inner": {"$ref": "#/$defs/Inner", "description": "the inner"},
                        "limits": {
                            "type": "object",
                            "properties": {"cpu": {"type": "integer", "minimum": 1}},
                            "required": ["cpu"],
                            "additionalProperties": false
                        }
                    },
                    "required": ["inner"],
                    "additionalProperties": false,
                    "$defs": {
                        "Inner": {
                            "type": "object",
                            "properties": {"n": {"type": ["integer", "null"], "default": 3}},
                            "additionalProperties": false
                        },
                        "Unused": {"type": "string", "maxLength": 4}
                    }
                }),
            )],
            None,
        );
        let doc = m.type_doc("Doc").unwrap();
        let anchors: Vec<&str> = doc.rows.iter().map(|r| r.anchor.as_str()).collect();
        assert_eq!(anchors, ["Doc.inner", "Doc.limits", "Doc.limits.cpu"]);
        assert!(doc.rows[0].required && !doc.rows[1].required && doc.rows[2].required);
        assert_eq!(doc.rows[0].description.as_deref(), Some("the inner"));
        let inner = m.type_doc("Inner").unwrap();
        assert!(inner.rows[0].nullable);
        assert_eq!(inner.rows[0].default.as_deref(), Some("3"));
        assert_eq!(inner.rows[0].aliases, ["Doc.inner.n"]);
        assert_eq!(
            inner.appears_in,
            [BackRef::Field {
                owner: "Doc".into(),
                anchor: "Doc.inner".into()
            }]
        );
        assert_eq!(m.documents[0].types, ["Doc", "Inner"]);
        assert_eq!(m.orphans, ["Unused"]);
        assert_eq!(m.home["Unused"], INDEX_PAGE);
        // typify names the inline object after its field; the field carries that anchor.
        let limits = m.rust_types.iter().find(|r| r.name == "DocLimits").unwrap();
        assert_eq!(limits.anchor, "Doc.limits");
        assert_eq!(doc.rows[1].rust_type.as_deref(), Some("DocLimits"));
    }

    #[test]
    fn inline_variants_of_a_field_are_rows_with_their_fields() {
        let m = model(
            vec![(
                "a.schema.json",
                json!({
                    "title": "Doc",
                    "type": "object",
                    "properties": {
                        "source": {
                            "description": "where from",
                            "oneOf": [
                                {"title": "image", "type": "object", "properties": {"ref": {"type": "string", "minLength": 1}}, "required": ["ref"], "additionalProperties": false},
                                {"title": "volume", "type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"], "additionalProperties": false}
                            ]
                        }
                    },
                    "additionalProperties": false
                }),
            )],
            None,
        );
        let doc = m.type_doc("Doc").unwrap();
        let rows: Vec<(&str, RowKind, &str)> = doc
            .rows
            .iter()
            .map(|r| (r.anchor.as_str(), r.kind, r.data_path.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("Doc.source", RowKind::Field, "source"),
                ("Doc.source.image", RowKind::Variant, "source"),
                ("Doc.source.image.ref", RowKind::Field, "source.ref"),
                ("Doc.source.volume", RowKind::Variant, "source"),
                ("Doc.source.volume.id", RowKind::Field, "source.id"),
            ]
        );
        // Every type typify made for the inline schemas has a place on the page.
        let space = crate::rust::type_space(&Bundle::from_files(
            vec![crate::bundle::SchemaFile {
                name: "a.schema.json".into(),
                path: "a.schema.json".into(),
                value: json!({"title": "Doc", "type": "object", "properties": {"source": {"oneOf": [
                    {"title": "image", "type": "object", "properties": {"ref": {"type": "string", "minLength": 1}}, "required": ["ref"], "additionalProperties": false},
                    {"title": "volume", "type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"], "additionalProperties": false}
                ]}}, "additionalProperties": false}),
            }],
            None,
        ).unwrap()).unwrap();
        let names = crate::rust::generated_type_names(&space);
        assert!(names.len() > 1, "typify named no inline type: {names:?}");
        for name in names {
            assert!(
                m.rust_types.iter().any(|r| r.name == name),
                "typify's {name} has no anchor"
            );
        }
    }

    #[test]
    fn named_variants_have_their_own_fields() {
        let m = model(
            vec![(
                "a.schema.json",
                json!({
                    "$defs": {
                        "Exit": {
                            "title": "Exit",
                            "oneOf": [
                                {"title": "code", "type": "object", "properties": {"code": {"type": "integer"}}, "required": ["code"], "additionalProperties": false},
                                {"title": "signal", "type": "object", "properties": {"signal": {"type": "integer"}}, "required": ["signal"], "additionalProperties": false}
                            ]
                        }
                    }
                }),
            )],
            None,
        );
        let exit = m.type_doc("Exit").unwrap();
        assert_eq!(exit.kind, TypeKind::Variants);
        let names: Vec<&str> = exit.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["code", "signal"]);
        assert_eq!(exit.variants[1].rows[0].anchor, "Exit.signal.signal");
        assert_eq!(exit.variants[1].rows[0].data_path, "signal");
    }
}
