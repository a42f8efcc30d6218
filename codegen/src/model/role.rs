//! What part a root document plays on fleetwire's wire, read from what the schemas and the API
//! document state, not from a list of names: the index groups the documents by it
//! (docs/reference-site.md, "What a page shows").

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum DocumentRole {
    /// Neither a body of the controller's API nor of a peer's: a file a host keeps
    /// (`reported.json`, `desired.json`, the agent's own ledgers).
    HostFile,
    /// The body of a request or response of an operation in the API document, or a part of one.
    ApiBody,
    /// A body of a peer's API that fleetwire sends or reads, as its definition's `x-upstream`
    /// annotation names it (`{program, version, schema, direction}`).
    PeerApi { program: String, version: String },
}

impl DocumentRole {
    /// The role of root document `schema`; `in_api` says whether an API operation's body is or
    /// holds it.
    pub fn of(schema: &Value, in_api: bool) -> DocumentRole {
        if let Some(upstream) = schema.get("x-upstream") {
            let field = |k: &str| {
                upstream
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            return DocumentRole::PeerApi {
                program: field("program"),
                version: field("version"),
            };
        }
        if in_api {
            DocumentRole::ApiBody
        } else {
            DocumentRole::HostFile
        }
    }

    /// The anchor of the role's group on the index.
    pub fn anchor(&self) -> String {
        match self {
            DocumentRole::HostFile => "role-host-files".into(),
            DocumentRole::ApiBody => "role-api-bodies".into(),
            DocumentRole::PeerApi { program, .. } => format!("role-runtime-{program}"),
        }
    }

    pub fn title(&self) -> String {
        match self {
            DocumentRole::HostFile => "Host files".into(),
            DocumentRole::ApiBody => "Controller API bodies".into(),
            DocumentRole::PeerApi { program, .. } => format!("Node runtime answers ({program})"),
        }
    }

    /// What the group holds and where that is stated.
    pub fn note(&self) -> String {
        match self {
            DocumentRole::HostFile => "Documents no API operation carries: the files a host keeps in its state directory, written and read by its agent.".into(),
            DocumentRole::ApiBody => "Request and response bodies of the controller's API operations, as its API document names them, and the documents they hold.".into(),
            DocumentRole::PeerApi { program, version } => format!(
                "Bodies of {program} {version}'s HTTP API that the agent sends or reads, as each definition's x-upstream annotation says; fleetwire-codegen peer-check compares them with {program}'s own API document."
            ),
        }
    }
}
