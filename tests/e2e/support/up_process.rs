//! `fleetwire up` as an operator runs it, for the tests of what it says: started in a folder
//! of the test's (its working directory), standard output and standard error read line by
//! line as they come, each kept apart, and the banner's lines at hand.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::{fleetwire, wait_for, without_user_settings, Running};

/// Which stream a line came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

pub struct UpProcess {
    pub running: Running,
    lines: mpsc::Receiver<(Stream, String)>,
    /// Every line read so far, in order.
    pub printed: Vec<(Stream, String)>,
}

/// A `fleetwire up` command run in `cwd`, with ports of its own and the user's own fleetwire
/// settings out of the way (`home` stands for the user's home).
pub fn up_command(cwd: &Path, home: &Path, api_port: u16, spawn_port: u16) -> Command {
    let mut command = fleetwire();
    command
        .current_dir(cwd)
        .arg("up")
        .args(["--listen", &format!("127.0.0.1:{api_port}")])
        .args(["--spawn-port", &spawn_port.to_string()])
        .args(["--heartbeat-interval", "1"]);
    without_user_settings(&mut command, home);
    command
}

impl UpProcess {
    /// Starts `command` (from [`up_command`]), reading both its streams.
    pub fn start(command: &mut Command) -> UpProcess {
        let mut running = Running::spawn(command.stdout(Stdio::piped()).stderr(Stdio::piped()));
        let (tx, lines) = mpsc::channel();
        let stdout = running.child.stdout.take().unwrap();
        let stderr = running.child.stderr.take().unwrap();
        for (stream, reader) in [
            (
                Stream::Stdout,
                Box::new(stdout) as Box<dyn std::io::Read + Send>,
            ),
            (Stream::Stderr, Box::new(stderr)),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(reader).lines().map_while(Result::ok) {
                    let _ = tx.send((stream, line));
                }
            });
        }
        UpProcess {
            running,
            lines,
            printed: Vec::new(),
        }
    }

    fn read(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.printed.push(line);
        }
    }

    /// Everything printed so far on `stream`, one line each.
    pub fn text(&mut self, stream: Stream) -> String {
        self.read();
        self.printed
            .iter()
            .filter(|(s, _)| *s == stream)
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits until a line containing `needle` was printed on either stream.
    pub fn wait_for_line(&mut self, needle: &str) {
        wait_for(needle, Duration::from_secs(60), || {
            self.read();
            self.printed
                .iter()
                .any(|(_, l)| l.contains(needle))
                .then_some(())
        });
    }

    /// Waits (at most a minute) for it to exit, and reads what it printed to the end.
    pub fn exit_status(&mut self) -> ExitStatus {
        let status = wait_for("`fleetwire up` to exit", Duration::from_secs(60), || {
            self.running.child.try_wait().unwrap()
        });
        // The reader threads finish at the streams' end.
        std::thread::sleep(Duration::from_millis(200));
        self.read();
        status
    }

    /// The banner's line for `label` (`nodes`, `fleet`, ...): what follows the label.
    pub fn banner_line(&mut self, label: &str) -> String {
        self.read();
        let prefix = format!("{label} ");
        self.printed
            .iter()
            .find_map(|(s, l)| {
                (*s == Stream::Stdout)
                    .then(|| l.trim_start().strip_prefix(&prefix))
                    .flatten()
            })
            .unwrap_or_else(|| panic!("no {label} line in the banner"))
            .trim()
            .to_string()
    }

    /// SIGINT, as Ctrl-C sends it; waits for the exit.
    pub fn ctrl_c(&mut self) -> ExitStatus {
        crate::support::send_signal(self.running.pid(), rustix::process::Signal::INT);
        self.exit_status()
    }
}
