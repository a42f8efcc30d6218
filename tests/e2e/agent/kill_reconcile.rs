//! SIGKILL the agent 200 times at random points of its reconcile and write cycle, with
//! supervised tenants (the process driver) and the desired state changing under it: before
//! each kill a spawn, a deletion or a stop/start goes out through the local API and the kill
//! lands a random 0–60 ms later, so in the middle of converging, starting, stopping or writing.
//! After every restart: reported.json parses and validates (read throughout by a watcher that
//! also holds every meter to never going down), and the tenants are as the agent's contract
//! says (docs/agent.md, "Restarts and crashes"): the crashed agent's tenants and what they
//! started are gone, never orphaned, and each instance desired running runs exactly once,
//! freshly started by the new agent, never twice.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::agent_harness::{spawn_body, AgentProcess};
use crate::support::free_port;
use crate::support::reported_watch::ReportedWatch;
use rand::RngExt;
use reqwest::Method;
use serde_json::Value;

const KILLS: usize = 200;

/// A process of this test's tenants, as /proc shows it.
#[derive(Debug, Clone)]
struct Tenant {
    pid: u32,
    /// The `sleep` argument naming the instance (or its child).
    token: String,
    ppid: u32,
    pgrp: u32,
}

/// `(state, ppid, pgrp)` from /proc/<pid>/stat.
fn stat(pid: u32) -> Option<(char, u32, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 2..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// Every live (not zombie) `sleep <token>` whose token starts with `prefix`.
fn tenants(prefix: &str) -> Vec<Tenant> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.len() < 2 || !args[0].ends_with("sleep") || !args[1].starts_with(prefix) {
            continue;
        }
        let Some((state, ppid, pgrp)) = stat(pid) else {
            continue;
        };
        if state != 'Z' && state != 'X' {
            found.push(Tenant {
                pid,
                token: args[1].clone(),
                ppid,
                pgrp,
            });
        }
    }
    found
}

/// Supervised by `agent`: the tenant leads a process group the agent started, or belongs to
/// one.
fn supervised_by(t: &Tenant, agent: u32) -> bool {
    if t.pgrp == t.pid {
        return t.ppid == agent;
    }
    stat(t.pgrp).is_some_and(|(_, leader_parent, _)| leader_parent == agent)
}

/// An instance of the test: its `sleep` token and, for the one that starts a child in its
/// group, the child's.
struct Instance {
    vm_id: String,
    token: String,
    child: Option<String>,
}

fn spawn_request(i: &Instance) -> Value {
    match &i.child {
        None => spawn_body(&i.vm_id, &["sleep", &i.token]),
        Some(child) => {
            let script = format!("sleep {child} & exec sleep {}", i.token);
            spawn_body(&i.vm_id, &["sh", "-c", &script])
        }
    }
}

/// What the agent was asked to run, by its own `GET /v1/desired`: vm id → (app id, desired
/// running).
fn desired(agent: &AgentProcess) -> BTreeMap<String, (String, bool)> {
    let (status, doc) = agent.send(Method::GET, "/v1/desired", None);
    assert_eq!(status, 200, "{doc}");
    doc["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["vmId"].as_str().unwrap().to_string(),
                (
                    i["appId"].as_str().unwrap().to_string(),
                    i["desiredState"] == "running",
                ),
            )
        })
        .collect()
}

