//! `fleetwire nodes|vms|fleet`, the operator commands, run as a user runs them: the real
//! binary against a real controller, with settings from flags, the environment and a config
//! file; tables, `-o json`, and the exit code of each kind of failure (docs/operator-cli.md).

use super::run_cli::{cli, exits, ok, stderr, stdout, words};
use crate::support::controller_harness::*;
use fleetwire_types::{FleetStatus, NodeRecord, VmRecord};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread")]
async fn operators_manage_nodes_and_vms_of_a_plain_http_controller() {
    let controller = ControllerProcess::start(&[]);
    let client = client();
    let agent = AgentStandIn::start().await;
    for node in ["node-a", "node-b"] {
        heartbeat_ok(
            &client,
            &controller,
            &ppn_heartbeat(node, "127.0.0.1", agent.port),
        )
        .await;
    }
    let home = tempfile::tempdir().unwrap();
    let url = controller.url("");
    // The controller's address and mode from the environment here (flags in the secure test).
    let env = [
        ("FLEETWIRE_URL", url.as_str()),
        ("FLEETWIRE_PLAIN_HTTP", "true"),
    ];
    let run = |args: &[&str]| cli(home.path(), &env, args);

    // A table for people: headers, one row per node, in node order.
    let table = ok(run(&["nodes", "list"]));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NODE") && lines[0].contains("STATUS"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("node-a") && lines[1].contains("ready"),
        "{table}"
    );
    assert!(lines[2].starts_with("node-b"), "{table}");
    // -o json: the controller's answer, a list of NodeRecord documents.
    let json: Value = serde_json::from_str(&ok(run(&["nodes", "list", "-o", "json"]))).unwrap();
    let records: Vec<NodeRecord> = json
        .as_array()
        .unwrap()
        .iter()
        .map(typed::<NodeRecord>)
        .collect();
    assert_eq!(records.len(), 2);

    // cordon with a reason, shown by get; uncordon clears it.
    let cordoned = ok(run(&[
        "nodes",
        "cordon",
        "node-a",
        "--reason",
        "kernel update",
    ]));
    assert_eq!(cordoned, "node node-a cordoned\n");
    let details = ok(run(&["nodes", "get", "node-a"]));
    assert!(details.contains("ready,cordoned"), "{details}");
    assert!(details.contains("kernel update"), "{details}");
    ok(run(&["nodes", "uncordon", "node-a"]));
    let record: NodeRecord =
        typed(&serde_json::from_str(&ok(run(&["nodes", "get", "node-a", "-o", "json"]))).unwrap());
    assert!(record.cordoned_at.is_none());

    // A VM from flags, placed through the agent; listed, fetched, deleted.
    let created = ok(run(&words(
        "vms create --type standard --memory-mb 512 --vcpus 1 --vm-id vm-cli-1 --tenant t1 -o json",
    )));
    let vm: VmRecord = typed(&serde_json::from_str(&created).unwrap());
    assert_eq!(vm.vm_id.as_str(), "vm-cli-1");
    assert_eq!(agent.spawned().len(), 1);
    let vms = ok(run(&["vms", "list", "--tenant", "t1"]));
    assert!(vms.lines().nth(1).unwrap().starts_with("vm-cli-1"), "{vms}");
    assert!(ok(run(&["vms", "get", "vm-cli-1"])).contains("Running"));
    // The same id again: the controller refuses it (409), exit 1.
    let again = run(&words(
        "vms create --type standard --memory-mb 512 --vcpus 1 --vm-id vm-cli-1",
    ));
    exits(&again, 1, "409");
    assert_eq!(
        ok(run(&["vms", "delete", "vm-cli-1"])),
        "vm vm-cli-1 deleted\n"
    );
    assert_eq!(agent.deleted(), vec!["vm-cli-1".to_string()]);

    // A request the schema refuses never leaves: exit 2, the field by its pointer.
    let bad = run(&words("vms create --type standard --memory-mb 0 --vcpus 1"));
    exits(&bad, 2, "/ram_mb");
    assert!(agent.spawned().len() == 1, "nothing was sent");
    // A request document from a file works the same way.
    let request = home.path().join("vm.json");
    std::fs::write(
        &request,
        r#"{"vm_type": "standard", "ram_mb": 256, "vcpu_count": 1, "vm_id": "vm-cli-2"}"#,
    )
    .unwrap();
    ok(run(&["vms", "create", "-f", request.to_str().unwrap()]));
    // No node has room for this one: 503, exit 6.
    let huge = run(&words(
        "vms create --type standard --memory-mb 10000000 --vcpus 1 -- true",
    ));
    exits(&huge, 6, "503");

    // Unknown ids: exit 3; an id the schema refuses: a usage error before any call.
    exits(&run(&["nodes", "get", "no-such-node"]), 3, "404");
    exits(&run(&["vms", "delete", "no-such-vm"]), 3, "404");
    let invalid_id = run(&["nodes", "get", "not a node id"]);
    assert_eq!(invalid_id.status.code(), Some(2), "{}", stderr(&invalid_id));

    // drain (only marking the node: its VMs are moved in tests/e2e/operator/drain.rs), then
    // fleet: the counts and the nodes.
    assert!(ok(run(&["nodes", "drain", "node-b", "--detach"])).contains("draining"));
    let fleet = ok(run(&["fleet"]));
    assert!(
        fleet.contains("1 ready") && fleet.contains("1 draining"),
        "{fleet}"
    );
    let fleet: FleetStatus =
        typed(&serde_json::from_str(&ok(run(&["fleet", "-o", "json"]))).unwrap());
    assert_eq!(fleet.nodes.len(), 2);

    // delete: the node is forgotten.
    assert_eq!(
        ok(run(&["nodes", "delete", "node-b"])),
        "node node-b deleted\n"
    );
    exits(&run(&["nodes", "get", "node-b"]), 3, "404");

    // Plain HTTP only when chosen: an http:// URL without --plain-http is a usage error.
    let unchosen = cli(home.path(), &[], &["nodes", "list", "--url", &url]);
    exits(&unchosen, 2, "--plain-http");
}

