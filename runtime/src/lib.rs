//! fleetwire's programs, built only on the generated types of `fleetwire-types`.

pub mod cli;
pub mod http;
pub mod validate;
