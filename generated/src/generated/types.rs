//! The generated types, one per schema definition: fleetwire-codegen's output from `schemas/`,
//! included from `OUT_DIR` as it is (`generated/snapshot/types.rs` is a copy for reading).
#![allow(clippy::all, dead_code, missing_docs, rustdoc::all)]

include!(concat!(env!("OUT_DIR"), "/types.rs"));
