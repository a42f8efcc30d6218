//! What an operator used to kubectl and nomad reaches for (issue 30), run against a controller
//! with real agents: shell completion, `-o json|yaml|wide|name`, `--ignore-not-found`,
//! `--watch`, `vms get` as a description, `vms logs [-f]`, `fleet` with its unreachable nodes
//! marked, and log files without colour codes.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use super::run_cli::{cli, exits, ok, words, SmallFleet};
use crate::support::controller_harness::ControllerProcess;
use crate::support::{fleetwire, wait_for, Running};

/// A long-running command (`--watch`, `logs -f`), its standard output read line by line.
fn follow(fleet: &SmallFleet, args: &[&str]) -> (Running, mpsc::Receiver<String>) {
    let mut command = fleetwire();
    command
        .args(args)
        .env_remove("NO_COLOR")
        .envs(fleet.env())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut running = Running::spawn(&mut command);
    let (tx, rx) = mpsc::channel();
    let out = running.child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (running, rx)
}

fn until_line(lines: &mpsc::Receiver<String>, what: &str, test: impl Fn(&str) -> bool) -> String {
    wait_for(what, Duration::from_secs(30), || {
        lines.try_iter().find(|l| test(l))
    })
}

#[test]
fn completion_scripts_for_bash_zsh_and_fish() {
    let home = tempfile::tempdir().unwrap();
    for (shell, says) in [
        ("bash", "complete -F _fleetwire"),
        ("zsh", "#compdef fleetwire"),
        ("fish", "complete -c fleetwire"),
    ] {
        let script = ok(cli(home.path(), &[], &["completion", shell]));
        assert!(script.contains(says), "{shell}: {script}");
        for word in ["vms", "nodes", "drain", "ignore-not-found"] {
            assert!(script.contains(word), "{shell} completes {word}");
        }
    }
    exits(&cli(home.path(), &[], &["completion", "tcsh"]), 2, "tcsh");
}

#[test]
fn formats_descriptions_absent_records_watch_and_logs() {
    let fleet = SmallFleet::start(&["node-a"]);
    let mut create = words("vms create --type t --memory-mb 64 --vcpus 1 --vm-id vm-talks --");
    create.extend(["sh", "-c", "echo first; sleep 4; echo second; sleep 600"]);
    ok(fleet.run(&create));

    // -o name, yaml, wide.
    assert_eq!(
        ok(fleet.run(&["vms", "list", "-o", "name"])),
        "vm/vm-talks\n"
    );
    assert_eq!(
        ok(fleet.run(&["nodes", "list", "-o", "name"])),
        "node/node-a\n"
    );
    let yaml = ok(fleet.run(&["vms", "get", "vm-talks", "-o", "yaml"]));
    assert!(
        yaml.contains("vm_id: vm-talks") && yaml.contains("state: Running"),
        "{yaml}"
    );
    let wide = ok(fleet.run(&["vms", "list", "-o", "wide"]));
    let header = wide.lines().next().unwrap();
    assert!(
        header.contains("PORTS") && header.contains("RESTARTS") && header.contains("MESSAGE"),
        "{wide}"
    );
    let wide_nodes = ok(fleet.run(&["nodes", "list", "-o", "wide"]));
    assert!(
        wide_nodes.lines().next().unwrap().contains("HOSTNAME"),
        "{wide_nodes}"
    );

    // vms get describes: node, ports, restarts, message, events.
    let described = ok(fleet.run(&["vms", "get", "vm-talks"]));
    for field in [
        "Node:",
        "node-a",
        "Ports:",
        "Restarts:",
        "Message:",
        "Events:",
        "started",
    ] {
        assert!(described.contains(field), "{field} in:\n{described}");
    }
    assert!(
        !described.contains('\u{1b}'),
        "no colours in a pipe: {described:?}"
    );

    // --ignore-not-found: get and delete of what is not there succeed silently.
    for args in [
        &["vms", "get", "no-such-vm", "--ignore-not-found"][..],
        &["vms", "delete", "no-such-vm", "--ignore-not-found"],
        &["nodes", "get", "no-such-node", "--ignore-not-found"],
    ] {
        assert_eq!(ok(fleet.run(args)), "", "{args:?}");
    }
    exits(&fleet.run(&["vms", "get", "no-such-vm"]), 3, "404");

    // vms logs: what the VM wrote; -f follows what it writes next.
    let first = wait_for("the VM's first line", Duration::from_secs(20), || {
        let out = ok(fleet.run(&["vms", "logs", "vm-talks"]));
        out.contains("first").then_some(out)
    });
    assert!(first.starts_with("first\n"), "{first:?}");
    let (_following, lines) = follow(&fleet, &["vms", "logs", "-f", "vm-talks"]);
    until_line(&lines, "`logs -f` to print the first line", |l| {
        l == "first"
    });
    until_line(&lines, "`logs -f` to print what came later", |l| {
        l == "second"
    });
    exits(&fleet.run(&["vms", "logs", "no-such-vm"]), 3, "404");

    // --watch prints the list again when it changes.
    let (_watching, lines) = follow(&fleet, &["vms", "list", "--watch", "-o", "name"]);
    until_line(&lines, "the watched list", |l| l == "vm/vm-talks");
    ok(fleet.run(&words(
        "vms create --type t --memory-mb 64 --vcpus 1 --vm-id vm-later -- sleep 600",
    )));
    until_line(&lines, "the watched list to show the new VM", |l| {
        l == "vm/vm-later"
    });
}

#[test]
fn fleet_lists_unreachable_nodes_marked() {
    let mut fleet = SmallFleet::start_with(&["node-a"], &["--stale-after", "2s"]);
    fleet.agents.clear();
    let table = wait_for(
        "the node to be unreachable",
        Duration::from_secs(30),
        || {
            let table = ok(fleet.run(&["fleet"]));
            table.contains("1 unreachable").then_some(table)
        },
    );
    let row = table
        .lines()
        .find(|l| l.starts_with("node-a"))
        .unwrap_or_else(|| panic!("the unreachable node is listed:\n{table}"));
    assert!(row.contains("unreachable"), "{table}");
}

#[test]
fn log_files_get_no_colour_codes() {
    // The mTLS harness writes the controller's log to a file, as `fleetwire up` does.
    let controller = ControllerProcess::start_secure(&[]);
    let log = wait_for("the controller's log", Duration::from_secs(10), || {
        let log = controller.log();
        (!log.is_empty()).then_some(log)
    });
    assert!(
        !log.contains('\u{1b}'),
        "escape codes in the log file: {log:?}"
    );
}