#[test]
fn operators_reach_a_secure_controller_with_settings_from_flags_env_or_config() {
    let controller = ControllerProcess::start_secure(&[]);
    let home = tempfile::tempdir().unwrap();
    let token_file = home.path().join("admin-token");
    std::fs::write(&token_file, format!("{ADMIN_TOKEN}\n")).unwrap();
    let viewer_file = home.path().join("viewer-token");
    std::fs::write(&viewer_file, VIEWER_TOKEN).unwrap();
    let url = controller.url("");
    let ca = controller.ca_path();
    let (ca, token, viewer) = (
        ca.to_str().unwrap(),
        token_file.to_str().unwrap(),
        viewer_file.to_str().unwrap(),
    );

    // Flags.
    let listed = ok(cli(
        home.path(),
        &[],
        &[
            "nodes",
            "list",
            "--url",
            &url,
            "--ca-file",
            ca,
            "--token-file",
            token,
        ],
    ));
    assert!(listed.starts_with("NODE"), "{listed}");
    // The environment.
    let env = [
        ("FLEETWIRE_URL", url.as_str()),
        ("FLEETWIRE_CA_FILE", ca),
        ("FLEETWIRE_TOKEN_FILE", token),
    ];
    let fleet = ok(cli(home.path(), &env, &["fleet", "-o", "json"]));
    let _: FleetStatus = typed(&serde_json::from_str(&fleet).unwrap());
    // The default config file, its paths relative to it.
    let config_dir = home.path().join(".config/fleetwire");
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::copy(controller.ca_path(), config_dir.join("ca.pem")).unwrap();
    std::fs::copy(&token_file, config_dir.join("token")).unwrap();
    std::fs::write(
        config_dir.join("config.toml"),
        format!("url = \"{url}\"\nca_file = \"ca.pem\"\ntoken_file = \"token\"\n"),
    )
    .unwrap();
    assert!(ok(cli(home.path(), &[], &["vms", "list"])).starts_with("VM"));

    // No token: 401, exit 4; a read-only token on a change: 403, exit 4.
    let base = ["--url", url.as_str(), "--ca-file", ca];
    fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
        [more, base].concat()
    }
    let no_token = cli(
        home.path(),
        &[("FLEETWIRE_CONFIG", "/dev/null")],
        &with(&base, &["nodes", "list"]),
    );
    exits(&no_token, 4, "401");
    let viewer_cordon = cli(
        home.path(),
        &[],
        &with(
            &base,
            &["nodes", "cordon", "some-node", "--token-file", viewer],
        ),
    );
    exits(&viewer_cordon, 4, "403");

    // Another CA: the TLS handshake fails, exit 5; so does a port nobody listens on.
    let other_ca = home.path().join("other-ca.pem");
    let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(&other_ca, other.cert.pem()).unwrap();
    let untrusted = cli(
        home.path(),
        &[],
        &[
            "nodes",
            "list",
            "--url",
            &url,
            "--ca-file",
            other_ca.to_str().unwrap(),
            "--token-file",
            token,
        ],
    );
    exits(&untrusted, 5, "list_nodes");
    let closed = format!("https://127.0.0.1:{}", crate::support::free_port());
    exits(
        &cli(
            home.path(),
            &[],
            &[
                "fleet",
                "--url",
                &closed,
                "--ca-file",
                ca,
                "--token-file",
                token,
            ],
        ),
        5,
        "get_fleet",
    );

    // Configuration errors are usage errors that name what is wrong; no token is ever shown.
    let no_ca = cli(
        home.path(),
        &[("FLEETWIRE_CONFIG", "/dev/null")],
        &["nodes", "list", "--url", &url, "--token-file", token],
    );
    exits(&no_ca, 2, "--ca-file");
    let over_http = cli(
        home.path(),
        &[],
        &[
            "nodes",
            "list",
            "--url",
            "http://127.0.0.1:9",
            "--plain-http",
            "--token-file",
            token,
        ],
    );
    exits(&over_http, 2, "never sent over plain HTTP");
    std::fs::write(config_dir.join("config.toml"), "url = [1]\n").unwrap();
    exits(&cli(home.path(), &[], &["fleet"]), 2, "config.toml");
    for out in [no_token, viewer_cordon, untrusted, no_ca, over_http] {
        for secret in [ADMIN_TOKEN, VIEWER_TOKEN] {
            assert!(!stderr(&out).contains(secret) && !stdout(&out).contains(secret));
        }
    }
}
