//! `fleetwire-codegen diff`: what changed between two schema sets, per direction of the wire,
//! and whether the version allows it (docs/versioning.md).
//!
//! - `change`: the rules, effects and directions a change is reported with;
//! - `compare`: one schema against another, keyword by keyword;
//! - `api_changes`: the API document's operations, statuses, parameters and bodies;
//! - `reach`: which documents and directions each definition travels in;
//! - `engine`: the whole comparison and the release verdict;
//! - `report`: text and JSON.

mod api_changes;
mod change;
mod compare;
mod engine;
mod reach;
mod report;

pub use change::{Change, Direction, DirectionVerdict, Effect, Rule};
pub use engine::{diff, next_major, Diff, SetInfo, Verdict};
pub use report::{json, text};
