//! The hand-written half of the crate: the reader and the strict deserializer, and the types the
//! generated code builds on (`Timestamp`, `BoundedVec`, `WireDocument`, the string
//! length bounds). They read schema facts
//! from [`crate::generated::facts`]; only `reader` uses generated types (`Violation`).

pub mod bounded;
pub mod document;
pub mod reader;
pub mod schema;
pub mod strict;
pub mod string_lengths;
pub mod timestamp;
