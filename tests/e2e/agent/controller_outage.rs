//! The controller unreachable for two minutes: two real agents (process driver), each with a
//! running machine, reach a real controller through a link the test cuts — a minute refusing
//! connections, then a minute taking them and never answering. Throughout, every agent keeps
//! its machine running (the same process, never a second one) and keeps writing a valid
//! reported.json that says `unreachable`; its retries through the silent link are spaced by
//! the call timeout plus a drawn delay (never in step); once the link is back both agents'
//! heartbeats are taken again and they are `ready` on both sides (docs/reliability/outage.md).

use std::time::{Duration, Instant};

use crate::support::agent_harness::{spawn_body, AgentProcess};
use crate::support::controller_harness::ControllerProcess;
use crate::support::cuttable_link::{CuttableLink, LinkMode};
use crate::support::wait_for;
use reqwest::Method;

/// How long each way of being unreachable lasts: two minutes in all, as the issue asks.
const SPELL: Duration = Duration::from_secs(60);
/// The agents' heartbeat interval (the harness's `VM_HEARTBEAT_INTERVAL_S`).
const INTERVAL: Duration = Duration::from_secs(1);
/// The agent's timeout for one call to the controller (`agent::trust`).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

fn wire<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

/// The pids of processes whose command line holds `token`.
fn pids_with(token: &str) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            // The machine itself (`sleep <token>`), not a shell or the test quoting it.
            (args.first() == Some(&&b"sleep"[..]) && args.get(1) == Some(&token.as_bytes()))
                .then_some(pid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// The controller's record of `node` (status and last contact), over plain HTTP.
fn node_status(controller: &ControllerProcess, node: &str) -> Option<(String, String)> {
    crate::support::install_crypto_provider();
    let answer = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(controller.url(&format!("/v1/nodes/{node}")))
        .send()
        .ok()?;
    if !answer.status().is_success() {
        return None;
    }
    let record: serde_json::Value = answer.json().ok()?;
    Some((
        record["status"].as_str()?.to_string(),
        record["last_heartbeat"].as_str()?.to_string(),
    ))
}

struct Node {
    id: String,
    link: CuttableLink,
    agent: AgentProcess,
    token: String,
    machine: u32,
}

#[test]
fn agents_ride_out_two_minutes_without_their_controller() {
    let controller = ControllerProcess::start(&[]);
    let target = format!("127.0.0.1:{}", controller.port);
    let mut nodes = Vec::new();
    for n in 1..=2 {
        let id = format!("outage-{n}");
        let link = CuttableLink::open(&target);
        let agent = AgentProcess::start(&link.url(), &[("VM_NODE_ID", id.as_str())]);
        let token = format!("{}", 800_000 + agent.port as u32);
        let machine = spawn_body(&format!("vm-{n}"), &["sleep", &token]);
        assert_eq!(agent.send(Method::POST, "/v1/spawn", Some(&machine)).0, 200);
        let pids = wait_for("the machine to run", Duration::from_secs(20), || {
            let pids = pids_with(&token);
            (pids.len() == 1).then_some(pids)
        });
        nodes.push(Node {
            id,
            link,
            agent,
            token,
            machine: pids[0],
        });
    }
    for node in &nodes {
        node.agent
            .wait_reported("ready", Duration::from_secs(30), |r| {
                (wire(&r.state) == "ready").then_some(())
            });
        wait_for(
            "the controller to list the node ready",
            Duration::from_secs(30),
            || node_status(&controller, &node.id).filter(|(s, _)| s == "ready"),
        );
    }

    // Cut: first refusing, then silent.
    let cut = Instant::now();
    let mut unreachable_since: Vec<Option<Instant>> = vec![None; nodes.len()];
    let mut last_reported = vec![None; nodes.len()];
    let mut reports = 0;
    for (mode, spell_end) in [
        (LinkMode::Refusing, cut + SPELL),
        (LinkMode::Blackhole, cut + 2 * SPELL),
    ] {
        for node in &nodes {
            node.link.set(mode);
        }
        while Instant::now() < spell_end {
            std::thread::sleep(Duration::from_millis(500));
            for (i, node) in nodes.iter().enumerate() {
                // Whole and valid every time (read through the generated reader).
                let report = node.agent.reported();
                reports += 1;
                let state = wire(&report.state);
                match unreachable_since[i] {
                    None if state == "unreachable" => unreachable_since[i] = Some(Instant::now()),
                    None => assert!(
                        cut.elapsed() < INTERVAL + CALL_TIMEOUT,
                        "{}: still {state} {:?} into the outage",
                        node.id,
                        cut.elapsed()
                    ),
                    Some(_) => assert_eq!(
                        state,
                        "unreachable",
                        "{}: {:?} into the outage ({mode:?})",
                        node.id,
                        cut.elapsed()
                    ),
                }
                if let Some(before) = &last_reported[i] {
                    assert!(
                        report.reported_at >= *before,
                        "{}: reported_at went back",
                        node.id
                    );
                }
                last_reported[i] = Some(report.reported_at);
                // The machine runs on: the same process, and only it.
                assert_eq!(
                    pids_with(&node.token),
                    [node.machine],
                    "{}: its machine, {:?} into the outage",
                    node.id,
                    cut.elapsed()
                );
                let instance = &report.instances[0];
                assert_eq!(wire(&instance.state), "running", "{}", node.id);
            }
        }
    }
    let back = Instant::now();
    for node in &nodes {
        node.link.set(LinkMode::Open);
    }
    // reported.json was rewritten all along: its latest copy is from the last seconds.
    for (i, node) in nodes.iter().enumerate() {
        let fresh =
            node.agent
                .wait_reported("a fresh reported.json", Duration::from_secs(5), |r| {
                    Some(r.reported_at)
                });
        assert!(
            Some(&fresh) >= last_reported[i].as_ref(),
            "{}: reported_at",
            node.id
        );
        assert!(
            unreachable_since[i].is_some(),
            "{} never said unreachable",
            node.id
        );
    }

    // Through the silent link each retry waited for the call timeout, then for a drawn
    // delay of one to two intervals: never faster, and not in step.
    let mut gaps = Vec::new();
    for node in &nodes {
        let silent: Vec<Instant> = node
            .link
            .accepted()
            .into_iter()
            .filter(|(_, mode)| *mode == LinkMode::Blackhole)
            .map(|(at, _)| at)
            .collect();
        assert!(
            silent.len() >= 3,
            "{}: {} attempts in a silent minute",
            node.id,
            silent.len()
        );
        gaps.extend(silent.windows(2).map(|w| w[1] - w[0]));
    }
    let shortest = *gaps.iter().min().unwrap();
    let longest = *gaps.iter().max().unwrap();
    println!(
        "{} retries through the silent link, {shortest:?} to {longest:?} apart; {reports} \
         reported.json copies read during the outage",
        gaps.len() + nodes.len()
    );
    assert!(
        shortest >= CALL_TIMEOUT + INTERVAL / 2,
        "a retry after {shortest:?}"
    );
    assert!(
        longest - shortest >= Duration::from_millis(250),
        "retries in step: {gaps:?}"
    );

    // The link is back: heartbeats are taken again, and both sides say ready.
    for node in &nodes {
        node.agent
            .wait_reported("ready again", Duration::from_secs(30), |r| {
                (wire(&r.state) == "ready").then_some(())
            });
        wait_for(
            "the controller to take heartbeats again",
            Duration::from_secs(30),
            || node_status(&controller, &node.id).filter(|(s, _)| s == "ready"),
        );
        assert_eq!(pids_with(&node.token), [node.machine], "{}", node.id);
    }
    println!(
        "both agents ready again {:?} after the link came back",
        back.elapsed()
    );
}