#[test]
fn the_agent_killed_200_times_mid_reconcile_leaves_no_orphan_and_runs_nothing_twice() {
    let controller = format!("http://127.0.0.1:{}", free_port());
    let env = [
        ("VM_RECONCILE_INTERVAL_MS", "10"),
        ("VM_STOP_TIMEOUT_MS", "300"),
    ];
    let mut agent = AgentProcess::start(&controller, &env);
    // Tokens unique to this run: `sleep` takes them as seconds.
    let prefix = format!("9{:05}", agent.port);
    let token = |n: usize| format!("{prefix}{n:04}");
    let mut instances: BTreeMap<String, Instance> = BTreeMap::new();
    let mut next = 0;
    let mut new_instance = |child: bool| {
        next += 1;
        Instance {
            vm_id: format!("vm-{next}"),
            token: token(2 * next),
            child: child.then(|| token(2 * next + 1)),
        }
    };
    // Two residents, desired throughout: one a lone process, one a shell leaving a child in
    // its process group.
    for child in [false, true] {
        let i = new_instance(child);
        let (status, body) = agent.send(Method::POST, "/v1/spawn", Some(&spawn_request(&i)));
        assert_eq!(status, 200, "{body}");
        instances.insert(i.vm_id.clone(), i);
    }

    let watch = ReportedWatch::start(agent.state_dir.join("reported.json"));
    let mut rng = rand::rng();
    let mut previous_pids: BTreeMap<String, u32> = BTreeMap::new();
    let (mut restarted_fresh, mut max_desired) = (0, 0);
    let began = Instant::now();
    for kill in 1..=KILLS {
        // A change of the desired state, sent from a thread of its own; the kill follows it.
        let wanted = desired(&agent);
        let churn: Vec<String> = wanted
            .keys()
            .filter(|id| *id != "vm-1" && *id != "vm-2")
            .cloned()
            .collect();
        let roll = rng.random_range(0..10);
        let change: Box<dyn FnOnce(String) + Send> =
            if churn.len() < 2 || (roll < 5 && churn.len() < 4) {
                let i = new_instance(rng.random_range(0..3) == 0);
                let body = spawn_request(&i);
                instances.insert(i.vm_id.clone(), i);
                Box::new(move |url| {
                    let _ = client().post(format!("{url}/v1/spawn")).json(&body).send();
                })
            } else if roll < 8 {
                let victim = churn[rng.random_range(0..churn.len())].clone();
                Box::new(move |url| {
                    let _ = client().delete(format!("{url}/v1/vms/{victim}")).send();
                })
            } else {
                let flip = churn[rng.random_range(0..churn.len())].clone();
                Box::new(move |url| {
                    let Ok(answer) = client().get(format!("{url}/v1/desired")).send() else {
                        return;
                    };
                    let Ok(mut doc) = answer.json::<Value>() else {
                        return;
                    };
                    for i in doc["instances"].as_array_mut().unwrap() {
                        if i["vmId"] == flip.as_str() {
                            let running = i["desiredState"] == "running";
                            i["desiredState"] = if running { "stopped" } else { "running" }.into();
                        }
                    }
                    let _ = client().put(format!("{url}/v1/desired")).json(&doc).send();
                })
            };
        let url = agent.url("");
        let sender = std::thread::spawn(move || change(url));
        std::thread::sleep(Duration::from_millis(rng.random_range(0..60)));
        let killed = agent.pid();
        agent.running.kill();
        // Nothing of the change may reach the next agent but what the killed one stored.
        sender.join().unwrap();
        agent.restart_after_kill(&controller);
        let agent_pid = agent.pid();

        // reported.json as the restarted agent found and rewrote it: whole and valid.
        let _ = agent.reported();
        let wanted = desired(&agent);
        max_desired = max_desired.max(wanted.values().filter(|(_, r)| *r).count());
        let expected: BTreeMap<String, String> = wanted
            .iter()
            .filter(|(_, (_, running))| *running)
            .flat_map(|(vm_id, _)| {
                let i = &instances[vm_id];
                std::iter::once((i.token.clone(), vm_id.clone()))
                    .chain(i.child.clone().map(|c| (c, vm_id.clone())))
            })
            .collect();
        let mut last = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        let converged = crate::support::wait_for(
            &format!(
                "kill {kill}: the tenants the desired state asks for, under agent {agent_pid} only"
            ),
            Duration::from_secs(30),
            || {
                // What was seen against what was asked, should it never converge.
                assert!(
                    Instant::now() < deadline,
                    "kill {kill}: after 20 s under agent {agent_pid} (killed {killed}) the \
                     tenants are {last:#?}\nand the desired state asks for {expected:#?}\n\
                     (reported: {:#?})",
                    agent.reported().instances
                );
                last = tenants(&prefix);
                let mut per_token: BTreeMap<&str, Vec<&Tenant>> = BTreeMap::new();
                for t in &last {
                    per_token.entry(t.token.as_str()).or_default().push(t);
                }
                for (token, running) in &per_token {
                    let supervised = running
                        .iter()
                        .filter(|t| supervised_by(t, agent_pid))
                        .count();
                    assert!(
                        supervised <= 1,
                        "kill {kill}: {token} runs {supervised} times under agent {agent_pid}: {running:?}"
                    );
                }
                let ok = last.len() == expected.len()
                    && last
                        .iter()
                        .all(|t| expected.contains_key(&t.token) && supervised_by(t, agent_pid));
                ok.then(|| last.clone())
            },
        );
        // The instances desired running are reported running.
        agent.wait_reported(
            &format!("kill {kill}: every instance desired running reported running"),
            Duration::from_secs(20),
            |report| {
                let running: Vec<&str> = report
                    .instances
                    .iter()
                    .filter(|i| i.state == fleetwire_types::InstanceState::Running)
                    .map(|i| i.app_id.as_str())
                    .collect();
                wanted
                    .values()
                    .filter(|(_, r)| *r)
                    .all(|(app_id, _)| running.contains(&app_id.as_str()))
                    .then_some(())
            },
        );
        // Cleaned up and started again, not adopted: a tenant's pid is never the one the
        // killed agent ran (docs/agent.md).
        for t in &converged {
            if let Some(old) = previous_pids.get(&t.token) {
                assert_ne!(*old, t.pid, "kill {kill}: {} survived its agent", t.token);
                restarted_fresh += 1;
            }
        }
        previous_pids = converged.iter().map(|t| (t.token.clone(), t.pid)).collect();
    }
    let took = began.elapsed();
    let seen = watch.finish();
    assert!(seen.problems.is_empty(), "{:#?}", seen.problems);
    assert!(
        seen.meters.values().any(|m| m.running_ms > 0),
        "{:?}",
        seen.meters
    );
    eprintln!(
        "{KILLS} kills in {took:.1?}; {restarted_fresh} tenant restarts checked, up to {max_desired} instances desired running at once, {} reported.json documents read",
        seen.documents
    );

    // SIGTERM drains the last agent's tenants, children and all.
    drop(agent);
    crate::support::wait_for("no tenant left", Duration::from_secs(10), || {
        tenants(&prefix).is_empty().then_some(())
    });
}

fn client() -> reqwest::blocking::Client {
    crate::support::install_crypto_provider();
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}
