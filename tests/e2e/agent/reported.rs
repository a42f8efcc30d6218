//! reported.json and /metrics: built by one builder, so the metrics page says exactly what the
//! document says; every copy written validates; meters never go down across agent restarts.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::agent_harness::{spawn_body, AgentProcess};
use crate::support::free_port;
use crate::support::reported_watch::ReportedWatch;
use fleetwire_types::{HostReportedState, InstanceState};
use reqwest::Method;

/// `name{labels} value` lines of an OpenMetrics page, by `name{labels}`.
fn series(page: &str) -> HashMap<String, f64> {
    assert!(
        page.trim_end().ends_with("# EOF"),
        "an OpenMetrics page ends with # EOF"
    );
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').expect("name value");
            (key.to_string(), value.parse().expect("a number"))
        })
        .collect()
}

fn wire<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn metrics_say_what_reported_json_says() {
    // Passes 2 s apart: the three reads below must fall between two passes, and on a busy
    // machine (the e2e tests run four at a time) they can take longer than the usual interval.
    let agent = AgentProcess::start(
        &format!("http://127.0.0.1:{}", free_port()),
        &[("VM_RECONCILE_INTERVAL_MS", "2000")],
    );
    // One tenant that burns some CPU then sleeps, one that fails, so every kind of figure moves.
    let busy = spawn_body(
        "busy",
        &[
            "/bin/sh",
            "-c",
            "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 600",
        ],
    );
    assert_eq!(agent.send(Method::POST, "/v1/spawn", Some(&busy)).0, 200);
    let failing = spawn_body("failing", &["/bin/false"]);
    assert_eq!(agent.send(Method::POST, "/v1/spawn", Some(&failing)).0, 200);
    agent.wait_reported("CPU to be metered", Duration::from_secs(20), |r| {
        r.instances
            .iter()
            .find(|i| i.app_id.as_str() == "busy")?
            .meters
            .as_ref()
            .filter(|m| m.cpu_ms > 0)
            .map(|_| ())
    });

    // The same pass on both routes: reported, metrics, reported again, until the two match.
    let (report, page) = crate::support::wait_for(
        "one pass seen on both routes",
        Duration::from_secs(30),
        || {
            let before: HostReportedState = agent.get("/v1/reported");
            let page = agent.get_text("/metrics");
            let after: HostReportedState = agent.get("/v1/reported");
            (before == after).then_some((before, page))
        },
    );
    let s = series(&page);
    let host = report.host_id.as_str();
    for state in ["registering", "ready", "draining", "unreachable"] {
        let want = if wire(&report.state) == state {
            1.0
        } else {
            0.0
        };
        assert_eq!(
            s[&format!("fleetwire_host_state{{host_id=\"{host}\",state=\"{state}\"}}")],
            want
        );
    }
    assert_eq!(
        s[&format!("fleetwire_host_memory_bytes{{host_id=\"{host}\",kind=\"allocatable\"}}")],
        (report.allocatable.memory_mib * 1024 * 1024) as f64
    );
    assert_eq!(report.instances.len(), 2);
    for i in &report.instances {
        let app = i.app_id.as_str();
        let m = i.meters.as_ref().expect("meters");
        // Base units: seconds and bytes (docs/agent.md, "/metrics").
        let mib = 1024.0 * 1024.0;
        for (name, value) in [
            ("running_seconds", m.running_ms as f64 / 1000.0),
            ("idle_seconds", m.idle_ms as f64 / 1000.0),
            ("cpu_seconds", m.cpu_ms as f64 / 1000.0),
            ("received_bytes", m.rx_bytes as f64),
            ("transmitted_bytes", m.tx_bytes as f64),
            (
                "disk_provisioned_byte_seconds",
                m.disk_provisioned_mib_seconds as f64 * mib,
            ),
            (
                "disk_used_byte_seconds",
                m.disk_used_mib_seconds as f64 * mib,
            ),
        ] {
            let key = format!("fleetwire_app_{name}_total{{app_id=\"{app}\"}}");
            assert_eq!(s.get(&key).copied(), Some(value), "{key}");
        }
        let dep = i.deployment_id.as_str();
        for state in [
            "pending",
            "starting",
            "running",
            "unhealthy",
            "stopping",
            "stopped",
            "idle",
            "failed",
        ] {
            let key = format!("fleetwire_instance_state{{app_id=\"{app}\",deployment_id=\"{dep}\",state=\"{state}\"}}");
            let want = if wire(&i.state) == state { 1.0 } else { 0.0 };
            assert_eq!(s[&key], want, "{key}");
        }
        assert_eq!(
            s[&format!("fleetwire_instance_restarts{{app_id=\"{app}\"}}")],
            i.restart_count as f64
        );
    }
    // And the file on disk is that same document (or a later pass of it).
    assert!(agent.reported().reported_at >= report.reported_at);
}

#[test]
fn meters_never_decrease_across_agent_restarts() {
    let controller = format!("http://127.0.0.1:{}", free_port());
    let mut agent = AgentProcess::start(&controller, &[]);
    let watch = ReportedWatch::start(agent.state_dir.join("reported.json"));
    let busy = spawn_body(
        "metered",
        &[
            "/bin/sh",
            "-c",
            "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; sleep 600",
        ],
    );
    assert_eq!(agent.send(Method::POST, "/v1/spawn", Some(&busy)).0, 200);
    let running_ms =
        |r: &HostReportedState| r.instances.first()?.meters.as_ref().map(|m| m.running_ms);

    let mut last = 0;
    for round in 0..3 {
        let floor = last;
        last = agent.wait_reported("running time to accrue", Duration::from_secs(10), |r| {
            running_ms(r).filter(|ms| *ms > floor + 300)
        });
        if round == 1 {
            // A clean stop: SIGTERM, the agent drains and exits 0.
            crate::support::send_signal(agent.pid(), rustix::process::Signal::TERM);
            let status =
                crate::support::wait_for("the agent to exit", Duration::from_secs(20), || {
                    agent.running.child.try_wait().expect("try_wait")
                });
            assert_eq!(status.code(), Some(0));
            let stopped = agent.reported();
            assert_eq!(wire(&stopped.state), "draining");
            assert_eq!(stopped.instances[0].state, InstanceState::Stopped);
        }
        agent.restart(&controller);
        let after = running_ms(&agent.reported()).expect("meters after the restart");
        assert!(after >= last, "round {round}: {after} < {last}");
    }
    let seen = watch.finish();
    assert!(seen.problems.is_empty(), "{:#?}", seen.problems);
    assert!(seen.documents > 10, "{seen:?}");
    assert!(seen.meters["metered"].cpu_ms > 0, "{seen:?}");
}
