//! State files are their owner's alone (issue 28): the agent's desired.json (tenants' command
//! lines), reported.json, meters.json and tenant logs, and the controller's SQLite files, are
//! mode 0600 in directories of mode 0700; and a plain-mode agent that serves its local API
//! beyond loopback says so at WARN.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::agent_harness::{agent_command, spawn_body, AgentProcess};
use crate::support::controller_harness::ControllerProcess;
use crate::support::{free_port, wait_for, Running};
use reqwest::Method;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn the_agents_state_files_and_tenant_logs_are_private() {
    let agent = AgentProcess::start(&format!("http://127.0.0.1:{}", free_port()), &[]);
    let (status, body) = agent.send(
        Method::POST,
        "/v1/spawn",
        Some(&spawn_body(
            "vm-a",
            &["sh", "-c", "echo secret-output; exec sleep 600"],
        )),
    );
    assert_eq!(status, 200, "{body}");
    let logs = agent.state_dir.join("logs");
    let log = wait_for("the tenant's log", Duration::from_secs(20), || {
        std::fs::read_dir(&logs)
            .ok()?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .find(|path| {
                std::fs::read_to_string(path).is_ok_and(|text| text.contains("secret-output"))
            })
    });
    assert_eq!(mode(&log), 0o600, "{}", log.display());
    assert_eq!(mode(&logs), 0o700);
    for dir in ["volumes", "run"] {
        assert_eq!(mode(&agent.state_dir.join(dir)), 0o700, "{dir}");
    }
    // Every document the agent keeps, rewritten since the spawn.
    wait_for(
        "reported.json to list vm-a",
        Duration::from_secs(20),
        || {
            std::fs::read_to_string(agent.state_dir.join("reported.json"))
                .ok()
                .filter(|text| text.contains("vm-a"))
        },
    );
    for file in ["desired.json", "reported.json"] {
        assert_eq!(mode(&agent.state_dir.join(file)), 0o600, "{file}");
    }
    if agent.state_dir.join("meters.json").exists() {
        assert_eq!(mode(&agent.state_dir.join("meters.json")), 0o600);
    }
}

#[test]
fn the_controllers_database_and_data_directory_are_private() {
    let temp = tempfile::tempdir().unwrap();
    let home = temp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // mTLS mode: the database (and its WAL files, while it runs) and the CA's directory.
    let controller = ControllerProcess::start_secure_in(&home, &[]);
    let database: Vec<_> = std::fs::read_dir(&home)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().contains("controller.sqlite3"))
        .collect();
    assert!(!database.is_empty());
    for path in &database {
        assert_eq!(mode(path), 0o600, "{}", path.display());
    }
    assert_eq!(mode(&home.join("ca")), 0o700);
    drop(controller);
    // A database in a directory the controller makes itself.
    let data = temp.path().join("data");
    let controller = ControllerProcess::start_in(
        &home,
        &["--db", data.join("fleet.sqlite3").to_str().unwrap()],
    );
    assert_eq!(mode(&data), 0o700);
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }
    drop(controller);
}

#[test]
fn a_plain_agent_serving_beyond_loopback_warns() {
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(String, String)> = [
        ("VM_LISTEN_ADDRESS", "0.0.0.0"),
        ("VM_PLAIN_HTTP_ANY_ADDRESS", "true"),
        ("RUST_LOG", "info"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let log_path = dir.path().join("agent.log");
    let mut command = agent_command(
        &format!("http://127.0.0.1:{}", free_port()),
        &dir.path().join("state"),
        free_port(),
        &env,
    );
    command.stderr(Stdio::from(std::fs::File::create(&log_path).unwrap()));
    let _agent = Running::spawn(&mut command);
    let line = wait_for("the agent's warning", Duration::from_secs(20), || {
        std::fs::read_to_string(&log_path)
            .ok()?
            .lines()
            .find(|line| line.contains("without authentication on a non-loopback address"))
            .map(str::to_string)
    });
    assert!(line.contains("WARN"), "{line}");
}
