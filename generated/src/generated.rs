//! The generated half of the crate: fleetwire-codegen's output from `schemas/`, written into
//! `OUT_DIR` by `build.rs` and included here as it is (never edited by hand; the copies under
//! `generated/snapshot/` are for reading).
//!
//! `facts` refers to no generated type, so the hand-written modules read it; `types` is built
//! on the hand-written `Timestamp` and `BoundedVec`; `documents` ties the two together.

/// The generated types, one per schema definition.
#[allow(clippy::all, dead_code, missing_docs, rustdoc::all)]
pub mod types {
    include!(concat!(env!("OUT_DIR"), "/types.rs"));
}

/// What the schemas say that the hand-written code reads: the root documents, the
/// `Timestamp` pattern, the schema files, and the strict deserializer's tables.
pub mod facts {
    use crate::hand_written::document::DocumentInfo;
    include!(concat!(env!("OUT_DIR"), "/facts.rs"));

    /// All definitions of all schema files in one document (local `$ref`s only).
    pub const BUNDLE_SCHEMA: &str = include_str!(concat!(env!("OUT_DIR"), "/bundle.schema.json"));
}

/// The root documents: their `WireDocument` impls and the by-name readers.
pub mod documents {
    use super::facts::DOCUMENTS;
    use super::types;
    use crate::hand_written::document::{DocumentInfo, WireDocument};
    use crate::hand_written::reader::{read, read_strict, Accepted, Rejection};
    use crate::hand_written::schema::compile_validator;
    use crate::hand_written::strict;
    include!(concat!(env!("OUT_DIR"), "/documents.rs"));
}
