//! fleetwire-codegen's integration tests: one test binary (modules of one target, so the
//! crate and the test support are linked once), run with `cargo test -p fleetwire-codegen`.

mod build_script;
mod bundle;
mod checked_in;
mod client;
mod exactness;
mod keywords;
mod openapi_dialect;
mod policy_sentences;
mod schema_diff;
mod schema_rules;
mod site;
mod site_static;
mod string_lengths;
mod toolkit_cli;
mod versioning;
