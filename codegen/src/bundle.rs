//! Loading `schemas/` and bundling every schema file into one set of definitions.
//!
//! typify and the OpenAPI document both need a single namespace of definitions with local
//! references only, so every output starts from the [`Bundle`] built here. A schema file is
//! either a root document (it has a `title`; the root object becomes a definition of that name)
//! or a bag of `$defs`. Definitions that carry a `title` are root documents too: whole bodies
//! that cross the wire and get a validator of their own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

use crate::keywords;
use crate::schema_set::{self, SchemaSet};

/// The file suffix that marks a JSON Schema under `schemas/`.
pub const SCHEMA_SUFFIX: &str = ".schema.json";
/// The file that describes the controller's HTTP API (OpenAPI 3.0.3 paths).
pub const API_FILE: &str = "fleet-api.openapi.json";
/// The file that describes the node agent's local API (docs/agent.md, "The local API").
pub const AGENT_API_FILE: &str = "agent-api.openapi.json";

/// One schema file as read from disk.
#[derive(Debug, Clone)]
pub struct SchemaFile {
    /// File name relative to `schemas/`, e.g. `reported-state.schema.json`.
    pub name: String,
    pub path: PathBuf,
    pub value: Value,
}

/// A whole body that crosses the wire: it gets a validator and a page of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootDocument {
    /// The definition name, equal to its `title` (e.g. `NodeHeartbeat`).
    pub name: String,
    /// The schema file it is defined in.
    pub file: String,
}

/// Every definition of every schema file, in one namespace, with local `$ref`s only.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// Definitions in schema order (files sorted by name; within a file, document order).
    pub defs: Map<String, Value>,
    /// Which file each definition came from.
    pub def_files: BTreeMap<String, String>,
    /// Root documents in schema order.
    pub roots: Vec<RootDocument>,
    /// The source files, for embedding and for the site.
    pub files: Vec<SchemaFile>,
    /// The API description, if `schemas/` has one.
    pub api: Option<Value>,
    /// The set's name, version and hash (`schemas/schema-set.json`), when it has a manifest.
    pub set: Option<SchemaSet>,
}

impl Bundle {
    /// Reads every `*.schema.json` (and fleetwire's API description, `fleet-api.openapi.json`,
    /// when there is one) under `dir`.
    pub fn load(dir: &Path) -> Result<Bundle> {
        let api_path = dir.join(API_FILE);
        Self::load_with_api(dir, api_path.exists().then_some(api_path.as_path()))
    }

