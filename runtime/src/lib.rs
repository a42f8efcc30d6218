//! fleetwire's programs, built only on the generated types of `fleetwire-types`.

pub mod agent;
pub mod cli;
pub mod drivers;
pub mod http;
pub mod reported;
pub mod validate;
