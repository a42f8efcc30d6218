//! `fleetwire up` on a terminal (a pseudo-terminal from openpty(3), as a terminal emulator
//! gives one): each step's clock is redrawn in place (a carriage return, the line erased) and
//! the step ends on a line of its own saying it is ready; then the banner. Off a terminal the
//! same steps are plain lines, never frames (`fleet::up`).

use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::up_process::up_command;
use crate::support::{free_port, wait_for, Running};

/// A pseudo-terminal: (the side a terminal emulator reads, the side a program is given), as
/// openpty(3) makes one: posix_openpt, grantpt, unlockpt, then the other side opened by name.
fn openpty() -> (std::fs::File, OwnedFd) {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("posix_openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
        .open(std::ffi::OsStr::from_bytes(name.as_bytes()))
        .expect("opening the terminal's other side");
    (std::fs::File::from(master), OwnedFd::from(slave))
}

#[test]
fn up_on_a_terminal_redraws_each_step_in_place_and_ends_it_on_a_line() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let api_port = free_port();
    let (mut terminal, tty) = openpty();
    let mut command = up_command(cwd.path(), home.path(), api_port, free_port());
    command
        .args(["--node-id", "tty-test"])
        .stdin(tty.try_clone().unwrap())
        .stdout(tty.try_clone().unwrap())
        .stderr(tty);
    let mut up = Running::spawn(&mut command);
    // The command holds the program's side until it is dropped: without it, the terminal's
    // side reads the end once the program exits.
    drop(command);
    let screen = Arc::new(Mutex::new(Vec::new()));
    let shown = screen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = terminal.read(&mut buf) {
            if n == 0 {
                break;
            }
            shown.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let text = || String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
    wait_for(
        "`fleetwire up` to say it is up on the terminal",
        Duration::from_secs(60),
        || text().contains("fleetwire is up").then_some(()),
    );
    let text = text();
    let controller = format!("  controller on https://127.0.0.1:{api_port} … ");
    let agent = "  agent tty-test enrolling … ";
    for step in [controller.as_str(), agent] {
        // A frame with the running clock, drawn over the line ...
        assert!(
            text.contains(&format!("\r\x1b[K{step}0.")),
            "no frame of {step:?} with its clock:\n{text:?}"
        );
        // ... and the step's end, drawn over its last frame, then a new line.
        assert!(
            text.contains(&format!("\r\x1b[K{step}ready (")),
            "{step:?} does not end in place:\n{text:?}"
        );
        // Not the plain line a pipe gets when a step starts.
        assert!(
            !text.contains(&format!("{}\r\n", step.trim_end())),
            "{step:?} printed as a plain line on a terminal:\n{text:?}"
        );
    }
    let banner = text.find("fleetwire is up").unwrap();
    assert!(
        text[..banner].ends_with("\r\n\r\n") || text[..banner].ends_with("\n\n"),
        "the banner starts on a fresh line after the last step:\n{text:?}"
    );
    // Ctrl-C.
    crate::support::send_signal(up.pid(), rustix::process::Signal::INT);
    let status = wait_for("`fleetwire up` to stop", Duration::from_secs(40), || {
        up.child.try_wait().unwrap()
    });
    assert!(status.success(), "{status}");
}
