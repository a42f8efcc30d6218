//! The systemd units of packaging/ and the readiness they rely on: the real controller says
//! READY=1 on NOTIFY_SOCKET once it answers, and STOPPING=1 when told to stop; both units pass
//! `systemd-analyze verify` (when it is installed) and keep their least-privilege directives.

use std::collections::BTreeMap;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{fleetwire, fleetwire_bin, free_port, have_program, workspace, Running};

/// The `[Service]` section of a unit file: every value of each key, in order.
fn service_section(unit: &str) -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(workspace().join("packaging").join(unit))
        .unwrap_or_else(|e| panic!("reading packaging/{unit}: {e}"));
    let mut section = String::new();
    let mut keys: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            section = line.to_string();
            continue;
        }
        if section == "[Service]" {
            let (key, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("{unit}: not key=value: {line}"));
            keys.entry(key.trim().to_string())
                .or_default()
                .push(value.trim().to_string());
        }
    }
    keys
}

fn assert_directives(unit: &str, keys: &BTreeMap<String, Vec<String>>, expected: &[(&str, &str)]) {
    for (key, value) in expected {
        let values = keys.get(*key).map(Vec::as_slice).unwrap_or_default();
        assert!(
            values.iter().any(|v| v == value),
            "{unit}: expected {key}={value}, found {values:?}"
        );
    }
}

fn address_families(unit: &str, keys: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let families: Vec<String> = keys
        .get("RestrictAddressFamilies")
        .unwrap_or_else(|| panic!("{unit}: no RestrictAddressFamilies="))
        .iter()
        .flat_map(|v| v.split_whitespace().map(str::to_string))
        .collect();
    for family in ["AF_INET", "AF_INET6", "AF_UNIX"] {
        assert!(families.iter().any(|f| f == family), "{unit}: {families:?}");
    }
    families
}

#[test]
fn the_controller_unit_keeps_its_least_privilege_directives() {
    let unit = "fleetwire-controller.service";
    let keys = service_section(unit);
    assert_directives(
        unit,
        &keys,
        &[
            ("Type", "notify"),
            ("ExecStart", "/usr/local/bin/fleetwire controller"),
            ("EnvironmentFile", "-/etc/fleetwire/controller.env"),
            ("DynamicUser", "yes"),
            ("StateDirectory", "fleetwire"),
            ("StateDirectoryMode", "0700"),
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("PrivateDevices", "yes"),
            ("CapabilityBoundingSet", ""),
            ("SystemCallFilter", "@system-service"),
            ("LimitNOFILE", "65536"),
        ],
    );
    // The bounding set is empty, never widened by a second line.
    assert_eq!(keys["CapabilityBoundingSet"], [""]);
    let families = address_families(unit, &keys);
    assert!(
        families
            .iter()
            .all(|f| f.starts_with("AF_") && f != "AF_PACKET"),
        "{families:?}"
    );
    // The operator-token hint is there for the operator to follow.
    let text = std::fs::read_to_string(workspace().join("packaging").join(unit)).unwrap();
    for hint in [
        "FLEETWIRE_OPERATOR_TOKEN_FILE",
        "LoadCredential=",
        "fleetwire token operator",
    ] {
        assert!(text.contains(hint), "{unit} should mention {hint}");
    }
}

#[test]
fn the_agent_unit_is_hardened_where_its_drivers_allow() {
    let unit = "fleetwire-agent.service";
    let keys = service_section(unit);
    assert_directives(
        unit,
        &keys,
        &[
            ("Type", "notify"),
            ("ExecStart", "/usr/local/bin/fleetwire agent"),
            ("EnvironmentFile", "/etc/fleetwire/agent.env"),
            ("StateDirectory", "fleetwire-agent"),
            ("StateDirectoryMode", "0700"),
            ("KillMode", "mixed"),
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("CapabilityBoundingSet", "CAP_CHOWN"),
            ("SystemCallFilter", "@system-service"),
            ("LimitNOFILE", "65536"),
        ],
    );
    address_families(unit, &keys);
    // What would break the drivers or the tenants: /dev/kvm hidden, JIT tenants killed.
    for (key, breaking) in [("PrivateDevices", "yes"), ("MemoryDenyWriteExecute", "yes")] {
        assert!(
            !keys
                .get(key)
                .is_some_and(|v| v.iter().any(|v| v == breaking)),
            "{unit}: {key}={breaking} breaks the agent's drivers"
        );
    }
    let text = std::fs::read_to_string(workspace().join("packaging").join(unit)).unwrap();
    for hint in [
        "VM_FLEET_ENDPOINT=https://",
        "VM_BOOTSTRAP_TOKEN_FILE=",
        "VM_FLEET_CA_FILE=",
    ] {
        assert!(text.contains(hint), "{unit} should mention {hint}");
    }
}

