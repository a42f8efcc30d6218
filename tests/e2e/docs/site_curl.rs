//! Every curl line of the reference site runs, as the site a fleet serves prints it, against
//! that fleet (issue 31; the lines come from codegen's `model::curl`). The page of a fleet of
//! `fleetwire up` is fetched from the fleet itself, mTLS and `--plain-http`, and each operation's
//! line is run with bash as a reader pasting it would, from a folder holding the files the page
//! says it names (`ca.pem`, `operator-header`, `bootstrap-header`, `node.crt`, `node.key`,
//! `ca.crt`, and `<Document>.json` for a body) and with its path parameters (`${NODE_ID}`,
//! `${VM_ID}`) set: it must answer 2xx.
//!
//! The bodies are this fleet's (a node that registers with its own CSR and heartbeats as itself,
//! a VM the process runtime places): the page's example bodies describe another fleet, and
//! `site::examples` checks them. The operations run in the order a reader would need them (a
//! token before registering, a VM before reading it); an operation of the page the plan does not
//! know fails the test, so a new route needs its line run too.

use serde_json::{json, Value};
use std::path::Path;

use super::blocks::Mode;
use super::docs_fleet::DocsFleet;
use crate::support::{free_port, install_crypto_provider};

/// The node the curl lines enroll (beside `up`'s own), and its VM's id.
const NODE: &str = "docs-curl";
const VM: &str = "vm-docs-curl";

/// The operations in the order they run; what each needs is set up before it.
const PLAN: &[&str] = &[
    "get_healthz",
    "get_readyz",
    "get_metrics",
    "create_bootstrap_token",
    "register_node",
    "post_heartbeat",
    "list_nodes",
    "get_node",
    "cordon_node",
    "uncordon_node",
    "drain_node",
    "get_fleet",
    "create_vm",
    "list_vms",
    "get_vm",
    "get_vm_logs",
    "delete_vm",
    "delete_node",
];

/// The page's operations: (operation id, curl line).
fn curl_lines(page: &str) -> Vec<(String, String)> {
    let html = scraper::Html::parse_document(page);
    let operation = scraper::Selector::parse("article.operation").unwrap();
    let curl = scraper::Selector::parse("pre.curl code").unwrap();
    html.select(&operation)
        .map(|op| {
            let id = op.value().id().unwrap_or_default().to_string();
            let line = op
                .select(&curl)
                .next()
                .map(|c| c.text().collect::<String>())
                .unwrap_or_default();
            (id, line)
        })
        .collect()
}

/// The lines as the served page shows them. A controller that serves `served-by.json` beside
/// the site has the page's script (docs-site/static/site.js) put its own origin in place of the
/// one written, its CA file in place of `ca.pem`, and drop the trust options on a plain
/// controller; the same is done here (the script itself is the browser test's). Without that
/// file the lines are what the page says.
fn as_served(fleet: &DocsFleet, page: &str, lines: Vec<(String, String)>) -> Vec<(String, String)> {
    let Some(served) = fetch(fleet, "/docs/served-by.json")
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
    else {
        return lines;
    };
    let html = scraper::Html::parse_document(page);
    let marker = scraper::Selector::parse("[data-curl-server]").unwrap();
    let Some(written) = html
        .select(&marker)
        .next()
        .and_then(|m| m.value().attr("data-curl-server"))
    else {
        return lines;
    };
    let scheme = if fleet.mode == Mode::Plain {
        "http"
    } else {
        "https"
    };
    let origin = format!("{scheme}://{}", fleet.api);
    lines
        .into_iter()
        .map(|(id, line)| {
            let mut line = line.replace(written, &origin);
            if served["plain_http"] == true {
                let (first, rest) = line.split_once(" \\\n").unwrap_or((&line, ""));
                let rest = rest.to_string();
                if first.starts_with("curl -s") {
                    line = format!("curl -s \\\n{rest}");
                }
            } else if let Some(ca) = served["ca_file"].as_str() {
                line = line.replace("--cacert ca.pem", &format!("--cacert {ca}"));
            }
            (id, line)
        })
        .collect()
}

/// A page of the fleet's site, when it answers 200.
fn fetch(fleet: &DocsFleet, path: &str) -> Option<String> {
    install_crypto_provider();
    let (scheme, client) = match fleet.mode {
        Mode::Plain => ("http", reqwest::blocking::Client::new()),
        Mode::Secure => {
            let ca = std::fs::read(ca_file(fleet.root())).unwrap();
            (
                "https",
                reqwest::blocking::Client::builder()
                    .tls_certs_only([reqwest::Certificate::from_pem(&ca).unwrap()])
                    .build()
                    .unwrap(),
            )
        }
    };
    let answer = client
        .get(format!("{scheme}://{}{path}", fleet.api))
        .send()
        .ok()?;
    (answer.status() == 200)
        .then(|| answer.text().ok())
        .flatten()
}

/// The page as the fleet serves it.
fn api_page(fleet: &DocsFleet) -> String {
    fetch(fleet, "/docs/api.html").expect("the fleet serves its API page")
}

fn ca_file(root: &Path) -> std::path::PathBuf {
    root.join(".fleetwire/controller/ca/ca.pem")
}

