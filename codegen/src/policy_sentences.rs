//! fleetwire's policies, said in its API documents from one home (issue 31): who may call a
//! route, and what changes between mTLS and `--plain-http` mode. Each operation's
//! `x-fleetwire-access` (and its `security`) states the policy; the sentence a reader sees is
//! written here, appended to the operation's description when the API description is read, so
//! the documents, the reference site and the client's doc comments all say the same thing and
//! none can say it differently. What a server does with an unknown field has its own home,
//! `openapi_as_read` (`x-fleetwire-unknown-fields`). A description typed by hand that states one
//! of these policies is found by [`hand_written`] (the codegen test `policy_sentences`).

use anyhow::{bail, Context, Result};
use regex::Regex;
use serde_json::Value;

/// The operation annotation that says who may call it.
pub const ACCESS_KEYWORD: &str = "x-fleetwire-access";

/// The sentences of one access level: in mTLS mode (the default), then with `--plain-http`.
pub fn access(access: &str, bootstrap_token: bool) -> Result<String> {
    Ok(match (access, bootstrap_token) {
        ("open", _) => "Access: anyone, in both modes; no token and no certificate.".into(),
        ("read", _) => "Access: an operator token of either scope in `Authorization: Bearer` (401 without a token the controller knows). A `--plain-http` controller serves it to anyone.".into(),
        ("admin", _) => "Access: an operator token with the admin scope in `Authorization: Bearer` (401 without a token the controller knows, 403 for a read-only one). A `--plain-http` controller serves it only to clients on its own host (loopback, 403 from elsewhere), or, started with `--operator-token-file`, to an admin token as in mTLS mode.".into(),
        ("metrics", _) => "Access: an operator token of either scope in `Authorization: Bearer` (401 without a token the controller knows), unless the controller runs with `--metrics-auth none`. A `--plain-http` controller serves it to anyone.".into(),
        ("node", true) => "Access: the node itself: a single-use bootstrap token for the body's node_id in `Authorization: Bearer` (a first enrollment), or the node's current certificate from the fleet CA as the TLS client certificate (a restart or a renewal); 401 with neither, 403 when either names another node. In mTLS mode the body must carry csr_pem: the controller signs the node's certificate from it, and refuses a registration without one (400 at /csr_pem), since the node could not serve its agent API without a certificate. A `--plain-http` controller authenticates no node and takes a registration without csr_pem.".into(),
        ("node", false) => "Access: the node itself: its current certificate from the fleet CA as the TLS client certificate, whose DNS name is the body's node_id (401 without one, 403 for another node's). A `--plain-http` controller authenticates no node.".into(),
        ("controller", _) => "Access: the fleet controller only: a client certificate from the fleet CA that carries the controller's mark (a handshake without a fleet certificate does not complete; 403 for another one, e.g. a node's). An agent with VM_PLAIN_HTTP=true serves plain HTTP to anyone who reaches it.".into(),
        (other, _) => bail!("`{ACCESS_KEYWORD}: {other}` is not an access this generator can say (open, read, admin, metrics, node, controller)"),
    })
}

/// Appends the access sentence to the description of every operation of `api` that carries
/// `x-fleetwire-access` (an operation without one is left as it is: a schema set other than
/// fleetwire's).
pub fn say(api: &mut Value) -> Result<()> {
    let Some(paths) = api.get_mut("paths").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in item.iter_mut() {
            let Some(level) = op.get(ACCESS_KEYWORD).and_then(Value::as_str) else {
                continue;
            };
            let bootstrap = op
                .get("security")
                .and_then(Value::as_array)
                .is_some_and(|s| s.iter().any(|r| r.get("bootstrapToken").is_some()));
            let sentence = access(level, bootstrap)
                .with_context(|| format!("{} {path}", method.to_uppercase()))?;
            let op = op
                .as_object_mut()
                .context("an operation must be an object")?;
            let said = op
                .get("description")
                .and_then(Value::as_str)
                .map(|d| format!("{d} "))
                .unwrap_or_default();
            op.insert(
                "description".into(),
                Value::String(format!("{said}{sentence}")),
            );
        }
    }
    Ok(())
}

/// Phrases that state a policy, which only the generated sentences may: unknown fields, the
/// access a route needs, and what one mode does that the other does not.
const POLICY_PHRASES: &[&str] = &[
    r"(?i)fields? (that )?(this|the|its|a) (body's )?schema does not (list|define)",
    r"(?i)\bunknown fields? (are|is) (refused|rejected|accepted|ignored|set aside)",
    r"(?i)\b(a|an|the) (read-only|admin)( operator)? token\b",
    r"(?i)--operator-token-file",
    r"(?i)\bin (mTLS|--plain-http|plain-http|plain HTTP|secure) mode\b",
    r"(?i)^(mTLS|secure|plain)( HTTP)? mode:",
    r"(?i)\bregistration (still )?succeeds without",
];

/// Every description or summary of `doc` that states a policy by hand: (JSON pointer, the
/// phrase). The generated sentences are not in the source files this is run on.
pub fn hand_written(doc: &Value) -> Vec<(String, String)> {
    let phrases: Vec<Regex> = POLICY_PHRASES
        .iter()
        .map(|p| Regex::new(p).expect("a valid pattern"))
        .collect();
    let mut found = Vec::new();
    walk(doc, String::new(), &phrases, &mut found);
    found
}

fn walk(value: &Value, at: String, phrases: &[Regex], found: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let here = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
                if let (true, Value::String(text)) =
                    (matches!(key.as_str(), "description" | "summary"), v)
                {
                    for p in phrases {
                        if let Some(m) = p.find(text) {
                            found.push((here.clone(), m.as_str().to_string()));
                        }
                    }
                }
                walk(v, here, phrases, found);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                walk(v, format!("{at}/{i}"), phrases, found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_three_contradictions_of_issue_31_are_found() {
        let doc = json!({
            "a": {"description": "PPN agents never send this document. Fields this schema does not list are refused."},
            "b": {"description": "When omitted, or when the controller has no node CA, the registration still succeeds without a certificate."},
            "c": {"summary": "In --plain-http mode without --operator-token-file: any client."},
            "d": {"description": "The node's id."}
        });
        let found: Vec<String> = hand_written(&doc).into_iter().map(|(at, _)| at).collect();
        assert_eq!(
            found,
            [
                "/a/description",
                "/b/description",
                "/c/summary",
                "/c/summary"
            ]
        );
    }

    #[test]
    fn each_operation_gets_its_access_sentence_and_an_unknown_access_is_refused() {
        let mut api = json!({"paths": {"/v1/nodes/register": {"post": {
            "description": "Enrolls a node.", "x-fleetwire-access": "node",
            "security": [{"bootstrapToken": []}, {}]}}}});
        say(&mut api).unwrap();
        let said = api["paths"]["/v1/nodes/register"]["post"]["description"]
            .as_str()
            .unwrap();
        assert!(said.starts_with("Enrolls a node. Access: the node itself"));
        assert!(said.contains("400 at /csr_pem"));
        let mut bad = json!({"paths": {"/x": {"get": {"x-fleetwire-access": "everyone"}}}});
        assert!(say(&mut bad).unwrap_err().to_string().contains("GET /x"));
    }
}
