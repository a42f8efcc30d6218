//! Definitions whose generated type is replaced by a hand-written one in `fleetwire-types`.
//!
//! A leaf: the Rust output ([`crate::rust`]) hands these to typify, the exactness analysis
//! ([`crate::exactness`]) trusts them, and the site model names them.

/// `(definition, Rust path)` of each replaced definition.
///
/// `Timestamp`: typify would map `format: date-time` to chrono's lenient parser; the replacement
/// enforces the schema's own pattern (emitted as `TIMESTAMP_PATTERN`) and strict RFC 3339, so the
/// type accepts exactly what the schema does.
pub const REPLACEMENTS: &[(&str, &str)] = &[("Timestamp", "crate::timestamp::Timestamp")];

/// Whether `definition` is replaced by a hand-written type.
pub fn is_replaced(definition: &str) -> bool {
    REPLACEMENTS.iter().any(|(name, _)| *name == definition)
}
