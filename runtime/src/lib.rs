//! fleetwire's programs, built only on the generated types of `fleetwire-types`.

pub mod cli;
pub mod controller;
pub mod http;
pub mod loadgen;
pub mod store;
pub mod validate;
