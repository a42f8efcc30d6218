//! What the schemas say that the hand-written code reads: the root documents, the `Timestamp`
//! pattern, the schema files, the strict deserializer's tables, and `Schemas`, fleetwire's
//! schema set that ties them together (generated; it names no generated type, so the
//! hand-written modules can read it).

use crate::schema_set::{DocumentInfo, SchemaSet, StructRules};

include!(concat!(env!("OUT_DIR"), "/facts.rs"));

/// All definitions of all schema files in one document (local `$ref`s only).
pub const BUNDLE_SCHEMA: &str = include_str!(concat!(env!("OUT_DIR"), "/bundle.schema.json"));
