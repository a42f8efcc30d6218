//! The API document read as the client generator needs it: every operation with its path
//! segments, parameters, request body, bearer credentials and answers, each body named by the
//! schema definition it references. Anything the client could not call faithfully (a body that
//! is not a root document, a security scheme that is not a known bearer token, a parameter
//! outside the path and query, a reference to `components`) is refused, naming the operation.

use anyhow::{bail, Context, Result};
use openapiv3::{
    OpenAPI, Parameter, ParameterSchemaOrContent, ReferenceOr, Response, Schema, SchemaKind,
    SecurityScheme, StatusCode, Type,
};

use crate::bundle::{ref_name, Bundle};

/// The security schemes the client knows, by their name in the document, with the variant of
/// `fleetwire_client::Bearer` that holds each one's token.
pub const BEARER_SCHEMES: &[(&str, &str)] = &[
    ("operatorToken", "Operator"),
    ("bootstrapToken", "Bootstrap"),
];

/// The definition every refusal of the controller is.
pub const API_ERROR: &str = "ApiError";

/// The query parameter every operation with a body declares, named as Kubernetes names it
/// (issue 30): what the server does with body fields the schema does not define. It is no
/// argument of the operation's method: the client sends its own setting
/// (`ClientBuilder::field_validation`) with every operation that declares it.
pub const FIELD_VALIDATION: &str = "fieldValidation";

/// The definition the `fieldValidation` parameter references.
pub const FIELD_VALIDATION_TYPE: &str = "FieldValidation";

#[derive(Debug, Clone)]
pub struct Operation {
    pub id: String,
    /// Upper case, e.g. `GET`.
    pub method: String,
    pub path: String,
    pub summary: Option<String>,
    pub description: Option<String>,
    /// `x-fleetwire-access`.
    pub access: String,
    /// Variants of `Bearer`, in the order of the operation's `security`.
    pub bearer: Vec<String>,
    pub segments: Vec<Segment>,
    pub parameters: Vec<Param>,
    /// Whether it declares the `fieldValidation` query parameter (every operation with a body
    /// does).
    pub field_validation: bool,
    /// The definition the JSON request body is.
    pub body: Option<String>,
    /// The body of the answers that are the operation's success (its 2xx, and any other status
    /// declared with the same body).
    pub answer: Body,
    pub answer_statuses: Vec<Status>,
    /// Statuses declared with an `ApiError` body.
    pub error_statuses: Vec<Status>,
    /// Whether `default` is declared (with an `ApiError` body).
    pub default_error: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(String),
    Param(String),
}

#[derive(Debug, Clone)]
pub struct Param {
    pub name: String,
    pub in_path: bool,
    pub required: bool,
    pub description: Option<String>,
    /// The definition its schema references; `None` for an inline string.
    pub ty: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// No content declared.
    Empty,
    /// A JSON root document.
    Json(String),
    /// A JSON array of root documents.
    List(String),
    /// A text body (`type: string` under a non-JSON media type).
    Text,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Code(u16),
    /// `4XX`: the hundreds digit.
    Range(u16),
}

/// Every operation of the bundle's API description (`file` under `schemas/`, for the
/// messages), in path order (methods in OpenAPI's order within a path); `None` without an API
/// description.
pub fn read(bundle: &Bundle, file: &str) -> Result<Option<Vec<Operation>>> {
    let Some(api) = &bundle.api else {
        return Ok(None);
    };
    let doc: OpenAPI = serde_json::from_value(api.clone())
        .with_context(|| format!("{file} is not an OpenAPI 3.0 document"))?;
    check_schemes(&doc, file)?;
    let is_root = |name: &str| bundle.roots.iter().any(|r| r.name == name);
    let mut operations = Vec::new();
    for (path, item) in doc.paths.iter() {
        let ReferenceOr::Item(item) = item else {
            bail!("{file}: {path}: references to path items are not supported");
        };
        for (method, op) in item.iter() {
            let at = format!("{file}: {} {path}", method.to_uppercase());
            let operation = read_operation(path, method, op, &item.parameters, &is_root)
                .with_context(|| at.clone())?;
            operations.push(operation);
        }
    }
    Ok(Some(operations))
}

