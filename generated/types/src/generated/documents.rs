//! The root documents: their `WireDocument` impls and the by-name readers (generated; the top
//! of the crate, built on both the generated types and the hand-written reader).

use crate::document::WireDocument;
use crate::facts::{Schemas, DOCUMENTS};
use crate::reader::{read, read_strict, Accepted, Rejection};
use crate::schema::compile_validator_in;
use crate::schema_set::DocumentInfo;
use crate::strict;
use crate::types;

include!(concat!(env!("OUT_DIR"), "/documents.rs"));
