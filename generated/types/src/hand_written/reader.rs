//! The one way to read a wire document: bytes in, a typed value (with the unknown fields set
//! aside, reported) or violations out.

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{JsonType, ValidationError};
use serde_json::Value;

use crate::document::WireDocument;
use crate::strict;
use crate::types::{JsonPointer, Violation};

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// Not JSON at all (or not UTF-8): one violation at the document root, with the position.
    Malformed(Violation),
    /// JSON, but not the document the schema describes.
    Invalid(Vec<Violation>),
}

impl Rejection {
    /// Every violation found, each with its JSON pointer into the document.
    pub fn violations(&self) -> &[Violation] {
        match self {
            Rejection::Malformed(v) => std::slice::from_ref(v),
            Rejection::Invalid(vs) => vs,
        }
    }

    /// One line: the first violation as `pointer: message (keyword)`, and how many more.
    pub fn summary(&self) -> String {
        summarize(self.violations())
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary())
    }
}

impl std::error::Error for Rejection {}

/// One line for a list of violations: the first as `pointer: message (keyword)`, and how
/// many more.
pub fn summarize(violations: &[Violation]) -> String {
    let first = violations.first().map(describe).unwrap_or_default();
    match violations.len() {
        0 | 1 => first,
        n => format!("{first} (and {} more)", n - 1),
    }
}

/// `pointer: message (keyword)`, the pointer shown as `/` for the document root.
pub fn describe(v: &Violation) -> String {
    format!("{}: {} ({})", v.shown_path(), v.message, v.keyword)
}

impl Violation {
    /// Where the offending value is, as people read it: the instance path, or `/` for the
    /// whole document (whose JSON pointer is the empty string, invisible in a message).
    pub fn shown_path(&self) -> &str {
        if self.instance_path.is_empty() {
            "/"
        } else {
            self.instance_path.as_str()
        }
    }
}

/// A document accepted under fleetwire's unknown-field policy (README "Unknown fields"): the
/// typed value of everything the schema knows, and the JSON pointers of the fields the schema
/// does not define that were set aside to get it.
///
/// Success means "valid once the unknown fields are set aside": with them removed, the
/// document validates against its schema; with `unknown_fields` empty, it validates as it
/// came. A field is unknown where its object's schema is closed (`additionalProperties:
/// false`); an open object's extra fields are valid and not reported. Callers report the
/// pointers (an HTTP `Warning` header, a log line, a metric); [`read_strict`] refuses them.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Accepted<T> {
    /// The document as the schema knows it.
    pub value: T,
    /// One JSON pointer per unknown field set aside (e.g. `/instances/0/publicIpv4`), in the
    /// order the schema validator reports them; empty for a document that is valid as it came.
    pub unknown_fields: Vec<JsonPointer>,
}

impl<T> Accepted<T> {
    /// The typed value, dropping the report.
    pub fn into_inner(self) -> T {
        self.value
    }

    /// Whether fields were set aside.
    pub fn has_unknown_fields(&self) -> bool {
        !self.unknown_fields.is_empty()
    }

    /// The same report around another value (e.g. a part of this one).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Accepted<U> {
        Accepted {
            value: f(self.value),
            unknown_fields: self.unknown_fields,
        }
    }

    /// One line per unknown field: `unknown field /instances/0/publicIpv4`, the text of the
    /// `Warning` header and of the log line.
    pub fn warnings(&self) -> impl Iterator<Item = String> + '_ {
        self.unknown_fields
            .iter()
            .map(|p| format!("unknown field {}", p.as_str()))
    }
}

/// Reads `bytes` as a `T` under the unknown-field policy: fields a closed object's schema does
/// not define are set aside and reported in [`Accepted::unknown_fields`]; anything else the
/// schema refuses is a [`Rejection`] with JSON pointers.
///
/// The typed parse comes first (it is the fast path: a document without unknown fields costs
/// no more than before the policy existed); the schema validator runs on it when the type does
/// not enforce the whole schema, on the raw document to say where unknown fields were (only
/// when there were some), and on the raw document to explain a refusal.
pub fn read<T: WireDocument>(bytes: &[u8]) -> Result<Accepted<T>, Rejection> {
    read_with::<T>(bytes, false)
}

