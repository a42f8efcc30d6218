//! The load generator (the `fleetwire-loadgen` crate, tests/loadgen) run in-process, as its
//! binary runs it: its flags as on its command line, [`fleetwire_loadgen::run`] on a thread of
//! its own (which builds its own runtime and heartbeat threads, apart from the test's), the
//! report and the log captured. A test cannot name another package's binary, and a nested
//! cargo build is what the single test binary removed (tests/e2e/main.rs).

use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::Parser;
use fleetwire_loadgen::LoadgenArgs;

/// What one run of the load generator printed, and how it ended.
pub struct LoadgenOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// A writer that keeps what it is given, for reading after the run.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn args(flags: &[String]) -> LoadgenArgs {
    let argv = std::iter::once("fleetwire-loadgen".to_string()).chain(flags.iter().cloned());
    LoadgenArgs::try_parse_from(argv).expect("the load generator's flags")
}

/// Runs the load generator with `flags` to its end (blocking: from async code, on
/// `spawn_blocking`).
pub fn run_loadgen(flags: &[&str]) -> LoadgenOutput {
    let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
    let (out, log) = (Captured::default(), Captured::default());
    let run = std::thread::Builder::new()
        .name("loadgen".into())
        .spawn({
            let (mut out, mut log) = (out.clone(), log.clone());
            move || fleetwire_loadgen::run(&args(&flags), &mut out, &mut log)
        })
        .unwrap();
    let code = run.join().expect("the load generator panicked");
    let text = |c: &Captured| String::from_utf8_lossy(&c.0.lock().unwrap()).into_owned();
    LoadgenOutput {
        success: code == ExitCode::SUCCESS,
        stdout: text(&out),
        stderr: text(&log),
    }
}

/// Starts the load generator with `flags`, its report discarded and its log written to `log`
/// as it goes; the handle tells, once joined, whether the run succeeded.
pub fn spawn_loadgen(flags: &[String], log: std::fs::File) -> std::thread::JoinHandle<bool> {
    let args = args(flags);
    std::thread::Builder::new()
        .name("loadgen".into())
        .spawn(move || {
            let mut log = log;
            fleetwire_loadgen::run(&args, &mut std::io::sink(), &mut log) == ExitCode::SUCCESS
        })
        .unwrap()
}
