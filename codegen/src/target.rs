//! Where the generated Rust code lives and what it names (docs/codegen.md, "Outputs").
//!
//! For fleetwire the generated code is part of `fleetwire-types` and names the hand-written
//! support by its defining module (`crate::bounded::BoundedVec`); for a crate that runs the
//! toolkit on its own schemas it names the same items through `fleetwire_types::toolkit`, and
//! has none of fleetwire's replacements unless it asks for them.

use crate::replacements::REPLACEMENTS;

/// How the generated code names the hand-written support of `fleetwire-types`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// The generated code is part of `fleetwire-types` itself.
    InCrate,
    /// Another crate: every support item is named under this path (`::fleetwire_types::toolkit`).
    External(String),
}

/// The path of the toolkit module of `fleetwire-types` as another crate names it.
pub const TOOLKIT_PATH: &str = "::fleetwire_types::toolkit";

impl Support {
    /// The path of `item`, which `fleetwire-types` defines in its module `module`.
    pub fn item(&self, module: &str, item: &str) -> String {
        match self {
            Support::InCrate => format!("crate::{module}::{item}"),
            Support::External(root) => format!("{root}::{item}"),
        }
    }
}

/// Where the generated code lives and what it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The module that holds the generated types, as the generated code names it
    /// (`crate::types`).
    pub types_module: String,
    /// How the generated code names the support items.
    pub support: Support,
    /// `(definition, Rust path)` of each definition whose type is hand-written.
    pub replacements: Vec<(String, String)>,
    /// The crate readers import the types from, for the paths the reference site shows
    /// (`fleetwire_types`).
    pub crate_name: String,
}

impl Target {
    /// `fleetwire-types`: fleetwire's own schemas, with its `Timestamp` replacement.
    pub fn fleetwire() -> Target {
        Target {
            types_module: "crate::types".into(),
            support: Support::InCrate,
            replacements: REPLACEMENTS
                .iter()
                .map(|(name, path)| (name.to_string(), path.to_string()))
                .collect(),
            crate_name: "fleetwire_types".into(),
        }
    }

    /// Another crate, `crate_name`, that includes the generated module at `module` (`crate`
    /// for its root): support through [`TOOLKIT_PATH`], no replacements.
    pub fn consumer(crate_name: &str, module: &str) -> Target {
        Target {
            types_module: format!("{module}::types"),
            support: Support::External(TOOLKIT_PATH.into()),
            replacements: Vec::new(),
            crate_name: crate_name.replace('-', "_"),
        }
    }

    /// Whether the code is `fleetwire-types`' own (fleetwire's schemas).
    pub fn is_fleetwire(&self) -> bool {
        self.support == Support::InCrate
    }

    /// Whether `definition`'s type is hand-written.
    pub fn is_replaced(&self, definition: &str) -> bool {
        self.replacements.iter().any(|(name, _)| name == definition)
    }

    /// The generic array type whose length the schema bounds.
    pub fn bounded_vec(&self) -> String {
        self.support.item("bounded", "BoundedVec")
    }

    /// The macro that gives a string newtype its length bounds.
    pub fn length_bounds(&self) -> String {
        self.support.item("string_lengths", "length_bounds")
    }
}