/// Reads `bytes` as a `T`, refusing unknown fields: each is a violation with keyword
/// `additionalProperties` at the field's own pointer. Otherwise the same as [`read`].
pub fn read_strict<T: WireDocument>(bytes: &[u8]) -> Result<T, Rejection> {
    read_with::<T>(bytes, true).map(Accepted::into_inner)
}

fn read_with<T: WireDocument>(bytes: &[u8], strict: bool) -> Result<Accepted<T>, Rejection> {
    match strict::from_slice_lenient::<T::Set, T>(bytes) {
        Ok((typed, 0)) if T::INFO.exact => Ok(Accepted {
            value: typed,
            unknown_fields: Vec::new(),
        }),
        Ok((typed, 0)) => {
            let value = serde_json::to_value(&typed).expect("a generated value serializes");
            let violations = validate_value::<T>(&value);
            if violations.is_empty() {
                Ok(Accepted {
                    value: typed,
                    unknown_fields: Vec::new(),
                })
            } else {
                Err(Rejection::Invalid(violations))
            }
        }
        Ok((typed, _)) => {
            // Keys were set aside: the schema validator on the raw document says which (and,
            // for an inexact type, checks the rest of it too).
            let value: Value = serde_json::from_slice(bytes).map_err(malformed)?;
            let found = check::<T>(&value);
            finish(typed, found, strict)
        }
        Err(err) => Err(explain::<T>(bytes, err, strict)),
    }
}

/// Reads an already-parsed JSON value as a `T`, with the same policy as [`read`].
pub fn read_value<T: WireDocument>(value: &Value) -> Result<Accepted<T>, Rejection> {
    read_value_with::<T>(value, false)
}

/// Reads an already-parsed JSON value as a `T`, refusing unknown fields, as [`read_strict`].
pub fn read_value_strict<T: WireDocument>(value: &Value) -> Result<T, Rejection> {
    read_value_with::<T>(value, true).map(Accepted::into_inner)
}

fn read_value_with<T: WireDocument>(value: &Value, strict: bool) -> Result<Accepted<T>, Rejection> {
    let found = check::<T>(value);
    if !found.violations.is_empty() || (strict && !found.unknown.is_empty()) {
        return Err(Rejection::Invalid(found.into_violations(strict)));
    }
    let (typed, _) = strict::from_value_lenient::<T::Set, T>(value)
        .map_err(|err| Rejection::Invalid(vec![type_violation("", &err.to_string())]))?;
    Ok(Accepted {
        value: typed,
        unknown_fields: found.unknown.into_iter().map(|u| u.pointer).collect(),
    })
}

/// Every violation of `T`'s schema in `value`, unknown fields included (each a violation with
/// keyword `additionalProperties` at the field's pointer): the check for documents fleetwire
/// writes, which never carry unknown fields.
pub fn validate_value<T: WireDocument>(value: &Value) -> Vec<Violation> {
    check::<T>(value).into_violations(true)
}

/// The JSON pointers of the fields of `value` that `T`'s schema does not define (where the
/// object is closed), without the other violations.
pub fn unknown_fields<T: WireDocument>(value: &Value) -> Vec<JsonPointer> {
    check::<T>(value)
        .unknown
        .into_iter()
        .map(|u| u.pointer)
        .collect()
}

/// What the validator found, with unknown fields apart from the other violations.
#[derive(Default)]
struct Found {
    violations: Vec<Violation>,
    unknown: Vec<Unknown>,
}

/// One field a closed object's schema does not define.
struct Unknown {
    pointer: JsonPointer,
    schema_path: JsonPointer,
    name: String,
}

impl Found {
    /// The violations, with the unknown fields among them when `strict`.
    fn into_violations(self, strict: bool) -> Vec<Violation> {
        let mut out = self.violations;
        if strict {
            out.extend(self.unknown.into_iter().map(|u| Violation {
                message: format!(
                    "unknown field {:?}: the schema does not define it (additionalProperties: false)",
                    u.name
                ),
                instance_path: u.pointer,
                schema_path: u.schema_path,
                keyword: "additionalProperties".into(),
            }));
        }
        out
    }
}

fn check<T: WireDocument>(value: &Value) -> Found {
    let mut found = Found::default();
    for err in T::validator().iter_errors(value) {
        push_violation(&err, &mut found);
    }
    found
}

