//! What `fleetwire up` says is true (docs/operator-cli.md, "fleetwire up"), off the happy
//! path, as an operator meets it:
//!
//! - a second `up` (another folder) on the port of a running one: the first controller
//!   answers on that port, but it is not the one this `up` started; the second says the
//!   address is in use, in its child's own words on its console, never "fleetwire is up";
//! - a stale node record: the fleet stopped, then started again while something else holds
//!   the agent's port. The controller's stored record says "ready", but this agent never
//!   heartbeated: `up` does not call it ready, and shows why the agent stopped.

use crate::support::free_port;
use crate::support::up_process::{up_command, Stream, UpProcess};

#[test]
fn a_second_up_on_the_port_of_a_running_one_says_the_address_is_in_use() {
    let home = tempfile::tempdir().unwrap();
    let first_dir = tempfile::tempdir().unwrap();
    let second_dir = tempfile::tempdir().unwrap();
    let api_port = free_port();
    // Both in PPN's plain mode, where the first controller's /readyz answers the second `up`
    // as readily as its own would.
    let mut first = UpProcess::start(
        up_command(first_dir.path(), home.path(), api_port, free_port()).args([
            "--plain-http",
            "--node-id",
            "first",
        ]),
    );
    first.wait_for_line("fleetwire is up");

    let mut second = UpProcess::start(
        up_command(second_dir.path(), home.path(), api_port, free_port()).args([
            "--plain-http",
            "--node-id",
            "second",
        ]),
    );
    let status = second.exit_status();
    let (out, err) = (second.text(Stream::Stdout), second.text(Stream::Stderr));
    assert!(!status.success(), "the second `up` exited with {status}");
    assert!(
        !out.contains("fleetwire is up") && !out.contains("… ready"),
        "the second `up` took the first controller for its own:\n{out}"
    );
    // The controller's own error, on the console as it happened, and `up`'s conclusion.
    assert!(
        err.contains("controller: ")
            && err.contains(&format!("127.0.0.1:{api_port}"))
            && err.contains("in use (os error 98)"),
        "the child's reason is not on the console:\n{err}"
    );
    assert!(
        err.contains("exited (exit code 1) before it was ready"),
        "{err}"
    );
    // The first fleet is untouched.
    assert!(first.running.child.try_wait().unwrap().is_none());
    assert!(first.ctrl_c().success());
}

#[test]
fn a_stale_node_record_does_not_make_an_agent_that_never_heartbeated_ready() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let (api_port, spawn_port) = (free_port(), free_port());
    let up = || {
        let mut command = up_command(cwd.path(), home.path(), api_port, spawn_port);
        command.args(["--node-id", "stale-test"]);
        command
    };
    // The fleet runs once: the controller stores the node as ready.
    let mut fleet = UpProcess::start(&mut up());
    fleet.wait_for_line("fleetwire is up");
    assert!(fleet.ctrl_c().success());

    // Something else takes the agent's port while the fleet is down; the fleet is started
    // again. The controller still has the node's record, "ready" (a stored node counts as
    // heard from when the controller starts), and reported.json is still there.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", spawn_port)).unwrap();
    let mut again = UpProcess::start(&mut up());
    let status = again.exit_status();
    let (out, err) = (again.text(Stream::Stdout), again.text(Stream::Stderr));
    assert!(!status.success(), "{status}\n{out}\n{err}");
    assert!(
        out.contains("controller on") && out.contains("… ready ("),
        "the controller came up:\n{out}"
    );
    assert!(
        !out.contains("agent stale-test enrolling … ready") && !out.contains("fleetwire is up"),
        "the stale record made the agent ready:\n{out}"
    );
    assert!(
        err.contains("agent: ")
            && err.contains(&spawn_port.to_string())
            && err.contains("in use (os error 98)"),
        "the agent's reason is not on the console:\n{err}"
    );
    assert!(
        err.contains("agent stale-test enrolling: the agent exited"),
        "{err}"
    );
    drop(squatter);

    // With its port free, the same fleet comes up again, its agent heartbeating anew.
    let mut third = UpProcess::start(&mut up());
    third.wait_for_line("fleetwire is up");
    let out = third.text(Stream::Stdout);
    assert!(
        out.contains("agent stale-test enrolling … ready ("),
        "{out}"
    );
    assert!(third.ctrl_c().success());
}
