//! The hostile-input catalogue (docs/reliability/hostile-input.md): one table of requests no
//! well-behaved client sends, each with the answer it must get, sent as raw bytes over TCP (and
//! TLS) to the real controller, in both its modes, and to the real agent's local API. After
//! every case the stored state (the controller's node and VM listings, the agent's desired
//! document and VMs) is what it was before, and the server still answers a normal request; the
//! controller's state is checked once more after a restart.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::agent_harness::AgentProcess;
use crate::support::controller_harness::{ControllerProcess, ADMIN_TOKEN};
use crate::support::wait_for;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Talking to a server in raw bytes.

/// Where the cases go: an address, TLS trust when the server speaks TLS, the operator token
/// its routes want.
#[derive(Clone)]
struct Server {
    name: &'static str,
    port: u16,
    tls: Option<Arc<rustls::ClientConfig>>,
    token: Option<&'static str>,
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

impl Server {
    fn connect(&self) -> Box<dyn Stream> {
        let tcp = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        tcp.set_nodelay(true).unwrap();
        match &self.tls {
            None => Box::new(tcp),
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
                let connection = rustls::ClientConnection::new(config.clone(), name).unwrap();
                Box::new(rustls::StreamOwned::new(connection, tcp))
            }
        }
    }

    /// A normal request's status: `GET /healthz`.
    fn healthz(&self) -> Option<u16> {
        let mut stream = self.connect();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .ok()?;
        match read_answer(&mut stream, Duration::from_secs(20)) {
            Outcome::Answered(answer) => Some(answer.status),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

#[derive(Debug)]
enum Outcome {
    Answered(Answer),
    /// The server closed the connection without answering.
    Closed,
    /// Nothing came within the wait.
    Silent,
}

/// Reads one answer: the head, then `Content-Length` bytes or up to the end of the connection.
fn read_answer(stream: &mut Box<dyn Stream>, wait: Duration) -> Outcome {
    let deadline = Instant::now() + wait;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(answer) = parse_answer(&buf, false) {
            return Outcome::Answered(answer);
        }
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if Instant::now() >= deadline {
                    return parse_answer(&buf, true)
                        .map(Outcome::Answered)
                        .unwrap_or(Outcome::Silent);
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // Reset, or TLS closed without close_notify: the end of the connection.
            Err(_) => break,
        }
    }
    parse_answer(&buf, true)
        .map(Outcome::Answered)
        .unwrap_or(Outcome::Closed)
}

fn parse_answer(buf: &[u8], at_end: bool) -> Option<Answer> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(head) = response.parse(buf).ok()? else {
        return None;
    };
    let status = response.code?;
    let headers: Vec<(String, String)> = response
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok());
    let body = &buf[head..];
    match length {
        Some(length) if body.len() >= length => Some(Answer {
            status,
            headers,
            body: body[..length].to_vec(),
        }),
        None if at_end => Some(Answer {
            status,
            headers,
            body: body.to_vec(),
        }),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// The catalogue.

/// What a case sends.
enum Sends {
    /// A request: method, path, extra headers and body; the runner adds `Host`,
    /// `Content-Length` (unless the headers have one or `Transfer-Encoding`), the operator
    /// token the server wants, and `Connection: close`.
    Http {
        method: &'static str,
        path: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// These bytes as they are.
    Raw(Vec<u8>),
    /// A request head and then the body a byte a second, for as long as the server listens.
    SlowBody { path: &'static str },
    /// A request head a byte a second, never finished.
    SlowHead,
}

/// The answer a case must get.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// This status, and when given the `ApiError` code and a violation at this pointer.
    Status(u16, Option<&'static str>, Option<&'static str>),
    /// This status and `ApiError` code, the message saying this.
    Saying(u16, &'static str, &'static str),
    /// The connection closed without an answer (within `wait`).
    Closed,
}

struct Case {
    name: &'static str,
    send: Sends,
    expect: Expect,
}

fn json_post(path: &str, body: impl Into<Vec<u8>>) -> Sends {
    request("POST", path, &[("Content-Type", "application/json")], body)
}

fn json_put(path: &str, body: impl Into<Vec<u8>>) -> Sends {
    request("PUT", path, &[("Content-Type", "application/json")], body)
}

fn request(
    method: &'static str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Vec<u8>>,
) -> Sends {
    Sends::Http {
        method,
        path: path.to_string(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        body: body.into(),
    }
}

fn get(path: &str) -> Sends {
    request("GET", path, &[], Vec::new())
}

fn bad(status: u16, code: &'static str) -> Expect {
    Expect::Status(status, Some(code), None)
}

fn invalid_at(pointer: &'static str) -> Expect {
    Expect::Status(400, Some("invalid_document"), Some(pointer))
}

fn malformed() -> Expect {
    bad(400, "malformed_json")
}

fn nested(depth: usize, open: &str, close: &str) -> String {
    format!("{}{}", open.repeat(depth), close.repeat(depth))
}

/// `base` as JSON text with `field` set to the raw JSON `value` (which need not be JSON).
fn with_field(mut base: Value, field: &str, value: &str) -> Vec<u8> {
    base[field] = json!("__hostile__");
    base.to_string()
        .replace("\"__hostile__\"", value)
        .into_bytes()
}

/// A valid `CreateVmRequest` with `field` replaced by the raw JSON `value`.
fn vm_request_with(field: &str, value: &str) -> Vec<u8> {
    let base = json!({"vm_type": "web", "ram_mb": 64, "vcpu_count": 1, "disk_gb": 1});
    with_field(base, field, value)
}

/// A valid `RegisterNodeRequest`, `field` replaced.
fn registration_with(field: &str, value: &str) -> Vec<u8> {
    let base = json!({
        "node_id": "hostile-node", "hostname": "hostile.example", "wg_ip": "127.0.0.9",
        "spawn_port": 1, "total_cpus": 4, "total_memory_mb": 8192, "total_disk_gb": 100,
        "kvm_available": true
    });
    with_field(base, field, value)
}

/// A valid PPN `NodeHeartbeat`, `field` replaced.
fn heartbeat_with(field: &str, value: &str) -> Vec<u8> {
    with_field(
        crate::support::controller_harness::ppn_body("hostile-node", "127.0.0.9"),
        field,
        value,
    )
}

/// What a JSON route of either server must refuse, whatever the route: `route` takes a body of
/// the route's document with one field replaced by raw JSON.
fn json_cases(
    prefix: &'static str,
    path: &'static str,
    with: fn(&str, &str) -> Vec<u8>,
    int_field: &'static str,
    int_pointer: &'static str,
    str_field: &'static str,
    str_pointer: &'static str,
) -> Vec<Case> {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let name = |what: &str| leak(format!("{prefix}: {what}"));
    let whole = with(int_field, "1");
    let truncated = whole[..whole.len() / 2].to_vec();
    vec![
        Case {
            name: name("truncated JSON"),
            send: json_post(path, truncated),
            expect: malformed(),
        },
        Case {
            name: name("empty body"),
            send: json_post(path, ""),
            expect: malformed(),
        },
        Case {
            name: name("trailing garbage"),
            send: json_post(path, [whole.clone(), b"}{".to_vec()].concat()),
            expect: malformed(),
        },
        Case {
            name: name("10^5 nested arrays"),
            send: json_post(path, nested(100_000, "[", "]")),
            expect: malformed(),
        },
        Case {
            name: name("10^5 nested objects"),
            send: json_post(path, nested(100_000, "{\"a\":", "}")),
            expect: malformed(),
        },
        Case {
            name: name("10^5 nested arrays in a field"),
            send: json_post(path, with(str_field, &nested(100_000, "[", "]"))),
            expect: malformed(),
        },
        Case {
            name: name("1e999 in an integer field"),
            send: json_post(path, with(int_field, "1e999")),
            expect: malformed(),
        },
        Case {
            name: name("NaN"),
            send: json_post(path, with(int_field, "NaN")),
            expect: malformed(),
        },
        Case {
            name: name("Infinity"),
            send: json_post(path, with(int_field, "-Infinity")),
            expect: malformed(),
        },
        Case {
            name: name("2^64 in an integer field"),
            send: json_post(path, with(int_field, "18446744073709551616")),
            expect: invalid_at(int_pointer),
        },
        Case {
            name: name("10^30 in an integer field"),
            send: json_post(path, with(int_field, "1000000000000000000000000000000")),
            expect: invalid_at(int_pointer),
        },
        Case {
            name: name("a 400-digit integer"),
            send: json_post(path, with(int_field, &"9".repeat(400))),
            expect: malformed(),
        },
        Case {
            name: name("a fraction in an integer field"),
            send: json_post(path, with(int_field, "1.5")),
            expect: invalid_at(int_pointer),
        },
        Case {
            name: name("a negative integer"),
            send: json_post(path, with(int_field, "-1")),
            expect: invalid_at(int_pointer),
        },
        Case {
            name: name("a string for an integer"),
            send: json_post(path, with(int_field, "\"1\"")),
            expect: invalid_at(int_pointer),
        },
        Case {
            name: name("an object for a string"),
            send: json_post(path, with(str_field, "{}")),
            expect: invalid_at(str_pointer),
        },
        Case {
            name: name("null for a string"),
            send: json_post(path, with(str_field, "null")),
            expect: invalid_at(str_pointer),
        },
        Case {
            name: name("an array for the document"),
            send: json_post(path, "[]"),
            expect: invalid_at(""),
        },
        Case {
            name: name("null for the document"),
            send: json_post(path, "null"),
            expect: invalid_at(""),
        },
        Case {
            name: name("a duplicate key"),
            send: json_post(path, {
                let body = String::from_utf8(with(str_field, "\"first\"")).unwrap();
                let key = str_pointer.rsplit('/').next().unwrap();
                let at = format!("\"{key}\":");
                body.replacen(&at, &format!("{at}\"second\",{at}"), 1)
                    .into_bytes()
            }),
            expect: Expect::Saying(400, "invalid_document", "duplicate field"),
        },
        Case {
            name: name("a 100 000-character string"),
            send: json_post(
                path,
                with(str_field, &format!("\"{}\"", "x".repeat(100_000))),
            ),
            expect: invalid_at(str_pointer),
        },
        Case {
            name: name("invalid UTF-8 in a string"),
            send: json_post(
                path,
                [
                    b"{\"".to_vec(),
                    str_field.as_bytes().to_vec(),
                    b"\": \"\xff\xfe\"}".to_vec(),
                ]
                .concat(),
            ),
            expect: malformed(),
        },
        Case {
            name: name("an overlong UTF-8 slash in a string"),
            send: json_post(
                path,
                [
                    b"{\"".to_vec(),
                    str_field.as_bytes().to_vec(),
                    b"\": \"..\xc0\xaf..\"}".to_vec(),
                ]
                .concat(),
            ),
            expect: malformed(),
        },
        Case {
            name: name("a lone surrogate escape"),
            send: json_post(path, with(str_field, "\"\\ud800\"")),
            expect: malformed(),
        },
        Case {
            name: name("a raw control character in a string"),
            send: json_post(path, with(str_field, "\"a\u{1}b\"")),
            expect: malformed(),
        },
        Case {
            name: name("an escaped NUL in a string"),
            send: json_post(path, with(str_field, "\"a\\u0000b\"")),
            expect: invalid_at(str_pointer),
        },
        Case {
            name: name("an escaped ESC and newline in a string"),
            send: json_post(path, with(str_field, "\"a\\u001b[31m\\nb\"")),
            expect: invalid_at(str_pointer),
        },
        Case {
            name: name("not sent as JSON"),
            send: request(
                "POST",
                path,
                &[("Content-Type", "text/plain")],
                whole.clone(),
            ),
            expect: bad(415, "unsupported_media_type"),
        },
    ]
}

/// What every HTTP server of fleetwire must do with a hostile request head or body.
fn transport_cases(prefix: &'static str, post_path: &'static str) -> Vec<Case> {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let name = |what: &str| leak(format!("{prefix}: {what}"));
    let limit = fleetwire::http::MAX_BODY_BYTES;
    let head_limit = fleetwire::http_serve::MAX_HEADER_BYTES;
    vec![
        Case {
            name: name("Content-Length of 100 MB, 64 KiB sent"),
            send: request(
                "POST",
                post_path,
                &[
                    ("Content-Type", "application/json"),
                    ("Content-Length", "100000000"),
                ],
                vec![b' '; 64 * 1024],
            ),
            expect: bad(413, "payload_too_large"),
        },
        Case {
            name: name("a body one byte over the limit"),
            send: json_post(post_path, vec![b' '; limit + 1]),
            expect: bad(413, "payload_too_large"),
        },
        Case {
            name: name("a chunked body over the limit"),
            send: request(
                "POST",
                post_path,
                &[
                    ("Content-Type", "application/json"),
                    ("Transfer-Encoding", "chunked"),
                ],
                [
                    (0..20)
                        .flat_map(|_| {
                            [b"10000\r\n".to_vec(), vec![b' '; 0x10000], b"\r\n".to_vec()].concat()
                        })
                        .collect(),
                    b"0\r\n\r\n".to_vec(),
                ]
                .concat(),
            ),
            expect: bad(413, "payload_too_large"),
        },
        Case {
            name: name("a 64 KiB header"),
            send: request(
                "GET",
                "/healthz",
                &[("X-Big", &"a".repeat(64 * 1024))],
                Vec::new(),
            ),
            expect: Expect::Status(431, None, None),
        },
        Case {
            name: name("a head one byte over the head limit"),
            send: Sends::Raw({
                let start = "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Pad: ";
                let pad = head_limit + 1 - start.len() - 4;
                format!("{start}{}\r\n\r\n", "a".repeat(pad)).into_bytes()
            }),
            expect: Expect::Status(431, None, None),
        },
        Case {
            name: name("500 headers"),
            send: Sends::Raw({
                let headers: String = (0..500).map(|i| format!("X-H{i}: v\r\n")).collect();
                format!("GET /healthz HTTP/1.1\r\nHost: t\r\n{headers}\r\n").into_bytes()
            }),
            expect: Expect::Status(431, None, None),
        },
        Case {
            name: name("a 40 KB URI"),
            send: get(&format!("/v1/vms/{}", "a".repeat(40_000))),
            expect: Expect::Status(431, None, None),
        },
        Case {
            name: name("a NUL in a header value"),
            send: Sends::Raw(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: a\0b\r\n\r\n".to_vec()),
            expect: Expect::Status(400, None, None),
        },
        Case {
            name: name("a space before a header's colon"),
            send: Sends::Raw(b"GET /healthz HTTP/1.1\r\nHost : t\r\n\r\n".to_vec()),
            expect: Expect::Status(400, None, None),
        },
        Case {
            name: name("a Content-Length that is not a number"),
            send: request(
                "POST",
                post_path,
                &[
                    ("Content-Type", "application/json"),
                    ("Content-Length", "12abc"),
                ],
                b"{}".to_vec(),
            ),
            expect: Expect::Status(400, None, None),
        },
        Case {
            name: name("two different Content-Lengths"),
            send: request(
                "POST",
                post_path,
                &[
                    ("Content-Type", "application/json"),
                    ("Content-Length", "2"),
                    ("Content-Length", "3"),
                ],
                b"{} ".to_vec(),
            ),
            expect: Expect::Status(400, None, None),
        },
        Case {
            name: name("Content-Length with Transfer-Encoding (smuggling)"),
            send: request(
                "POST",
                post_path,
                &[
                    ("Content-Type", "application/json"),
                    ("Content-Length", "4"),
                    ("Transfer-Encoding", "chunked"),
                ],
                b"0\r\n\r\n".to_vec(),
            ),
            expect: Expect::Status(400, None, None),
        },
        Case {
            name: name("not HTTP at all"),
            send: Sends::Raw(
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n".to_vec(),
            ),
            expect: Expect::Status(400, None, None),
        },
        Case {
            name: name("HTTP/2 preface on an HTTP/1.1 server"),
            send: Sends::Raw(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec()),
            expect: Expect::Closed,
        },
        Case {
            name: name("a body dribbled a byte a second"),
            send: Sends::SlowBody { path: post_path },
            expect: bad(408, "timeout"),
        },
        Case {
            name: name("a request head dribbled a byte a second"),
            send: Sends::SlowHead,
            expect: Expect::Closed,
        },
    ]
}

fn traversal_cases(prefix: &'static str, paths: &[(&'static str, &'static str)]) -> Vec<Case> {
    paths
        .iter()
        .map(|(method, path)| Case {
            name: Box::leak(format!("{prefix}: path traversal {method} {path}").into_boxed_str()),
            send: request(method, path, &[], Vec::new()),
            expect: bad(404, "not_found"),
        })
        .collect()
}

fn controller_cases(secure: bool) -> Vec<Case> {
    let mut cases = json_cases(
        "POST /v1/vms",
        "/v1/vms",
        vm_request_with,
        "vcpu_count",
        "/vcpu_count",
        "vm_type",
        "/vm_type",
    );
    if !secure {
        // The node routes want a node's credential in mTLS mode: they are reached in plain mode.
        cases.extend(json_cases(
            "POST /v1/nodes/register",
            "/v1/nodes/register",
            registration_with,
            "total_cpus",
            "/total_cpus",
            "hostname",
            "/hostname",
        ));
        cases.extend(json_cases(
            "POST /v1/nodes/heartbeat",
            "/v1/nodes/heartbeat",
            heartbeat_with,
            "cpu_cores",
            "/cpu_cores",
            "hostname",
            "/hostname",
        ));
        cases.extend([
            Case {
                name: "register: a node id with ../",
                send: json_post(
                    "/v1/nodes/register",
                    registration_with("node_id", "\"../../etc/passwd\""),
                ),
                expect: invalid_at("/node_id"),
            },
            Case {
                name: "register: a node id with %2e%2e%2f",
                send: json_post(
                    "/v1/nodes/register",
                    registration_with("node_id", "\"%2e%2e%2fx\""),
                ),
                expect: invalid_at("/node_id"),
            },
            Case {
                name: "register: a 300-character node id",
                send: json_post(
                    "/v1/nodes/register",
                    registration_with("node_id", &format!("\"{}\"", "n".repeat(300))),
                ),
                expect: invalid_at("/node_id"),
            },
            Case {
                name: "register: a node id with a control character",
                send: json_post(
                    "/v1/nodes/register",
                    registration_with("node_id", "\"n\\u0007\""),
                ),
                expect: invalid_at("/node_id"),
            },
            Case {
                name: "heartbeat: a node id with ../",
                send: json_post("/v1/nodes/heartbeat", heartbeat_with("node_id", "\"../x\"")),
                expect: invalid_at("/node_id"),
            },
            Case {
                name: "heartbeat: vms is an object",
                send: json_post("/v1/nodes/heartbeat", heartbeat_with("vms", "{}")),
                expect: invalid_at("/vms"),
            },
        ]);
        cases.extend(transport_cases(
            "POST /v1/nodes/heartbeat",
            "/v1/nodes/heartbeat",
        ));
    }
    cases.extend([
        Case {
            name: "POST /v1/vms: -0 for vcpu_count (minimum 1)",
            send: json_post("/v1/vms", vm_request_with("vcpu_count", "-0")),
            expect: invalid_at("/vcpu_count"),
        },
        Case {
            name: "POST /v1/vms: a 129-character VM id",
            send: json_post(
                "/v1/vms",
                vm_request_with("vm_id", &format!("\"{}\"", "v".repeat(129))),
            ),
            expect: invalid_at("/vm_id"),
        },
        Case {
            name: "POST /v1/vms: a VM id with a newline",
            send: json_post("/v1/vms", vm_request_with("vm_id", "\"a\\nb\"")),
            expect: invalid_at("/vm_id"),
        },
        Case {
            name: "POST /v1/vms: a 65-character VM type",
            send: json_post(
                "/v1/vms",
                vm_request_with("vm_type", &format!("\"{}\"", "t".repeat(65))),
            ),
            expect: invalid_at("/vm_type"),
        },
        Case {
            name: "POST /v1/vms: a tenant id with U+2028",
            send: json_post("/v1/vms", vm_request_with("tenant_id", "\"a\\u2028b\"")),
            expect: invalid_at("/tenant_id"),
        },
    ]);
    cases.extend(transport_cases("POST /v1/vms", "/v1/vms"));
    cases.extend(traversal_cases(
        "controller",
        &[
            ("GET", "/v1/nodes/..%2F..%2Fetc%2Fpasswd"),
            ("GET", "/v1/nodes/%2e%2e"),
            ("GET", "/v1/nodes/%2E%2E%2Fkeep-node"),
            ("GET", "/v1/nodes/%ff%fe"),
            ("GET", "/v1/nodes/../../etc/passwd"),
            ("DELETE", "/v1/nodes/..%2Fkeep-node"),
            ("POST", "/v1/nodes/..%2Fkeep-node/cordon"),
            ("GET", "/v1/vms/..%2F..%2Fetc%2Fpasswd"),
            ("GET", "/v1/vms/%2e%2e%2fkeep-vm"),
            ("DELETE", "/v1/vms/..%2Fkeep-vm"),
            ("DELETE", "/v1/vms/%2e%2e"),
            ("GET", "/docs/../../../../etc/passwd"),
            ("GET", "/docs/%2e%2e/%2e%2e/%2e%2e/etc/passwd"),
            ("GET", "/docs/..%2f..%2f..%2fCargo.toml"),
            ("GET", "/docs//etc/passwd"),
            ("GET", "/docs/%00"),
            ("GET", "/docs/index.html%00.png"),
            ("GET", "/docs/..\\..\\Cargo.toml"),
        ],
    ));
    cases
}

fn agent_cases() -> Vec<Case> {
    let mut cases = json_cases(
        "agent POST /v1/spawn",
        "/v1/spawn",
        vm_request_with,
        "vcpu_count",
        "/vcpu_count",
        "vm_type",
        "/vm_type",
    );
    // PUT /v1/desired: the same body faults in a desired-state document.
    for case in json_cases(
        "agent PUT /v1/desired",
        "/v1/desired",
        desired_with,
        "vcpu_count",
        "/instances/0/resources/vcpuCount",
        "app_id",
        "/instances/0/appId",
    ) {
        let send = match case.send {
            Sends::Http {
                path,
                headers,
                body,
                ..
            } => Sends::Http {
                method: "PUT",
                path,
                headers,
                body,
            },
            other => other,
        };
        cases.push(Case { send, ..case });
    }
    cases.extend([
        Case {
            name: "agent POST /v1/spawn: -0 for vcpu_count (minimum 1)",
            send: json_post("/v1/spawn", vm_request_with("vcpu_count", "-0")),
            expect: invalid_at("/vcpu_count"),
        },
        Case {
            name: "agent PUT /v1/desired: -0 for vcpuCount (minimum 1)",
            send: json_put("/v1/desired", desired_with("vcpu_count", "-0")),
            expect: invalid_at("/instances/0/resources/vcpuCount"),
        },
        Case {
            name: "agent PUT /v1/desired: an app id with ../",
            send: json_put("/v1/desired", desired_with("app_id", "\"../../etc\"")),
            expect: invalid_at("/instances/0/appId"),
        },
        Case {
            name: "agent PUT /v1/desired: another host's document",
            send: json_put(
                "/v1/desired",
                String::from_utf8(desired_with("app_id", "\"a1\""))
                    .unwrap()
                    .replace(HOST_ID.get().unwrap().as_str(), "other-host"),
            ),
            expect: Expect::Status(422, Some("invalid_document"), None),
        },
        Case {
            name: "agent POST /v1/spawn: a 129-character VM id",
            send: json_post(
                "/v1/spawn",
                vm_request_with("vm_id", &format!("\"{}\"", "v".repeat(129))),
            ),
            expect: invalid_at("/vm_id"),
        },
        Case {
            name: "agent POST /v1/spawn: a VM id with a control character",
            send: json_post("/v1/spawn", vm_request_with("vm_id", "\"a\\u0001\"")),
            expect: invalid_at("/vm_id"),
        },
    ]);
    cases.extend(transport_cases("agent", "/v1/spawn"));
    cases.extend(traversal_cases(
        "agent",
        &[
            ("DELETE", "/v1/vms/..%2F..%2Fdesired.json"),
            ("DELETE", "/v1/vms/%2e%2e"),
            ("DELETE", "/v1/vms/..%2Fkeep-vm"),
            ("DELETE", "/v1/vms/%ff"),
            ("GET", "/v1/../../etc/passwd"),
            ("GET", "/v1/reported/..%2F..%2Fdesired.json"),
        ],
    ));
    cases
}

/// The host id of the agent under test (its desired document's `hostId`).
static HOST_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// A desired-state document for the agent under test with one instance, `field` of it
/// replaced by raw JSON (`vcpu_count` is the instance's resources').
fn desired_with(field: &str, value: &str) -> Vec<u8> {
    let mut resources = json!({"vcpuCount": 1, "memoryMib": 64, "diskMib": 64});
    let mut instance = json!({
        "appId": "a1", "deploymentId": "d1", "desiredState": "running",
        "command": ["sleep", "60"]
    });
    match field {
        "vcpu_count" => resources["vcpuCount"] = json!("__field__"),
        "app_id" => instance["appId"] = json!("__field__"),
        other => panic!("no field {other} in the desired-state body"),
    }
    instance["resources"] = resources;
    let doc =
        json!({"hostId": HOST_ID.get().expect("the agent's host id"), "instances": [instance]});
    doc.to_string().replace("\"__field__\"", value).into_bytes()
}

// ---------------------------------------------------------------------------------------------
// Running the catalogue.

fn render(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    let sets_length = headers.iter().any(|(n, _)| {
        n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("transfer-encoding")
    });
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !sets_length && (!body.is_empty() || method != "GET") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    if let Some(token) = server.token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    [head.into_bytes(), body.to_vec()].concat()
}

/// Sends a case; returns what came back.
fn send(server: &Server, case: &Case) -> Outcome {
    let mut stream = server.connect();
    let wait = Duration::from_secs(20);
    match &case.send {
        Sends::Http {
            method,
            path,
            headers,
            body,
        } => {
            // A server may answer (413) and close before all was sent: what it answered counts.
            let _ = stream.write_all(&render(server, method, path, headers, body));
            let _ = stream.flush();
            read_answer(&mut stream, wait)
        }
        Sends::Raw(bytes) => {
            let _ = stream.write_all(bytes);
            let _ = stream.flush();
            read_answer(&mut stream, wait)
        }
        Sends::SlowBody { path } => {
            let head = render(
                server,
                "POST",
                path,
                &[
                    ("Content-Type".into(), "application/json".into()),
                    ("Content-Length".into(), "100000".into()),
                ],
                &[],
            );
            let _ = stream.write_all(&head);
            let _ = stream.flush();
            dribble(&mut stream, b" ")
        }
        Sends::SlowHead => {
            let _ = stream.write_all(b"POST /v1/vms HTTP/1.1\r\nHost: t\r\n");
            let _ = stream.flush();
            dribble(&mut stream, b"X")
        }
    }
}

/// Sends `byte` once a second until the server answers or closes (or 3 minutes pass: far past
/// every timeout of the servers).
fn dribble(stream: &mut Box<dyn Stream>, byte: &[u8]) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(180);
    while Instant::now() < deadline {
        if stream
            .write_all(byte)
            .and_then(|()| stream.flush())
            .is_err()
        {
            return read_answer(stream, Duration::from_secs(1));
        }
        match read_answer(stream, Duration::from_secs(1)) {
            Outcome::Silent => {}
            outcome => return outcome,
        }
    }
    Outcome::Silent
}

/// Whether `outcome` is what `expect` asks; else what was wrong.
fn check(expect: Expect, outcome: &Outcome) -> Result<(), String> {
    match (expect, outcome) {
        (Expect::Closed, Outcome::Closed) => Ok(()),
        (Expect::Status(status, code, pointer), Outcome::Answered(answer)) => {
            let body: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
            if answer.status != status {
                return Err(format!(
                    "answered {} (wanted {status}): {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body[..answer.body.len().min(400)])
                ));
            }
            if let Some(code) = code {
                if body["code"] != code {
                    return Err(format!("code {} (wanted {code}): {body}", body["code"]));
                }
                if fleetwire_types::read_strict::<fleetwire_types::ApiError>(&answer.body).is_err()
                {
                    return Err(format!("the body is not an ApiError: {body}"));
                }
            }
            if let Some(pointer) = pointer {
                let named = body["violations"]
                    .as_array()
                    .is_some_and(|v| v.iter().any(|v| v["instance_path"] == pointer));
                if !named {
                    return Err(format!("no violation at {pointer:?}: {body}"));
                }
            }
            if status == 408
                && !answer
                    .headers
                    .iter()
                    .any(|(n, v)| n == "connection" && v.eq_ignore_ascii_case("close"))
            {
                return Err("a 408 without Connection: close".into());
            }
            Ok(())
        }
        (Expect::Saying(status, code, saying), Outcome::Answered(answer)) => {
            check(Expect::Status(status, Some(code), None), outcome)?;
            let body: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
            match body["message"].as_str() {
                Some(message) if message.contains(saying) => Ok(()),
                _ => Err(format!("the message does not say {saying:?}: {body}")),
            }
        }
        (expect, outcome) => Err(format!("wanted {expect:?}, got {outcome:?}")),
    }
}

/// Runs `cases` against `server` (the slow ones on threads of their own, alongside the rest),
/// checking after each that `state()` is still `before` and the server answers `/healthz`.
/// Returns every failure.
fn run_catalogue(
    server: &Server,
    cases: Vec<Case>,
    state: &(dyn Fn() -> Value + Sync),
    before: &Value,
) -> Vec<String> {
    eprintln!(
        "hostile_input: [{}] {} cases, then the idle connections",
        server.name,
        cases.len()
    );
    let failures = Mutex::new(Vec::new());
    // A change is reported once, by the case after which it was seen; later cases are
    // compared with the changed state.
    let expected = Mutex::new(before.clone());
    let (slow, quick): (Vec<Case>, Vec<Case>) = cases
        .into_iter()
        .partition(|c| matches!(c.send, Sends::SlowBody { .. } | Sends::SlowHead));
    let check_after = |case: &Case, outcome: &Outcome| {
        let mut problems = Vec::new();
        if let Err(problem) = check(case.expect, outcome) {
            problems.push(problem);
        }
        if server.healthz() != Some(200) {
            problems.push("the server no longer answers GET /healthz".into());
        }
        let after = state();
        let mut expected = expected.lock().unwrap();
        if after != *expected {
            problems.push(format!(
                "the stored state changed:\nbefore {expected}\nafter  {after}"
            ));
            *expected = after;
        }
        drop(expected);
        if !problems.is_empty() {
            failures.lock().unwrap().push(format!(
                "[{}] {}: {}",
                server.name,
                case.name,
                problems.join("; ")
            ));
        }
    };
    std::thread::scope(|scope| {
        for case in &slow {
            let check_after = &check_after;
            scope.spawn(move || {
                let outcome = send(server, case);
                check_after(case, &outcome);
            });
        }
        for case in &quick {
            let outcome = send(server, case);
            check_after(case, &outcome);
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.extend(idle_connections(server));
    failures
}

/// Opens [`IDLE_CONNECTIONS`] TCP connections that send nothing: the server must keep serving
/// a normal client meanwhile, and close every idle one after its head timeout.
fn idle_connections(server: &Server) -> Vec<String> {
    // One crowd at a time in this process (descriptors).
    static ONE_CROWD: Mutex<()> = Mutex::new(());
    let _crowd = ONE_CROWD.lock().unwrap_or_else(|p| p.into_inner());
    let count = idle_connection_count();
    let mut idle = Vec::with_capacity(count);
    for _ in 0..count {
        match TcpStream::connect(("127.0.0.1", server.port)) {
            Ok(stream) => idle.push(stream),
            Err(e) => {
                return vec![format!(
                    "[{}] idle connections: connect failed after {}: {e}",
                    server.name,
                    idle.len()
                )]
            }
        }
    }
    let mut failures = Vec::new();
    if server.healthz() != Some(200) {
        failures.push(format!(
            "[{}] {count} idle connections: GET /healthz was not answered",
            server.name
        ));
    }
    for stream in &idle {
        stream.set_nonblocking(true).unwrap();
    }
    // Every idle connection closed by the server: well past its 30 s head timeout (and the TLS
    // handshake's 10 s), within three minutes.
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut open = idle.len();
    while open > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1));
        open = idle
            .iter()
            .filter(|stream| {
                let mut byte = [0u8; 64];
                loop {
                    match (&**stream).read(&mut byte) {
                        Ok(0) => return false,
                        Ok(_) => continue, // a TLS alert or an answer, then the end
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                        Err(_) => return false,
                    }
                }
            })
            .count();
    }
    if open > 0 {
        failures.push(format!(
            "[{}] {open} of {count} idle connections were still open after 3 minutes",
            server.name
        ));
    }
    if server.healthz() != Some(200) {
        failures.push(format!(
            "[{}] after the idle connections: GET /healthz was not answered",
            server.name
        ));
    }
    failures
}

/// 5,000, or fewer when this process may not open that many descriptors (said on stderr).
fn idle_connection_count() -> usize {
    const WANTED: usize = 5_000;
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    // Err: the soft limit stays; what it allows is read back below.
    let _ = setrlimit(Resource::Nofile, raised);
    // `None` is no limit.
    let soft = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    let usable = usize::try_from(soft)
        .unwrap_or(usize::MAX)
        .saturating_sub(512);
    if usable < WANTED {
        eprintln!(
            "hostile_input: the descriptor limit allows {usable} idle connections, not {WANTED}"
        );
    }
    WANTED.min(usable)
}

// ---------------------------------------------------------------------------------------------
// Stored state.

fn blocking_client(ca: Option<&[u8]>) -> reqwest::blocking::Client {
    crate::support::install_crypto_provider();
    let mut builder = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20));
    if let Some(ca) = ca {
        builder = builder.tls_certs_only([reqwest::Certificate::from_pem(ca).unwrap()]);
    }
    builder.build().unwrap()
}

fn get_json(client: &reqwest::blocking::Client, url: &str, token: Option<&str>) -> Value {
    let mut request = client.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let answer = request.send().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(
        answer.status().is_success(),
        "GET {url}: {}",
        answer.status()
    );
    answer.json().unwrap()
}

/// What the controller stores of its nodes and VMs, without what heartbeats move (last
/// heartbeat, status, free memory).
fn controller_state(controller: &ControllerProcess) -> Value {
    let ca = controller.secure.then(|| controller.ca_pem());
    let client = blocking_client(ca.as_deref());
    let token = controller.secure.then_some(ADMIN_TOKEN);
    let keep = |record: &Value, fields: &[&str]| -> Value {
        fields
            .iter()
            .map(|f| (f.to_string(), record[*f].clone()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let nodes = get_json(&client, &controller.url("/v1/nodes?status=all"), token);
    let vms = get_json(&client, &controller.url("/v1/vms"), token);
    let mut nodes: Vec<Value> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            keep(
                n,
                &[
                    "node_id",
                    "hostname",
                    "wg_ip",
                    "vm_count",
                    "reserved",
                    "reserved_disk_gb",
                    "runtime",
                ],
            )
        })
        .collect();
    let mut vms: Vec<Value> = vms
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            keep(
                v,
                &[
                    "vm_id",
                    "vm_type",
                    "node_id",
                    "ram_alloc_mb",
                    "vcpu_count",
                    "tenant_id",
                    "disk_gb",
                    "command",
                ],
            )
        })
        .collect();
    nodes.sort_by_key(|n| n["node_id"].to_string());
    vms.sort_by_key(|v| v["vm_id"].to_string());
    json!({"nodes": nodes, "vms": vms})
}

/// What the agent stores: its desired document, and the VMs it runs.
fn agent_state(agent: &AgentProcess) -> Value {
    let client = blocking_client(None);
    let desired = get_json(&client, &agent.url("/v1/desired"), None);
    let vms = get_json(&client, &agent.url("/v1/vms"), None);
    let mut vms: Vec<Value> = vms
        .as_array()
        .unwrap()
        .iter()
        .map(|v| json!([v["vm_id"], v["vm_type"], v["ram_alloc_mb"]]))
        .collect();
    vms.sort_by_key(|v| v.to_string());
    json!({"desired": desired, "vms": vms})
}

fn plain_server(name: &'static str, port: u16) -> Server {
    Server {
        name,
        port,
        tls: None,
        token: None,
    }
}

fn report(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} hostile-input case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// The plain-HTTP controller with a real agent enrolled and running a VM, and that agent's
/// local API: every case of both, the controller's state checked again after a restart.
#[test]
fn the_plain_controller_and_the_agent_refuse_hostile_input_and_keep_their_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut controller = ControllerProcess::start_in(
        dir.path(),
        &["--disk-cordon-below", "1", "--disk-uncordon-above", "2"],
    );
    let agent = AgentProcess::start(&controller.url(""), &[("VM_NODE_ID", "keep-node")]);
    let client = blocking_client(None);
    let create = client
        .post(controller.url("/v1/vms"))
        .json(&json!({"vm_type": "web", "ram_mb": 64, "vcpu_count": 1, "disk_gb": 1, "vm_id": "keep-vm", "command": ["sleep", "3600"]}));
    // Until the agent has enrolled (its first heartbeat), placement finds no node.
    wait_for(
        "the agent to enrol and take a VM",
        Duration::from_secs(30),
        || {
            let answer = create.try_clone().unwrap().send().ok()?;
            (answer.status().as_u16() == 200).then_some(())
        },
    );
    wait_for("the VM to run", Duration::from_secs(30), || {
        let vms = get_json(&client, &agent.url("/v1/vms"), None);
        (vms[0]["state"] == "Running").then_some(())
    });

