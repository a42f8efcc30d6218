//! One operation through the client progenitor made of fleetwire's OpenAPI 3.0 document, for
//! tests/openapi/generated_clients.py: `fleetwire-progenitor-check CALL.json` (CALL.json as the
//! other drivers': operation, base, ca, token, cert, key, params, body). Prints the answer the
//! client read into its model, as JSON; exits 1 with the error otherwise.

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

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let path = std::env::args().nth(1).expect("CALL.json");
    let request: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let text = |key: &str| request[key].as_str().map(str::to_string);
    let mut http = reqwest::Client::builder();
    if let Some(ca) = text("ca") {
        let pem = std::fs::read(ca).unwrap();
        http = http.tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()]);
    }
    if let (Some(cert), Some(key)) = (text("cert"), text("key")) {
        let mut pem = std::fs::read(cert).unwrap();
        pem.extend(std::fs::read(key).unwrap());
        http = http.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    if let Some(token) = text("token") {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        http = http.default_headers(headers);
    }
    let client = fleet::Client::new_with_client(&text("base").unwrap(), http.build().unwrap());
    let params = request["params"].as_object().cloned().unwrap_or_default();
    let body = (!request["body"].is_null()).then(|| request["body"].clone());
    match call(
        &client,
        request["operation"].as_str().unwrap(),
        &params,
        body,
    )
    .await
    {
        Ok(answer) => println!("{answer}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
