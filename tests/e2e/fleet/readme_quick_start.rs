//! The README's quick start, run as printed: `fleetwire up` in a folder (standing in for the
//! checkout, with the binary where `cargo run --release` puts it), the quick start's commands
//! pasted into a shell in that folder, then Ctrl-C and `up` again in the same folder, which
//! starts the same fleet.

use std::process::Command;

use crate::support::up_process::{up_command, Stream, UpProcess};
use crate::support::{fleetwire_bin, free_port, without_user_settings, workspace};

/// The first `sh` block of the README's "Quick start" section.
fn quick_start_commands() -> String {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let section = readme
        .split("\n## Quick start\n")
        .nth(1)
        .expect("README.md has a Quick start section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the quick start has a sh block");
    block.to_string()
}

#[test]
fn the_readme_quick_start_works_as_printed() {
    let home = tempfile::tempdir().unwrap();
    let checkout = tempfile::tempdir().unwrap();
    let release = checkout.path().join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::os::unix::fs::symlink(fleetwire_bin(), release.join("fleetwire")).unwrap();
    let (api_port, spawn_port) = (free_port(), free_port());
    let up = || {
        let mut command = up_command(checkout.path(), home.path(), api_port, spawn_port);
        command.args(["--node-id", "readme-test"]);
        UpProcess::start(&mut command)
    };
    let mut fleet = up();
    fleet.wait_for_line("fleetwire is up");

    let commands = quick_start_commands();
    let out = without_user_settings(
        Command::new("sh")
            .arg("-ec")
            .arg(&commands)
            .current_dir(checkout.path()),
        home.path(),
    )
    .output()
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the quick start failed:\n{commands}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(stdout.contains("readme-test"), "{stdout}");
    assert!(stdout.contains("hello"), "{stdout}");
    assert!(stdout.contains("vm hello deleted"), "{stdout}");

    // Ctrl-C keeps the state; `up` again in the same folder starts the same fleet.
    assert!(fleet.ctrl_c().success());
    let mut again = up();
    again.wait_for_line("fleetwire is up");
    let said = again.text(Stream::Stdout);
    assert!(
        said.contains("agent readme-test enrolling … ready"),
        "{said}"
    );
    assert!(
        !again.text(Stream::Stderr).contains("taking over"),
        "a clean stop leaves nothing to take over"
    );
    assert!(again.ctrl_c().success());
}
