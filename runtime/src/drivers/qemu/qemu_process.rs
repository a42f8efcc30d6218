//! A running QEMU: started by this agent (its child, waited for on a thread) or found again
//! after an agent restart (pid file + QMP, watched through /proc). QEMU runs in its own process
//! group and outlives a crashed agent, so that the guest does not go down with it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fleetwire_types::TenantExit;
use tokio::sync::oneshot;

use super::argv::{argv, Launch};
use crate::drivers::proc_stats;
use crate::drivers::process::exit_of;

pub struct QemuProcess {
    pub pid: u32,
    /// The end of a child run (its exit), or `None` for a QEMU found again (watched by pid).
    exit: Option<oneshot::Receiver<TenantExit>>,
    start_time: Option<u64>,
}

impl QemuProcess {
    /// Starts QEMU for `launch`; its stdout and stderr go to the VM's log with the console.
    pub fn spawn(binary: &Path, launch: &Launch) -> std::io::Result<QemuProcess> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&launch.console_log)?;
        let _ = std::fs::remove_file(&launch.qmp_socket);
        let _ = std::fs::remove_file(&launch.pid_file);
        let mut child = std::process::Command::new(binary)
            .args(argv(launch))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()?;
        let pid = child.id();
        let (tx, rx) = oneshot::channel();
        std::thread::Builder::new()
            .name(format!("qemu-{pid}"))
            .spawn(move || {
                let _ = tx.send(exit_of(child.wait()));
            })?;
        Ok(QemuProcess {
            pid,
            exit: Some(rx),
            start_time: proc_stats::start_time(pid),
        })
    }

    /// The QEMU a previous agent started for this VM, if it still runs: the pid in its pid
    /// file, whose command line names this VM's QMP socket (so a reused pid is never taken).
    pub fn find(pid_file: &Path, qmp_socket: &Path) -> Option<QemuProcess> {
        let pid: u32 = std::fs::read_to_string(pid_file)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let socket = format!(
            "unix:{},",
            qmp_socket.display().to_string().replace(',', ",,")
        );
        let ours = cmdline
            .split(|b| *b == 0)
            .any(|arg| arg.starts_with(socket.as_bytes()));
        (ours && alive(pid)).then(|| QemuProcess {
            pid,
            exit: None,
            start_time: proc_stats::start_time(pid),
        })
    }

    /// Waits for QEMU to end: its exit when it was this agent's child.
    pub async fn ended(&mut self) -> Option<TenantExit> {
        match &mut self.exit {
            Some(rx) => rx.await.ok(),
            None => {
                while self.running() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                None
            }
        }
    }

    fn running(&self) -> bool {
        alive(self.pid) && proc_stats::start_time(self.pid) == self.start_time
    }

    pub fn kill(&self) {
        if self.running() {
            // The QEMU this process runs (checked by its start time); Err: it has just gone.
            if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// A process that exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// The first line of `qemu-system-x86_64 --version`, shortened to "QEMU 7.2.22 (Debian ...)".
pub fn version(binary: &Path) -> std::io::Result<String> {
    let out = std::process::Command::new(binary)
        .arg("--version")
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("").trim();
    Ok(first.replace("QEMU emulator version", "QEMU"))
}

/// `VM_QEMU_BINARY`, else `qemu-system-x86_64` on `PATH`.
pub fn resolve_binary(configured: Option<&Path>) -> Result<PathBuf, String> {
    const NAME: &str = "qemu-system-x86_64";
    if let Some(path) = configured {
        return if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(format!(
                "VM_QEMU_BINARY: {} is not a file (install qemu-system-x86, or point VM_QEMU_BINARY at {NAME})",
                path.display()
            ))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(NAME))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!("{NAME} is not on PATH: install qemu-system-x86, or set VM_QEMU_BINARY")
        })
}