    let controller_before = controller_state(&controller);
    assert_eq!(
        controller_before["vms"].as_array().unwrap().len(),
        1,
        "{controller_before}"
    );
    let agent_before = agent_state(&agent);
    HOST_ID
        .set(
            agent_before["desired"]["hostId"]
                .as_str()
                .unwrap()
                .to_string(),
        )
        .unwrap();
    let agent_cases = agent_cases();
    let controller_cases = controller_cases(false);
    let agent_server = plain_server("agent", agent.port);
    let controller_server = plain_server("controller --plain-http", controller.port);
    let (mut failures, agent_failures) = std::thread::scope(|scope| {
        let agent_run = scope.spawn(|| {
            run_catalogue(
                &agent_server,
                agent_cases,
                &|| agent_state(&agent),
                &agent_before,
            )
        });
        let controller_failures = run_catalogue(
            &controller_server,
            controller_cases,
            &|| controller_state(&controller),
            &controller_before,
        );
        (controller_failures, agent_run.join().unwrap())
    });
    failures.extend(agent_failures);

    // What is persisted is still there after a restart.
    crate::support::send_signal(controller.process.pid(), rustix::process::Signal::TERM);
    let _ = controller.process.child.wait();
    let args: Vec<&str> = controller.args.iter().map(String::as_str).skip(1).collect();
    let restarted = ControllerProcess::start_in(dir.path(), &args);
    let after_restart = controller_state(&restarted);
    if after_restart != controller_before {
        failures.push(format!("after a restart the controller's state differs:\nbefore {controller_before}\nafter  {after_restart}"));
    }
    report(failures);
}

