//! The reference site: static HTML pages rendered with askama (templates under
//! `codegen/site/templates/`, escaping on) from the documentation [`Model`], plus the stylesheet,
//! the search script and its index, the example documents and the schema files.
//!
//! Every link is relative, so the folder works as published, from `file://`, and under the
//! controller's `/docs/` prefix alike.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use askama::Template;
use serde::Serialize;

use crate::build_stamp::Stamp;
use crate::model::brand::Brand;
use crate::model::words::{Phrase, Token};
use crate::model::{
    self, ApiDoc, BackRef, ExtraFields, Model, Row, RowKind, TypeDoc, TypeKind, Variant, API_PAGE,
    INDEX_PAGE,
};
use crate::site_changelog::{ReleaseView, CHANGELOG_PAGE};

const STYLESHEET: &str = include_str!("../site/static/site.css");
const SCRIPT: &str = include_str!("../site/static/site.js");
/// The search index is a script assigning a global, so it loads from `file://` too.
pub const SEARCH_INDEX: &str = "search-index.js";

/// A piece of a phrase, ready to print: text, code, or a link.
pub struct Tok {
    pub kind: &'static str,
    pub text: String,
    pub href: String,
}

/// A link with a label and, optionally, a note after it.
pub struct Link {
    pub label: String,
    pub href: String,
    pub note: String,
}

pub struct RowView {
    pub variant: bool,
    pub anchor: String,
    pub name: String,
    pub parent: String,
    pub depth: usize,
    pub ty: Vec<Tok>,
    pub required: bool,
    pub nullable: bool,
    pub default: Option<String>,
    pub constraints: Vec<Vec<Tok>>,
    /// What each named type of the field is, in a few words (model::essence).
    pub essence: Vec<Vec<Tok>>,
    pub description: Vec<String>,
    /// Further ids of the row (data paths through other types, Rust type names).
    pub aliases: Vec<String>,
    pub rust_type: Option<String>,
}

pub struct ExtraView {
    pub refused: bool,
    pub ty: Vec<Tok>,
    /// fleetwire's own schemas: the text states what fleetwire does with an unlisted field.
    pub fleetwire: bool,
}

pub struct VariantView {
    pub name: String,
    pub anchor: String,
    pub description: Vec<String>,
    pub summary: Vec<Tok>,
    pub constraints: Vec<Vec<Tok>>,
    pub rows: Vec<RowView>,
    pub extra: Option<ExtraView>,
    pub aliases: Vec<String>,
}

pub struct TypeView {
    pub name: String,
    pub file: String,
    pub root: bool,
    pub description: Vec<String>,
    pub rust_path: Option<String>,
    pub kind: &'static str,
    pub summary: Vec<Tok>,
    pub nullable: bool,
    pub constraints: Vec<Vec<Tok>>,
    pub default: Option<String>,
    pub values: Vec<String>,
    pub rows: Vec<RowView>,
    pub extra: Option<ExtraView>,
    pub variants: Vec<VariantView>,
    pub variant_rule: String,
    pub appears_in: Vec<Link>,
    pub aliases: Vec<String>,
}

pub struct ExampleView {
    pub name: String,
    pub href: String,
    pub text: String,
    pub open: bool,
}

/// What the side bar lists: the page's sections.
pub struct TocEntry {
    pub href: String,
    pub label: String,
    pub kind: &'static str,
}

/// A site-wide link in the header (documents, API).
pub struct NavEntry {
    pub href: String,
    pub label: String,
    pub current: bool,
}

#[derive(Template)]
#[template(path = "document.html")]
struct DocumentPage {
    title: String,
    stamp: Stamp,
    brand: Brand,
    nav: Vec<NavEntry>,
    toc: Vec<TocEntry>,
    root: TypeView,
    rest: Vec<TypeView>,
    examples: Vec<ExampleView>,
    used_by: Vec<Link>,
    schema_href: String,
    schema_file: String,
    policy: crate::model::policy::UnknownFieldPolicy,
}

pub struct ParamView {
    pub anchor: String,
    pub name: String,
    pub location: String,
    pub required: bool,
    pub nullable: bool,
    pub ty: Vec<Tok>,
    pub default: Option<String>,
    pub constraints: Vec<Vec<Tok>>,
    pub essence: Vec<Vec<Tok>>,
    pub description: Vec<String>,
}

pub struct ContentView {
    pub media_type: String,
    pub ty: Vec<Tok>,
}

