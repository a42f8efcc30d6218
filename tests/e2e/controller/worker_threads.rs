//! How many threads serve: `--worker-threads` (or `FLEETWIRE_WORKER_THREADS`) sizes the
//! controller's runtime, tokio's own `TOKIO_WORKER_THREADS` does not, the start log says how
//! many it runs (`workers=`), and a count the controller cannot run is refused before anything
//! starts (docs/controller.md, "--worker-threads").

use std::process::Stdio;
use std::time::Duration;

use crate::support::controller_harness::*;
use crate::support::{fleetwire, free_port, wait_for, Running};

/// The `workers=` field of the first start line ("controller serving…") in `log`, once it is
/// there. Log files carry no colour codes (`operator::habits`), so the field reads as written.
fn logged_workers(log: &str) -> Option<usize> {
    let line = log
        .lines()
        .find(|line| line.contains("controller serving"))?;
    let value = line
        .split_whitespace()
        .find_map(|field| field.strip_prefix("workers="))
        .unwrap_or_else(|| panic!("no workers= in the start line: {line}"));
    Some(value.parse().unwrap())
}

/// The workers a `--plain-http` controller started with `env` logs.
fn workers_with_env(env: &[(&str, String)]) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("controller.log");
    let mut command = fleetwire();
    command
        .arg("controller")
        .arg("--plain-http")
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--data-dir")
        .arg(dir.path())
        .env("RUST_LOG", "info")
        .env_remove("FLEETWIRE_WORKER_THREADS")
        .env_remove("TOKIO_WORKER_THREADS")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    for (name, value) in env {
        command.env(name, value);
    }
    let _controller = Running::spawn(&mut command);
    wait_for(
        "the controller's start line",
        Duration::from_secs(20),
        || logged_workers(&std::fs::read_to_string(&log).unwrap_or_default()),
    )
}

#[tokio::test]
async fn the_controller_runs_the_workers_it_is_given_and_one_per_cpu_by_default() {
    let workers = |controller: &ControllerProcess| {
        logged_workers(&controller.log())
            .unwrap_or_else(|| panic!("no start line in the log:\n{}", controller.log()))
    };
    let one = ControllerProcess::start_secure(&["--worker-threads", "1"]);
    assert_eq!(workers(&one), 1);
    // One worker serves the API as many do.
    let fleet = one.admin_api().get_fleet().await.unwrap().into_inner();
    assert!(fleet.nodes.is_empty());

    let three = ControllerProcess::start_secure(&["--worker-threads", "3"]);
    assert_eq!(workers(&three), 3);

    // The default: the CPUs this process may use, which the test shares with the controller
    // it starts.
    let default = ControllerProcess::start_secure(&[]);
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(workers(&default), cpus);
}

#[test]
fn the_count_comes_from_fleetwires_setting_not_tokios() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    // A count tokio would take from its own variable if the controller left the sizing to it.
    let tokio_count = (cpus + 1).to_string();
    assert_eq!(
        workers_with_env(&[("TOKIO_WORKER_THREADS", tokio_count.clone())]),
        cpus
    );
    assert_eq!(
        workers_with_env(&[
            ("TOKIO_WORKER_THREADS", tokio_count),
            ("FLEETWIRE_WORKER_THREADS", "1".into()),
        ]),
        1
    );
}

#[test]
fn a_worker_count_the_controller_cannot_run_is_refused_naming_the_flag() {
    for value in ["0", "1025", "two", ""] {
        let (code, stderr) = controller_exit(&[
            "--plain-http".as_ref(),
            "--worker-threads".as_ref(),
            value.as_ref(),
        ]);
        assert_eq!(code, 2, "--worker-threads {value:?}: {stderr}");
        assert!(
            stderr.contains("--worker-threads") && stderr.contains(&format!("'{value}'")),
            "--worker-threads {value:?}: {stderr}"
        );
    }
}
