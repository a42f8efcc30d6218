//! What a root document is: a whole body or file, with a validator of its own. The generated
//! code implements [`WireDocument`] for every root type and lists their [`DocumentInfo`].

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

/// A root document: a whole body or file, with a validator of its own.
pub trait WireDocument: serde::de::DeserializeOwned + serde::Serialize {
    const INFO: &'static DocumentInfo;
    /// The validator compiled from the embedded schema, built on first use.
    fn validator() -> &'static jsonschema::Validator;
}
