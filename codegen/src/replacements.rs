//! Definitions whose generated type is replaced by a hand-written one in `fleetwire-types`.
//!
//! A leaf: fleetwire's [`crate::target::Target`] carries these to typify, the exactness
//! analysis ([`crate::exactness`]) trusts them, and the site model names them. A crate that
//! runs the toolkit on its own schemas has none (docs/codegen.md).

/// `(definition, Rust path)` of each of fleetwire's replaced definitions.
///
/// `Timestamp`: typify would map `format: date-time` to chrono's lenient parser; the replacement
/// enforces the schema's own pattern (emitted as `TIMESTAMP_PATTERN`) and strict RFC 3339, so the
/// type accepts exactly what the schema does.
pub const REPLACEMENTS: &[(&str, &str)] = &[("Timestamp", "crate::timestamp::Timestamp")];