pub struct ResponseView {
    pub anchor: String,
    pub status: String,
    pub class: &'static str,
    pub description: Vec<String>,
    pub contents: Vec<ContentView>,
}

/// A field of a body, shown one level deep on the API page; its name links the full row.
pub struct BodyFieldView {
    pub href: String,
    pub row: RowView,
}

/// A request or response body on the API page: what statuses carry it, its type, its fields
/// one level deep and its examples.
pub struct BodyView {
    pub label: String,
    pub ty: Vec<Tok>,
    pub essence: Vec<Vec<Tok>>,
    pub fields: Vec<BodyFieldView>,
    pub examples: Vec<ExampleView>,
}

pub struct OperationView {
    pub id: String,
    /// The `curl` line to call it with the trust the route asks for (model::curl).
    pub curl: String,
    /// The example to send with it, when the request body has one.
    pub curl_body: Option<Link>,
    pub request_body: Option<BodyView>,
    /// One per body type, led by the statuses that answer with it.
    pub response_bodies: Vec<BodyView>,
    pub method: String,
    pub method_class: String,
    pub path: String,
    pub summary: String,
    pub description: Vec<String>,
    pub deprecated: bool,
    pub parameters: Vec<ParamView>,
    pub request: Option<(Vec<String>, bool, Vec<ContentView>)>,
    pub responses: Vec<ResponseView>,
}

pub struct GroupView {
    pub anchor: String,
    pub tag: String,
    pub description: Vec<String>,
    pub operations: Vec<OperationView>,
}

#[derive(Template)]
#[template(path = "api.html")]
struct ApiPage {
    title: String,
    stamp: Stamp,
    brand: Brand,
    nav: Vec<NavEntry>,
    toc: Vec<TocEntry>,
    /// The files the `curl` lines name, and what each holds.
    trust_files: Vec<(String, String)>,
    /// The origin the `curl` lines are written with; served by a controller, the page puts the
    /// serving origin in its place (docs/reference-site.md, "Served by a controller").
    curl_server: String,
    api_title: String,
    version: String,
    description: Vec<String>,
    servers: Vec<Link>,
    /// The OpenAPI documents to download, 3.0.3 and 3.1.0.
    documents: Vec<Link>,
    groups: Vec<GroupView>,
    types: Vec<TypeView>,
}

pub struct DocumentSummary {
    pub name: String,
    pub href: String,
    pub summary: String,
    pub fields: usize,
    pub examples: usize,
    /// The schema file that defines it, and its link.
    pub file: String,
    pub file_href: String,
}

/// The documents of one role on the wire (model::DocumentRole).
pub struct RoleGroup {
    pub anchor: String,
    pub title: String,
    pub note: String,
    pub documents: Vec<DocumentSummary>,
}

#[derive(Template)]
#[template(path = "index.html")]
struct IndexPage {
    title: String,
    stamp: Stamp,
    brand: Brand,
    nav: Vec<NavEntry>,
    toc: Vec<TocEntry>,
    groups: Vec<RoleGroup>,
    schema_files: usize,
    api: Option<Link>,
    operations: usize,
    types: usize,
    orphans: Vec<TypeView>,
}

#[derive(Template)]
#[template(path = "changelog.html")]
struct ChangelogPage {
    title: String,
    stamp: Stamp,
    brand: Brand,
    nav: Vec<NavEntry>,
    toc: Vec<TocEntry>,
    releases: Vec<ReleaseView>,
}

fn render_changelog(model: &Model) -> Result<String> {
    let releases = crate::site_changelog::views(model);
    ChangelogPage {
        title: "Changelog".into(),
        stamp: model.stamp.clone(),
        brand: model.brand.clone(),
        nav: nav(model, CHANGELOG_PAGE),
        toc: releases
            .iter()
            .map(|r| TocEntry {
                href: format!("#{}", r.anchor),
                label: r.title.clone(),
                kind: "release",
            })
            .collect(),
        releases,
    }
    .render()
    .context("rendering the changelog")
}

/// One entry of the search index.
#[derive(Serialize)]
struct SearchEntry<'a> {
    /// Kind: document, type, field, variant, operation.
    k: &'static str,
    /// Name shown and matched (dotted for fields).
    n: String,
    /// Description (matched; shown shortened).
    d: &'a str,
    /// URL relative to the site root.
    u: String,
    /// The type, in words without links (`integer (uint64)`, `UsageMeters`, `object`).
    #[serde(skip_serializing_if = "String::is_empty")]
    t: String,
    /// For fields: the dotted paths from each root document that reach it, so a dotted path
    /// or a JSON pointer finds it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    p: Vec<String>,
}

