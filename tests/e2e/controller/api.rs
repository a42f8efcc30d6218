//! The controller against its API document: every operation of
//! `generated/openapi/fleet-api.json` is called on a live controller, and every answer is
//! checked against the schema the document gives for that status (else its range, `5XX`, else
//! `default`). Then the refusals: bodies that break their schema (400 with each violation's
//! JSON pointer), too large (413), not JSON (415), unknown routes (404), wrong methods (405),
//! unknown runtimes (422) — all as `ApiError` documents, none of which changes stored state.
//!
//! With `FLEETWIRE_OPENAPI_ANSWERS=DIR`, every answer checked here is also written to DIR (one
//! JSON file each: operation, method, path template, status, content type, body), for
//! `tests/openapi/check_openapi.py` to validate against both OpenAPI documents with an
//! independent validator, as a generated client would read them (`.ci/run` does both).

use std::collections::BTreeSet;

use crate::support::controller_harness::*;
use crate::support::workspace;
use serde_json::{json, Value};

struct ApiDocument {
    doc: Value,
}

impl ApiDocument {
    fn load() -> ApiDocument {
        let text =
            std::fs::read_to_string(workspace().join("generated/openapi/fleet-api.json")).unwrap();
        ApiDocument {
            doc: serde_json::from_str(&text).unwrap(),
        }
    }

    /// (operationId, METHOD, path) of every operation.
    fn operations(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for (path, item) in self.doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                if let Some(id) = operation.get("operationId").and_then(Value::as_str) {
                    out.push((id.to_string(), method.to_uppercase(), path.clone()));
                }
            }
        }
        out
    }

    fn operation(&self, id: &str) -> (&Value, String, String) {
        for (path, item) in self.doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                if operation.get("operationId").and_then(Value::as_str) == Some(id) {
                    return (operation, method.to_uppercase(), path.clone());
                }
            }
        }
        panic!("no operation {id}")
    }

    /// Checks one answer against the document; panics with the violations.
    fn check(&self, id: &str, status: u16, content_type: Option<&str>, body: &[u8]) {
        self.check_exchange(id, None, status, content_type, body)
    }

    /// [`Self::check`], recording the JSON request body that provoked the answer too.
    fn check_exchange(
        &self,
        id: &str,
        request: Option<&Value>,
        status: u16,
        content_type: Option<&str>,
        body: &[u8],
    ) {
        record_answer(self, id, request, status, content_type, body);
        let (operation, _, _) = self.operation(id);
        let responses = &operation["responses"];
        let response = responses
            .get(status.to_string())
            // OpenAPI's order: the exact status, then its range (`5XX`), then `default`.
            .or_else(|| responses.get(format!("{}XX", status / 100)))
            .or_else(|| responses.get("default"))
            .unwrap_or_else(|| panic!("{id}: status {status} is not in the document"));
        let Some(content) = response.get("content").and_then(Value::as_object) else {
            assert!(
                body.is_empty(),
                "{id} {status}: the document says no body, got {:?}",
                String::from_utf8_lossy(body)
            );
            return;
        };
        let (media, media_object) = content.iter().next().unwrap();
        let content_type = content_type.unwrap_or_else(|| panic!("{id} {status}: no Content-Type"));
        let essence = |t: &str| t.split(';').next().unwrap().trim().to_ascii_lowercase();
        assert_eq!(
            essence(content_type),
            essence(media),
            "{id} {status}: Content-Type"
        );
        let schema = &media_object["schema"];
        if media != "application/json" {
            assert_eq!(schema["type"], "string");
            assert!(std::str::from_utf8(body).is_ok());
            return;
        }
        let value: Value = serde_json::from_slice(body).unwrap_or_else(|e| {
            panic!(
                "{id} {status}: not JSON ({e}): {:?}",
                String::from_utf8_lossy(body)
            )
        });
        let (name, items) = match (schema.get("$ref"), schema.get("items")) {
            (Some(reference), _) => (reference.as_str().unwrap(), false),
            (None, Some(items)) => {
                assert_eq!(schema["type"], "array");
                (items["$ref"].as_str().unwrap(), true)
            }
            _ => panic!("{id} {status}: unexpected schema {schema}"),
        };
        let name = name.strip_prefix("#/components/schemas/").unwrap();
        let validator = fleetwire_types::compile_validator(name);
        let documents: Vec<&Value> = if items {
            value
                .as_array()
                .unwrap_or_else(|| panic!("{id} {status}: not an array"))
                .iter()
                .collect()
        } else {
            vec![&value]
        };
        for document in documents {
            let errors: Vec<String> = validator
                .iter_errors(document)
                .map(|e| format!("{}: {e}", e.instance_path()))
                .collect();
            assert!(
                errors.is_empty(),
                "{id} {status}: not a valid {name}: {errors:?}\n{document}"
            );
        }
    }
}

