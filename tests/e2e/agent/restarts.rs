//! The process driver's supervision, through the real agent: restarts within the budget with
//! growing backoff, exit codes and signals in reported.json, SIGTERM then SIGKILL on stop.

use std::time::Duration;

use crate::support::agent_harness::AgentProcess;
use crate::support::free_port;
use fleetwire_types::{HostReportedState, InstanceState, ReportedInstance, TenantExit};
use reqwest::Method;
use serde_json::{json, Value};

fn unreachable_controller() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

fn instance(app: &str, command: &[&str], policy: Value) -> Value {
    json!({
        "appId": app,
        "deploymentId": "d1",
        "desiredState": "running",
        "command": command,
        "resources": {"vcpuCount": 1, "memoryMib": 64, "diskMib": 0},
        "restartPolicy": policy,
    })
}

fn put_desired(agent: &AgentProcess, instances: Vec<Value>) {
    let doc = json!({"hostId": "node-1", "instances": instances});
    let (status, body) = agent.send(Method::PUT, "/v1/desired", Some(&doc));
    assert_eq!(status, 200, "{body}");
}

fn find<'a>(r: &'a HostReportedState, app: &str) -> Option<&'a ReportedInstance> {
    r.instances.iter().find(|i| i.app_id.as_str() == app)
}

#[test]
fn a_tenant_exiting_with_3_is_restarted_within_its_budget_with_growing_backoff() {
    let agent = AgentProcess::start(&unreachable_controller(), &[]);
    put_desired(
        &agent,
        vec![instance(
            "crasher",
            &["/bin/sh", "-c", "sleep 0.05; exit 3"],
            json!({"maxRestarts": 3, "initialBackoffMs": 100, "backoffFactor": 2.0,
                   "maxBackoffMs": 1000, "resetAfterMs": 60000}),
        )],
    );
    let mut seen = Vec::new();
    let last = agent.wait_reported("the budget to run out", Duration::from_secs(20), |r| {
        let i = find(r, "crasher")?;
        if let Some(lr) = &i.last_restart {
            if seen.last() != Some(&(lr.attempt, lr.backoff_ms)) {
                seen.push((lr.attempt, lr.backoff_ms));
            }
        }
        (i.state == InstanceState::Failed).then(|| i.clone())
    });
    // Every restart seen: attempt n waited 100 * 2^(n-1) ms, attempts only go up.
    for (attempt, backoff) in &seen {
        assert_eq!(*backoff, 100 << (attempt - 1), "{seen:?}");
    }
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{seen:?}");
    assert_eq!(last.restart_count, 3);
    assert_eq!(last.last_exit_code, Some(3));
    let lr = last.last_restart.expect("lastRestart");
    assert_eq!((lr.attempt, lr.budget, lr.backoff_ms), (3, 3, 400));
    assert_eq!(lr.exit, TenantExit::Code(3));
    assert!(
        lr.reason.contains("exited with code 3"),
        "{}",
        lr.reason.as_str()
    );
    let message = last.message.expect("a failed instance says why");
    assert!(
        message.contains("gave up after 3 restarts"),
        "{}",
        message.as_str()
    );
}

/// The pid of the process whose command line contains `token`.
fn pid_of(token: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        (cmdline.contains(token) && !cmdline.starts_with("/bin/sh")).then_some(pid)
    })
}

fn cmdline(pid: i32) -> String {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&bytes).replace('\0', " ")
}

#[test]
fn a_tenant_killed_by_a_signal_shows_the_signal() {
    let agent = AgentProcess::start(&unreachable_controller(), &[]);
    let token = format!("{}.{}", 1000 + std::process::id() % 1000, agent.port);
    put_desired(
        &agent,
        vec![instance(
            "victim",
            &["sleep", &token],
            json!({"initialBackoffMs": 50}),
        )],
    );
    agent.wait_reported("the tenant to run", Duration::from_secs(10), |r| {
        find(r, "victim")
            .filter(|i| i.state == InstanceState::Running)
            .map(|_| ())
    });
    let pid = crate::support::wait_for("the tenant's pid", Duration::from_secs(5), || {
        pid_of(&token)
    });
    assert!(crate::support::send_signal(
        pid as u32,
        rustix::process::Signal::KILL
    ));
    let i = agent.wait_reported("the kill to be reported", Duration::from_secs(10), |r| {
        find(r, "victim").filter(|i| i.restart_count == 1).cloned()
    });
    let lr = i.last_restart.expect("lastRestart");
    assert_eq!(lr.exit, TenantExit::Signal(9));
    assert_eq!(lr.attempt, 1);
    assert_eq!(i.last_exit_code, Some(128 + 9));
    assert!(
        lr.reason.contains("killed by signal 9"),
        "{}",
        lr.reason.as_str()
    );
    // And it runs again.
    agent.wait_reported("the tenant to run again", Duration::from_secs(10), |r| {
        find(r, "victim")
            .filter(|i| i.state == InstanceState::Running)
            .map(|_| ())
    });
}

