//! How many threads serve: `--worker-threads` sizes the controller's runtime, the start log
//! says how many it runs (`workers=`), and a count that is not one the controller can run is
//! refused before anything starts (docs/controller.md, "--worker-threads").

use crate::support::controller_harness::*;

/// The `workers=` field of the controller's start line, as it logged it.
fn logged_workers(controller: &ControllerProcess) -> usize {
    let log = controller.log_text();
    let line = log
        .lines()
        .find(|line| line.contains("controller serving HTTPS"))
        .unwrap_or_else(|| panic!("no start line in the log:\n{log}"));
    let value = line
        .split_whitespace()
        .find_map(|field| field.strip_prefix("workers="))
        .unwrap_or_else(|| panic!("no workers= in the start line: {line}"));
    value.parse().unwrap()
}

#[tokio::test]
async fn the_controller_runs_the_workers_it_is_given_and_one_per_cpu_by_default() {
    let one = ControllerProcess::start_secure(&["--worker-threads", "1"]);
    assert_eq!(logged_workers(&one), 1);
    // One worker serves the API as many do.
    let fleet = one.admin_api().get_fleet().await.unwrap().into_inner();
    assert!(fleet.nodes.is_empty());

    let three = ControllerProcess::start_secure(&["--worker-threads", "3"]);
    assert_eq!(logged_workers(&three), 3);

    // The default: the CPUs this process may use, which the test shares with the controller
    // it starts.
    let default = ControllerProcess::start_secure(&[]);
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(logged_workers(&default), cpus);
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
