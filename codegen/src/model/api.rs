//! The controller's API as the site shows it: every operation of the OpenAPI paths, with its
//! parameters, request body and every response, grouped by tag in the document's order.

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

use super::words::{self, Phrase, Token};
use crate::bundle::API_FILE;

const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

#[derive(Debug, Clone)]
pub struct ApiDoc {
    pub title: String,
    pub version: String,
    pub description: Option<String>,
    /// (URL, description) of each server the document names.
    pub servers: Vec<(String, Option<String>)>,
    pub groups: Vec<ApiGroup>,
    /// Definitions shown on the API page because no document page shows them.
    pub types: Vec<String>,
}

/// The operations of one tag (or of none: tag `other`).
#[derive(Debug, Clone)]
pub struct ApiGroup {
    pub tag: String,
    pub description: Option<String>,
    pub operations: Vec<Operation>,
}

#[derive(Debug, Clone)]
pub struct Operation {
    /// The anchor: the `operationId`, or `METHOD-path` when there is none.
    pub id: String,
    /// Upper case, e.g. `POST`.
    pub method: String,
    pub path: String,
    pub summary: Option<String>,
    pub description: Option<String>,
    pub deprecated: bool,
    /// Who may call it, as the document's `x-fleetwire-access` says (`open`, `node`, `read`,
    /// `admin`, `metrics`).
    pub access: Option<String>,
    /// The security schemes its `security` names, in any alternative.
    pub security: Vec<String>,
    pub parameters: Vec<Parameter>,
    pub request: Option<Body>,
    pub responses: Vec<Response>,
}

#[derive(Debug, Clone)]
pub struct Parameter {
    pub anchor: String,
    pub name: String,
    /// `path`, `query`, `header` or `cookie`.
    pub location: String,
    pub required: bool,
    pub description: Option<String>,
    pub ty: Phrase,
    pub nullable: bool,
    pub default: Option<String>,
    pub constraints: Vec<Phrase>,
}

#[derive(Debug, Clone)]
pub struct Body {
    pub description: Option<String>,
    pub required: bool,
    pub contents: Vec<Content>,
}

/// One media type of a body and the schema of its content.
#[derive(Debug, Clone)]
pub struct Content {
    pub media_type: String,
    pub ty: Phrase,
}

#[derive(Debug, Clone)]
pub struct Response {
    pub anchor: String,
    /// `200`, `4XX` or `default`.
    pub status: String,
    pub description: String,
    pub contents: Vec<Content>,
}

