//! What a generated crate tells the hand-written reader about its own schema set: the bundle,
//! the root documents, and the strict deserializer's tables. fleetwire's set is one
//! implementation (`fleetwire_types::Schemas`); a crate that runs fleetwire-codegen's toolkit
//! on its own schemas gets another (docs/codegen.md), and the reader, the strict deserializer
//! and the validators work the same for both. The set is a type parameter, not a value: every
//! lookup is a static call the compiler inlines, as the crate-global tables were.

/// What the schemas say about one root document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocumentInfo {
    /// The definition name and schema title, e.g. `NodeHeartbeat`.
    pub name: &'static str,
    /// The schema file that defines it.
    pub file: &'static str,
    /// Whether the generated type enforces every constraint of the schema on its own (decided by
    /// the code generator); when it does not, [`crate::read`] runs the validator on the parsed
    /// value too.
    pub exact: bool,
    /// Why, in words.
    pub exactness: &'static str,
}

/// What the strict deserializer knows of one generated struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StructRules {
    /// Optional properties that may not be `null` (by JSON name).
    pub non_null: &'static [&'static str],
    /// The schema is closed (`additionalProperties: false`): a key it does not define is an
    /// unknown field, counted when skipped.
    pub closed: bool,
}

impl StructRules {
    /// A struct the table does not name: every optional property may be `null`, and its
    /// schema is open.
    pub const OPEN: StructRules = StructRules {
        non_null: &[],
        closed: false,
    };
}

/// One generated schema set. fleetwire-codegen writes the implementation (a unit struct
/// `Schemas` in the generated facts); nothing else should implement it.
pub trait SchemaSet: 'static {
    /// All definitions of all schema files in one document (local `$ref`s only).
    const BUNDLE_SCHEMA: &'static str;
    /// Every root document, in schema order.
    const DOCUMENTS: &'static [DocumentInfo];
    /// What the strict deserializer knows of the generated struct called `struct_name`.
    fn struct_rules(struct_name: &str) -> StructRules;
    /// Whether the generated enum called `enum_name` is a string enum (read from a string
    /// only, never from `{"variant": null}`).
    fn is_string_enum(enum_name: &str) -> bool;
}
