//! The `curl` line the API page shows for each operation, with the trust options the
//! controller asks for on that route (docs/security.md, "Two modes"): the fleet CA for every
//! route, an operator's `Authorization` header from a file for operator routes (as
//! `fleetwire up` writes it, so the token never shows in the process list), the node's
//! certificate and key for node routes, a bootstrap token's header for registration.
//! What a route asks for is read from the API document: its `x-fleetwire-access` and its
//! `security` schemes.

use super::api::Operation;
use super::words::Token;

/// The files the line names, and what each holds; the API page explains them once.
pub const TRUST_FILES: &[(&str, &str)] = &[
    ("ca.pem", "the fleet CA's certificate (<data-dir>/ca/ca.pem on the controller host; fleetwire up prints its path)"),
    ("operator-header", "the line Authorization: Bearer <operator token> (fleetwire up writes one, mode 0600; any token of the right scope from the controller's --operator-token-file)"),
    ("bootstrap-header", "the line Authorization: Bearer <bootstrap token>, for a node's first registration (fleetwire token create)"),
    ("node.crt, node.key, ca.crt", "a node's certificate, key and CA, from its agent's state directory"),
];

/// The definition a request body is, when it is one (`CreateVmRequest`).
pub fn request_document(op: &Operation) -> Option<&str> {
    let body = op.request.as_ref()?;
    body.contents.iter().find_map(|c| match c.ty.as_slice() {
        [Token::Type(name)] if c.media_type.contains("json") => Some(name.as_str()),
        _ => None,
    })
}

/// The command, one option group per line, for a controller at `server`.
pub fn curl(op: &Operation, server: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let trust = match op.access.as_deref() {
        Some("open") => "curl -s --cacert ca.pem".to_string(),
        Some("node") if op.security.iter().any(|s| s == "bootstrapToken") => {
            "curl -s --cacert ca.pem -H @bootstrap-header".to_string()
        }
        Some("node") => "curl -s --cacert ca.crt --cert node.crt --key node.key".to_string(),
        // read, admin, metrics and anything that names the operator scheme.
        _ if op.access.is_some() || op.security.iter().any(|s| s == "operatorToken") => {
            "curl -s --cacert ca.pem -H @operator-header".to_string()
        }
        _ => "curl -s --cacert ca.pem".to_string(),
    };
    lines.push(trust);
    let mut call = Vec::new();
    if op.method != "GET" {
        call.push(format!("-X {}", op.method));
    }
    if let Some(doc) = request_document(op) {
        call.push("-H 'content-type: application/json'".to_string());
        call.push(format!("-d @{doc}.json"));
    }
    if !call.is_empty() {
        lines.push(call.join(" "));
    }
    // A body is sent with fieldValidation=Strict, so a mistyped field is refused by name
    // rather than set aside (issue 30).
    let strict = if request_document(op).is_some() {
        "?fieldValidation=Strict"
    } else {
        ""
    };
    lines.push(format!(
        "\"{}{}{strict}\"",
        server.trim_end_matches('/'),
        shell_path(&op.path)
    ));
    lines.join(" \\\n  ")
}

/// `/v1/nodes/{node_id}` → `/v1/nodes/${NODE_ID}`: a shell variable per path parameter (curl
/// would read the braces as a URL glob).
fn shell_path(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        out.push_str(&rest[..open]);
        let name = &rest[open + 1..open + close];
        out.push_str(&format!(
            "${{{}}}",
            name.to_ascii_uppercase().replace('-', "_")
        ));
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(method: &str, path: &str, extra: serde_json::Value) -> Operation {
        let mut item = json!({"operationId": "x", "responses": {"200": {"description": "ok"}}});
        for (k, v) in extra.as_object().unwrap() {
            item[k] = v.clone();
        }
        let api = json!({"openapi": "3.0.3", "info": {"title": "t", "version": "1"},
            "paths": {path: {method: item}}});
        super::super::api::describe(&api)
            .unwrap()
            .operations()
            .next()
            .unwrap()
            .clone()
    }

    #[test]
    fn each_route_gets_the_trust_it_asks_for() {
        let server = "https://127.0.0.1:9203";
        let get = op(
            "get",
            "/v1/nodes/{node_id}",
            json!({"x-fleetwire-access": "read", "security": [{"operatorToken": []}]}),
        );
        assert_eq!(
            curl(&get, server),
            "curl -s --cacert ca.pem -H @operator-header \\\n  \"https://127.0.0.1:9203/v1/nodes/${NODE_ID}\""
        );
        let create = op(
            "post",
            "/v1/vms",
            json!({"x-fleetwire-access": "admin", "security": [{"operatorToken": []}],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "node.schema.json#/$defs/CreateVmRequest"}}}}}),
        );
        assert_eq!(
            curl(&create, server),
            "curl -s --cacert ca.pem -H @operator-header \\\n  -X POST -H 'content-type: application/json' -d @CreateVmRequest.json \\\n  \"https://127.0.0.1:9203/v1/vms?fieldValidation=Strict\""
        );
        let heartbeat = op(
            "post",
            "/v1/nodes/heartbeat",
            json!({"x-fleetwire-access": "node", "security": [{}]}),
        );
        assert!(curl(&heartbeat, server)
            .starts_with("curl -s --cacert ca.crt --cert node.crt --key node.key \\\n  -X POST"));
        let register = op(
            "post",
            "/v1/nodes/register",
            json!({"x-fleetwire-access": "node", "security": [{"bootstrapToken": []}, {}]}),
        );
        assert!(curl(&register, server).contains("-H @bootstrap-header"));
        let health = op(
            "get",
            "/healthz",
            json!({"x-fleetwire-access": "open", "security": []}),
        );
        assert_eq!(
            curl(&health, server),
            "curl -s --cacert ca.pem \\\n  \"https://127.0.0.1:9203/healthz\""
        );
    }
}
