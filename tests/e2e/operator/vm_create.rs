//! `fleetwire vms create` tells the truth (issue 30): against a controller with a real agent
//! of the process driver, a VM that fails to start is no success. The three stories of the
//! issue, each of which exited 0 with STATE `Error` (its reason only under `-o json`): a type
//! and no command, a command that does not exist, a command that exits at once (which blocked
//! 7 s without a sign of progress). And the VM that runs: exit 0, with or without waiting.

use super::run_cli::{exits, ok, stderr, stdout, words, SmallFleet};

#[test]
fn a_vm_that_fails_is_no_success_and_its_reason_is_printed() {
    let fleet = SmallFleet::start(&["node-a"]);

    // No command, on a process node without VM_DEFAULT_COMMAND: refused, naming the field,
    // rather than running a placeholder (`sleep infinity`).
    let bogus = fleet.run(&words(
        "vms create --type bogus --memory-mb 64 --vcpus 1 --vm-id vm-bogus",
    ));
    assert_ne!(bogus.status.code(), Some(0), "{}", stdout(&bogus));
    exits(&bogus, bogus.status.code().unwrap(), "/command");
    assert!(
        stderr(&bogus).contains("VM_DEFAULT_COMMAND"),
        "{}",
        stderr(&bogus)
    );
    let none = ok(fleet.run(&["vms", "list", "-o", "name"]));
    assert!(!none.contains("vm-bogus"), "nothing was placed: {none}");

    // A command that does not exist: exit 6, and the node's reason on standard error.
    let missing = fleet.run(&words(
        "vms create --type t --memory-mb 64 --vcpus 1 --vm-id vm-missing -- /nonexistent",
    ));
    exits(&missing, 6, "vm-missing");
    assert!(stdout(&missing).contains("Error"), "{}", stdout(&missing));
    assert!(
        stderr(&missing).contains("/nonexistent"),
        "the VM's message names what failed: {}",
        stderr(&missing)
    );

    // A command that exits at once: exit 6, with progress lines while it waited (standard
    // error is a pipe here: plain lines, no spinner redrawn with `\r`).
    let exits_at_once = fleet.run(&words(
        "vms create --type t --memory-mb 64 --vcpus 1 --vm-id vm-false -- /bin/false",
    ));
    exits(&exits_at_once, 6, "vm-false");
    let progress = stderr(&exits_at_once);
    assert!(
        progress
            .lines()
            .next()
            .unwrap_or_default()
            .starts_with("creating VM vm-false"),
        "progress first: {progress}"
    );
    assert!(!progress.contains('\r'), "{progress:?}");
    assert!(
        !progress.contains('\u{1b}'),
        "no colours off a terminal: {progress:?}"
    );
    assert!(progress.contains("Error"), "{progress}");

    // A VM that runs: exit 0, its row says Running; with --no-wait too.
    let runs = ok(fleet.run(&words(
        "vms create --type t --memory-mb 64 --vcpus 1 --vm-id vm-runs -- sleep 600",
    )));
    assert!(
        runs.contains("vm-runs") && runs.contains("Running"),
        "{runs}"
    );
    let detached = fleet.run(&words(
        "vms create --type t --memory-mb 64 --vcpus 1 --vm-id vm-nowait --no-wait -o name -- sleep 600",
    ));
    assert_eq!(ok(detached), "vm/vm-nowait\n");
}