#[test]
fn stopping_sends_sigterm_then_sigkill_to_the_process_group() {
    let agent = AgentProcess::start(&unreachable_controller(), &[("VM_STOP_TIMEOUT_MS", "300")]);
    // `polite` ends on SIGTERM; `stubborn` (and the sleep it starts) ignores it.
    let polite = instance("polite", &["sleep", "600"], json!({}));
    let stubborn = instance(
        "stubborn",
        &["/bin/sh", "-c", "trap '' TERM; sleep 600"],
        json!({}),
    );
    put_desired(&agent, vec![polite.clone(), stubborn.clone()]);
    agent.wait_reported("both to run", Duration::from_secs(10), |r| {
        let up = |a| find(r, a).is_some_and(|i| i.state == InstanceState::Running);
        (up("polite") && up("stubborn")).then_some(())
    });
    let mut stopped = vec![polite, stubborn];
    for i in &mut stopped {
        i["desiredState"] = json!("stopped");
    }
    put_desired(&agent, stopped);
    let r = agent.wait_reported("both to stop", Duration::from_secs(10), |r| {
        let down = |a| find(r, a).is_some_and(|i| i.state == InstanceState::Stopped);
        (down("polite") && down("stubborn")).then(|| r.clone())
    });
    assert_eq!(
        find(&r, "polite").unwrap().last_exit_code,
        Some(128 + 15),
        "SIGTERM"
    );
    assert_eq!(
        find(&r, "stubborn").unwrap().last_exit_code,
        Some(128 + 9),
        "SIGKILL"
    );
    // A stop asked for is not a restart.
    assert_eq!(find(&r, "polite").unwrap().restart_count, 0);
    // Converged on "stopped".
    assert!(find(&r, "polite").unwrap().converged_at.is_some());
}

#[test]
fn a_tenant_that_stays_up_long_enough_earns_its_budget_back() {
    let agent = AgentProcess::start(&unreachable_controller(), &[]);
    // Up 300 ms each time, which is past resetAfterMs: every restart is the first of a new run,
    // so a budget of 1 never runs out.
    put_desired(
        &agent,
        vec![instance(
            "phoenix",
            &["/bin/sh", "-c", "sleep 0.3; exit 3"],
            json!({"maxRestarts": 1, "initialBackoffMs": 50, "resetAfterMs": 200}),
        )],
    );
    let i = agent.wait_reported("three restarts", Duration::from_secs(20), |r| {
        let i = find(r, "phoenix")?;
        assert_ne!(
            i.state,
            InstanceState::Failed,
            "the budget was restored each time: {i:?}"
        );
        (i.restart_count >= 3).then(|| i.clone())
    });
    let lr = i.last_restart.expect("lastRestart");
    assert_eq!((lr.attempt, lr.budget, lr.backoff_ms), (1, 1, 50));
}

#[test]
fn a_restarted_agent_ends_what_a_killed_one_left_running() {
    let controller = unreachable_controller();
    let mut agent = AgentProcess::start(&controller, &[]);
    let token = format!("{}.{}", 2000 + std::process::id() % 1000, agent.port);
    // The shell dies with the agent; the sleep it started would outlive both.
    let script = format!("sleep {token}; :");
    put_desired(
        &agent,
        vec![instance("family", &["/bin/sh", "-c", &script], json!({}))],
    );
    let orphan = crate::support::wait_for("the grandchild", Duration::from_secs(10), || {
        pid_of(&format!("sleep {token}"))
            .filter(|pid| cmdline(*pid).starts_with(&format!("sleep {token}")))
    });
    agent.restart(&controller);
    crate::support::wait_for(
        "the orphaned group to be ended",
        Duration::from_secs(10),
        || {
            let cmdline = std::fs::read(format!("/proc/{orphan}/cmdline")).unwrap_or_default();
            (!String::from_utf8_lossy(&cmdline).contains(&token)).then_some(())
        },
    );
    // And the machine runs again under the new agent.
    agent.wait_reported("the tenant to run again", Duration::from_secs(10), |r| {
        find(r, "family")
            .filter(|i| i.state == InstanceState::Running)
            .map(|_| ())
    });
    // A clean stop ends the whole group, grandchild included.
    crate::support::send_signal(agent.pid(), rustix::process::Signal::TERM);
    crate::support::wait_for(
        "the agent to drain and exit",
        Duration::from_secs(20),
        || agent.running.child.try_wait().expect("try_wait"),
    );
    crate::support::wait_for("no tenant left", Duration::from_secs(10), || {
        pid_of(&format!("sleep {token}")).is_none().then_some(())
    });
}
