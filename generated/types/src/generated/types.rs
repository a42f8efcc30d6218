//! The generated types, one per schema definition: fleetwire-codegen's output from `schemas/`,
//! included from `OUT_DIR` as it is (`code/types.rs` is the checked-in copy).
#![allow(clippy::all, dead_code, missing_docs, rustdoc::all)]

include!(concat!(env!("OUT_DIR"), "/types.rs"));
