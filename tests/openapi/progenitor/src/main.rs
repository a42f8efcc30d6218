//! The client progenitor made of fleetwire's OpenAPI 3.0 document, driven by
//! tests/openapi/generated_clients.py: `fleetwire-progenitor-check`, then one call a line on
//! stdin (operation, base, ca, token, cert, key, params, body, as the other drivers') and one
//! line on stdout for each: `{"answer": …}` with what the client read into its model, or
//! `{"error": "…"}`.

#[allow(clippy::all, unused)]
mod fleet {
    include!(concat!(env!("OUT_DIR"), "/fleet_api.rs"));
}
#[allow(clippy::all, unused)]
mod agent {
    include!(concat!(env!("OUT_DIR"), "/agent_api.rs"));
}

type Params = serde_json::Map<String, serde_json::Value>;

fn param(params: &Params, name: &str) -> Result<String, String> {
    params
        .get(name)
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .ok_or_else(|| format!("no parameter {name}"))
}

fn json<T: serde::Serialize>(answer: T) -> Result<serde_json::Value, String> {
    serde_json::to_value(answer).map_err(|e| e.to_string())
}

/// A text answer (the metrics page), read whole, as a JSON string.
async fn text(stream: progenitor_client::ByteStream) -> Result<serde_json::Value, String> {
    use futures_util::TryStreamExt;
    let bytes = stream
        .into_inner()
        .try_fold(Vec::new(), |mut all, chunk| async move {
            all.extend_from_slice(&chunk);
            Ok(all)
        })
        .await
        .map_err(|e| e.to_string())?;
    String::from_utf8(bytes)
        .map(serde_json::Value::String)
        .map_err(|e| e.to_string())
}

include!(concat!(env!("OUT_DIR"), "/dispatch.rs"));

/// One call: a client configured as the call says (CA, client certificate, token), then the
/// operation.
async fn answer(request: &serde_json::Value) -> Result<serde_json::Value, String> {
    let text = |key: &str| request[key].as_str().map(str::to_string);
    let read = |path: String| std::fs::read(&path).map_err(|e| format!("{path}: {e}"));
    let mut http = reqwest::Client::builder();
    if let Some(ca) = text("ca") {
        let pem = read(ca)?;
        let ca = reqwest::Certificate::from_pem(&pem).map_err(|e| e.to_string())?;
        http = http.tls_certs_only([ca]);
    }
    if let (Some(cert), Some(key)) = (text("cert"), text("key")) {
        let mut pem = read(cert)?;
        pem.extend(read(key)?);
        http = http.identity(reqwest::Identity::from_pem(&pem).map_err(|e| e.to_string())?);
    }
    if let Some(token) = text("token") {
        let mut headers = reqwest::header::HeaderMap::new();
        let value = format!("Bearer {token}").parse().map_err(|e| format!("{e}"))?;
        headers.insert(reqwest::header::AUTHORIZATION, value);
        http = http.default_headers(headers);
    }
    let base = text("base").ok_or("no base")?;
    let client = fleet::Client::new_with_client(&base, http.build().map_err(|e| e.to_string())?);
    let params = request["params"].as_object().cloned().unwrap_or_default();
    let body = (!request["body"].is_null()).then(|| request["body"].clone());
    let operation = request["operation"].as_str().ok_or("no operation")?;
    call(&client, operation, &params, body).await
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A blocking read is right here: one call at a time, nothing else runs meanwhile.
    for line in std::io::stdin().lines() {
        let line = line.expect("stdin");
        let out = match serde_json::from_str(&line) {
            Ok(request) => match answer(&request).await {
                Ok(answer) => serde_json::json!({ "answer": answer }),
                Err(e) => serde_json::json!({ "error": e }),
            },
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        };
        println!("{out}");
    }
}
