//! Inside the fleetwire workspace (feature `regenerate`, which the workspace turns on), brings
//! `src/generated/` up to date with `schemas/` and the generator, in-process, before the crate
//! is compiled: `cargo build` after a schema edit builds the edited schemas
//! (docs/codegen.md, "One generator path"). A packaged crate builds what it carries: no
//! generator among its dependencies, nothing done here.

fn main() {
    #[cfg(feature = "regenerate")]
    fleetwire_codegen::build_script::generated_crate(fleetwire_codegen::GeneratedCrate::Client);
}