/// Writes one answer (and the JSON request body behind it, if any) to
/// `$FLEETWIRE_OPENAPI_ANSWERS` (when set) for the OpenAPI checker.
fn record_answer(
    api: &ApiDocument,
    id: &str,
    request: Option<&Value>,
    status: u16,
    content_type: Option<&str>,
    body: &[u8],
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static SEQUENCE: AtomicUsize = AtomicUsize::new(0);
    let Some(dir) = std::env::var_os("FLEETWIRE_OPENAPI_ANSWERS") else {
        return;
    };
    let (_, method, path) = api.operation(id);
    let is_json = content_type.is_some_and(|t| t.contains("json"));
    let body = match (body.is_empty(), is_json) {
        (true, _) => Value::Null,
        (false, true) => serde_json::from_slice(body).unwrap_or_else(|e| {
            panic!(
                "{id} {status}: not JSON ({e}): {:?}",
                String::from_utf8_lossy(body)
            )
        }),
        (false, false) => Value::String(String::from_utf8_lossy(body).into_owned()),
    };
    let answer = json!({
        "operation": id,
        "method": method,
        "path": path,
        "status": status,
        "content_type": content_type,
        "body": body,
        "request": request,
    });
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let file = dir.join(format!("{}-{n:04}-{id}-{status}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_vec_pretty(&answer).unwrap())
        .unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
}

struct Caller {
    client: reqwest::Client,
    controller: ControllerProcess,
    api: ApiDocument,
    exercised: BTreeSet<(String, u16)>,
}

impl Caller {
    /// Calls operation `id` with `path` (parameters filled in) and an optional JSON body,
    /// checks the answer against the document, and returns status and parsed body.
    async fn call(&mut self, id: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let (_, method, _) = self.api.operation(id);
        let url = self.controller.url(path);
        let mut request = self.client.request(method.parse().unwrap(), &url);
        if let Some(body) = &body {
            request = request.json(body);
        }
        let (status, value) = send_checked(&self.api, id, request, body.as_ref()).await;
        self.exercised.insert((id.to_string(), status));
        (status, value)
    }
}

/// POSTs a JSON body to operation `id` at `url`, checks (and records) the answer against the
/// document, and returns status and parsed body.
async fn post_checked(
    client: &reqwest::Client,
    api: &ApiDocument,
    id: &str,
    url: &str,
    body: &Value,
) -> (u16, Value) {
    send_checked(api, id, client.post(url).json(body), Some(body)).await
}

/// Sends `request` (operation `id`, carrying `body`), checks (and records) the answer against
/// the document, and returns status and parsed body (`null` when it is not JSON).
async fn send_checked(
    api: &ApiDocument,
    id: &str,
    request: reqwest::RequestBuilder,
    body: Option<&Value>,
) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = response.bytes().await.unwrap();
    api.check_exchange(id, body, status, content_type.as_deref(), &bytes);
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn csr_pem() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["whatever.example".to_string()]).unwrap();
    params.serialize_request(&key).unwrap().pem().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_answers_what_the_api_document_says() {
    let ca_dir = tempfile::tempdir().unwrap();
    let agent = AgentStandIn::start().await;
    let engine = SmolvmStandIn::start("0.5.2").await;
    let controller =
        ControllerProcess::start(&["--ca-dir", ca_dir.path().join("ca").to_str().unwrap()]);
    let mut c = Caller {
        client: client(),
        controller,
        api: ApiDocument::load(),
        exercised: BTreeSet::new(),
    };

    // Nodes.
    let mut register = registration("api-node", agent.port, 1000);
    register["csr_pem"] = csr_pem().into();
    register["smolvm_address"] = engine.address().into();
    register["addresses"] = json!(["127.0.0.2", "192.0.2.7"]);
    let (status, answer) = c
        .call(
            "register_node",
            "/v1/nodes/register",
            Some(register.clone()),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["cert_pem"]
        .as_str()
        .unwrap()
        .starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(answer["ca_pem"].is_string());
    assert_eq!(answer["node"]["status"], "registering");
    assert!(answer["node"]["cert_serial"].is_string());
    let ca_pem = std::fs::read_to_string(ca_dir.path().join("ca/ca.pem")).unwrap();
    assert_eq!(
        answer["ca_pem"],
        ca_pem.as_str(),
        "the CA was created in --ca-dir"
    );
    let (_, pem) =
        x509_parser::pem::parse_x509_pem(answer["cert_pem"].as_str().unwrap().as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    let sans: Vec<String> = cert
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .map(|name| match name {
            x509_parser::extensions::GeneralName::DNSName(dns) => dns.to_string(),
            x509_parser::extensions::GeneralName::IPAddress(bytes) => {
                std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*bytes).unwrap()).to_string()
            }
            other => format!("{other:?}"),
        })
        .collect();
    // Loopback addresses are never a node certificate's (docs/security.md).
    assert_eq!(
        sans,
        ["api-node", "192.0.2.7"],
        "only our names, never the CSR's"
    );

    let mut unknown_runtime = registration("api-other", agent.port, 1000);
    unknown_runtime["runtime"] = "firecracker".into();
    let (status, answer) = c
        .call("register_node", "/v1/nodes/register", Some(unknown_runtime))
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (422, Some("unknown_runtime"))
    );
    let mut bad_csr = registration("api-other", agent.port, 1000);
    bad_csr["csr_pem"] =
        "-----BEGIN CERTIFICATE REQUEST-----\nnot base64\n-----END CERTIFICATE REQUEST-----\n"
            .into();
    let (status, answer) = c
        .call("register_node", "/v1/nodes/register", Some(bad_csr))
        .await;
    assert_eq!(
        (status, answer["violations"][0]["instance_path"].as_str()),
        (400, Some("/csr_pem"))
    );
    let (status, _) = c.call("get_node", "/v1/nodes/api-other", None).await;
    assert_eq!(status, 404, "a refused registration stores nothing");

    let mut beat = ppn_heartbeat("api-node", "127.0.0.1", agent.port);
    beat["disk_free_gb"] = 900.into();
    beat["runtime_boot_id"] = "rt-1".into();
    beat["cpu_usage"] = 0.5.into();
    let (status, _) = c
        .call("post_heartbeat", "/v1/nodes/heartbeat", Some(beat.clone()))
        .await;
    assert_eq!(status, 200);
    let mut broken = beat.clone();
    broken["ram_total_mb"] = (-1).into();
    broken["wg_ip"] = "10.0.0.300".into();
    broken.as_object_mut().unwrap().remove("boot_id");
    let (status, answer) = c
        .call("post_heartbeat", "/v1/nodes/heartbeat", Some(broken))
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("invalid_document"))
    );
    let pointers: BTreeSet<&str> = answer["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["instance_path"].as_str().unwrap())
        .collect();
    for pointer in ["/ram_total_mb", "/wg_ip", ""] {
        assert!(
            pointers.contains(pointer),
            "{pointer:?} not among {pointers:?}"
        );
    }

    for (query, status_wanted) in [
        ("", 200),
        ("?status=all", 200),
        ("?status=registering", 200),
        ("?status=bogus", 400),
    ] {
        let (status, answer) = c
            .call("list_nodes", &format!("/v1/nodes{query}"), None)
            .await;
        assert_eq!(status, status_wanted, "{answer}");
    }
    let (status, node) = c.call("get_node", "/v1/nodes/api-node", None).await;
    assert_eq!((status, node["status"].as_str()), (200, Some("ready")));
    c.call("get_node", "/v1/nodes/nobody", None).await;
    let (status, node) = c
        .call(
            "cordon_node",
            "/v1/nodes/api-node/cordon?reason=kernel%20update",
            None,
        )
        .await;
    assert_eq!(
        (status, node["cordon_reason"].as_str()),
        (200, Some("kernel update"))
    );
    c.call("cordon_node", "/v1/nodes/nobody/cordon", None).await;
    let (status, node) = c
        .call("uncordon_node", "/v1/nodes/api-node/uncordon", None)
        .await;
    assert!(status == 200 && node.get("cordoned_at").is_none());
    c.call("uncordon_node", "/v1/nodes/nobody/uncordon", None)
        .await;
    let (status, node) = c.call("drain_node", "/v1/nodes/api-node/drain", None).await;
    assert_eq!((status, node["status"].as_str()), (200, Some("draining")));
    c.call("drain_node", "/v1/nodes/nobody/drain", None).await;
    c.call("uncordon_node", "/v1/nodes/api-node/uncordon", None)
        .await;
    let (status, fleet) = c.call("get_fleet", "/v1/fleet", None).await;
    assert_eq!((status, fleet["counts"]["ready"].as_u64()), (200, Some(1)));

    // VMs.
    // `preferred_node: null` as PPN clients send it: nullable in the schema and both documents.
    let (status, vm) = c.call("create_vm", "/v1/vms", Some(json!({"vm_type": "small", "ram_mb": 512, "vcpu_count": 1, "tenant_id": "t1", "preferred_node": null, "image": "alpine:3.20", "network": true, "command": ["/bin/app", "--serve"]}))).await;
    assert_eq!(status, 200, "{vm}");
    assert_eq!(vm["image"], "alpine:3.20");
    let vm_id = vm["vm_id"].as_str().unwrap().to_string();
    assert_eq!(vm["command"], json!(["/bin/app", "--serve"]));
    c.call(
        "create_vm",
        "/v1/vms",
        Some(json!({"vm_type": "small", "ram_mb": 512, "vcpu_count": 1, "vm_id": vm_id})),
    )
    .await;
    c.call(
        "create_vm",
        "/v1/vms",
        Some(json!({"vm_type": "", "ram_mb": 0, "vcpu_count": 1})),
    )
    .await;
    c.call(
        "create_vm",
        "/v1/vms",
        Some(json!({"vm_type": "x", "ram_mb": 1, "vcpu_count": 1, "preferred_node": "nobody"})),
    )
    .await;
    c.call(
        "create_vm",
        "/v1/vms",
        Some(json!({"vm_type": "x", "ram_mb": 1_000_000, "vcpu_count": 1})),
    )
    .await;
    agent.set_mode(SpawnMode::Fail);
    c.call(
        "create_vm",
        "/v1/vms",
        Some(json!({"vm_type": "x", "ram_mb": 1, "vcpu_count": 1})),
    )
    .await;
    agent.set_mode(SpawnMode::Succeed);
    for path in [
        "/v1/vms".to_string(),
        "/v1/vms?tenant_id=t1".into(),
        "/v1/vms?tenant_id=no%0Anewlines".into(),
    ] {
        c.call("list_vms", &path, None).await;
    }
    let (status, got) = c.call("get_vm", &format!("/v1/vms/{vm_id}"), None).await;
    assert_eq!((status, got["tenant_id"].as_str()), (200, Some("t1")));
    c.call("get_vm", "/v1/vms/nothing", None).await;
    // The stand-in agent keeps no logs: its answer is relayed as the document declares.
    c.call("get_vm_logs", &format!("/v1/vms/{vm_id}/logs"), None)
        .await;
    c.call("get_vm_logs", "/v1/vms/nothing/logs", None).await;
    let (status, _) = c.call("delete_vm", &format!("/v1/vms/{vm_id}"), None).await;
    assert_eq!(status, 204);
    c.call("delete_vm", &format!("/v1/vms/{vm_id}"), None).await;

    // Operations.
    let (status, health) = c.call("get_healthz", "/healthz", None).await;
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
    let (status, ready) = c.call("get_readyz", "/readyz", None).await;
    assert_eq!((status, ready["status"].as_str()), (200, Some("ok")));
    let (status, _) = c.call("get_metrics", "/metrics", None).await;
    assert_eq!(status, 200);
    let metrics = metrics_text(&c.client, &c.controller).await;
    for family in [
        "fleetwire_controller_http_requests_total{method=\"POST\",route=\"/v1/nodes/heartbeat\",status=\"200\"}",
        "fleetwire_controller_http_request_duration_seconds_bucket{",
        "fleetwire_controller_nodes{status=\"ready\"}",
        "fleetwire_controller_heartbeats_received_total 1",
        "fleetwire_controller_store_flush_duration_seconds_count",
    ] {
        assert!(metrics.contains(family), "{family} missing:\n{metrics}");
    }

    // Bootstrap tokens (taken in every mode; only mTLS mode asks for them).
    let (status, issued) = c
        .call(
            "create_bootstrap_token",
            "/v1/tokens",
            Some(json!({"node_id": "api-node", "ttl_s": 600})),
        )
        .await;
    assert_eq!(status, 201, "{issued}");
    let (status, _) = c
        .call(
            "create_bootstrap_token",
            "/v1/tokens",
            Some(json!({"node_id": "api-node", "ttl_s": 5})),
        )
        .await;
    assert_eq!(
        status, 400,
        "a token of five seconds is under the schema's minimum"
    );

    let (status, _) = c.call("delete_node", "/v1/nodes/api-node", None).await;
    assert_eq!(status, 204);
    c.call("delete_node", "/v1/nodes/api-node", None).await;

    // Every operation of the document was called.
    let called: BTreeSet<String> = c.exercised.iter().map(|(id, _)| id.clone()).collect();
    let documented: BTreeSet<String> = c
        .api
        .operations()
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(called, documented);
    // And every documented error status that a request can provoke here was seen.
    for (id, status) in [
        ("register_node", 422),
        ("register_node", 400),
        ("post_heartbeat", 400),
        ("list_nodes", 400),
        ("create_bootstrap_token", 400),
        ("get_node", 404),
        ("delete_node", 404),
        ("create_vm", 409),
        ("create_vm", 400),
        ("create_vm", 422),
        ("create_vm", 503),
        ("create_vm", 502),
        ("list_vms", 400),
        ("get_vm", 404),
        ("delete_vm", 404),
    ] {
        assert!(
            c.exercised.contains(&(id.to_string(), status)),
            "{id} {status} not exercised"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_api_errors_and_change_nothing() {
    let controller = ControllerProcess::start(&[]);
    let client = client();
    let api = ApiDocument::load();
    let url = controller.url("/v1/nodes/heartbeat");
    let good = ppn_heartbeat("n1", "127.0.0.1", 9204);

    // 415: not declared as JSON.
    let response = client
        .post(&url)
        .header("content-type", "text/plain")
        .body(good.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 415);
    let ct = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    let bytes = response.bytes().await.unwrap();
    api.check("post_heartbeat", 415, Some(&ct), &bytes);
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["code"], "unsupported_media_type");
    // 400 malformed_json.
    let response = client
        .post(&url)
        .header("content-type", "application/json")
        .body("{\"node_id\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let ct = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    let bytes = response.bytes().await.unwrap();
    api.check("post_heartbeat", 400, Some(&ct), &bytes);
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).unwrap()["code"],
        "malformed_json"
    );
    // 413: over the body limit.
    let mut huge = good.clone();
    huge["hostname"] = "x".repeat(2 << 20).into();
    let response = client.post(&url).json(&huge).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let ct = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    let bytes = response.bytes().await.unwrap();
    api.check("post_heartbeat", 413, Some(&ct), &bytes);
    // A registration with a bad value and a field the schema does not list: 400 naming the bad
    // value only. An unknown field alone is set aside and answered as a warning, not refused
    // (README "Unknown fields"; tests/e2e/controller/unknown_fields.rs).
    let mut extra = registration("n1", 9204, 10);
    extra["engine_version"] = "1.0.0".into();
    extra["total_cpus"] = (-1).into();
    let (status, body) = post_checked(
        &client,
        &api,
        "register_node",
        &controller.url("/v1/nodes/register"),
        &extra,
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_document"))
    );
    let violations = body["violations"].as_array().unwrap();
    assert_eq!(violations.len(), 1, "{body}");
    assert_eq!(violations[0]["instance_path"], "/total_cpus", "{body}");
    assert!(
        !body["message"].as_str().unwrap().contains("engine_version"),
        "{body}"
    );
    // None of it enrolled anything.
    let (_, all) = get_json(&client, &controller.url("/v1/nodes?status=all")).await;
    assert_eq!(all, json!([]));
    // A bad VM record inside a heartbeat refuses only that entry: the node is taken and its
    // record points into the array (docs/controller.md, "Bad VM entries").
    let mut bad_vm = good.clone();
    bad_vm["vms"] = json!([{"vm_id": "v", "vm_type": "t", "state": "Sleeping", "ram_alloc_mb": 1, "vcpu_count": 1}]);
    let (status, body) = post_json(&client, &url, &bad_vm).await;
    assert_eq!(status, 200, "{body}");
    let (_, node) = get_json(&client, &controller.url("/v1/nodes/n1")).await;
    assert_eq!(
        node["rejected_vms"][0]["instance_path"], "/vms/0/state",
        "{node}"
    );
    assert_eq!(node["vm_count"], 0);
    let (status, _) = delete_url(&client, &controller.url("/v1/nodes/n1")).await;
    assert_eq!(status, 204);

    // 404 and 405 as ApiError (the heartbeat path too, though POSTs to it skip the router).
    let (status, body) = get_json(&client, &controller.url("/v2/nothing")).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let (status, body) = get_json(&client, &url).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
    let response = client
        .put(controller.url("/v1/fleet"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 405);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "method_not_allowed");
    assert!(
        fleetwire_types::read_strict::<fleetwire_types::ApiError>(body.to_string().as_bytes())
            .is_ok()
    );

    // The reference site is served under /docs/.
    let response = client.get(controller.url("/docs/")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    // And both OpenAPI documents beside its API page, as generated/openapi/ holds them.
    for name in ["fleet-api.json", "fleet-api.3.1.json"] {
        let response = client
            .get(controller.url(&format!("/docs/openapi/{name}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{name}");
        assert_eq!(response.headers()["content-type"], "application/json");
        let served = response.text().await.unwrap();
        let kept = std::fs::read_to_string(workspace().join("generated/openapi").join(name));
        assert_eq!(served, kept.unwrap(), "{name}");
    }
    let response = client
        .get(controller.url("/docs/no-such-page.html"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
}

/// Sends `head` and a part of a body it promises in full, then waits for the answer.
fn stalled_request(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{{\"node_id\":"
    )
    .unwrap();
    let mut answer = vec![0; 4096];
    let n = stream.read(&mut answer).unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_body_stalls_times_out_as_an_api_error() {
    let controller = ControllerProcess::start(&["--request-timeout", "300ms"]);
    for path in ["/v1/nodes/heartbeat", "/v1/nodes/register"] {
        let port = controller.port;
        let started = std::time::Instant::now();
        let answer = tokio::task::spawn_blocking(move || stalled_request(port, path))
            .await
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 503"), "{path}: {answer}");
        assert!(answer.contains("\"code\":\"timeout\""), "{path}: {answer}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{path}: answered only after {:?}",
            started.elapsed()
        );
    }
    let metrics = metrics_text(&client(), &controller).await;
    assert!(
        metrics.contains(
            "fleetwire_controller_http_requests_total{method=\"POST\",route=\"/v1/nodes/heartbeat\",status=\"503\"} 1"
        ),
        "{metrics}"
    );
}

/// mTLS mode's refusals, checked (and recorded) against the document like every other answer:
/// `401` and `403` on node routes and operator routes, with the credentials a caller would
/// have (docs/security.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_refusals_answer_what_the_api_document_says() {
    let controller = ControllerProcess::start_secure(&[]);
    let api = ApiDocument::load();
    let anonymous = controller.tls_client();
    let url = |path: &str| controller.url(path);

    // A token for n1, minted by an admin; a read-only token may not.
    let mint = json!({"node_id": "n1", "ttl_s": 600});
    let (status, issued) = send_checked(
        &api,
        "create_bootstrap_token",
        anonymous
            .post(url("/v1/tokens"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&mint),
        Some(&mint),
    )
    .await;
    assert_eq!(status, 201);
    let token = issued["token"].as_str().unwrap().to_string();
    let (status, _) = send_checked(
        &api,
        "create_bootstrap_token",
        anonymous
            .post(url("/v1/tokens"))
            .bearer_auth(VIEWER_TOKEN)
            .json(&mint),
        Some(&mint),
    )
    .await;
    assert_eq!(status, 403);

    // Registration: no credential 401, another node's token 403, its own token 200.
    let key = rcgen::KeyPair::generate().unwrap();
    let csr = rcgen::CertificateParams::new(vec!["n1".to_string()])
        .unwrap()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap();
    let mut register = registration("n2", 9, 100);
    register["csr_pem"] = csr.clone().into();
    let (status, _) = post_checked(
        &anonymous,
        &api,
        "register_node",
        &url("/v1/nodes/register"),
        &register,
    )
    .await;
    assert_eq!(status, 401);
    let (status, _) = send_checked(
        &api,
        "register_node",
        anonymous
            .post(url("/v1/nodes/register"))
            .bearer_auth(&token)
            .json(&register),
        Some(&register),
    )
    .await;
    assert_eq!(status, 403);
    register["node_id"] = "n1".into();
    let (status, answer) = send_checked(
        &api,
        "register_node",
        anonymous
            .post(url("/v1/nodes/register"))
            .bearer_auth(&token)
            .json(&register),
        Some(&register),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let n1 = tls_client(
        &controller.ca_pem(),
        Some((answer["cert_pem"].as_str().unwrap(), &key.serialize_pem())),
    );

    // Heartbeats: without a certificate 401, as another node 403.
    let body = ppn_heartbeat("n1", "127.0.0.1", 9);
    let (status, _) = post_checked(
        &anonymous,
        &api,
        "post_heartbeat",
        &url("/v1/nodes/heartbeat"),
        &body,
    )
    .await;
    assert_eq!(status, 401);
    let other = ppn_heartbeat("n2", "127.0.0.1", 9);
    let (status, _) = post_checked(
        &n1,
        &api,
        "post_heartbeat",
        &url("/v1/nodes/heartbeat"),
        &other,
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = post_checked(
        &n1,
        &api,
        "post_heartbeat",
        &url("/v1/nodes/heartbeat"),
        &body,
    )
    .await;
    assert_eq!(status, 200);

    // Operator routes: no token 401, a read-only token on a write 403; metrics 401.
    for (id, path) in [
        ("list_nodes", "/v1/nodes"),
        ("get_fleet", "/v1/fleet"),
        ("get_metrics", "/metrics"),
    ] {
        let (status, _) = send_checked(&api, id, anonymous.get(url(path)), None).await;
        assert_eq!(status, 401, "{id}");
    }
    let (status, _) = send_checked(
        &api,
        "cordon_node",
        anonymous
            .post(url("/v1/nodes/n1/cordon"))
            .bearer_auth(VIEWER_TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = send_checked(
        &api,
        "delete_node",
        anonymous
            .delete(url("/v1/nodes/n1"))
            .bearer_auth(VIEWER_TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = send_checked(
        &api,
        "get_node",
        anonymous.get(url("/v1/nodes/n1")).bearer_auth(VIEWER_TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 200);

    // Unenrolled: its heartbeat is 404, the cue to register again (with a new token).
    let (status, _) = send_checked(
        &api,
        "delete_node",
        anonymous
            .delete(url("/v1/nodes/n1"))
            .bearer_auth(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 204);
    let (status, _) = post_checked(
        &n1,
        &api,
        "post_heartbeat",
        &url("/v1/nodes/heartbeat"),
        &body,
    )
    .await;
    assert_eq!(status, 404);
}
