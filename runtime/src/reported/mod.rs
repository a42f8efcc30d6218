//! reported.json: one builder from the live state, and the OpenMetrics rendering of the same
//! built value. The file itself is written by [`crate::document_file`].

pub mod builder;
pub mod metrics;

pub use builder::{build, LiveState};
pub use metrics::{render, render_with};
