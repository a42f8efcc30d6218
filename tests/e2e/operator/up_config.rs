//! The commands `fleetwire up` prints, run as an operator runs them (docs/operator-cli.md,
//! "Connecting"): from the directory `up` ran in, where they find `./.fleetwire/operator.toml`
//! by themselves, and from anywhere else with the `FLEETWIRE_CONFIG` the banner names. The
//! commands that read the controller's state (`token list`, `token operator`) find `up`'s
//! directory the same way; a token `token operator` adds is taken up by the running
//! controller at once, and a line removed from the file stops working as soon.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::support::up_process::{up_command, Stream, UpProcess};
use crate::support::{free_port, wait_for, without_user_settings};

/// Runs `line` with `sh -c` in `cwd`, as a user pasting it would, with none of the user's
/// own fleetwire settings (`home` stands for the user's home).
fn shell(cwd: &Path, home: &Path, line: &str) -> Output {
    let mut command = std::process::Command::new("sh");
    without_user_settings(command.arg("-c").arg(line).current_dir(cwd), home)
        .output()
        .unwrap()
}

fn ok(line: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{line}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `up` in a folder of its own with the default state directory (`.fleetwire`).
fn start(cwd: &Path, home: &Path, node: &str) -> UpProcess {
    let mut up =
        UpProcess::start(up_command(cwd, home, free_port(), free_port()).args(["--node-id", node]));
    up.wait_for_line("fleetwire is up");
    up
}

#[test]
fn the_commands_up_prints_work_from_its_directory_and_from_elsewhere() {
    let home = tempfile::tempdir().unwrap();
    let here = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let mut up = start(here.path(), home.path(), "found-test");
    let exe = crate::support::fleetwire_bin().display().to_string();

    // The banner's nodes line: the bare command here, the variable for elsewhere.
    let banner = up.banner_line("nodes");
    let (command, note) = banner.split_once("   (").unwrap();
    assert_eq!(command, format!("{exe} nodes list"), "{banner}");
    let export = note
        .split("elsewhere: ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| {
            panic!("the banner says how to reach the fleet from elsewhere: {banner}")
        });
    assert!(export.starts_with("export FLEETWIRE_CONFIG="), "{export}");

    // From `up`'s directory, as printed, and the other commands that read config or state.
    let table = ok(command, shell(here.path(), home.path(), command));
    assert!(
        table.starts_with("NODE") && table.contains("found-test"),
        "{table}"
    );
    for args in ["vms list", "fleet", "token list"] {
        let line = format!("{exe} {args}");
        let out = ok(&line, shell(here.path(), home.path(), &line));
        if args == "token list" {
            // The agent's bootstrap token, spent when it enrolled.
            assert!(
                out.lines()
                    .any(|l| l.contains("found-test") && l.contains("used at")),
                "{out}"
            );
        }
    }

    // From elsewhere, with the variable the banner names.
    for args in ["nodes list", "token list"] {
        let line = format!("{export}; {exe} {args}");
        let out = ok(&line, shell(elsewhere.path(), home.path(), &line));
        assert!(out.contains("found-test"), "{line}:\n{out}");
    }
    // And without it, elsewhere, the command says what it looked for.
    let line = format!("{exe} nodes list");
    let out = shell(elsewhere.path(), home.path(), &line);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("./.fleetwire/operator.toml"), "{err}");

    assert!(up.ctrl_c().success());
}

#[test]
fn a_token_from_token_operator_works_at_once_and_a_removed_one_stops() {
    let home = tempfile::tempdir().unwrap();
    let here = tempfile::tempdir().unwrap();
    let mut up = start(here.path(), home.path(), "token-test");
    let exe = crate::support::fleetwire_bin().display().to_string();

    // From `up`'s directory: `token operator` finds the controller's token file itself.
    let line = format!("{exe} token operator --name reader --scope read-only");
    let out = shell(here.path(), home.path(), &line);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let token = ok(&line, out).trim().to_string();
    assert!(
        err.contains(".fleetwire/operator-tokens") && err.contains("no restart"),
        "{err}"
    );
    let token_file = here.path().join("reader-token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let as_reader = format!("{exe} nodes list --token-file {}", token_file.display());

    // The running controller takes it, without a restart.
    let table = wait_for(
        "the controller to take the new token",
        Duration::from_secs(10),
        || {
            let out = shell(here.path(), home.path(), &as_reader);
            out.status
                .success()
                .then(|| String::from_utf8(out.stdout).unwrap())
        },
    );
    assert!(table.contains("token-test"), "{table}");

    // The operator removes its line: refused as soon (401, exit 4).
    let tokens = here.path().join(".fleetwire/operator-tokens");
    let kept: String = std::fs::read_to_string(&tokens)
        .unwrap()
        .lines()
        .filter(|l| !l.contains(",reader,"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&tokens, &kept).unwrap();
    wait_for(
        "the controller to drop the removed token",
        Duration::from_secs(10),
        || (shell(here.path(), home.path(), &as_reader).status.code() == Some(4)).then_some(()),
    );

    // A broken edit: the controller keeps the tokens it has and says why, on `up`'s console.
    std::fs::write(&tokens, format!("{kept}not a token line\n")).unwrap();
    up.wait_for_line("operator-tokens");
    let console = up.text(Stream::Stderr);
    assert!(
        console.contains("controller: ") && console.contains("line"),
        "{console}"
    );
    let line = format!("{exe} fleet");
    ok(&line, shell(here.path(), home.path(), &line));
    assert!(up.ctrl_c().success());
}