/// Runs `line` in `dir` with `curl` answering its HTTP status on a last line of its own:
/// (status, body).
fn run_line(fleet: &DocsFleet, dir: &Path, line: &str, env: &[(&str, String)]) -> (u16, String) {
    let mut script = String::from("curl() { command curl -w '\\n%{http_code}' \"$@\"; }\n");
    for (name, value) in env {
        script.push_str(&format!("{name}='{value}'\n"));
    }
    script.push_str(line);
    // Without the docs' address mapping: the page must name this fleet's own origin.
    let (output, _) = fleet.shell(dir, &script, false);
    let (body, status) = output
        .trim_end()
        .rsplit_once('\n')
        .unwrap_or(("", output.trim()));
    (status.trim().parse().unwrap_or(0), body.to_string())
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn run_every_line(mode: Mode) {
    let fleet = DocsFleet::up(mode);
    let page = api_page(&fleet);
    let lines = as_served(&fleet, &page, curl_lines(&page));
    let mut failures = Vec::new();
    for (id, line) in &lines {
        if !PLAN.contains(&id.as_str()) {
            failures.push(format!("{id}: on the page, but not in this test's plan"));
        }
        if line.trim().is_empty() {
            failures.push(format!("{id}: no curl line"));
        }
    }
    for id in PLAN {
        if !lines.iter().any(|(op, _)| op == id) {
            failures.push(format!("{id}: in this test's plan, but not on the page"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");

    // The files the page names, as a reader holding them would.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fw = fleet.root().join(".fleetwire");
    if mode == Mode::Secure {
        std::fs::copy(ca_file(fleet.root()), d.join("ca.pem")).unwrap();
        std::fs::copy(ca_file(fleet.root()), d.join("ca.crt")).unwrap();
        std::fs::copy(fw.join("operator-header"), d.join("operator-header")).unwrap();
    } else {
        // Nothing to trust or show on plain HTTP; curl still reads the files it is told to.
        for name in ["ca.pem", "ca.crt", "node.crt", "node.key"] {
            write(d, name, "");
        }
        write(
            d,
            "operator-header",
            "X-Nothing: plain HTTP takes no token\n",
        );
        write(
            d,
            "bootstrap-header",
            "X-Nothing: plain HTTP takes no token\n",
        );
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let spawn_port = free_port();
    let env: Vec<(&str, String)> = vec![("NODE_ID", NODE.into()), ("VM_ID", VM.into())];
    let mut failures = Vec::new();
    for id in PLAN {
        let line = &lines.iter().find(|(op, _)| op == id).unwrap().1;
        match *id {
            "create_bootstrap_token" => write(
                d,
                "CreateBootstrapTokenRequest.json",
                &json!({"node_id": NODE}).to_string(),
            ),
            "register_node" => {
                let mut body = json!({
                    "node_id": NODE, "hostname": NODE, "wg_ip": "127.0.0.1",
                    "spawn_port": spawn_port, "runtime": "process",
                    "total_cpus": 1, "total_memory_mb": 1024, "total_disk_gb": 1,
                    "kvm_available": false,
                });
                if mode == Mode::Secure {
                    let mut params = rcgen::CertificateParams::new(vec![NODE.into()]).unwrap();
                    params
                        .distinguished_name
                        .push(rcgen::DnType::CommonName, NODE);
                    body["csr_pem"] = params
                        .serialize_request(&key)
                        .unwrap()
                        .pem()
                        .unwrap()
                        .into();
                    write(d, "node.key", &key.serialize_pem());
                }
                write(d, "RegisterNodeRequest.json", &body.to_string());
            }
            "post_heartbeat" => write(
                d,
                "NodeHeartbeat.json",
                &json!({
                    "node_id": NODE, "wg_ip": "127.0.0.1", "hostname": NODE,
                    "spawn_port": spawn_port, "ram_total_mb": 1024, "ram_used_mb": 0,
                    "cpu_cores": 1, "cpu_load_pct": 0.0, "kvm_available": false, "vms": [],
                    "boot_id": "docs-curl-boot", "timestamp_utc": "2026-12-03T12:00:00Z",
                })
                .to_string(),
            ),
            "create_vm" => write(
                d,
                "CreateVmRequest.json",
                &json!({"vm_id": VM, "vm_type": "process", "ram_mb": 64, "vcpu_count": 1,
                    "command": ["/bin/sleep", "600"]})
                .to_string(),
            ),
            _ => {}
        }
        let (status, body) = run_line(&fleet, d, line, &env);
        if !(200..300).contains(&status) {
            failures.push(format!(
                "{id} ({mode:?} fleet): answered {status}:\n{line}\n{body}"
            ));
            continue;
        }
        let answer: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        match *id {
            "create_bootstrap_token" => {
                let token = answer["token"].as_str().unwrap_or_default();
                write(
                    d,
                    "bootstrap-header",
                    &format!("Authorization: Bearer {token}\n"),
                );
            }
            "register_node" if mode == Mode::Secure => {
                let cert = answer["cert_pem"].as_str().unwrap_or_default();
                write(d, "node.crt", cert);
            }
            _ => {}
        }
    }
    assert!(
        failures.is_empty(),
        "{} of the site's {} curl lines do not work as printed:\n\n{}",
        failures.len(),
        lines.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_curl_line_of_the_site_works_as_printed_on_the_mtls_fleet() {
    run_every_line(Mode::Secure);
}

#[test]
fn every_curl_line_of_the_site_works_as_printed_on_the_plain_fleet() {
    run_every_line(Mode::Plain);
}
