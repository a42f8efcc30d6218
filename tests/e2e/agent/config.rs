//! The agent's environment contract (docs/agent.md, "Environment contract"): each missing or
//! malformed required variable stops it with one line naming the variable, exit code 2; defaults
//! apply; flags mirror them.

use std::process::{Command, Stdio};

use crate::support::fleetwire;

const REQUIRED: [(&str, &str); 3] = [
    ("VM_FLEET_ENDPOINT", "http://127.0.0.1:9203"),
    ("VM_NODE_ID", "node-1"),
    ("VM_WG_IP", "10.8.0.12"),
];

/// Plain mode (`VM_PLAIN_HTTP=true`) unless `env` says otherwise, so the http:// endpoint
/// above is taken; the secure mode's own rules are tested below.
fn agent(env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut cmd = fleetwire();
    cmd.arg("agent")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("VM_PLAIN_HTTP", "true")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn run(mut cmd: Command) -> (i32, String, String) {
    let out = cmd.output().expect("running fleetwire agent");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn each_missing_required_variable_is_named_and_exits_2() {
    for (missing, _) in REQUIRED {
        let env: Vec<(&str, &str)> = REQUIRED
            .iter()
            .copied()
            .filter(|(k, _)| *k != missing)
            .collect();
        let (code, _, stderr) = run(agent(&env, &[]));
        assert_eq!(code, 2, "without {missing}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {stderr}");
        assert!(lines[0].contains(missing), "{stderr}");
        assert!(lines[0].contains("is required"), "{stderr}");
    }
    // A blank value is as good as missing.
    let mut env = REQUIRED.to_vec();
    env[1] = ("VM_NODE_ID", "  ");
    let (code, _, stderr) = run(agent(&env, &[]));
    assert_eq!(code, 2);
    assert!(stderr.contains("VM_NODE_ID is required"), "{stderr}");
}

#[test]
fn malformed_values_are_named_with_what_is_expected() {
    let cases = [
        (
            "VM_FLEET_ENDPOINT",
            "controller:9203",
            "http:// or https:// URL",
        ),
        ("VM_NODE_ID", "node 1!", "fleet-unique id"),
        ("VM_WG_IP", "10.8.0.300", "IPv4"),
        ("VM_HEARTBEAT_INTERVAL_S", "0", "seconds"),
        ("VM_SPAWN_PORT", "70000", "TCP port"),
        ("VM_RESERVED", "maybe", "true or 1"),
        ("VM_RUNTIME", "docker", "smolvm, process, qemu"),
        ("VM_QEMU_ACCEL", "hvf", "auto, kvm or tcg"),
        ("VM_HOST_PORT_RANGE", "9000", "FIRST-LAST"),
    ];
    for (variable, value, expected) in cases {
        let mut env = REQUIRED.to_vec();
        env.push((variable, value));
        let (code, _, stderr) = run(agent(&env, &[]));
        assert_eq!(code, 2, "{variable}={value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(variable) && stderr.contains(value),
            "{stderr}"
        );
        assert!(stderr.contains(expected), "{variable}: {stderr}");
    }
}

fn settings(stdout: &str) -> std::collections::HashMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn defaults_apply_when_only_the_required_three_are_set() {
    let (code, stdout, stderr) = run(agent(&REQUIRED, &["--check"]));
    assert_eq!(code, 0, "{stderr}");
    let s = settings(&stdout);
    assert_eq!(s["VM_HEARTBEAT_INTERVAL_S"], "10");
    assert_eq!(s["VM_SPAWN_PORT"], "9204");
    assert_eq!(s["VM_RESERVED"], "false");
    assert_eq!(s["VM_RUNTIME"], "process");
    assert_eq!(s["VM_STATE_DIR"], ".fleetwire/agent-node-1");
    assert_eq!(s["VM_FLEET_ENDPOINT"], "http://127.0.0.1:9203");
    assert_eq!(s["VM_PLAIN_HTTP"], "true");
    // The local API listens on the WireGuard address, not on every address.
    assert_eq!(s["VM_LISTEN_ADDRESS"], "10.8.0.12");

    // PPN's spellings of VM_RESERVED, in any case.
    for (raw, want) in [("TRUE", "true"), ("1", "true"), ("False", "false")] {
        let mut env = REQUIRED.to_vec();
        env.push(("VM_RESERVED", raw));
        let (code, stdout, _) = run(agent(&env, &["--check"]));
        assert_eq!(code, 0);
        assert_eq!(settings(&stdout)["VM_RESERVED"], want, "{raw}");
    }
}

#[test]
fn secure_mode_is_the_default_and_says_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state").display().to_string();
    let mut env = REQUIRED.to_vec();
    env.push(("VM_STATE_DIR", &state));
    env.push(("VM_PLAIN_HTTP", "false"));
    let (code, _, stderr) = run(agent(&env, &["--check"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("VM_FLEET_ENDPOINT=\"http://127.0.0.1:9203\" is not an https:// URL")
            && stderr.contains("VM_PLAIN_HTTP=true"),
        "{stderr}"
    );
    env[0] = ("VM_FLEET_ENDPOINT", "https://127.0.0.1:9203");
    let (code, _, stderr) = run(agent(&env, &["--check"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("VM_FLEET_CA_FILE is required"), "{stderr}");

    // A token given on the command line or in the environment is never printed back.
    let ca = dir.path().join("ca.pem");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(&ca, cert.pem()).unwrap();
    let ca = ca.display().to_string();
    env.push(("VM_FLEET_CA_FILE", &ca));
    env.push(("VM_BOOTSTRAP_TOKEN", "abc123.0123456789abcdef"));
    let (code, stdout, stderr) = run(agent(&env, &["--check"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.contains("0123456789abcdef"), "{stdout}");
    let s = settings(&stdout);
    assert_eq!(s["VM_BOOTSTRAP_TOKEN"], "<set>");
    assert_eq!(s["VM_PLAIN_HTTP"], "false");
    assert_eq!(s["VM_FLEET_CA_FILE"], ca);
    let (_, help, _) = run(agent(&env, &["--help"]));
    assert!(help.contains("VM_BOOTSTRAP_TOKEN"), "{help}");
    assert!(!help.contains("0123456789abcdef"), "{help}");

    env.push(("VM_BOOTSTRAP_TOKEN_FILE", "/etc/fleetwire/token"));
    let (code, _, stderr) = run(agent(&env, &["--check"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("VM_BOOTSTRAP_TOKEN is set together with VM_BOOTSTRAP_TOKEN_FILE"),
        "{stderr}"
    );
}

#[test]
fn plain_mode_refuses_to_listen_beyond_the_wireguard_address_unless_told() {
    let mut env = REQUIRED.to_vec();
    env.push(("VM_LISTEN_ADDRESS", "0.0.0.0"));
    let (code, _, stderr) = run(agent(&env, &[]));
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("VM_LISTEN_ADDRESS=\"0.0.0.0\"")
            && stderr.contains("VM_PLAIN_HTTP_ANY_ADDRESS=true"),
        "{stderr}"
    );
    env.push(("VM_PLAIN_HTTP_ANY_ADDRESS", "true"));
    let (code, stdout, stderr) = run(agent(&env, &["--check"]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(settings(&stdout)["VM_LISTEN_ADDRESS"], "0.0.0.0");
}

#[test]
fn flags_mirror_the_variables() {
    let (code, stdout, stderr) = run(agent(
        &[],
        &[
            "--fleet-endpoint",
            "http://10.0.0.1:9203",
            "--node-id",
            "n-7",
            "--wg-ip",
            "10.8.0.7",
            "--spawn-port",
            "9300",
            "--reserved",
            "1",
            "--plain-http",
            "1",
            "--check",
        ],
    ));
    assert_eq!(code, 0, "{stderr}");
    let s = settings(&stdout);
    assert_eq!(s["VM_NODE_ID"], "n-7");
    assert_eq!(s["VM_SPAWN_PORT"], "9300");
    assert_eq!(s["VM_RESERVED"], "true");
    assert_eq!(s["VM_PLAIN_HTTP"], "true");
}

#[test]
fn the_systemd_unit_restarts_on_failure_and_sets_only_variables_the_agent_reads() {
    let unit = std::fs::read_to_string(
        crate::support::workspace().join("packaging/fleetwire-agent.service"),
    )
    .expect("packaging/fleetwire-agent.service");
    let lines: Vec<&str> = unit
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert!(lines.contains(&"Restart=on-failure"));
    assert!(lines.contains(&"ExecStart=/usr/local/bin/fleetwire agent"));
    let env: Vec<(&str, &str)> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("Environment="))
        .map(|kv| kv.split_once('=').expect("NAME=value"))
        .collect();
    assert!(!env.is_empty());
    // The unit's settings plus the three required ones make a configuration the agent accepts,
    // and each one it sets is a variable the agent reads (--check prints every one it knows).
    let mut all = REQUIRED.to_vec();
    all.extend(env.iter().copied());
    let (code, stdout, stderr) = run(agent(&all, &["--check"]));
    assert_eq!(code, 0, "{stderr}");
    let s = settings(&stdout);
    for (k, v) in env {
        assert_eq!(s.get(k).map(String::as_str), Some(v), "{k}");
    }
}
