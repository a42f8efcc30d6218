//! The one way to read a wire document: bytes in, a typed value or violations out.

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{JsonType, ValidationError};
use serde_json::Value;

use crate::{JsonPointer, Violation, WireDocument};

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
    let pointer = if v.instance_path.is_empty() {
        "/"
    } else {
        v.instance_path.as_str()
    };
    format!("{pointer}: {} ({})", v.message, v.keyword)
}

/// Reads `bytes` as a `T`. The typed parse comes first (it is the fast path); the schema
/// validator runs on it when the type does not enforce the whole schema, and on the raw
/// document to explain a refusal, so a refused document always gets pointers.
pub fn read<T: WireDocument>(bytes: &[u8]) -> Result<T, Rejection> {
    match crate::strict::from_slice::<T>(bytes) {
        Ok(typed) if T::INFO.exact => Ok(typed),
        Ok(typed) => {
            let value = serde_json::to_value(&typed).expect("a generated value serializes");
            let violations = validate_value::<T>(&value);
            if violations.is_empty() {
                Ok(typed)
            } else {
                Err(Rejection::Invalid(violations))
            }
        }
        Err(err) => Err(explain::<T>(bytes, err)),
    }
}

/// Reads an already-parsed JSON value as a `T`, with the same checks as [`read`].
pub fn read_value<T: WireDocument>(value: &Value) -> Result<T, Rejection> {
    let violations = validate_value::<T>(value);
    if !violations.is_empty() {
        return Err(Rejection::Invalid(violations));
    }
    T::deserialize(value)
        .map_err(|err| Rejection::Invalid(vec![type_violation("", &err.to_string())]))
}

/// Every violation of `T`'s schema in `value`.
pub fn validate_value<T: WireDocument>(value: &Value) -> Vec<Violation> {
    let mut out = Vec::new();
    for err in T::validator().iter_errors(value) {
        push_violation(&err, &mut out);
    }
    out
}

/// Adds `err`, looking through `X | null` alternatives: when a nullable field's value is not
/// null, the only useful report is why it is not a valid `X` (`maximum`, `pattern`, ...), not
/// that it matched neither alternative.
fn push_violation(err: &ValidationError<'_>, out: &mut Vec<Violation>) {
    if let ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } =
        err.kind()
    {
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
    out.push(Violation {
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

/// The slow path: why the typed parse refused `bytes`.
fn explain<T: WireDocument>(bytes: &[u8], typed_error: serde_json::Error) -> Rejection {
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(err) => {
            return Rejection::Malformed(Violation {
                instance_path: pointer(""),
                schema_path: pointer(""),
                keyword: "json".into(),
                message: format!("not a JSON document: {err}"),
            })
        }
    };
    let violations = validate_value::<T>(&value);
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
        instance_path: crate::reader::pointer(pointer),
        schema_path: crate::reader::pointer(""),
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
