//! Whose reference a site is: fleetwire's own, or another schema set's rendered by the toolkit
//! (docs/codegen.md). The pages name the set, the crate its Rust types live in, and state
//! fleetwire's unknown-field policy only for fleetwire's schemas.

use crate::bundle::Bundle;
use crate::target::Target;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Brand {
    /// The name the pages carry ("fleetwire reference").
    pub name: String,
    /// The path the Rust types are named by (`fleetwire_types`, or the consumer's crate).
    pub crate_path: String,
    /// fleetwire's own schemas: the pages say where fleetwire reads and writes each document.
    pub fleetwire: bool,
}

impl Brand {
    pub fn of(bundle: &Bundle, target: &Target) -> Brand {
        let fleetwire = target.is_fleetwire();
        let name = match (&bundle.set, fleetwire) {
            (_, true) => "fleetwire".to_string(),
            (Some(set), false) => set.name.clone(),
            (None, false) => target.crate_name.replace('_', "-"),
        };
        Brand {
            name,
            crate_path: target.crate_name.clone(),
            fleetwire,
        }
    }
}
