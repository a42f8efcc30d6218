//! One owner per state directory (docs/operations.md, "One owner per directory"), as an
//! operator meets it: a second `fleetwire up` in the directory of a running one, on other
//! ports, stops at once naming the first, and the first fleet is untouched (its operator
//! config, its tenant, its controller); so do a second controller and a second agent on the
//! directories `up` gave its own. After `kill -9` of the first `up`, a new one takes the
//! directory over, says so, and its node enrolls again.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::support::{fleetwire, free_port, wait_for, Running};

/// `fleetwire up` on `dir` with ports of its own, and its standard output line by line.
fn start_up(dir: &Path) -> (Running, mpsc::Receiver<String>, u16) {
    let api_port = free_port();
    let mut up = Running::spawn(
        fleetwire()
            .arg("up")
            .arg("--dir")
            .arg(dir)
            .args(["--listen", &format!("127.0.0.1:{api_port}")])
            .args(["--spawn-port", &free_port().to_string()])
            .args(["--node-id", "owner-test", "--heartbeat-interval", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stdout = up.child.stdout.take().unwrap();
    let stderr = up.child.stderr.take().unwrap();
    for stream in [
        Box::new(stdout) as Box<dyn std::io::Read + Send>,
        Box::new(stderr),
    ] {
        let tx = lines_tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    (up, lines, api_port)
}

/// Waits until a line containing `needle` was printed; returns everything printed so far.
fn wait_for_line(lines: &mpsc::Receiver<String>, printed: &mut Vec<String>, needle: &str) {
    wait_for(needle, Duration::from_secs(60), || {
        while let Ok(line) = lines.try_recv() {
            printed.push(line);
        }
        printed.iter().any(|l| l.contains(needle)).then_some(())
    });
}

/// Runs `command` to its end (at most 20 s) and returns (exit code, stderr).
fn refused(command: &mut Command) -> (Option<i32>, String) {
    let mut child = Running::spawn(command.stdout(Stdio::null()).stderr(Stdio::piped()));
    let status = wait_for("the second owner to exit", Duration::from_secs(20), || {
        child.child.try_wait().unwrap()
    });
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

fn healthz(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[test]
fn a_second_owner_of_a_state_directory_is_refused_and_a_dead_ones_lock_is_taken_over() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("state");
    let (mut first, lines, first_port) = start_up(&dir);
    let mut printed = Vec::new();
    wait_for_line(&lines, &mut printed, "fleetwire is up");
    let operator_toml = std::fs::read_to_string(dir.join("operator.toml")).unwrap();
    let agent_lock = std::fs::read_to_string(dir.join("agent/owner.lock")).unwrap();
    let controller_lock = std::fs::read_to_string(dir.join("controller/owner.lock")).unwrap();

    // A second `up` in the same directory, on other ports.
    let (code, stderr) = refused(
        fleetwire()
            .arg("up")
            .arg("--dir")
            .arg(&dir)
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--spawn-port", &free_port().to_string()])
            .args(["--node-id", "owner-test"]),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("is used by pid {} (", first.pid()))
            && stderr.contains("fleetwire up"),
        "the refusal names the first `up`: {stderr}"
    );
    // A second controller and a second agent on the directories `up` gave its own.
    let (code, stderr) = refused(
        fleetwire()
            .arg("controller")
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .arg("--data-dir")
            .arg(dir.join("controller")),
    );
    assert_eq!(code, Some(1), "{stderr}");
    let controller_pid = controller_lock.lines().next().unwrap();
    assert!(
        stderr.contains(&format!("is used by {controller_pid} (")),
        "{stderr}"
    );
    let (code, stderr) = refused(
        fleetwire()
            .arg("agent")
            .env("VM_STATE_DIR", dir.join("agent"))
            .env(
                "VM_FLEET_ENDPOINT",
                format!("http://127.0.0.1:{}", free_port()),
            )
            .env("VM_NODE_ID", "owner-test")
            .env("VM_SPAWN_PORT", free_port().to_string())
            .env("VM_WG_IP", "127.0.0.1")
            .env("VM_PLAIN_HTTP", "true"),
    );
    let agent_pid = agent_lock.lines().next().unwrap();
    assert!(
        code == Some(1) && stderr.contains(&format!("is used by {agent_pid} (")),
        "exit {code:?}: {stderr}"
    );
    // The first fleet is as it was.
    assert_eq!(
        std::fs::read_to_string(dir.join("operator.toml")).unwrap(),
        operator_toml
    );
    assert!(healthz(first_port), "the first controller still serves");
    assert!(
        first.child.try_wait().unwrap().is_none(),
        "the first `up` runs"
    );

    // `kill -9` of the first `up`: its children stop (they die with it), the locks stay
    // written. A new `up` takes the directory over, says so, and comes up enrolled again.
    let first_pid = first.pid();
    first.kill();
    let agent_proc = format!("/proc/{}", agent_pid.trim_start_matches("pid "));
    wait_for(
        "the first fleet's controller and agent to stop",
        Duration::from_secs(30),
        || (!healthz(first_port) && !Path::new(&agent_proc).exists()).then_some(()),
    );
    let (mut again, lines, _) = start_up(&dir);
    let mut printed = Vec::new();
    wait_for_line(&lines, &mut printed, "fleetwire is up");
    let text = printed.join("\n");
    assert!(
        text.contains(&format!("from pid {first_pid} (")) && text.contains("taking over"),
        "the new `up` says whose directory it took over:\n{text}"
    );
    again.kill();
}
