//! Drift guards of the reference site, on the real `schemas/`: every property of every schema
//! is on its page with its description and constraints, every generated Rust type has an
//! anchor, every internal link and anchor resolves, and `fleetwire-codegen docs` writes the
//! same site.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use fleetwire_codegen::bundle::{collect_refs, ref_name};
use fleetwire_codegen::model::{self, API_PAGE};
use fleetwire_codegen::{rust, site, Outputs};
use scraper::{ElementRef, Html, Selector};
use serde_json::Value;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn outputs() -> &'static Outputs {
    static OUTPUTS: OnceLock<Outputs> = OnceLock::new();
    OUTPUTS.get_or_init(|| {
        fleetwire_codegen::generate(&workspace().join("schemas")).expect("schemas/ generate")
    })
}

/// The rendered site: path → bytes.
fn files() -> &'static BTreeMap<String, Vec<u8>> {
    static FILES: OnceLock<BTreeMap<String, Vec<u8>>> = OnceLock::new();
    FILES.get_or_init(|| {
        site::render(&outputs().model)
            .expect("the site renders")
            .into_iter()
            .map(|(p, b)| (p.to_string_lossy().replace('\\', "/"), b))
            .collect()
    })
}

fn page(path: &str) -> Html {
    let bytes = files()
        .get(path)
        .unwrap_or_else(|| panic!("the site has no {path}"));
    Html::parse_document(std::str::from_utf8(bytes).expect("pages are UTF-8"))
}

fn sel(s: &str) -> Selector {
    Selector::parse(s).expect("selector")
}

/// Text of an element with runs of whitespace folded, as a reader sees it.
fn text(el: ElementRef<'_>) -> String {
    fold(&el.text().collect::<String>())
}

fn fold(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn by_id<'a>(html: &'a Html, id: &str) -> Option<ElementRef<'a>> {
    html.select(&sel("[id]"))
        .find(|e| e.value().attr("id") == Some(id))
}

/// The schema without its "or null" member(s), like the site shows it.
fn non_null(schema: &Value) -> Value {
    let mut s = schema.clone();
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(members)) = schema.get(key) {
            let kept: Vec<Value> = members
                .iter()
                .filter(|m| m.get("type").and_then(Value::as_str) != Some("null"))
                .cloned()
                .collect();
            if kept.len() < members.len() {
                let obj = s.as_object_mut().unwrap();
                obj.remove(key);
                if let [one] = kept.as_slice() {
                    for (k, v) in one.as_object().unwrap() {
                        obj.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                } else {
                    obj.insert(key.into(), Value::Array(kept));
                }
            }
        }
    }
    s
}

/// One property of a schema as the raw JSON says it: its anchor, schema, and whether required.
struct Property {
    anchor: String,
    schema: Value,
    required: bool,
}

/// Every property of `schema` (anchored under `base`), read straight from the JSON: fields of
/// inline objects, of array items and of titled `oneOf` variants too.
fn properties(base: &str, schema: &Value, out: &mut Vec<Property>) {
    let schema = non_null(schema);
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        let required: BTreeSet<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, prop) in props {
            let anchor = format!("{base}.{name}");
            out.push(Property {
                anchor: anchor.clone(),
                schema: prop.clone(),
                required: required.contains(name.as_str()),
            });
            let inner = non_null(prop);
            let inner = match inner.get("items") {
                Some(items) if inner.get("type") == Some(&Value::from("array")) => items.clone(),
                _ => inner,
            };
            if inner.get("$ref").is_none() {
                properties(&anchor, &inner, out);
            }
        }
    }
    for key in ["oneOf", "anyOf"] {
        for member in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(title) = member.get("title").and_then(Value::as_str) {
                properties(&format!("{base}.{title}"), member, out);
            }
        }
    }
}