/// The controller in its default mode (HTTPS, mTLS, operator tokens): the operator route's body
/// cases with the admin token, and every transport case over TLS.
#[test]
fn the_mtls_controller_refuses_hostile_input_and_keeps_its_state() {
    let controller = ControllerProcess::start_secure(&[]);
    use rustls::pki_types::pem::PemObject;
    crate::support::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for ca in rustls::pki_types::CertificateDer::pem_slice_iter(&controller.ca_pem()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server = Server {
        name: "controller mTLS",
        port: controller.port,
        tls: Some(Arc::new(tls)),
        token: Some(ADMIN_TOKEN),
    };
    let before = controller_state(&controller);
    let mut cases = controller_cases(true);
    cases.push(Case {
        name: "plain HTTP on the TLS port",
        send: Sends::Raw(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".to_vec()),
        expect: Expect::Closed,
    });
    // The plain-HTTP case goes over TCP, the rest over TLS.
    let (plain, tls_cases): (Vec<Case>, Vec<Case>) = cases
        .into_iter()
        .partition(|c| c.name == "plain HTTP on the TLS port");
    let mut failures = run_catalogue(
        &server,
        tls_cases,
        &|| controller_state(&controller),
        &before,
    );
    let tcp_only = Server {
        tls: None,
        token: None,
        name: "controller mTLS, plain TCP",
        ..server.clone()
    };
    for case in plain {
        let outcome = send(&tcp_only, &case);
        if let Err(problem) = check(case.expect, &outcome) {
            failures.push(format!("[{}] {}: {problem}", tcp_only.name, case.name));
        }
    }
    report(failures);
}
