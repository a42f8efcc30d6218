//! One change between two schema sets, and how a change's effect on a reader or a writer makes
//! it breaking or compatible per direction of the wire (docs/versioning.md, "The rules").

use serde::Serialize;

use crate::wire::Party;

/// What a change does to the documents a schema accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Effect {
    /// Accepts less: a new reader refuses what an older writer sends.
    Tightened,
    /// Accepts more: a new writer may send what an older reader refuses.
    Loosened,
    /// Neither a subset nor a superset (a type, a pattern, a default, a field gone): breaking
    /// wherever it is read or written.
    Incompatible,
    /// Changes no document's acceptance (descriptions, additions nobody must send).
    Neutral,
}

/// One writer → reader direction of a root document or an API body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Direction {
    pub writer: Party,
    pub reader: Party,
}

impl Direction {
    /// Whether a change with `effect` breaks this direction when the two ends are not upgraded
    /// at the same instant: a tighter schema breaks a versioned reader (it meets older
    /// writers), a looser one a versioned writer (it meets older, or foreign, readers).
    pub fn breaks(self, effect: Effect) -> bool {
        match effect {
            Effect::Tightened => self.reader.is_versioned(),
            Effect::Loosened => self.writer.is_versioned(),
            Effect::Incompatible => true,
            Effect::Neutral => false,
        }
    }

    pub fn label(self) -> String {
        format!("{} → {}", self.writer.as_str(), self.reader.as_str())
    }
}

/// The rule a change falls under; its name is what the fixtures and the JSON output say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    DocumentAdded,
    DocumentRemoved,
    DefinitionAdded,
    DefinitionRemoved,
    FieldAdded,
    RequiredFieldAdded,
    FieldRemoved,
    FieldRenamed,
    MadeRequired,
    MadeOptional,
    TypeChanged,
    TypeNarrowed,
    TypeWidened,
    EnumValueAdded,
    EnumValueRemoved,
    VariantAdded,
    VariantRemoved,
    ConstraintTightened,
    ConstraintLoosened,
    ConstraintChanged,
    AdditionalPropertiesClosed,
    AdditionalPropertiesOpened,
    FormatAdded,
    FormatRemoved,
    DefaultChanged,
    DescriptionChanged,
    OperationAdded,
    OperationRemoved,
    StatusAdded,
    StatusRemoved,
    ParameterAdded,
    RequiredParameterAdded,
    ParameterRemoved,
    BodyMadeRequired,
}

impl Rule {
    /// Every rule, in the order of the table in docs/versioning.md.
    pub const ALL: &[Rule] = &[
        Rule::DocumentAdded,
        Rule::DocumentRemoved,
        Rule::DefinitionAdded,
        Rule::DefinitionRemoved,
        Rule::FieldAdded,
        Rule::RequiredFieldAdded,
        Rule::FieldRemoved,
        Rule::FieldRenamed,
        Rule::MadeRequired,
        Rule::MadeOptional,
        Rule::TypeChanged,
        Rule::TypeNarrowed,
        Rule::TypeWidened,
        Rule::EnumValueAdded,
        Rule::EnumValueRemoved,
        Rule::VariantAdded,
        Rule::VariantRemoved,
        Rule::ConstraintTightened,
        Rule::ConstraintLoosened,
        Rule::ConstraintChanged,
        Rule::AdditionalPropertiesClosed,
        Rule::AdditionalPropertiesOpened,
        Rule::FormatAdded,
        Rule::FormatRemoved,
        Rule::DefaultChanged,
        Rule::DescriptionChanged,
        Rule::OperationAdded,
        Rule::OperationRemoved,
        Rule::StatusAdded,
        Rule::StatusRemoved,
        Rule::ParameterAdded,
        Rule::RequiredParameterAdded,
        Rule::ParameterRemoved,
        Rule::BodyMadeRequired,
    ];

    pub fn as_str(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// A change found by comparing one schema (or operation) of the base with the head's, before
/// the directions of the documents it belongs to are known.
#[derive(Debug, Clone)]
pub struct Found {
    pub rule: Rule,
    pub effect: Effect,
    /// The JSON pointer inside the definition (`/properties/vms/items`), or inside the API
    /// document for an operation (`/paths/~1v1~1fleet/get`).
    pub pointer: String,
    /// The field's data path below its definition (`vms.state`), empty for the definition.
    pub field: String,
    pub message: String,
}

/// A change as reported: where, for whom, and whether it breaks.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub rule: Rule,
    pub effect: Effect,
    pub breaking: bool,
    /// The definition (or `METHOD /path` for an operation) the change is in.
    pub subject: String,
    /// The root documents (or API operations) whose wire it changes.
    pub documents: Vec<String>,
    /// `file#pointer`: the place in the schema files (head's, or base's for what was removed).
    pub pointer: String,
    /// The field's data path below `subject` (empty for the definition itself).
    pub field: String,
    /// Every direction it crosses, and whether it breaks there.
    pub directions: Vec<DirectionVerdict>,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct DirectionVerdict {
    pub writer: Party,
    pub reader: Party,
    pub breaking: bool,
}
