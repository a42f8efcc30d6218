//! SIGKILL the agent at random moments while it rewrites reported.json every 10 ms: over at
//! least 200 write cycles, every copy anyone reads is a complete valid document, the file left
//! by each kill is the last one written (never older, never torn), and no meter ever goes down.

use std::time::Duration;

use crate::support::agent_harness::{spawn_body, AgentProcess};
use crate::support::free_port;
use crate::support::reported_watch::ReportedWatch;
use rand::RngExt;
use reqwest::Method;

#[test]
fn reported_json_survives_sigkill_at_any_moment() {
    let controller = format!("http://127.0.0.1:{}", free_port());
    let fast = [("VM_RECONCILE_INTERVAL_MS", "10")];
    let mut agent = AgentProcess::start(&controller, &fast);
    let token = format!("{}", 700_000 + agent.port as u32);
    let tenant = spawn_body("survivor", &["sleep", &token]);
    assert_eq!(agent.send(Method::POST, "/v1/spawn", Some(&tenant)).0, 200);

    let watch = ReportedWatch::start(agent.state_dir.join("reported.json"));
    let mut rng = rand::rng();
    let mut kills = 0;
    while watch.snapshot().documents < 200 {
        std::thread::sleep(Duration::from_millis(rng.random_range(0..120)));
        let before_kill = watch.snapshot().last;
        agent.running.kill();
        kills += 1;
        // What the kill left: whole, valid, and not older than anything read before it.
        let left = agent.reported();
        if let Some(seen) = before_kill {
            assert!(
                left.reported_at >= seen,
                "kill {kills}: the file went back to {}",
                left.reported_at
            );
        }
        agent.restart_after_kill(&controller);
    }
    let seen = watch.finish();
    assert!(seen.problems.is_empty(), "{:#?}", seen.problems);
    assert!(kills >= 3, "{kills} kills");
    assert!(seen.meters["survivor"].running_ms > 0);
    let leftovers: Vec<String> = std::fs::read_dir(&agent.state_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(
        leftovers.len() <= 1,
        "stale temp files are cleaned at start: {leftovers:?}"
    );

    // The agent's death takes its tenants with it: only the current agent's tenant runs.
    drop(agent);
    crate::support::wait_for("no orphaned tenant", Duration::from_secs(10), || {
        let alive = std::fs::read_dir("/proc").ok()?.flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&token))
                .unwrap_or(false)
        });
        (!alive).then_some(())
    });
}