    /// Reads every `*.schema.json` under `dir`, and the API description at `api` if given.
    pub fn load_with_api(dir: &Path, api: Option<&Path>) -> Result<Bundle> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .with_context(|| format!("reading schema directory {}", dir.display()))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(SCHEMA_SUFFIX))
            .collect();
        names.sort();
        if names.is_empty() {
            bail!("no *{SCHEMA_SUFFIX} files in {}", dir.display());
        }
        let mut files = Vec::new();
        for name in names {
            let path = dir.join(&name);
            files.push(SchemaFile {
                value: read_json(&path)?,
                name,
                path,
            });
        }
        let set = schema_set::load(dir, is_set_file)?;
        let api = match api {
            Some(path) => {
                let mut api = read_json(path)?;
                if let Some(set) = &set {
                    stamp_api_version(&mut api, &set.version)?;
                }
                // Who may call each route, said from its annotation (issue 31).
                crate::policy_sentences::say(&mut api)
                    .with_context(|| format!("{}", path.display()))?;
                Some(api)
            }
            None => None,
        };
        let mut bundle = Self::from_files(files, api)?;
        bundle.set = set;
        Ok(bundle)
    }

    /// Bundles already-read files; `load` is the usual entry point.
    pub fn from_files(files: Vec<SchemaFile>, api: Option<Value>) -> Result<Bundle> {
        let mut defs = Map::new();
        let mut def_files = BTreeMap::new();
        let mut roots = Vec::new();
        for file in &files {
            keywords::check_file(&file.name, &file.value)?;
            let obj = file
                .value
                .as_object()
                .with_context(|| format!("{}: a schema file must be a JSON object", file.name))?;
            let mut add = |name: &str, schema: &Value| -> Result<()> {
                if let Some(other) = def_files.get(name) {
                    bail!(
                        "{}: definition `{name}` is already defined in {other}",
                        file.name
                    );
                }
                let mut schema = schema.clone();
                rewrite_refs(&mut schema, "")
                    .with_context(|| format!("{}: in definition `{name}`", file.name))?;
                if let Some(title) = schema.get("title").and_then(Value::as_str) {
                    if title != name {
                        bail!("{}: definition `{name}` has title `{title}`; a root document's title must equal its name", file.name);
                    }
                    roots.push(RootDocument {
                        name: name.to_string(),
                        file: file.name.clone(),
                    });
                }
                def_files.insert(name.to_string(), file.name.clone());
                defs.insert(name.to_string(), schema);
                Ok(())
            };
            if let Some(title) = obj.get("title").and_then(Value::as_str) {
                // The file's root object is itself a document: it becomes a definition.
                let mut root = Map::new();
                for (k, v) in obj {
                    if k != "$defs" && k != "$schema" && k != "$id" {
                        root.insert(k.clone(), v.clone());
                    }
                }
                add(title, &Value::Object(root))?;
            }
            if let Some(local) = obj.get("$defs") {
                let local = local
                    .as_object()
                    .with_context(|| format!("{}: `$defs` must be an object", file.name))?;
                for (name, schema) in local {
                    add(name, schema)?;
                }
            }
        }
        // Every reference must land on a definition.
        for (name, schema) in &defs {
            for target in collect_refs(schema) {
                let def = target.trim_start_matches("#/$defs/");
                if !defs.contains_key(def) {
                    bail!("definition `{name}` refers to `{target}`, which is not defined");
                }
            }
        }
        Ok(Bundle {
            defs,
            def_files,
            roots,
            files,
            api,
            set: None,
        })
    }

    /// A stand-alone schema for one definition: the whole bundle plus a `$ref` to it.
    /// This is what each root document's validator is compiled from.
    pub fn schema_for(&self, name: &str) -> Value {
        serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$ref": format!("#/$defs/{name}"),
            "$defs": Value::Object(self.defs.clone()),
        })
    }

    /// The bundle as one JSON document (`$defs` only).
    pub fn to_value(&self) -> Value {
        serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$comment": "Generated by fleetwire-codegen from schemas/*.schema.json. Do not edit.",
            "$defs": Value::Object(self.defs.clone()),
        })
    }

    pub fn is_root(&self, name: &str) -> bool {
        self.roots.iter().any(|r| r.name == name)
    }
}

/// The API document's `info.version` is the schema set's (docs/versioning.md): written there
/// when the description leaves it out, refused when it says another.
pub(crate) fn stamp_api_version(api: &mut Value, version: &semver::Version) -> Result<()> {
    let info = api
        .get_mut("info")
        .and_then(Value::as_object_mut)
        .with_context(|| format!("{API_FILE}: /info must be an object"))?;
    match info.get("version").and_then(Value::as_str) {
        Some(stated) if stated != version.to_string() => bail!(
            "{API_FILE}: /info/version is `{stated}`, but {} says the schema set is {version}; leave /info/version out (it is derived) or make them equal",
            schema_set::MANIFEST_FILE
        ),
        _ => {
            info.insert("version".into(), Value::String(version.to_string()));
            Ok(())
        }
    }
}

/// Whether a file of `schemas/` is part of the set (and so of its hash, `schema_set`).
pub fn is_set_file(name: &str) -> bool {
    name.ends_with(SCHEMA_SUFFIX) || name == API_FILE || name == AGENT_API_FILE
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))
}

/// Turns every `$ref` into a local `#/$defs/Name`: `#/$defs/X` stays, `other.schema.json#/$defs/X`
/// drops the file, and `#` (the file's own root) becomes the root's title.
fn rewrite_refs(value: &mut Value, pointer: &str) -> Result<()> {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let here = format!("{pointer}/{k}");
                if k == "$ref" {
                    let target = v
                        .as_str()
                        .with_context(|| format!("{here}: `$ref` must be a string"))?;
                    *v = Value::String(local_ref(target).with_context(|| format!("at {here}"))?);
                } else {
                    rewrite_refs(v, &here)?;
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                rewrite_refs(v, &format!("{pointer}/{i}"))?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn local_ref(target: &str) -> Result<String> {
    let (doc, fragment) = target.split_once('#').unwrap_or((target, ""));
    if !doc.is_empty() && !doc.ends_with(SCHEMA_SUFFIX) {
        bail!("`{target}`: only references to sibling *{SCHEMA_SUFFIX} files are supported");
    }
    match fragment.strip_prefix("/$defs/") {
        Some(name) if !name.contains('/') => Ok(format!("#/$defs/{name}")),
        _ => bail!("`{target}`: a reference must point at a definition (`file#/$defs/Name`)"),
    }
}

/// Every `$ref` target inside a schema.
pub fn collect_refs(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("$ref", Value::String(s)) => out.push(s.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(value, &mut out);
    out
}

/// The property names an object schema lists as `required`.
pub fn required_names(schema: &Map<String, Value>) -> std::collections::BTreeSet<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The definition name a local `$ref` points at.
pub fn ref_name(target: &str) -> &str {
    target.rsplit('/').next().unwrap_or(target)
}