/// A phrase as plain words, for the search index.
fn plain(phrase: &Phrase) -> String {
    phrase
        .iter()
        .map(|t| match t {
            Token::Text(s) | Token::Code(s) | Token::Type(s) => s.as_str(),
        })
        .collect()
}

/// Where things are: which definitions a page shows, and each definition's home page.
struct Place<'a> {
    page: String,
    here: BTreeSet<String>,
    model: &'a Model,
}

impl Place<'_> {
    /// The link to `anchor`, which belongs to definition `owner`.
    fn href(&self, owner: &str, anchor: &str) -> String {
        if self.here.contains(owner) {
            format!("#{anchor}")
        } else {
            let page = self
                .model
                .home
                .get(owner)
                .map(String::as_str)
                .unwrap_or(INDEX_PAGE);
            if page == self.page {
                format!("#{anchor}")
            } else {
                format!("{page}#{anchor}")
            }
        }
    }

    fn phrase(&self, phrase: &Phrase) -> Vec<Tok> {
        phrase
            .iter()
            .map(|t| match t {
                Token::Text(s) => Tok {
                    kind: "text",
                    text: s.clone(),
                    href: String::new(),
                },
                Token::Code(s) => Tok {
                    kind: "code",
                    text: s.clone(),
                    href: String::new(),
                },
                Token::Type(name) => Tok {
                    kind: "link",
                    text: name.clone(),
                    href: self.href(name, name),
                },
            })
            .collect()
    }

    /// The essence of every definition `ty` names; each led by the name when there are several.
    fn essences(&self, ty: &Phrase) -> Vec<Vec<Tok>> {
        let named: Vec<&String> = ty
            .iter()
            .filter_map(|t| match t {
                Token::Type(name) => Some(name),
                _ => None,
            })
            .collect();
        named
            .iter()
            .filter_map(|name| {
                let essence = self.model.essence(name)?;
                let mut phrase = Vec::new();
                if named.len() > 1 {
                    phrase.push(Token::Code((*name).clone()));
                    phrase.push(Token::Text(": ".into()));
                }
                phrase.extend(essence);
                Some(self.phrase(&phrase))
            })
            .collect()
    }

    fn phrases(&self, phrases: &[Phrase]) -> Vec<Vec<Tok>> {
        phrases.iter().map(|p| self.phrase(p)).collect()
    }

    fn extra(&self, extra: &Option<ExtraFields>) -> Option<ExtraView> {
        match extra {
            Some(ExtraFields::Refused) => Some(ExtraView {
                refused: true,
                ty: Vec::new(),
                fleetwire: self.model.brand.fleetwire,
            }),
            Some(ExtraFields::Typed(ty)) => Some(ExtraView {
                refused: false,
                ty: self.phrase(ty),
                fleetwire: self.model.brand.fleetwire,
            }),
            // Whether unknown fields are refused matters to every writer: say it either way.
            Some(ExtraFields::Accepted) => Some(ExtraView {
                refused: false,
                ty: Vec::new(),
                fleetwire: self.model.brand.fleetwire,
            }),
            None => None,
        }
    }

    fn row(&self, row: &Row) -> RowView {
        let mut aliases = row.aliases.clone();
        if let Some(rust) = &row.rust_type {
            aliases.push(rust.clone());
        }
        RowView {
            variant: row.kind == RowKind::Variant,
            anchor: row.anchor.clone(),
            name: row.name.clone(),
            parent: row.parent.clone(),
            depth: row.depth,
            ty: self.phrase(&row.ty),
            required: row.required,
            nullable: row.nullable,
            default: row.default.clone(),
            constraints: self.phrases(&row.constraints),
            essence: self.essences(&row.ty),
            description: paragraphs(row.description.as_deref()),
            aliases,
            rust_type: row
                .rust_type
                .as_ref()
                .map(|name| format!("{}::{name}", self.model.brand.crate_path)),
        }
    }

    fn variant(&self, v: &Variant) -> VariantView {
        VariantView {
            name: v.name.clone(),
            anchor: v.anchor.clone(),
            description: paragraphs(v.description.as_deref()),
            summary: self.phrase(&v.summary),
            constraints: self.phrases(&v.constraints),
            rows: v.rows.iter().map(|r| self.row(r)).collect(),
            extra: self.extra(&v.extra),
            aliases: v.aliases.clone(),
        }
    }

    /// A body of type `ty` (`X` or `array of X`): X's own fields (not those of its inline
    /// objects), each linking its full row, and X's examples when the body is X itself.
    fn body(&self, label: String, ty: &Phrase) -> BodyView {
        let (named, whole) = match ty.as_slice() {
            [Token::Type(name)] => (Some(name.as_str()), true),
            [Token::Text(lead), Token::Type(name)] if lead == "array of " => {
                (Some(name.as_str()), false)
            }
            _ => (None, false),
        };
        let t = named.and_then(|n| self.model.type_doc(n));
        BodyView {
            label,
            ty: self.phrase(ty),
            essence: self.essences(ty),
            fields: t
                .map(|t| {
                    t.rows
                        .iter()
                        .filter(|r| r.depth == 0 && r.kind == RowKind::Field)
                        .map(|r| BodyFieldView {
                            href: self.href(&t.name, &r.anchor),
                            row: self.row(r),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            examples: match (named, whole) {
                (Some(name), true) => self
                    .model
                    .documents
                    .iter()
                    .filter(|d| d.name == name)
                    .flat_map(|d| d.examples.iter())
                    .map(|e| ExampleView {
                        name: e.name.clone(),
                        href: e.site_path(),
                        text: e.text.trim_end().to_string(),
                        open: false,
                    })
                    .collect(),
                _ => Vec::new(),
            },
        }
    }

    fn back_link(&self, back: &BackRef) -> Link {
        match back {
            BackRef::Field { owner, anchor } => Link {
                label: anchor.clone(),
                href: self.href(owner, anchor),
                note: String::new(),
            },
            BackRef::Operation { id, label } => Link {
                label: label.clone(),
                href: if self.page == API_PAGE {
                    format!("#{id}")
                } else {
                    format!("{API_PAGE}#{id}")
                },
                note: String::new(),
            },
        }
    }

    fn type_view(&self, t: &TypeDoc) -> TypeView {
        TypeView {
            name: t.name.clone(),
            file: t.file.clone(),
            root: t.root,
            description: paragraphs(t.description.as_deref()),
            rust_path: t.rust_path.clone(),
            kind: match t.kind {
                TypeKind::Object => "object",
                TypeKind::Variants => "variants",
                TypeKind::Enum => "enum",
                TypeKind::Value => "value",
            },
            summary: self.phrase(&t.summary),
            nullable: t.nullable,
            constraints: self.phrases(&t.constraints),
            default: t.default.clone(),
            values: t.values.clone(),
            rows: t.rows.iter().map(|r| self.row(r)).collect(),
            extra: self.extra(&t.extra),
            variants: t.variants.iter().map(|v| self.variant(v)).collect(),
            variant_rule: t.variant_rule.unwrap_or_default().to_string(),
            appears_in: t.appears_in.iter().map(|b| self.back_link(b)).collect(),
            aliases: t.aliases.clone(),
        }
    }
}

/// A description split into paragraphs at blank lines, verbatim otherwise.
fn paragraphs(text: Option<&str>) -> Vec<String> {
    text.map(|t| {
        t.split("\n\n")
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect()
    })
    .unwrap_or_default()
}

/// The first sentence of a description, for lists.
fn first_sentence(text: Option<&str>) -> String {
    let text = text.unwrap_or_default();
    match text.find(". ") {
        Some(end) => text[..=end].to_string(),
        None => text.to_string(),
    }
}

fn nav(model: &Model, current: &str) -> Vec<NavEntry> {
    let mut out = vec![NavEntry {
        href: INDEX_PAGE.into(),
        label: "Documents".into(),
        current: current == INDEX_PAGE,
    }];
    if model.api.is_some() {
        out.push(NavEntry {
            href: API_PAGE.into(),
            label: "API".into(),
            current: current == API_PAGE,
        });
    }
    out.push(NavEntry {
        href: CHANGELOG_PAGE.into(),
        label: "Changelog".into(),
        current: current == CHANGELOG_PAGE,
    });
    out
}

fn toc_for(types: &[TypeView]) -> Vec<TocEntry> {
    types
        .iter()
        .map(|t| TocEntry {
            href: format!("#{}", t.name),
            label: t.name.clone(),
            kind: if t.root { "root" } else { t.kind },
        })
        .collect()
}

fn render_document(model: &Model, doc: &model::DocumentDoc) -> Result<String> {
    let place = Place {
        page: model::document_page(&doc.name),
        here: doc.types.iter().cloned().collect(),
        model,
    };
    let mut views: Vec<TypeView> = doc
        .types
        .iter()
        .filter_map(|name| model.type_doc(name))
        .map(|t| place.type_view(t))
        .collect();
    let mut toc = toc_for(&views);
    if !doc.examples.is_empty() {
        // The examples close the page: open between the document and its types they would
        // push the types a screen or more away from the fields that name them.
        toc.push(TocEntry {
            href: "#examples".into(),
            label: "Examples".into(),
            kind: "examples",
        });
    }
    let root = views.remove(0);
    let used_by = model
        .type_doc(&doc.name)
        .map(|t| {
            t.appears_in
                .iter()
                .filter(|b| matches!(b, BackRef::Operation { .. }))
                .map(|b| place.back_link(b))
                .collect()
        })
        .unwrap_or_default();
    DocumentPage {
        title: doc.name.clone(),
        stamp: model.stamp.clone(),
        brand: model.brand.clone(),
        nav: nav(model, &place.page),
        toc,
        root,
        rest: views,
        examples: doc
            .examples
            .iter()
            .enumerate()
            .map(|(i, e)| ExampleView {
                name: e.name.clone(),
                href: e.site_path(),
                text: e.text.trim_end().to_string(),
                open: i == 0,
            })
            .collect(),
        used_by,
        schema_href: format!("schemas/{}", doc.file),
        schema_file: doc.file.clone(),
        policy: doc.unknown_fields.clone(),
    }
    .render()
    .with_context(|| format!("rendering the page of {}", doc.name))
}

fn method_class(method: &str) -> String {
    format!("method-{}", method.to_ascii_lowercase())
}

fn status_class(status: &str) -> &'static str {
    match status.chars().next() {
        Some('2') => "ok",
        Some('3') => "redirect",
        Some('4') => "client-error",
        Some('5') => "server-error",
        _ => "other",
    }
}

/// An operation's response bodies, one per body type, each led by the statuses that carry it
/// (`400, 404, 409`), so the error body's fields are shown once.
fn response_bodies(place: &Place, op: &model::Operation) -> Vec<BodyView> {
    let mut by_type: Vec<(Vec<String>, &Phrase)> = Vec::new();
    for r in &op.responses {
        let Some(c) = r.contents.first() else {
            continue;
        };
        match by_type.iter_mut().find(|(_, ty)| *ty == &c.ty) {
            Some((statuses, _)) => statuses.push(r.status.clone()),
            None => by_type.push((vec![r.status.clone()], &c.ty)),
        }
    }
    by_type
        .into_iter()
        .map(|(statuses, ty)| place.body(statuses.join(", "), ty))
        .collect()
}

fn render_api(model: &Model, api: &ApiDoc) -> Result<String> {
    // The curl lines call the first server the API document names.
    let server = api
        .servers
        .first()
        .map(|(url, _)| url.clone())
        .unwrap_or_else(|| "https://controller:9203".into());
    let place = Place {
        page: API_PAGE.into(),
        here: api.types.iter().cloned().collect(),
        model,
    };
    let contents = |c: &[model::Content]| -> Vec<ContentView> {
        c.iter()
            .map(|c| ContentView {
                media_type: c.media_type.clone(),
                ty: place.phrase(&c.ty),
            })
            .collect()
    };
    let groups: Vec<GroupView> = api
        .groups
        .iter()
        .map(|g| GroupView {
            anchor: format!("tag-{}", g.tag),
            tag: g.tag.clone(),
            description: paragraphs(g.description.as_deref()),
            operations: g
                .operations
                .iter()
                .map(|op| OperationView {
                    id: op.id.clone(),
                    curl: model::curl::curl(op, &server),
                    curl_body: model::curl::request_document(op).and_then(|doc| {
                        let e = model
                            .documents
                            .iter()
                            .find(|d| d.name == doc)?
                            .examples
                            .first()?;
                        Some(Link {
                            label: format!("{doc}.json"),
                            href: e.site_path(),
                            note: e.name.clone(),
                        })
                    }),
                    request_body: op.request.as_ref().and_then(|b| {
                        let c = b.contents.first()?;
                        Some(place.body("Request body".into(), &c.ty))
                    }),
                    response_bodies: response_bodies(&place, op),
                    method_class: method_class(&op.method),
                    method: op.method.clone(),
                    path: op.path.clone(),
                    summary: op.summary.clone().unwrap_or_else(|| op.id.clone()),
                    description: paragraphs(op.description.as_deref()),
                    deprecated: op.deprecated,
                    parameters: op
                        .parameters
                        .iter()
                        .map(|p| ParamView {
                            anchor: p.anchor.clone(),
                            name: p.name.clone(),
                            location: p.location.clone(),
                            required: p.required,
                            nullable: p.nullable,
                            ty: place.phrase(&p.ty),
                            default: p.default.clone(),
                            constraints: place.phrases(&p.constraints),
                            essence: place.essences(&p.ty),
                            description: paragraphs(p.description.as_deref()),
                        })
                        .collect(),
                    request: op.request.as_ref().map(|b| {
                        (
                            paragraphs(b.description.as_deref()),
                            b.required,
                            contents(&b.contents),
                        )
                    }),
                    responses: op
                        .responses
                        .iter()
                        .map(|r| ResponseView {
                            anchor: r.anchor.clone(),
                            class: status_class(&r.status),
                            status: r.status.clone(),
                            description: paragraphs(Some(&r.description)),
                            contents: contents(&r.contents),
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let types: Vec<TypeView> = api
        .types
        .iter()
        .filter_map(|n| model.type_doc(n))
        .map(|t| place.type_view(t))
        .collect();
    let mut toc: Vec<TocEntry> = Vec::new();
    for g in &groups {
        toc.push(TocEntry {
            href: format!("#{}", g.anchor),
            label: g.tag.clone(),
            kind: "tag",
        });
        for op in &g.operations {
            toc.push(TocEntry {
                href: format!("#{}", op.id),
                label: format!("{} {}", op.method, op.path),
                kind: "operation",
            });
        }
    }
    toc.extend(toc_for(&types));
    ApiPage {
        title: api.title.clone(),
        stamp: model.stamp.clone(),
        brand: model.brand.clone(),
        nav: nav(model, API_PAGE),
        toc,
        trust_files: model::curl::TRUST_FILES
            .iter()
            .map(|(f, what)| (f.to_string(), what.to_string()))
            .collect(),
        curl_server: server.trim_end_matches('/').to_string(),
        api_title: api.title.clone(),
        version: api.version.clone(),
        description: paragraphs(api.description.as_deref()),
        servers: api
            .servers
            .iter()
            .map(|(url, note)| Link {
                label: url.clone(),
                href: url.clone(),
                note: note.clone().unwrap_or_default(),
            })
            .collect(),
        documents: model
            .openapi_files
            .iter()
            .map(|(name, text)| Link {
                label: name.clone(),
                href: format!("{OPENAPI_DIR}/{name}"),
                note: serde_json::from_str::<serde_json::Value>(text)
                    .ok()
                    .and_then(|doc| doc["openapi"].as_str().map(|v| format!("OpenAPI {v}")))
                    .unwrap_or_default(),
            })
            .collect(),
        groups,
        types,
    }
    .render()
    .context("rendering the API page")
}

fn render_index(model: &Model) -> Result<String> {
    let place = Place {
        page: INDEX_PAGE.into(),
        here: model.orphans.iter().cloned().collect(),
        model,
    };
    let mut roles: Vec<&model::DocumentRole> = model.documents.iter().map(|d| &d.role).collect();
    roles.sort();
    roles.dedup();
    let groups: Vec<RoleGroup> = roles
        .into_iter()
        .map(|role| RoleGroup {
            anchor: role.anchor(),
            title: role.title(),
            note: role.note(),
            documents: model
                .documents
                .iter()
                .filter(|d| &d.role == role)
                .map(|doc| DocumentSummary {
                    name: doc.name.clone(),
                    href: model::document_page(&doc.name),
                    summary: first_sentence(
                        model
                            .type_doc(&doc.name)
                            .and_then(|t| t.description.as_deref()),
                    ),
                    fields: doc
                        .types
                        .iter()
                        .filter_map(|n| model.type_doc(n))
                        .map(|t| t.all_rows().count())
                        .sum(),
                    examples: doc.examples.len(),
                    file_href: format!("schemas/{}", doc.file),
                    file: doc.file.clone(),
                })
                .collect(),
        })
        .collect();
    let orphans: Vec<TypeView> = model
        .orphans
        .iter()
        .filter_map(|n| model.type_doc(n))
        .map(|t| place.type_view(t))
        .collect();
    let mut toc: Vec<TocEntry> = groups
        .iter()
        .map(|g| TocEntry {
            href: format!("#{}", g.anchor),
            label: g.title.clone(),
            kind: "role",
        })
        .collect();
    toc.extend(toc_for(&orphans));
    IndexPage {
        title: format!("{} reference", model.brand.name),
        stamp: model.stamp.clone(),
        brand: model.brand.clone(),
        nav: nav(model, INDEX_PAGE),
        toc,
        groups,
        schema_files: model.schema_files.len(),
        api: model.api.as_ref().map(|a| Link {
            label: a.title.clone(),
            href: API_PAGE.into(),
            note: a.description.clone().unwrap_or_default(),
        }),
        operations: model.api.as_ref().map_or(0, |a| a.operations().count()),
        types: model.types.len(),
        orphans,
    }
    .render()
    .context("rendering index.html")
}

/// The search index: every document, type, field, variant and operation, each once, at its
/// home page.
fn search_index(model: &Model) -> Result<String> {
    let mut entries = Vec::new();
    let mut paths = model.document_paths();
    for t in &model.types {
        let page = model
            .home
            .get(&t.name)
            .cloned()
            .unwrap_or_else(|| INDEX_PAGE.into());
        entries.push(SearchEntry {
            k: if t.root { "document" } else { "type" },
            n: t.name.clone(),
            d: t.description.as_deref().unwrap_or_default(),
            u: format!("{page}#{}", t.name),
            t: plain(&t.summary),
            p: Vec::new(),
        });
        for v in &t.variants {
            entries.push(SearchEntry {
                k: "variant",
                n: v.anchor.clone(),
                d: v.description.as_deref().unwrap_or_default(),
                u: format!("{page}#{}", v.anchor),
                t: plain(&v.summary),
                p: Vec::new(),
            });
        }
        for row in t.all_rows() {
            entries.push(SearchEntry {
                k: if row.kind == RowKind::Variant {
                    "variant"
                } else {
                    "field"
                },
                n: row.anchor.clone(),
                d: row.description.as_deref().unwrap_or_default(),
                u: format!("{page}#{}", row.anchor),
                t: plain(&row.ty) + if row.nullable { " or null" } else { "" },
                p: if row.kind == RowKind::Field {
                    paths.remove(&row.anchor).unwrap_or_default()
                } else {
                    Vec::new()
                },
            });
        }
    }
    if let Some(api) = &model.api {
        for op in api.operations() {
            entries.push(SearchEntry {
                k: "operation",
                n: format!("{} {}", op.method, op.path),
                d: op
                    .summary
                    .as_deref()
                    .or(op.description.as_deref())
                    .unwrap_or_default(),
                u: format!("{API_PAGE}#{}", op.id),
                t: String::new(),
                p: Vec::new(),
            });
        }
    }
    let json = serde_json::to_string(&entries)?;
    Ok(format!(
        "// Generated by fleetwire-codegen. The search index of the reference site.\nwindow.FLEETWIRE_SEARCH = {json};\n"
    ))
}

/// Where the site publishes the OpenAPI documents, beside `api.html`.
pub const OPENAPI_DIR: &str = "openapi";

/// Renders the whole site; returns every file as (path relative to the site root, bytes).
pub fn render(model: &Model) -> Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    files.push((INDEX_PAGE.into(), render_index(model)?.into_bytes()));
    files.push((CHANGELOG_PAGE.into(), render_changelog(model)?.into_bytes()));
    for doc in &model.documents {
        files.push((
            model::document_page(&doc.name).into(),
            render_document(model, doc)?.into_bytes(),
        ));
        for e in &doc.examples {
            files.push((e.site_path().into(), e.text.clone().into_bytes()));
        }
    }
    if let Some(api) = &model.api {
        files.push((API_PAGE.into(), render_api(model, api)?.into_bytes()));
    }
    for (name, text) in &model.schema_files {
        files.push((
            PathBuf::from("schemas").join(name),
            text.clone().into_bytes(),
        ));
    }
    for (name, text) in &model.openapi_files {
        files.push((
            PathBuf::from(OPENAPI_DIR).join(name),
            text.clone().into_bytes(),
        ));
    }
    files.push(("site.css".into(), STYLESHEET.as_bytes().to_vec()));
    files.push(("site.js".into(), SCRIPT.as_bytes().to_vec()));
    files.push((SEARCH_INDEX.into(), search_index(model)?.into_bytes()));
    Ok(files)
}

/// Writes the rendered site under `out` (a folder ready to publish as-is); returns the paths
/// written, relative to `out`.
pub fn write(model: &Model, out: &Path) -> Result<Vec<PathBuf>> {
    let files = render(model)?;
    let mut written = Vec::new();
    for (path, bytes) in files {
        crate::output_file::write_if_changed(&out.join(&path), &bytes)?;
        written.push(path);
    }
    Ok(written)
}

/// The list of files a published folder holds, kept beside them (not part of the site), so a
/// later `publish` into the same folder removes what the site no longer has and nothing else.
pub const MANIFEST: &str = ".fleetwire-site";

/// What [`publish`] did.
#[derive(Debug, Clone, Default)]
pub struct Published {
    pub written: Vec<PathBuf>,
    /// Files an earlier publication wrote that the site no longer has.
    pub removed: Vec<PathBuf>,
}

/// Writes the site under `out` as a folder to publish, and removes the files that an earlier
/// publication into `out` wrote and this one does not (a removed document's page, say). Files
/// it did not write are never touched.
pub fn publish(model: &Model, out: &Path) -> Result<Published> {
    let manifest = out.join(MANIFEST);
    let earlier: Vec<PathBuf> = std::fs::read_to_string(&manifest)
        .map(|list| {
            list.lines()
                .filter(|l| !l.is_empty())
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default();
    let written = write(model, out)?;
    let keep: BTreeSet<&PathBuf> = written.iter().collect();
    let mut removed = Vec::new();
    for stale in earlier.iter().filter(|p| !keep.contains(p)) {
        // The manifest is ours, but a path in it must still stay inside `out`.
        if stale.is_absolute()
            || stale
                .components()
                .any(|c| c == std::path::Component::ParentDir)
        {
            continue;
        }
        let path = out.join(stale);
        if path.is_file() {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            removed.push(stale.clone());
            // Drop the folders this leaves empty, up to `out`.
            let mut dir = path.parent();
            while let Some(d) = dir.filter(|d| *d != out) {
                if std::fs::remove_dir(d).is_err() {
                    break;
                }
                dir = d.parent();
            }
        }
    }
    let list: String = written
        .iter()
        .map(|p| format!("{}\n", p.to_string_lossy().replace('\\', "/")))
        .collect();
    std::fs::write(&manifest, list).with_context(|| format!("writing {}", manifest.display()))?;
    Ok(Published { written, removed })
}

/// The Rust table that compiles the site into the runtime (`include_bytes!` of each file
/// written under `site_dir`).
///
/// Each text file is also compressed here, once, gzip and brotli at their best, into
/// `compressed_dir` (as `<path>.gz` and `<path>.br`); a variant is listed only where it is
/// smaller than the file, and the server picks one by `Accept-Encoding`
/// (docs/reference-site.md, "Building and serving it").
pub fn files_table(site_dir: &Path, compressed_dir: &Path, paths: &[PathBuf]) -> Result<String> {
    let mut out = String::from("// Generated by fleetwire-codegen. Do not edit.\n/// Every file of the reference site.\npub static FILES: &[SiteFile] = &[\n");
    for path in paths {
        let rel = path.to_string_lossy().replace('\\', "/");
        let ct = content_type(&rel);
        let source = site_dir.join(path);
        let bytes =
            std::fs::read(&source).with_context(|| format!("reading {}", source.display()))?;
        let variant = |extension: &str, compressed: Vec<u8>| -> Result<String> {
            if !is_text(ct) || compressed.len() >= bytes.len() {
                return Ok("None".to_string());
            }
            let file = compressed_dir.join(format!("{rel}.{extension}"));
            crate::output_file::write_if_changed(&file, &compressed)?;
            Ok(format!(
                "Some(include_bytes!({:?}))",
                file.display().to_string()
            ))
        };
        let gzip = variant("gz", gzip(&bytes))?;
        let brotli = variant("br", brotli(&bytes))?;
        out.push_str(&format!(
            "    SiteFile {{ path: {rel:?}, content_type: {ct:?}, bytes: include_bytes!({abs:?}), gzip: {gzip}, brotli: {brotli} }},\n",
            abs = source.display().to_string(),
        ));
    }
    out.push_str("];\n");
    Ok(out)
}

/// Whether a file of this media type is text, worth compressing (images are compressed already).
fn is_text(content_type: &str) -> bool {
    content_type.starts_with("text/")
        || content_type.starts_with("application/json")
        || content_type.starts_with("image/svg")
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).expect("compressing into memory");
    encoder.finish().expect("compressing into memory")
}

fn brotli(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let params = brotli::enc::BrotliEncoderParams {
        quality: 11,
        lgwin: 22,
        ..Default::default()
    };
    brotli::BrotliCompress(&mut &bytes[..], &mut out, &params).expect("compressing into memory");
    out
}

/// The media type a file is served with, from its extension.
pub fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("json") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}
