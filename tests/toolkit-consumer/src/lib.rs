//! Parcel shipping documents, generated from `schemas/` by fleetwire-codegen's toolkit
//! (`build.rs`) and read with `fleetwire_types::read`: a schema set that has nothing to do with
//! fleetwire's, to prove the toolkit works for any (docs/codegen.md).

include!(concat!(env!("OUT_DIR"), "/fleetwire_generated.rs"));
