//! Running the operator commands as a user runs them, for the tests of this folder: the real
//! binary, only the settings the test gives (none of the caller's own), and a small fleet to run
//! them against (a plain-HTTP controller with real agents of the process driver).

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::support::agent_harness::AgentProcess;
use crate::support::controller_harness::ControllerProcess;
use crate::support::{fleetwire, wait_for, without_user_settings};

/// Runs `fleetwire ARGS` with `env`, and nothing of the caller's own fleetwire settings.
pub fn cli(home: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = fleetwire();
    without_user_settings(command.args(args), home).current_dir(home);
    command.envs(env.iter().copied());
    command.output().expect("running fleetwire")
}

/// A command line of words without spaces in them.
pub fn words(line: &str) -> Vec<&str> {
    line.split(' ').collect()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The standard output of a command that must succeed.
pub fn ok(out: Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

/// Asserts the exit code and a piece of standard error.
pub fn exits(out: &Output, code: i32, says: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
    assert!(
        stderr(out).contains(says),
        "expected {says:?} in: {}",
        stderr(out)
    );
}

/// A plain-HTTP controller with a real agent (process driver) per node id, every node ready,
/// and a home directory for the commands.
pub struct SmallFleet {
    pub controller: ControllerProcess,
    pub agents: Vec<AgentProcess>,
    pub home: tempfile::TempDir,
}

impl SmallFleet {
    pub fn start(nodes: &[&str]) -> SmallFleet {
        SmallFleet::start_with(nodes, &[])
    }

    /// Same, with more controller flags.
    pub fn start_with(nodes: &[&str], controller_flags: &[&str]) -> SmallFleet {
        // The agents report this machine's real free disk: no disk cordon, whatever it is.
        let mut flags = vec!["--disk-cordon-below", "0", "--disk-uncordon-above", "1"];
        flags.extend_from_slice(controller_flags);
        let controller = ControllerProcess::start(&flags);
        let url = controller.url("");
        let agents = nodes
            .iter()
            .map(|node| AgentProcess::start(&url, &[("VM_NODE_ID", node)]))
            .collect();
        let fleet = SmallFleet {
            controller,
            agents,
            home: tempfile::tempdir().unwrap(),
        };
        for node in nodes {
            wait_for(
                &format!("node {node} to be ready"),
                Duration::from_secs(30),
                || {
                    let out = fleet.run(&["nodes", "get", node, "-o", "json"]);
                    stdout(&out).contains("\"ready\"").then_some(())
                },
            );
        }
        fleet
    }

    /// `fleetwire ARGS` against this fleet's controller (from the environment, as a user's
    /// shell would give it).
    pub fn run(&self, args: &[&str]) -> Output {
        let url = self.controller.url("");
        cli(
            self.home.path(),
            &[
                ("FLEETWIRE_URL", url.as_str()),
                ("FLEETWIRE_PLAIN_HTTP", "true"),
            ],
            args,
        )
    }

    /// The environment `run` gives, for a command started another way.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("FLEETWIRE_URL".into(), self.controller.url("")),
            ("FLEETWIRE_PLAIN_HTTP".into(), "true".into()),
        ]
    }
}