fn text_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn content(content: Option<&Value>) -> Vec<Content> {
    content
        .and_then(Value::as_object)
        .map(|media| {
            media
                .iter()
                .map(|(media_type, m)| Content {
                    media_type: media_type.clone(),
                    ty: m
                        .get("schema")
                        .map(|s| {
                            let (core, nullable) = words::strip_nullable(s);
                            let mut ty = words::type_phrase(&core);
                            if nullable {
                                ty.push(Token::Text(" or null".into()));
                            }
                            ty
                        })
                        .unwrap_or_else(|| vec![Token::Text("no body".into())]),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn no_refs(what: &Value, at: &str) -> Result<()> {
    if what.get("$ref").is_some() {
        bail!("{API_FILE}: {at}: references to components are not supported; write it inline");
    }
    Ok(())
}

/// Reads every operation of the API description.
pub fn describe(api: &Value) -> Result<ApiDoc> {
    let info = api.get("info").cloned().unwrap_or(Value::Null);
    let mut groups: Vec<ApiGroup> = api
        .get("tags")
        .and_then(Value::as_array)
        .map(|tags| {
            tags.iter()
                .filter_map(|t| {
                    Some(ApiGroup {
                        tag: text_of(t, "name")?,
                        description: text_of(t, "description"),
                        operations: Vec::new(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let empty = Map::new();
    let paths = api
        .get("paths")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (path, item) in paths {
        no_refs(item, path)?;
        let shared: Vec<Value> = item
            .get("parameters")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for method in METHODS {
            let Some(op) = item.get(*method) else {
                continue;
            };
            let id = text_of(op, "operationId").unwrap_or_else(|| {
                format!("{}-{}", method.to_uppercase(), path.trim_matches('/'))
                    .replace(['/', '{', '}'], "-")
            });
            let mut parameters = Vec::new();
            let own = op
                .get("parameters")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for p in shared.iter().chain(own.iter()) {
                no_refs(p, &format!("{method} {path} parameter"))?;
                let name = text_of(p, "name").with_context(|| {
                    format!("{API_FILE}: {method} {path}: a parameter has no name")
                })?;
                let schema = p.get("schema").cloned().unwrap_or(Value::Null);
                let (core, nullable) = words::strip_nullable(&schema);
                parameters.push(Parameter {
                    anchor: format!("{id}.{name}"),
                    location: text_of(p, "in").unwrap_or_default(),
                    required: p.get("required").and_then(Value::as_bool) == Some(true),
                    description: text_of(p, "description"),
                    ty: words::type_phrase(&core),
                    nullable,
                    default: schema.get("default").map(Value::to_string),
                    constraints: words::constraints(&core),
                    name,
                });
            }
            let request = match op.get("requestBody") {
                Some(body) => {
                    no_refs(body, &format!("{method} {path} requestBody"))?;
                    Some(Body {
                        description: text_of(body, "description"),
                        required: body.get("required").and_then(Value::as_bool) == Some(true),
                        contents: content(body.get("content")),
                    })
                }
                None => None,
            };
            let mut responses = Vec::new();
            if let Some(all) = op.get("responses").and_then(Value::as_object) {
                for (status, response) in all {
                    no_refs(response, &format!("{method} {path} response {status}"))?;
                    responses.push(Response {
                        anchor: format!("{id}.{status}"),
                        status: status.clone(),
                        description: text_of(response, "description").unwrap_or_default(),
                        contents: content(response.get("content")),
                    });
                }
            }
            let operation = Operation {
                method: method.to_uppercase(),
                path: path.clone(),
                summary: text_of(op, "summary"),
                description: text_of(op, "description"),
                deprecated: op.get("deprecated").and_then(Value::as_bool) == Some(true),
                access: text_of(op, "x-fleetwire-access"),
                security: op
                    .get("security")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_object)
                    .flat_map(|alternative| alternative.keys().cloned())
                    .collect(),
                id,
                parameters,
                request,
                responses,
            };
            let tag = op
                .get("tags")
                .and_then(Value::as_array)
                .and_then(|t| t.first())
                .and_then(Value::as_str)
                .unwrap_or("other")
                .to_string();
            match groups.iter_mut().find(|g| g.tag == tag) {
                Some(group) => group.operations.push(operation),
                None => groups.push(ApiGroup {
                    tag,
                    description: None,
                    operations: vec![operation],
                }),
            }
        }
    }
    groups.retain(|g| !g.operations.is_empty());
    Ok(ApiDoc {
        title: text_of(&info, "title").unwrap_or_else(|| "API".into()),
        version: text_of(&info, "version").unwrap_or_default(),
        description: text_of(&info, "description"),
        servers: api
            .get("servers")
            .and_then(Value::as_array)
            .map(|s| {
                s.iter()
                    .filter_map(|s| Some((text_of(s, "url")?, text_of(s, "description"))))
                    .collect()
            })
            .unwrap_or_default(),
        groups,
        types: Vec::new(),
    })
}

fn phrase_refs(phrase: &Phrase) -> impl Iterator<Item = String> + '_ {
    phrase.iter().filter_map(|t| match t {
        Token::Type(n) => Some(n.clone()),
        _ => None,
    })
}

impl ApiDoc {
    pub fn operations(&self) -> impl Iterator<Item = &Operation> {
        self.groups.iter().flat_map(|g| g.operations.iter())
    }

    /// Every (definition, operation id, what uses it) of the API, in order.
    pub fn uses(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for op in self.operations() {
            let at = format!("{} {}", op.method, op.path);
            for p in &op.parameters {
                for name in phrase_refs(&p.ty) {
                    out.push((
                        name,
                        op.id.clone(),
                        format!("{at}, {} parameter {}", p.location, p.name),
                    ));
                }
            }
            if let Some(body) = &op.request {
                for c in &body.contents {
                    for name in phrase_refs(&c.ty) {
                        out.push((name, op.id.clone(), format!("{at}, request body")));
                    }
                }
            }
            for r in &op.responses {
                for c in &r.contents {
                    for name in phrase_refs(&c.ty) {
                        out.push((name, op.id.clone(), format!("{at}, {} response", r.status)));
                    }
                }
            }
        }
        out.dedup();
        out
    }

    /// Every definition the API names, once each, in order.
    pub fn refs(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (name, _, _) in self.uses() {
            if !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }
}
