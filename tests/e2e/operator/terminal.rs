//! The operator commands on a terminal (issue 30), in a pseudo terminal as a person's shell
//! gives them: a spinner redrawn in place while `vms create` waits, coloured states, none of
//! either under `NO_COLOR` or off a terminal (the other tests read pipes), and the completion
//! script completing in a real bash.

use std::process::Command;
use std::time::Duration;

use expectrl::{Eof, Expect, Session};

use super::run_cli::SmallFleet;
use crate::support::fleetwire_bin;

/// Runs `fleetwire ARGS` on a pseudo terminal and returns all it wrote there.
fn on_terminal(fleet: &SmallFleet, env: &[(&str, &str)], args: &[&str]) -> String {
    let mut command = Command::new(fleetwire_bin());
    command.args(args).envs(fleet.env()).env_remove("NO_COLOR");
    command.env("TERM", "xterm-256color");
    for (name, value) in env {
        command.env(name, value);
    }
    let mut session = Session::spawn(command).expect("a pseudo terminal");
    session.set_expect_timeout(Some(Duration::from_secs(60)));
    let seen = session.expect(Eof).expect("the command ends");
    String::from_utf8_lossy(seen.as_bytes()).into_owned()
}

#[test]
fn a_terminal_gets_a_spinner_colours_and_completion() {
    let fleet = SmallFleet::start(&["node-a"]);

    // The spinner: redrawn in place (carriage returns or cursor moves) while the VM starts;
    // the state coloured.
    let created = on_terminal(
        &fleet,
        &[],
        &[
            "vms",
            "create",
            "--type",
            "t",
            "--memory-mb",
            "64",
            "--vcpus",
            "1",
            "--vm-id",
            "vm-tty",
            "--",
            "sleep",
            "600",
        ],
    );
    assert!(created.contains("creating VM vm-tty"), "{created:?}");
    assert!(
        created.matches('\r').count() > 2 || created.contains("\u{1b}[2K"),
        "a spinner redrawn in place: {created:?}"
    );
    assert!(
        created.contains("\u{1b}[32mRunning"),
        "Running in green: {created:?}"
    );
    let listed = on_terminal(&fleet, &[], &["nodes", "list"]);
    assert!(listed.contains("\u{1b}[32mready"), "{listed:?}");

    // NO_COLOR: the same table, plain.
    let plain = on_terminal(&fleet, &[("NO_COLOR", "1")], &["nodes", "list"]);
    assert!(
        plain.contains("ready") && !plain.contains("\u{1b}["),
        "{plain:?}"
    );

    // Completion in bash: `vms cr<TAB>` becomes `vms create`.
    completes_in_bash();
}

/// `fleetwire vms cr<TAB>` in an interactive bash that sourced the completion script: the line
/// becomes `vms create`.
fn completes_in_bash() {
    // A person's terminal echoes; readline reads the terminal's echo setting once, when it
    // starts, and on a terminal that does not echo it shows neither typing nor completion
    // (readline's `_rl_echoing_p`). The pseudo terminal starts with echo off, so it is turned
    // on before bash runs: turned on from outside after the spawn, it raced bash's start, and
    // a bash that won never showed a completion (the flake of CI rehearsals under load).
    let mut bash = Command::new("sh");
    bash.args(["-c", "stty echo && exec bash --norc --noprofile -i"])
        .env("PS1", "$ ")
        .env("TERM", "dumb");
    let mut shell = Session::spawn(bash).expect("bash on a pseudo terminal");
    shell.set_expect_timeout(Some(Duration::from_secs(20)));
    // Each line once the prompt is back, as a person types: readline reads the TAB itself.
    let fleetwire = fleetwire_bin().display().to_string();
    for line in [
        format!("source <({fleetwire} completion bash)"),
        format!("alias fleetwire={fleetwire}"),
    ] {
        shell.expect("$ ").expect("the prompt");
        shell.send_line(&line).expect("a line typed");
    }
    shell.expect("$ ").expect("the prompt");
    shell.send("fleetwire vms cr\t").expect("a line typed");
    if let Err(error) = shell.expect("vms create") {
        panic!("bash did not complete `vms cr` to `vms create`: {error:?}");
    }
    let _ = shell.send("\u{3}");
    let _ = shell.send_line("exit");
}
