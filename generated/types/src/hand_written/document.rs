//! What a root document is: a whole body or file, with a validator of its own. The generated
//! code implements [`WireDocument`] for every root type of its schema set.

use crate::schema_set::{DocumentInfo, SchemaSet};

/// A root document: a whole body or file, with a validator of its own.
pub trait WireDocument: serde::de::DeserializeOwned + serde::Serialize {
    /// The schema set the document belongs to (its bundle and the strict deserializer's
    /// tables).
    type Set: SchemaSet;
    const INFO: &'static DocumentInfo;
    /// The validator compiled from the embedded schema, built on first use.
    fn validator() -> &'static jsonschema::Validator;
}