fn check_schemes(doc: &OpenAPI, file: &str) -> Result<()> {
    let Some(components) = &doc.components else {
        return Ok(());
    };
    for (name, scheme) in &components.security_schemes {
        let bearer = matches!(scheme, ReferenceOr::Item(SecurityScheme::HTTP { scheme, .. }) if scheme.eq_ignore_ascii_case("bearer"));
        if !bearer || !BEARER_SCHEMES.iter().any(|(known, _)| known == name) {
            bail!(
                "{file}: security scheme `{name}`: the client knows only the bearer schemes {:?}",
                BEARER_SCHEMES.iter().map(|(n, _)| *n).collect::<Vec<_>>()
            );
        }
    }
    Ok(())
}

fn read_operation(
    path: &str,
    method: &str,
    op: &openapiv3::Operation,
    shared: &[ReferenceOr<Parameter>],
    is_root: &dyn Fn(&str) -> bool,
) -> Result<Operation> {
    let id = op
        .operation_id
        .clone()
        .context("no operationId (the client's method name)")?;
    if !is_identifier(&id) {
        bail!("operationId `{id}` is not a snake_case Rust identifier");
    }
    let access = op
        .extensions
        .get("x-fleetwire-access")
        .and_then(|v| v.as_str())
        .context("no x-fleetwire-access")?
        .to_string();
    let mut bearer = Vec::new();
    for requirement in op.security.iter().flatten() {
        for name in requirement.keys() {
            let (_, variant) = BEARER_SCHEMES
                .iter()
                .find(|(known, _)| known == name)
                .with_context(|| format!("security scheme `{name}` is not one the client knows"))?;
            bearer.push(variant.to_string());
        }
    }
    let mut parameters = Vec::new();
    let mut field_validation = false;
    for parameter in shared.iter().chain(&op.parameters) {
        let ReferenceOr::Item(parameter) = parameter else {
            bail!("references to parameters are not supported; write them inline");
        };
        if let Parameter::Query { parameter_data, .. } = parameter {
            if parameter_data.name == FIELD_VALIDATION {
                let references = matches!(&parameter_data.format,
                    ParameterSchemaOrContent::Schema(ReferenceOr::Reference { reference })
                        if ref_name(reference) == FIELD_VALIDATION_TYPE);
                if !references || parameter_data.required {
                    bail!("`{FIELD_VALIDATION}` must be optional and reference {FIELD_VALIDATION_TYPE}");
                }
                field_validation = true;
                continue;
            }
        }
        parameters.push(read_parameter(parameter)?);
    }
    let segments = segments(path, &parameters)?;
    let body = match &op.request_body {
        None => None,
        Some(ReferenceOr::Reference { .. }) => {
            bail!("references to request bodies are not supported")
        }
        Some(ReferenceOr::Item(body)) => {
            let media = body
                .content
                .get("application/json")
                .context("the request body must be application/json")?;
            match media.schema.as_ref().map(body_of).transpose()? {
                Some(Body::Json(name)) if is_root(&name) => Some(name),
                _ => bail!(
                    "the request body must reference a root document (a definition with a title)"
                ),
            }
        }
    };
    if body.is_some() != field_validation {
        bail!("an operation declares the `{FIELD_VALIDATION}` query parameter exactly when it has a request body");
    }
    let mut answer: Option<Body> = None;
    let mut others = Vec::new();
    let mut answer_statuses = Vec::new();
    let mut error_statuses = Vec::new();
    for (code, response) in &op.responses.responses {
        let status = match code {
            StatusCode::Code(n) => Status::Code(*n),
            StatusCode::Range(n) => Status::Range(*n),
        };
        let body = response_body(response).with_context(|| format!("response {code}"))?;
        // A redirect without a body (a standby's 307 to the leader) is followed by the HTTP
        // client itself: the operation never sees it.
        if matches!(status, Status::Code(300..=399)) && body == Body::Empty {
            continue;
        }
        let success = matches!(status, Status::Code(200..=299) | Status::Range(2));
        if body == Body::Json(API_ERROR.to_string()) && !success {
            error_statuses.push(status);
        } else if success {
            match &answer {
                Some(known) if *known != body => bail!("its success answers have different bodies ({known:?}, {body:?}): the client has one answer type per operation"),
                _ => answer = Some(body),
            }
            answer_statuses.push(status);
        } else {
            others.push((status, body));
        }
    }
    let answer = answer.context("no success (2xx) answer is declared")?;
    for (status, body) in others {
        if body != answer {
            bail!("status {status:?} declares {body:?}, neither an ApiError nor the success answer's body");
        }
        answer_statuses.push(status);
    }
    let default_error = match &op.responses.default {
        None => false,
        Some(response) if response_body(response)? == Body::Json(API_ERROR.to_string()) => true,
        Some(_) => bail!("the default answer must be an ApiError"),
    };
    for body in [&answer] {
        if let Body::Json(name) | Body::List(name) = body {
            if !is_root(name) {
                bail!("the answer `{name}` is not a root document (a definition with a title), which the client reads with fleetwire_types::read");
            }
        }
    }
    Ok(Operation {
        id,
        method: method.to_uppercase(),
        path: path.to_string(),
        summary: op.summary.clone(),
        description: op.description.clone(),
        access,
        bearer,
        segments,
        parameters,
        field_validation,
        body,
        answer,
        answer_statuses,
        error_statuses,
        default_error,
    })
}

