//! Generates the clients of fleetwire's two OpenAPI 3.0 documents with progenitor (builder
//! style), and, for the controller's, a dispatch from an operation id to its call, so that
//! `src/main.rs` can run any operation the document has. A document progenitor cannot take
//! fails this build.

use std::fmt::Write as _;
use std::path::PathBuf;

fn generate(document: &str, out: &str) -> serde_json::Value {
    // Read when the script runs, not baked in when it is built: cargo may reuse one built
    // script for a copy of this crate elsewhere (the same package, hashed alike).
    let path = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../../../generated/openapi")
        .join(document);
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(&path).unwrap();
    let spec: openapiv3::OpenAPI = serde_json::from_str(&text).unwrap();
    let mut settings = progenitor::GenerationSettings::default();
    settings.with_interface(progenitor::InterfaceStyle::Builder);
    let mut generator = progenitor::Generator::new(&settings);
    let tokens = generator
        .generate_tokens(&spec)
        .unwrap_or_else(|e| panic!("progenitor refused {document}: {e}"));
    let file: syn::File = syn::parse2(tokens).unwrap();
    let dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::write(dir.join(out), prettyplease::unparse(&file)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn main() {
    let fleet = generate("fleet-api.json", "fleet_api.rs");
    generate("agent-api.json", "agent_api.rs");
    let mut dispatch = String::from(
        "pub async fn call(client: &fleet::Client, operation: &str, params: &Params, body: Option<serde_json::Value>) -> Result<serde_json::Value, String> {\n    match operation {\n",
    );
    for item in fleet["paths"].as_object().unwrap().values() {
        for (method, op) in item.as_object().unwrap() {
            if !["get", "put", "post", "delete", "patch"].contains(&method.as_str()) {
                continue;
            }
            let id = op["operationId"].as_str().unwrap();
            let mut chain = format!("client.{id}()");
            for p in op["parameters"].as_array().into_iter().flatten() {
                if p["in"] == "path" {
                    let name = p["name"].as_str().unwrap();
                    write!(chain, ".{name}(param(params, \"{name}\")?)").unwrap();
                }
            }
            if let Some(r) = op.pointer("/requestBody/content/application~1json/schema/$ref") {
                let ty = r.as_str().unwrap().rsplit('/').next().unwrap();
                write!(chain, ".body(serde_json::from_value::<fleet::types::{ty}>(body.clone().ok_or(\"no body\")?).map_err(|e| e.to_string())?)").unwrap();
            }
            // The success answer as its model: JSON into its type, text (the metrics page) into
            // a string, no body into `()`.
            let success: Vec<&serde_json::Value> = op["responses"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(s, _)| s.starts_with('2'))
                .map(|(_, r)| r)
                .collect();
            let text = success.iter().any(|r| {
                r["content"]
                    .as_object()
                    .is_some_and(|c| !c.is_empty() && !c.contains_key("application/json"))
            });
            let read = if text {
                "text(answer.into_inner()).await"
            } else {
                "json(answer.into_inner())"
            };
            writeln!(
                dispatch,
                "        \"{id}\" => {{ let answer = {chain}.send().await.map_err(|e| format!(\"{{e:?}}\"))?; {read} }}"
            )
            .unwrap();
        }
    }
    dispatch.push_str(
        "        other => Err(format!(\"the client has no operation {other}\")),\n    }\n}\n",
    );
    let dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::write(dir.join("dispatch.rs"), dispatch).unwrap();
}
