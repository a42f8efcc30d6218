//! reported.json: one builder from the live state, an atomic validated writer, and the
//! OpenMetrics rendering of the same built value.

pub mod builder;
pub mod metrics;
pub mod writer;

pub use builder::{build, LiveState};
pub use metrics::{render, render_with};
pub use writer::{atomic_write, write_document, WriteError};
