//! What one generation reads and for which crate: the schema folder, the API description, the
//! examples, the [`Target`], the OpenAPI file names (docs/codegen.md, "Inputs").
//! [`Config::fleetwire`] has fleetwire's values.

use std::path::{Path, PathBuf};

use crate::bundle::{AGENT_API_FILE, API_FILE};
use crate::target::Target;

/// The folder of example documents beside the schemas, by default (`examples/<Document>/valid`).
pub const EXAMPLES_DIR: &str = "examples";

/// The OpenAPI documents' file names for a crate other than fleetwire.
pub const OPENAPI_30_FILE: &str = "openapi.json";
pub const OPENAPI_31_FILE: &str = "openapi.3.1.json";

/// fleetwire's OpenAPI documents' file names, under `generated/openapi/` in the repository
/// and under `openapi/` on the reference site.
pub const FLEET_API_30_FILE: &str = "fleet-api.json";
pub const FLEET_API_31_FILE: &str = "fleet-api.3.1.json";
/// The node agent's OpenAPI documents' file names, beside the controller's.
pub const AGENT_API_30_FILE: &str = "agent-api.json";
pub const AGENT_API_31_FILE: &str = "agent-api.3.1.json";

/// What one generation reads and for which crate.
#[derive(Debug, Clone)]
pub struct Config {
    /// The folder of `*.schema.json` files.
    pub schemas_dir: PathBuf,
    /// The API description (OpenAPI 3.0.3 paths whose bodies reference the schemas), if any.
    pub api_file: Option<PathBuf>,
    /// Example documents for the site: `<dir>/<Document>/valid/*.json` (missing: none).
    pub examples_dir: PathBuf,
    /// Where the generated code lives and what it names.
    pub target: Target,
    /// The file names of the OpenAPI 3.0.3 and 3.1.0 documents (on the site, and in `OUT_DIR`
    /// under `openapi/`).
    pub openapi_files: [String; 2],
    /// fleetwire's node agent API description (`agent-api.openapi.json`), bundled into OpenAPI
    /// documents of its own beside the controller's; `None` for other crates.
    pub agent_api_file: Option<PathBuf>,
}

impl Config {
    /// fleetwire's own: `schemas_dir/fleet-api.openapi.json` when it exists, the examples under
    /// `schemas_dir/examples`, the code for `fleetwire-types`.
    pub fn fleetwire(schemas_dir: &Path) -> Config {
        let api = schemas_dir.join(API_FILE);
        let agent_api = schemas_dir.join(AGENT_API_FILE);
        Config {
            schemas_dir: schemas_dir.to_path_buf(),
            api_file: api.exists().then_some(api),
            examples_dir: schemas_dir.join(EXAMPLES_DIR),
            target: Target::fleetwire(),
            openapi_files: [FLEET_API_30_FILE.into(), FLEET_API_31_FILE.into()],
            agent_api_file: agent_api.exists().then_some(agent_api),
        }
    }
}