#[test]
fn both_units_pass_systemd_analyze_verify() {
    if !have_program(
        "systemd-analyze",
        "apt-get install -y systemd (Debian), then run this test again",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fleetwire_bin();
    let mut units = Vec::new();
    for unit in ["fleetwire-controller.service", "fleetwire-agent.service"] {
        let text = std::fs::read_to_string(workspace().join("packaging").join(unit)).unwrap();
        assert!(
            text.contains("ExecStart=/usr/local/bin/fleetwire "),
            "{unit}"
        );
        let text = text.replace(
            "ExecStart=/usr/local/bin/fleetwire ",
            &format!("ExecStart={} ", bin.display()),
        );
        let path = dir.path().join(unit);
        std::fs::write(&path, text).unwrap();
        units.push(path);
    }
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .args(&units)
        .output()
        .expect("running systemd-analyze verify");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // Unknown keys and unparsable values are only warnings to systemd: any line about these
    // units is a failure here.
    let complaints: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains(&dir.path().display().to_string()))
        .collect();
    assert!(complaints.is_empty(), "{complaints:#?}");
}

/// The next datagram on `socket`, as text.
fn receive(socket: &UnixDatagram, what: &str) -> String {
    let mut buffer = [0u8; 4096];
    let n = socket
        .recv(&mut buffer)
        .unwrap_or_else(|e| panic!("waiting for {what} on the notify socket: {e}"));
    String::from_utf8_lossy(&buffer[..n]).into_owned()
}

#[test]
fn the_controller_says_ready_once_it_answers_and_stopping_when_told_to_stop() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let port = free_port();
    fleetwire_bin();
    let mut controller = Running::spawn(
        fleetwire()
            .args(["controller", "--plain-http", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env("NOTIFY_SOCKET", &socket_path)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null()),
    );
    let ready = receive(&socket, "READY=1");
    assert_eq!(ready.trim(), "READY=1");
    // Right then, with no retry: the port is bound and the store loaded.
    crate::support::install_crypto_provider();
    let health = reqwest::blocking::get(format!("http://127.0.0.1:{port}/healthz"))
        .expect("/healthz answers as soon as READY=1 is sent");
    assert_eq!(health.status().as_u16(), 200);

    crate::support::send_signal(controller.pid(), rustix::process::Signal::TERM);
    let stopping = receive(&socket, "STOPPING=1");
    assert_eq!(stopping.trim(), "STOPPING=1");
    let status = controller.child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn the_agent_says_ready_once_its_local_api_answers_and_stopping_when_told_to_stop() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let port = free_port();
    fleetwire_bin();
    // No controller answers: readiness is the agent's own (its local API), not the link's.
    let env = [(
        "NOTIFY_SOCKET".to_string(),
        socket_path.display().to_string(),
    )];
    let mut agent = Running::spawn(&mut crate::support::agent_harness::agent_command(
        &format!("http://127.0.0.1:{}", free_port()),
        &dir.path().join("state"),
        port,
        &env,
    ));
    let ready = receive(&socket, "READY=1");
    assert_eq!(ready.trim(), "READY=1");
    crate::support::install_crypto_provider();
    let health = reqwest::blocking::get(format!("http://127.0.0.1:{port}/healthz"))
        .expect("the local API answers as soon as READY=1 is sent");
    assert!(health.status().is_success(), "{}", health.status());

    crate::support::send_signal(agent.pid(), rustix::process::Signal::TERM);
    let stopping = receive(&socket, "STOPPING=1");
    assert_eq!(stopping.trim(), "STOPPING=1");
    let status = agent.child.wait().unwrap();
    assert!(status.success(), "{status}");
}