/// The typed value and what the validator found on the raw document: accepted when the only
/// findings are unknown fields (and the policy is not strict).
fn finish<T>(typed: T, found: Found, strict: bool) -> Result<Accepted<T>, Rejection> {
    if !found.violations.is_empty() || (strict && !found.unknown.is_empty()) {
        return Err(Rejection::Invalid(found.into_violations(strict)));
    }
    Ok(Accepted {
        value: typed,
        unknown_fields: found.unknown.into_iter().map(|u| u.pointer).collect(),
    })
}

/// Adds `err`, looking through `X | null` alternatives: when a nullable field's value is not
/// null, the only useful report is why it is not a valid `X` (`maximum`, `pattern`, ...), not
/// that it matched neither alternative. A closed object's unexpected properties go to
/// `unknown`, one per field.
fn push_violation(err: &ValidationError<'_>, out: &mut Found) {
    match err.kind() {
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => {
            let non_null: Vec<&Vec<ValidationError<'static>>> = context
                .iter()
                .filter(|branch| !is_null_mismatch(branch))
                .collect();
            if non_null.len() == 1 && non_null.len() < context.len() && !non_null[0].is_empty() {
                for inner in non_null[0] {
                    push_violation(inner, out);
                }
                return;
            }
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let object = err.instance_path().as_str();
            for name in unexpected {
                out.unknown.push(Unknown {
                    pointer: pointer(&format!(
                        "{object}/{}",
                        name.replace('~', "~0").replace('/', "~1")
                    )),
                    schema_path: pointer(err.schema_path().as_str()),
                    name: name.clone(),
                });
            }
            return;
        }
        _ => {}
    }
    out.violations.push(Violation {
        instance_path: pointer(err.instance_path().as_str()),
        schema_path: pointer(err.schema_path().as_str()),
        keyword: err.kind().keyword().to_string(),
        message: err.to_string(),
    });
}

/// The errors of the `{"type": "null"}` alternative: one type error expecting null.
fn is_null_mismatch(branch: &[ValidationError<'static>]) -> bool {
    matches!(
        branch,
        [only] if matches!(only.kind(), ValidationErrorKind::Type { kind: TypeKind::Single(JsonType::Null) })
    )
}

fn malformed(err: serde_json::Error) -> Rejection {
    Rejection::Malformed(Violation {
        instance_path: pointer(""),
        schema_path: pointer(""),
        keyword: "json".into(),
        message: format!("not a JSON document: {err}"),
    })
}

/// The slow path: why the typed parse refused `bytes`. Unknown fields are not why (the parse
/// sets them aside), so they are left out unless the policy is strict.
fn explain<T: WireDocument>(
    bytes: &[u8],
    typed_error: serde_json::Error,
    strict: bool,
) -> Rejection {
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(err) => return malformed(err),
    };
    let violations = check::<T>(&value).into_violations(strict);
    if !violations.is_empty() {
        return Rejection::Invalid(violations);
    }
    // Valid by the schema yet refused by the type (e.g. a key given twice): say where.
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let pointer = match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Err(err) => to_pointer(&err.path().to_string()),
        Ok(_) => String::new(),
    };
    Rejection::Invalid(vec![type_violation(&pointer, &typed_error.to_string())])
}

fn type_violation(pointer: &str, message: &str) -> Violation {
    Violation {
        instance_path: self::pointer(pointer),
        schema_path: self::pointer(""),
        keyword: "type".into(),
        message: message.to_string(),
    }
}

/// A JSON pointer as the generated `JsonPointer` type.
fn pointer(text: &str) -> JsonPointer {
    text.parse()
        .unwrap_or_else(|e| panic!("{text:?} is not a JSON pointer: {e}"))
}

/// `a.b[2].c` (serde_path_to_error's form) → `/a/b/2/c`.
fn to_pointer(path: &str) -> String {
    if path == "." {
        return String::new();
    }
    let mut out = String::new();
    for segment in path.split('.') {
        for part in segment.split('[') {
            let part = part.trim_end_matches(']');
            if !part.is_empty() {
                out.push('/');
                out.push_str(&part.replace('~', "~0").replace('/', "~1"));
            }
        }
    }
    out
}
