//! `fleetwire up` end to end: a real controller and a real agent come up enrolled, a machine
//! placed through the controller's API runs as a real process through the agent, deleting it
//! stops the process, and Ctrl-C (SIGINT) stops both programs cleanly. The commands the banner
//! prints work as printed: they carry the fleet's CA and the operator token `up` wrote.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use crate::support::{fleetwire, free_port, wait_for, Running};
use fleetwire_types::{read_strict as read, HostReportedState, NodeRecord, VmRecord};
use serde_json::{json, Value};

fn pid_alive(pid: i32) -> bool {
    // A reaped process has no /proc entry; a zombie is not running either.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// Runs `command` with `sh -c`, as a user pasting it would, and returns its standard output.
fn shell(command: &str) -> Vec<u8> {
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

#[test]
fn up_runs_a_fleet_of_one_places_a_machine_and_stops_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let api_port = free_port();
    let spawn_port = free_port();
    let api = format!("https://127.0.0.1:{api_port}");
    let mut up = Running::spawn(
        fleetwire()
            .arg("up")
            .arg("--dir")
            .arg(dir.path().join("state"))
            .args(["--listen", &format!("127.0.0.1:{api_port}")])
            .args(["--spawn-port", &spawn_port.to_string()])
            .args(["--node-id", "up-test", "--heartbeat-interval", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stdout = up.child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let mut printed = Vec::new();
    wait_for(
        "`fleetwire up` to say it is up",
        Duration::from_secs(60),
        || {
            while let Ok(line) = lines.try_recv() {
                printed.push(line);
            }
            printed
                .iter()
                .any(|l| l.contains("fleetwire is up"))
                .then_some(())
        },
    );
    let text = printed.join("\n");
    // Standard output is a pipe here, not a terminal: no progress frames redrawn with `\r`,
    // each step one line when it starts and one when it is ready.
    assert!(!text.contains('\r'), "progress frames in a pipe:\n{text:?}");
    assert!(
        printed
            .iter()
            .any(|l| l.trim_start().starts_with("controller on") && l.contains("… ready (")),
        "the controller's step ends on a line of its own:\n{text}"
    );
    for expected in [&format!("{api}/docs/"), "reported.json", "-X POST"] {
        assert!(
            text.contains(expected),
            "the banner names {expected}:\n{text}"
        );
    }

    // The banner's commands work as printed (they carry the CA and the operator token).
    let fleet_line = printed
        .iter()
        .find_map(|l| l.trim_start().strip_prefix("fleet "))
        .unwrap_or_else(|| panic!("no fleet command in the banner:\n{text}"))
        .trim()
        .to_string();
    assert!(fleet_line.starts_with("curl "), "{fleet_line}");
    let fleet: Value = serde_json::from_slice(&shell(&fleet_line)).unwrap();
    assert!(
        fleet["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["node_id"] == "up-test" && n["status"] == "ready"),
        "{fleet}"
    );
    // So does the operator command's line, with the config file `up` wrote.
    let nodes_line = printed
        .iter()
        .find_map(|l| l.trim_start().strip_prefix("nodes "))
        .unwrap_or_else(|| panic!("no nodes command in the banner:\n{text}"));
    let nodes_line = nodes_line.split("   (").next().unwrap().trim();
    let table = String::from_utf8(shell(nodes_line)).unwrap();
    assert!(
        table.starts_with("NODE")
            && table
                .lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("up-test")),
        "{nodes_line}:\n{table}"
    );
    let place_at = printed.iter().position(|l| l.contains("-X POST")).unwrap();
    let place = format!("{}\n{}", printed[place_at], printed[place_at + 1]);
    let placed: VmRecord = read(&shell(place.trim())).unwrap();
    assert_eq!(placed.node_id.as_ref().map(|n| n.as_str()), Some("up-test"));

    // Without the token, the API refuses.
    let ca = dir.path().join("state/controller/ca/ca.pem");
    crate::support::install_crypto_provider();
    let anonymous = reqwest::blocking::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&std::fs::read(&ca).unwrap()).unwrap()])
        .build()
        .unwrap();
    assert_eq!(
        anonymous
            .get(format!("{api}/v1/nodes"))
            .send()
            .unwrap()
            .status(),
        401
    );
    let token = std::fs::read_to_string(dir.path().join("state/operator-token")).unwrap();
    let http = reqwest::blocking::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&std::fs::read(&ca).unwrap()).unwrap()])
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {}", token.trim()).parse().unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .unwrap();
    let nodes: Vec<NodeRecord> = serde_json::from_slice(
        &http
            .get(format!("{api}/v1/nodes"))
            .send()
            .unwrap()
            .bytes()
            .unwrap(),
    )
    .unwrap();
    assert!(nodes
        .iter()
        .any(|n| n.node_id.as_str() == "up-test" && n.status.to_string() == "ready"));
    assert!(
        !dir.path().join("state/agent-bootstrap-token").exists(),
        "the spent bootstrap token is removed"
    );
    let deleted = http
        .delete(format!("{api}/v1/vms/{}", placed.vm_id.as_str()))
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);

    // Place a machine through the controller: the agent runs it as a real process.
    let pid_file = dir.path().join("tenant.pid");
    let command = format!("echo $$ > {}; exec sleep 600", pid_file.display());
    let answer = http
        .post(format!("{api}/v1/vms"))
        .json(&json!({"vm_type": "process", "ram_mb": 64, "vcpu_count": 1, "command": ["/bin/sh", "-c", command]}))
        .send()
        .unwrap();
    assert_eq!(answer.status(), 200);
    let vm: VmRecord = read(&answer.bytes().unwrap()).unwrap();
    let pid: i32 = wait_for(
        "the tenant to write its pid",
        Duration::from_secs(20),
        || std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok(),
    );
    assert!(pid_alive(pid));
    let reported_path = dir.path().join("state/agent/reported.json");
    wait_for(
        "reported.json to show the machine running",
        Duration::from_secs(20),
        || {
            let doc: HostReportedState = read(&std::fs::read(&reported_path).ok()?).ok()?;
            doc.instances
                .iter()
                .any(|i| i.state.to_string() == "running")
                .then_some(())
        },
    );
    let listed = http
        .get(format!("{api}/v1/vms/{}", vm.vm_id.as_str()))
        .send()
        .unwrap();
    assert_eq!(listed.status(), 200);

    // Delete it: the process stops and the controller forgets the machine.
    let deleted = http
        .delete(format!("{api}/v1/vms/{}", vm.vm_id.as_str()))
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    wait_for(
        "the tenant process to stop",
        Duration::from_secs(20),
        || (!pid_alive(pid)).then_some(()),
    );
    assert_eq!(
        http.get(format!("{api}/v1/vms/{}", vm.vm_id.as_str()))
            .send()
            .unwrap()
            .status(),
        404
    );

    // Ctrl-C stops both programs, cleanly, and frees the ports.
    crate::support::send_signal(up.pid(), rustix::process::Signal::INT);
    let status = wait_for("`fleetwire up` to exit", Duration::from_secs(40), || {
        up.child.try_wait().unwrap()
    });
    assert!(status.success(), "up exited with {status}");
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", api_port)).is_ok(),
        "the controller's port is free"
    );
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", spawn_port)).is_ok(),
        "the agent's port is free"
    );
    assert!(Path::new(&dir.path().join("state/controller")).exists());
}

#[test]
fn a_killed_up_takes_its_controller_and_agent_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let api_port = free_port();
    let mut up = Running::spawn(
        fleetwire()
            .arg("up")
            .arg("--dir")
            .arg(dir.path())
            .args(["--listen", &format!("127.0.0.1:{api_port}")])
            .args([
                "--spawn-port",
                &free_port().to_string(),
                "--node-id",
                "killed-up",
                // PPN's plain mode, which `up` runs too.
                "--plain-http",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let api = format!("http://127.0.0.1:{api_port}/v1/nodes/killed-up");
    crate::support::install_crypto_provider();
    wait_for("the fleet to come up", Duration::from_secs(60), || {
        reqwest::blocking::get(&api)
            .ok()
            .filter(|r| r.status() == 200)
            .map(|_| ())
    });
    up.kill(); // SIGKILL: `up` gets no chance to stop its children itself.
    wait_for(
        "the controller's port to be free",
        Duration::from_secs(20),
        || {
            std::net::TcpListener::bind(("127.0.0.1", api_port))
                .ok()
                .map(|_| ())
        },
    );
}
