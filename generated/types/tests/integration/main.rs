//! fleetwire-types' integration tests: one test binary (modules of one target, so the crate is
//! linked once), run with `cargo test -p fleetwire-types`.

mod fixtures;
mod integer_spellings;
mod light_dependencies;
mod ppn_compat;
mod schema_set_version;
mod string_lengths;
mod typed_matches_schema;