fn read_parameter(parameter: &Parameter) -> Result<Param> {
    let (data, in_path) = match parameter {
        Parameter::Path { parameter_data, .. } => (parameter_data, true),
        Parameter::Query { parameter_data, .. } => (parameter_data, false),
        _ => bail!("only path and query parameters are supported"),
    };
    let name = &data.name;
    if !is_identifier(name) {
        bail!("parameter `{name}` is not a snake_case Rust identifier");
    }
    let ty = match &data.format {
        ParameterSchemaOrContent::Schema(ReferenceOr::Reference { reference }) => {
            Some(ref_name(reference).to_string())
        }
        ParameterSchemaOrContent::Schema(ReferenceOr::Item(Schema {
            schema_kind: SchemaKind::Type(Type::String(_)),
            ..
        })) => None,
        _ => bail!("parameter `{name}`: its schema must reference a definition or be a string"),
    };
    Ok(Param {
        name: name.clone(),
        in_path,
        required: data.required,
        description: data.description.clone(),
        ty,
    })
}

fn segments(path: &str, parameters: &[Param]) -> Result<Vec<Segment>> {
    let mut segments = Vec::new();
    for piece in path.trim_start_matches('/').split('/') {
        if let Some(name) = piece.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            if !parameters.iter().any(|p| p.in_path && p.name == name) {
                bail!("path parameter `{name}` is not declared");
            }
            segments.push(Segment::Param(name.to_string()));
        } else if piece
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
        {
            segments.push(Segment::Literal(piece.to_string()));
        } else {
            bail!("path segment `{piece}` is neither a parameter nor plain text");
        }
    }
    for p in parameters.iter().filter(|p| p.in_path) {
        if !segments.contains(&Segment::Param(p.name.clone())) {
            bail!("path parameter `{}` is not in the path", p.name);
        }
    }
    Ok(segments)
}

fn response_body(response: &ReferenceOr<Response>) -> Result<Body> {
    let ReferenceOr::Item(response) = response else {
        bail!("references to responses are not supported; write them inline");
    };
    let mut bodies = response.content.iter();
    let Some((media_type, media)) = bodies.next() else {
        return Ok(Body::Empty);
    };
    if bodies.next().is_some() {
        bail!("several media types for one answer are not supported");
    }
    let schema = media.schema.as_ref().context("a body without a schema")?;
    if media_type == "application/json" {
        return body_of(schema);
    }
    match schema {
        ReferenceOr::Item(Schema {
            schema_kind: SchemaKind::Type(Type::String(_)),
            ..
        }) => Ok(Body::Text),
        _ => bail!("`{media_type}`: only JSON bodies and text are supported"),
    }
}

fn body_of(schema: &ReferenceOr<Schema>) -> Result<Body> {
    match schema {
        ReferenceOr::Reference { reference } => Ok(Body::Json(ref_name(reference).to_string())),
        ReferenceOr::Item(Schema {
            schema_kind: SchemaKind::Type(Type::Array(array)),
            ..
        }) => match &array.items {
            Some(ReferenceOr::Reference { reference }) => {
                Ok(Body::List(ref_name(reference).to_string()))
            }
            _ => bail!("an array body must reference its items' definition"),
        },
        ReferenceOr::Item(_) => {
            bail!("a JSON body must reference a definition (or be an array of one)")
        }
    }
}

fn is_identifier(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}