/// What a reader must find about a property, from its raw schema: the description verbatim
/// and every constraint's literal (pattern, bounds, lengths, enum values, default, format).
fn expected_texts(prop: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(d) = prop.get("description").and_then(Value::as_str) {
        out.push(fold(d));
    }
    let core = non_null(prop);
    if core.get("$ref").is_some() {
        out.push(ref_name(core["$ref"].as_str().unwrap()).to_string());
    }
    for key in [
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "multipleOf",
    ] {
        match core.get(key) {
            Some(Value::String(s)) => out.push(s.clone()),
            Some(v @ Value::Number(_)) => out.push(v.to_string()),
            _ => {}
        }
    }
    if let Some(Value::Array(values)) = core.get("enum") {
        for v in values.iter().filter(|v| !v.is_null()) {
            out.push(match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        }
    }
    if let Some(d) = prop.get("default") {
        out.push(d.to_string());
    }
    if let Some(f) = core.get("format").and_then(Value::as_str) {
        out.push(f.to_string());
    }
    if core
        .get("type")
        .and_then(Value::as_array)
        .is_some_and(|t| t.contains(&Value::from("null")))
        || prop
            .get("oneOf")
            .is_some_and(|o| o.to_string().contains(r#""type":"null""#))
    {
        out.push("nullable".into());
    }
    out
}

/// The definitions a root document reaches, read from the raw bundle.
fn reachable(root: &str) -> BTreeSet<String> {
    let defs = &outputs().bundle.defs;
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_string()];
    while let Some(name) = todo.pop() {
        if seen.insert(name.clone()) {
            for r in collect_refs(&defs[&name]) {
                todo.push(ref_name(&r).to_string());
            }
        }
    }
    seen
}

fn check_properties_on(page_path: &str, defs: &BTreeSet<String>, problems: &mut Vec<String>) {
    let html = page(page_path);
    let by_id: BTreeMap<&str, ElementRef<'_>> = html
        .select(&sel("[id]"))
        .filter_map(|e| Some((e.value().attr("id")?, e)))
        .collect();
    let by_id = |_: &Html, id: &str| by_id.get(id).copied();
    let bundle = &outputs().bundle;
    for def in defs {
        if by_id(&html, def).is_none() {
            problems.push(format!("{page_path}: no section #{def}"));
        }
        let mut props = Vec::new();
        properties(def, &bundle.defs[def], &mut props);
        for prop in props {
            let Some(row) = by_id(&html, &prop.anchor) else {
                problems.push(format!("{page_path}: no row #{}", prop.anchor));
                continue;
            };
            let shown = text(row);
            for want in expected_texts(&prop.schema) {
                if !shown.contains(&want) {
                    problems.push(format!(
                        "{page_path}#{}: `{want}` is missing from the row",
                        prop.anchor
                    ));
                }
            }
            let badge = if prop.required {
                "required"
            } else {
                "optional"
            };
            if !row.select(&sel(&format!(".badge.{badge}"))).any(|_| true) {
                problems.push(format!("{page_path}#{}: not marked {badge}", prop.anchor));
            }
        }
    }
}

#[test]
fn every_property_is_on_every_page_that_reaches_it() {
    let mut problems = Vec::new();
    for root in &outputs().bundle.roots {
        let defs = reachable(&root.name);
        check_properties_on(&model::document_page(&root.name), &defs, &mut problems);
    }
    // Definitions no document reaches live on the API page or the index.
    let m = &outputs().model;
    let elsewhere: BTreeMap<&str, BTreeSet<String>> =
        m.home.iter().fold(BTreeMap::new(), |mut acc, (def, page)| {
            if page == API_PAGE || page == model::INDEX_PAGE {
                acc.entry(page.as_str()).or_default().insert(def.clone());
            }
            acc
        });
    for (page_path, defs) in &elsewhere {
        check_properties_on(page_path, defs, &mut problems);
    }
    assert!(
        m.home.len() == outputs().bundle.defs.len(),
        "some definition has no page"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_definition_description_and_enum_value_is_shown() {
    let mut problems = Vec::new();
    for (def, schema) in &outputs().bundle.defs {
        let home = &outputs().model.home[def];
        let html = page(home);
        let Some(section) = by_id(&html, def) else {
            problems.push(format!("{home}: no section #{def}"));
            continue;
        };
        let shown = text(section);
        let mut want: Vec<String> = schema
            .get("description")
            .and_then(Value::as_str)
            .map(fold)
            .into_iter()
            .collect();
        for v in schema
            .get("enum")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            want.push(
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string()),
            );
        }
        if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
            want.push(p.to_string());
        }
        // Whether a writer may add fields is stated for every object.
        if schema.get("properties").is_some() {
            want.push(
                match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => "Closed: a field not listed here is not part of it. fleetwire never writes one; read from a peer, it is set aside and reported, and refused in strict mode",
                    Some(Value::Object(_)) => "Any other field is accepted when its value is",
                    _ => "Open: a field not listed here is accepted",
                }
                .to_string(),
            );
        }
        for w in want {
            if !shown.contains(&w) {
                problems.push(format!("{home}#{def}: `{w}` is missing"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_generated_rust_type_has_an_anchor() {
    let space = rust::type_space(&outputs().bundle).unwrap();
    let names = rust::generated_type_names(&space);
    assert!(
        names.len() > 50,
        "typify generated only {} types",
        names.len()
    );
    let all_ids: BTreeSet<String> = files()
        .keys()
        .filter(|p| p.ends_with(".html"))
        .flat_map(|p| ids(&page(p)))
        .collect();
    let missing: Vec<&String> = names.iter().filter(|n| !all_ids.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "Rust types without an anchor: {missing:?}"
    );
    // The inline ones sit on the field they came from.
    let html = page("ApiError.html");
    let row = by_id(&html, "ApiError.message").expect("row ApiError.message");
    assert!(row.select(&sel("#ApiErrorMessage")).next().is_some());
}

fn ids(html: &Html) -> Vec<String> {
    html.select(&sel("[id]"))
        .filter_map(|e| e.value().attr("id").map(str::to_string))
        .collect()
}

/// Resolves `href` found on `from` (a site path) to (site path, fragment); `None` for links
/// that leave the site.
fn resolve(from: &str, href: &str) -> Option<(String, String)> {
    if href.contains("://") || href.starts_with("mailto:") || href.starts_with("//") {
        return None;
    }
    let (path, fragment) = href.split_once('#').unwrap_or((href, ""));
    let target = if path.is_empty() {
        from.to_string()
    } else {
        let mut parts: Vec<&str> = from.split('/').collect();
        parts.pop();
        for seg in path.split('/') {
            match seg {
                ".." => {
                    parts.pop();
                }
                "." | "" => {}
                s => parts.push(s),
            }
        }
        parts.join("/")
    };
    Some((target, fragment.to_string()))
}

#[test]
fn no_broken_link_or_anchor_anywhere() {
    let pages: BTreeMap<&String, Html> = files()
        .keys()
        .filter(|p| p.ends_with(".html"))
        .map(|p| (p, page(p)))
        .collect();
    let mut ids_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for (path, html) in &pages {
        let mut seen = BTreeSet::new();
        for id in ids(html) {
            if !seen.insert(id.clone()) {
                problems.push(format!("{path}: id `{id}` is used twice"));
            }
        }
        ids_of.insert(path.to_string(), seen);
    }
    let mut links = 0;
    for (path, html) in &pages {
        for (selector, attr) in [
            ("a[href]", "href"),
            ("link[href]", "href"),
            ("script[src]", "src"),
        ] {
            for el in html.select(&sel(selector)) {
                let href = el.value().attr(attr).unwrap();
                let Some((target, fragment)) = resolve(path, href) else {
                    continue;
                };
                links += 1;
                if !files().contains_key(&target) {
                    problems.push(format!("{path}: `{href}` → no file {target}"));
                } else if !fragment.is_empty()
                    && !ids_of
                        .get(&target)
                        .is_some_and(|ids| ids.contains(&fragment))
                {
                    problems.push(format!(
                        "{path}: `{href}` → no anchor #{fragment} in {target}"
                    ));
                }
            }
        }
    }
    // The search index points into the pages too.
    let index = std::str::from_utf8(&files()[site::SEARCH_INDEX]).unwrap();
    let json = index
        .split_once("window.FLEETWIRE_SEARCH = ")
        .and_then(|(_, rest)| rest.trim_end().strip_suffix(';'))
        .expect("the search index assigns window.FLEETWIRE_SEARCH");
    let entries: Vec<Value> = serde_json::from_str(json).expect("the index is JSON");
    for e in &entries {
        let u = e["u"].as_str().unwrap();
        let (target, fragment) = resolve("index.html", u).unwrap();
        if !ids_of
            .get(&target)
            .is_some_and(|ids| ids.contains(&fragment))
        {
            problems.push(format!("search index: `{u}` does not resolve"));
        }
    }
    assert!(links > 1000, "only {links} internal links checked");
    assert!(entries.len() > 300, "only {} search entries", entries.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn deep_links_by_dotted_path_resolve() {
    let html = page("HostReportedState.html");
    for id in [
        "HostReportedState",
        "HostReportedState.instances",
        "UsageMeters.cpuMs",
        "ReportedInstance.meters.cpuMs",
        "HostReportedState.instances.meters.cpuMs",
        "TenantExit.signal",
        "TenantExit.signal.signal",
        "ReportedRestart.exit.signal",
    ] {
        assert!(
            by_id(&html, id).is_some(),
            "HostReportedState.html#{id} does not resolve"
        );
    }
    // A path alias lands on the canonical row.
    let alias = by_id(&html, "ReportedInstance.meters.cpuMs").unwrap();
    let row = alias
        .ancestors()
        .filter_map(ElementRef::wrap)
        .find(|e| e.value().name() == "tr")
        .expect("the alias sits in a row");
    assert_eq!(row.value().attr("id"), Some("UsageMeters.cpuMs"));
}

#[test]
fn every_operation_is_on_the_api_page() {
    let api = outputs().bundle.api.as_ref().expect("schemas/ has an API");
    let html = page(API_PAGE);
    let mut problems = Vec::new();
    for (path, item) in api["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Some(id) = op.get("operationId").and_then(Value::as_str) else {
                continue;
            };
            let Some(el) = by_id(&html, id) else {
                problems.push(format!("no operation #{id}"));
                continue;
            };
            let shown = text(el);
            let mut want = vec![method.to_uppercase(), path.clone()];
            want.extend(op.get("description").and_then(Value::as_str).map(fold));
            for p in op
                .get("parameters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                want.push(p["name"].as_str().unwrap().to_string());
                want.extend(p.get("description").and_then(Value::as_str).map(fold));
            }
            for (status, r) in op["responses"].as_object().unwrap() {
                want.push(status.clone());
                want.push(fold(r["description"].as_str().unwrap()));
                if by_id(&html, &format!("{id}.{status}")).is_none() {
                    problems.push(format!("no response anchor #{id}.{status}"));
                }
            }
            for w in want {
                if !shown.contains(&w) {
                    problems.push(format!("#{id}: `{w}` is missing"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_root_document_has_an_example_from_the_fixtures() {
    for doc in &outputs().model.documents {
        assert!(!doc.examples.is_empty(), "{} has no example", doc.name);
        let html = page(&model::document_page(&doc.name));
        let shown: Vec<String> = html
            .select(&sel("pre.example-json"))
            .map(|e| e.text().collect())
            .collect();
        for e in &doc.examples {
            let fixture = std::fs::read_to_string(
                workspace()
                    .join("schemas/examples")
                    .join(&doc.name)
                    .join("valid")
                    .join(&e.file),
            )
            .unwrap();
            assert!(
                shown.iter().any(|s| s == fixture.trim_end()),
                "{}: example {} is not the fixture verbatim",
                doc.name,
                e.file
            );
            assert_eq!(files()[&e.site_path()], fixture.as_bytes());
        }
    }
}

#[test]
fn pages_are_complete_without_javascript() {
    // The search box is the only thing that needs the script, and it starts hidden.
    for (path, _) in files().iter().filter(|(p, _)| p.ends_with(".html")) {
        let html = page(path);
        let search = html.select(&sel("#search")).next().expect("search box");
        assert!(
            search.value().attr("hidden").is_some(),
            "{path}: search box shown without script"
        );
        assert!(
            html.select(&sel("script:not([src])")).next().is_none(),
            "{path}: inline script"
        );
        assert!(html.select(&sel("meta[name=viewport]")).next().is_some());
    }
    let css = std::str::from_utf8(&files()["site.css"]).unwrap();
    assert!(css.contains("prefers-color-scheme: dark"));
    assert!(css.contains("@media print"));
}

#[test]
fn docs_command_writes_the_site_as_a_folder() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("dist");
    let run = Command::new(env!("CARGO_BIN_EXE_fleetwire-codegen"))
        .args(["--workspace"])
        .arg(workspace())
        .args(["docs", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "docs failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(String::from_utf8_lossy(&run.stdout).contains("index.html"));
    let mut written = BTreeMap::new();
    collect(&dir, &dir, &mut written);
    // Beside the site: the list of what was written, for the next run.
    let manifest = written.remove(site::MANIFEST).expect("the manifest");
    assert_eq!(
        manifest.iter().filter(|b| **b == b'\n').count(),
        files().len()
    );
    assert_eq!(
        written.keys().collect::<Vec<_>>(),
        files().keys().collect::<Vec<_>>()
    );
    for (path, bytes) in files() {
        assert!(&written[path] == bytes, "{path} differs");
    }
}

fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(root, &path, out);
        } else {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.insert(rel, std::fs::read(&path).unwrap());
        }
    }
}

fn run_docs(dir: &Path) -> String {
    let run = Command::new(env!("CARGO_BIN_EXE_fleetwire-codegen"))
        .args(["--workspace"])
        .arg(workspace())
        .args(["docs", "--out"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "docs failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    String::from_utf8_lossy(&run.stdout).into_owned()
}

#[test]
fn docs_command_removes_what_it_wrote_before_and_nothing_else() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("published");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    run_docs(&dir);
    // As if an earlier site had a document that is gone now.
    let manifest = dir.join(site::MANIFEST);
    let mut list = std::fs::read_to_string(&manifest).unwrap();
    assert!(list.lines().any(|l| l == "index.html"));
    list.push_str("GoneDocument.html\nexamples/GoneDocument/x.json\n../outside.txt\n");
    std::fs::write(&manifest, list).unwrap();
    std::fs::write(dir.join("GoneDocument.html"), "old").unwrap();
    std::fs::create_dir_all(dir.join("examples/GoneDocument")).unwrap();
    std::fs::write(dir.join("examples/GoneDocument/x.json"), "{}").unwrap();
    std::fs::write(out.path().join("outside.txt"), "not in the folder").unwrap();
    let said = run_docs(&dir);
    assert!(said.contains("removed GoneDocument.html"), "{said}");
    assert!(!dir.join("GoneDocument.html").exists());
    assert!(!dir.join("examples/GoneDocument").exists());
    assert!(dir.join("examples").is_dir());
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
        "mine"
    );
    assert!(out.path().join("outside.txt").exists());
    assert!(dir.join("index.html").exists());
}

/// The unknown-field policy is stated on the index and, per document, on every document page:
/// where fleetwire reads it from a peer (with what happens to an unknown field there, and the
/// strict mode), and that what fleetwire writes never carries one.
#[test]
fn every_document_page_states_the_unknown_field_policy() {
    let index = page(model::INDEX_PAGE);
    let general = text(by_id(&index, "unknown-fields").expect("the index's Unknown fields"));
    for words in [
        "set aside and reported",
        "Warning: 299",
        "--strict",
        "never carry",
    ] {
        assert!(general.contains(words), "index: {words:?} in {general}");
    }
    let bundle: Value = serde_json::from_str(&outputs().bundle_json).unwrap();
    for doc in &outputs().model.documents {
        let html = page(&model::document_page(&doc.name));
        let section = text(
            by_id(&html, "unknown-fields")
                .unwrap_or_else(|| panic!("{}: no Unknown fields section", doc.name)),
        );
        let closed = bundle["$defs"][&doc.name]["additionalProperties"] == Value::Bool(false);
        let policy = &doc.unknown_fields;
        assert!(!policy.general, "{}: not in the policy table", doc.name);
        if !policy.read_from.is_empty() {
            assert!(
                section.contains("fleetwire reads this document from"),
                "{}",
                doc.name
            );
            if closed {
                for words in [
                    "set aside and reported",
                    "fleetwire validate --strict",
                    "additionalProperties",
                ] {
                    assert!(
                        section.contains(words),
                        "{}: {words:?} in {section}",
                        doc.name
                    );
                }
                assert_eq!(
                    section.contains("Warning: 299"),
                    policy.warns_in_answer,
                    "{}: {section}",
                    doc.name
                );
            } else {
                assert!(
                    section.contains("neither reported nor refused"),
                    "{}: {section}",
                    doc.name
                );
            }
        }
        if !policy.written_to.is_empty() {
            assert!(
                section.contains("never carries a field its schema does not define"),
                "{}",
                doc.name
            );
        }
    }
    // The documents named in the issue: peers' documents, read with unknown fields reported.
    for name in [
        "NodeHeartbeat",
        "CreateVmRequest",
        "HostReportedState",
        "VmRecord",
    ] {
        let doc = outputs()
            .model
            .documents
            .iter()
            .find(|d| d.name == name)
            .unwrap();
        assert!(
            doc.unknown_fields.closed && !doc.unknown_fields.read_from.is_empty(),
            "{name}"
        );
    }
}

/// The definition a property's schema names directly (`$ref`, or an array of `$ref` items).
fn named_type(prop: &Value) -> Option<String> {
    let core = non_null(prop);
    let target = match core.get("items") {
        Some(items) if core.get("type") == Some(&Value::from("array")) => non_null(items),
        _ => core,
    };
    target
        .get("$ref")
        .and_then(Value::as_str)
        .map(|r| ref_name(r).to_string())
}

/// What a definition's essence must say, from its raw schema (one level of `$ref` alias
/// followed): a value, a bound, the pattern (or the format when there is one), a field name.
fn essence_words(name: &str) -> Vec<String> {
    let defs = &outputs().bundle.defs;
    let mut def = non_null(&defs[name]);
    if let Some(target) = def.get("$ref").and_then(Value::as_str) {
        if def
            .as_object()
            .unwrap()
            .keys()
            .all(|k| k == "$ref" || k == "description")
        {
            def = non_null(&defs[ref_name(target)]);
        }
    }
    let mut out = Vec::new();
    if let Some(Value::Array(values)) = def.get("enum") {
        out.extend(values.first().and_then(Value::as_str).map(str::to_string));
    } else if let Some(props) = def.get("properties").and_then(Value::as_object) {
        out.extend(props.keys().next().cloned());
    } else if let Some(members) = def.get("oneOf").and_then(Value::as_array) {
        out.extend(
            members
                .first()
                .and_then(|m| m.get("title"))
                .and_then(Value::as_str)
                .map(str::to_string),
        );
    } else {
        for key in ["minimum", "maximum", "maxLength", "minItems", "maxItems"] {
            if let Some(v) = def.get(key) {
                out.push(v.to_string());
            }
        }
        match (
            def.get("format").and_then(Value::as_str),
            def.get("pattern"),
        ) {
            (Some(format), _) if !format.starts_with("uint") && !format.starts_with("int") => {
                out.push(format.to_string())
            }
            (_, Some(Value::String(pattern))) => out.push(pattern.clone()),
            _ => {}
        }
    }
    out
}

/// Rows on the main pages (every document page and the API page) whose type cell says nothing
/// but a link: no constraint, default or essence beside it. The figure of
/// docs/reference-site.md ("Figures") comes from here: 209 of 438 before essences, 0 after.
fn link_only_rows() -> (usize, Vec<String>) {
    let mut rows = 0;
    let mut only = Vec::new();
    for (path, _) in files()
        .iter()
        .filter(|(p, _)| p.ends_with(".html") && p.as_str() != model::INDEX_PAGE)
    {
        let html = page(path);
        for row in html.select(&sel("tr.field")) {
            rows += 1;
            let Some(cell) = row.select(&sel("td.type")).next() else {
                continue;
            };
            let linked = cell.select(&sel("a.type-link")).next().is_some();
            let said = cell
                .select(&sel(".essence, ul.constraints, .default"))
                .next()
                .is_some();
            if linked && !said {
                only.push(format!(
                    "{path}#{}",
                    row.value().attr("id").unwrap_or_default()
                ));
            }
        }
    }
    (rows, only)
}

#[test]
fn every_named_type_shows_its_essence_in_the_row() {
    let (rows, only) = link_only_rows();
    assert!(rows > 400, "only {rows} rows on the main pages");
    assert!(
        only.is_empty(),
        "{} of {rows} rows only link their type:\n{}",
        only.len(),
        only.join("\n")
    );
    let mut problems = Vec::new();
    let mut checked = 0;
    for root in &outputs().bundle.roots {
        let page_path = model::document_page(&root.name);
        let html = page(&page_path);
        for def in reachable(&root.name) {
            let mut props = Vec::new();
            properties(&def, &outputs().bundle.defs[&def], &mut props);
            for prop in props {
                let Some(named) = named_type(&prop.schema) else {
                    continue;
                };
                let row = by_id(&html, &prop.anchor).expect("the row exists");
                let essence: String = row
                    .select(&sel("td.type .essence"))
                    .map(text)
                    .collect::<Vec<_>>()
                    .join(" ");
                checked += 1;
                for want in essence_words(&named) {
                    if !essence.contains(&want) {
                        problems.push(format!(
                            "{page_path}#{}: the essence of {named} lacks `{want}`: {essence:?}",
                            prop.anchor
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 200, "only {checked} rows naming a type checked");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn examples_close_the_page_and_rows_link_by_their_names() {
    for doc in &outputs().model.documents {
        let path = model::document_page(&doc.name);
        let html = page(&path);
        let sections: Vec<String> = html
            .select(&sel("main > section"))
            .map(|s| s.value().attr("id").unwrap_or_default().to_string())
            .collect();
        let examples = sections
            .iter()
            .position(|id| id == "examples")
            .unwrap_or_else(|| panic!("{path}: no examples section"));
        assert_eq!(
            examples,
            sections.len() - 1,
            "{path}: the examples are not last: {sections:?}"
        );
        let toc: Vec<String> = html
            .select(&sel("nav.toc a"))
            .filter_map(|a| a.value().attr("href").map(str::to_string))
            .collect();
        assert_eq!(toc.last().map(String::as_str), Some("#examples"), "{path}");
    }
    for (path, _) in files().iter().filter(|(p, _)| p.ends_with(".html")) {
        let html = page(path);
        assert!(
            html.select(&sel("tr a.permalink")).next().is_none(),
            "{path}: a row carries a permalink icon"
        );
        for row in html.select(&sel("tr[id]")) {
            let id = row.value().attr("id").unwrap();
            let href = format!("#{id}");
            assert!(
                row.select(&sel("a.field-name"))
                    .any(|a| a.value().attr("href") == Some(href.as_str())),
                "{path}: row {id} has no name linking to itself"
            );
        }
    }
}

#[test]
fn the_index_groups_documents_by_their_role_on_the_wire() {
    let bundle = &outputs().bundle;
    let api = bundle.api.as_ref().expect("schemas/ has an API");
    // What the API's bodies are or hold, read from the raw API document and schemas.
    let mut in_api = BTreeSet::new();
    let mut todo: Vec<String> = collect_refs(&api["paths"])
        .iter()
        .map(|r| ref_name(r).to_string())
        .collect();
    while let Some(name) = todo.pop() {
        if in_api.insert(name.clone()) {
            todo.extend(
                collect_refs(&bundle.defs[&name])
                    .iter()
                    .map(|r| ref_name(r).to_string()),
            );
        }
    }
    let index = page(model::INDEX_PAGE);
    let mut seen = BTreeSet::new();
    for root in &bundle.roots {
        let def = &bundle.defs[&root.name];
        let want = match def.get("x-upstream") {
            Some(up) => format!("role-runtime-{}", up["program"].as_str().unwrap()),
            None if in_api.contains(&root.name) => "role-api-bodies".into(),
            None => "role-host-files".into(),
        };
        seen.insert(want.clone());
        let section = by_id(&index, &want).unwrap_or_else(|| panic!("index: no #{want}"));
        let href = model::document_page(&root.name);
        let entry = section
            .select(&sel("a.doc-name"))
            .find(|a| a.value().attr("href") == Some(href.as_str()))
            .unwrap_or_else(|| panic!("index: {} is not under #{want}", root.name));
        let li = ElementRef::wrap(entry.parent().unwrap()).unwrap();
        assert!(
            text(li).contains(&root.file),
            "index: {} does not name its file",
            root.name
        );
    }
    assert_eq!(
        seen,
        BTreeSet::from([
            "role-host-files".to_string(),
            "role-api-bodies".to_string(),
            "role-runtime-smolvm".to_string()
        ])
    );
    assert_eq!(
        index.select(&sel("a.doc-name")).count(),
        bundle.roots.len(),
        "every document is listed once"
    );
}

/// The definition a media type's schema names, from the raw API description.
fn body_type(media: &Value) -> Option<String> {
    media
        .pointer("/schema/$ref")
        .and_then(Value::as_str)
        .map(|r| ref_name(r).to_string())
}

#[test]
fn each_operation_shows_its_bodies_a_curl_line_and_the_examples() {
    let api = outputs().bundle.api.as_ref().expect("schemas/ has an API");
    let html = page(API_PAGE);
    let openapi: Vec<Value> = [&outputs().openapi_json, &outputs().openapi_31_json]
        .into_iter()
        .map(|t| serde_json::from_str(t.as_ref().unwrap()).unwrap())
        .collect();
    let examples = |name: &str| -> Vec<(String, String)> {
        let dir = workspace()
            .join("schemas/examples")
            .join(name)
            .join("valid");
        let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .map(|p| {
                (
                    p.file_stem().unwrap().to_string_lossy().into_owned(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .collect();
        out.sort();
        out
    };
    let mut problems = Vec::new();
    let mut bodies = 0;
    for (path, item) in api["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Some(id) = op.get("operationId").and_then(Value::as_str) else {
                continue;
            };
            let article = by_id(&html, id).unwrap();
            // The curl line: the trust the route asks for, the method, the body, the URL.
            let curl = article
                .select(&sel("pre.curl"))
                .next()
                .map(text)
                .unwrap_or_default();
            let access = op["x-fleetwire-access"].as_str().unwrap();
            let bootstrap = op.to_string().contains("bootstrapToken");
            let mut want = vec!["curl -s --cacert".to_string()];
            match access {
                "open" => {}
                "node" if bootstrap => want.push("-H @bootstrap-header".into()),
                "node" => want.push("--cert node.crt --key node.key".into()),
                _ => want.push("-H @operator-header".into()),
            }
            if method != "get" {
                want.push(format!("-X {}", method.to_uppercase()));
            }
            let url_path = path
                .split('/')
                .map(
                    |seg| match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                        Some(param) => format!("${{{}}}", param.to_uppercase()),
                        None => seg.to_string(),
                    },
                )
                .collect::<Vec<_>>()
                .join("/");
            // A body is sent with fieldValidation=Strict (issue 30).
            let strict = if op.get("requestBody").is_some() {
                "?fieldValidation=Strict"
            } else {
                ""
            };
            want.push(format!("{url_path}{strict}\""));
            if (access != "node" || bootstrap) && curl.contains("--cert") {
                problems.push(format!(
                    "#{id}: a client certificate on a {access} route: {curl}"
                ));
            }
            if !matches!(access, "read" | "admin" | "metrics") && curl.contains("operator-header") {
                problems.push(format!(
                    "#{id}: an operator token on a {access} route: {curl}"
                ));
            }
            // Every body: its type's own fields, and its examples.
            let mut media: Vec<(String, &Value)> = Vec::new();
            if let Some(content) = op
                .pointer("/requestBody/content")
                .and_then(Value::as_object)
            {
                media.extend(content.iter().map(|(t, m)| (format!("request {t}"), m)));
                if let Some(name) = content.values().find_map(body_type) {
                    want.push(format!("-d @{name}.json"));
                }
            }
            for (status, r) in op["responses"].as_object().unwrap() {
                if let Some(content) = r.get("content").and_then(Value::as_object) {
                    media.extend(content.iter().map(|(t, m)| (format!("{status} {t}"), m)));
                }
            }
            for w in want {
                if !curl.contains(&w) {
                    problems.push(format!("#{id}: the curl line lacks `{w}`: {curl}"));
                }
            }
            let shown_fields: BTreeSet<String> = article
                .select(&sel("table.body-fields a.field-ref"))
                .filter_map(|a| a.value().attr("href").map(str::to_string))
                .collect();
            let shown_examples: Vec<String> = article
                .select(&sel("pre.example-json"))
                .map(|e| e.text().collect())
                .collect();
            for (what, m) in media {
                let Some(name) = body_type(m) else {
                    continue;
                };
                bodies += 1;
                let home = &outputs().model.home[&name];
                let fragment = |field: &str| {
                    if home == API_PAGE {
                        format!("#{name}.{field}")
                    } else {
                        format!("{home}#{name}.{field}")
                    }
                };
                for field in outputs().bundle.defs[&name]
                    .get("properties")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flat_map(|p| p.keys())
                {
                    if !shown_fields.contains(&fragment(field)) {
                        problems.push(format!("#{id} {what}: field {name}.{field} is not shown"));
                    }
                }
                for (example, fixture) in examples(&name) {
                    if !shown_examples.iter().any(|s| s == fixture.trim_end()) {
                        problems.push(format!(
                            "#{id} {what}: example {name}/{example} is not shown"
                        ));
                    }
                    let value: Value = serde_json::from_str(&fixture).unwrap();
                    let (status, media_type) = what.split_once(' ').unwrap();
                    for doc in &openapi {
                        let at = if status == "request" {
                            doc["paths"][path][method]["requestBody"]["content"][media_type].clone()
                        } else {
                            doc["paths"][path][method]["responses"][status]["content"][media_type]
                                .clone()
                        };
                        // Each body refers to the fixture, written once in components.examples.
                        let shown = at["examples"][&example]["$ref"]
                            .as_str()
                            .and_then(|r| r.strip_prefix("#/components/examples/"))
                            .map(|key| &doc["components"]["examples"][key]["value"]);
                        if shown != Some(&value) {
                            problems.push(format!(
                                "OpenAPI {}: {method} {path} {what}: example {example} is not the fixture",
                                doc["openapi"]
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(bodies > 20, "only {bodies} bodies checked");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The checked-in documents are the generated ones (so they carry the examples too).
    for (file, text) in [
        ("fleet-api.json", &outputs().openapi_json),
        ("fleet-api.3.1.json", &outputs().openapi_31_json),
    ] {
        let on_disk =
            std::fs::read_to_string(workspace().join("generated/openapi").join(file)).unwrap();
        assert_eq!(
            &on_disk,
            text.as_ref().unwrap(),
            "generated/openapi/{file} is stale: run `cargo run -p fleetwire-codegen -- generate`"
        );
    }
}
