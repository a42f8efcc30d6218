//! How 1,000 agents come back to a controller that was gone for two minutes
//! (docs/reliability/outage.md): a real `fleetwire controller` on a scratch store, and N
//! agents' heartbeat loops in this process, each paced by the agent's own
//! [`HeartbeatPace`] (the interval after a heartbeat taken, its jittered retries after one
//! that did not get through) and sending through the same typed client call the agent makes.
//! The controller is killed (`kill -9`) after a warm-up, started again on the same store and
//! port after the outage, and the program prints when each agent's first heartbeat after the
//! return was taken: p50/p99/max, arrivals per second, the peak against the steady rate.
//!
//! `--retry every-interval` paces retries the way the agent did before `HeartbeatPace` (one
//! every interval), for the comparison in the doc.
//!
//! ```text
//! cargo build --release -p fleetwire --bin fleetwire --example reconnect_spread
//! target/release/examples/reconnect_spread --fleetwire target/release/fleetwire
//! ```

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetwire::agent::backoff::HeartbeatPace;
use fleetwire_types::{NodeHeartbeat, RegisterNodeRequest};
use serde_json::json;

struct Options {
    fleetwire: String,
    agents: usize,
    interval: Duration,
    outage: Duration,
    warm_up: Duration,
    every_interval: bool,
    in_step: bool,
}

fn options() -> Options {
    let mut o = Options {
        fleetwire: "target/release/fleetwire".into(),
        agents: 1000,
        interval: Duration::from_secs(10),
        outage: Duration::from_secs(120),
        warm_up: Duration::from_secs(30),
        every_interval: false,
        in_step: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        let secs = |v: String| Duration::from_secs(v.parse().expect("seconds"));
        match arg.as_str() {
            "--fleetwire" => o.fleetwire = value(),
            "--agents" => o.agents = value().parse().expect("a count"),
            "--interval-s" => o.interval = secs(value()),
            "--outage-s" => o.outage = secs(value()),
            "--warm-up-s" => o.warm_up = secs(value()),
            "--retry" => match value().as_str() {
                "every-interval" => o.every_interval = true,
                "pace" => o.every_interval = false,
                other => panic!("--retry pace|every-interval, not {other}"),
            },
            "--start" => match value().as_str() {
                "in-step" => o.in_step = true,
                "spread" => o.in_step = false,
                other => panic!("--start in-step|spread, not {other}"),
            },
            other => panic!("unknown argument {other}"),
        }
    }
    o
}

fn start_controller(o: &Options, db: &std::path::Path, port: u16) -> Child {
    Command::new(&o.fleetwire)
        .args(["controller", "--plain-http", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--db")
        .arg(db)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the controller")
}

async fn wait_serving(http: &reqwest::Client, port: u16) -> Instant {
    loop {
        let answer = http
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await;
        if answer.is_ok_and(|a| a.status().is_success()) {
            return Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Heartbeats taken per whole second since `from`, over `seconds` seconds.
fn per_second(times: &[Instant], from: Instant, seconds: usize) -> Vec<usize> {
    let mut buckets = vec![0; seconds];
    for t in times {
        if let Some(s) = t.checked_duration_since(from) {
            if let Some(b) = buckets.get_mut(s.as_secs() as usize) {
                *b += 1;
            }
        }
    }
    buckets
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let o = options();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("controller.sqlite3");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut controller = start_controller(&o, &db, port);
    wait_serving(&http, port).await;

    // Every agent registered, each with a client (and connection) of its own.
    let url = format!("http://127.0.0.1:{port}");
    let mut clients = Vec::new();
    for i in 0..o.agents {
        let client = fleetwire_client::Client::builder(url.clone())
            .plain_http()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let id = format!("sim-{i:05}");
        let request: RegisterNodeRequest = serde_json::from_value(json!({
            "node_id": id, "hostname": format!("{id}.example"), "wg_ip": "127.0.0.1",
            "spawn_port": 9220, "total_cpus": 8, "total_memory_mb": 16384,
            "total_disk_gb": 500, "kvm_available": true, "boot_id": "runtime-1",
            "agent_version": "0.1.0"
        }))
        .unwrap();
        client.register_node(&request).await.unwrap();
        clients.push((id, client));
    }

    // The agents' loops: each records when the controller took its heartbeats, and counts
    // the attempts that did not get through.
    let taken: Arc<Mutex<Vec<Vec<Instant>>>> = Arc::new(Mutex::new(vec![Vec::new(); o.agents]));
    let failed: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let started = Instant::now();
    for (i, (id, client)) in clients.into_iter().enumerate() {
        let heartbeat: NodeHeartbeat = serde_json::from_value(json!({
            "node_id": id, "wg_ip": "127.0.0.1", "hostname": format!("{id}.example"),
            "ram_total_mb": 16384, "ram_used_mb": 4096, "cpu_cores": 8, "cpu_load_pct": 10.0,
            "kvm_available": true, "reserved": false, "vms": [],
            "boot_id": "0b8e2a4c-9d1f-4e3a-b5c6-d7e8f9a0b1c2",
            "timestamp_utc": "2026-11-30T09:30:00Z", "spawn_port": 9220
        }))
        .unwrap();
        let (taken, failed) = (taken.clone(), failed.clone());
        let interval = o.interval;
        let every_interval = o.every_interval;
        // In step: every loop starts at once (a fleet started together). Spread: each at a
        // random point of the first interval.
        let offset = if o.in_step {
            Duration::ZERO
        } else {
            interval.mul_f64(rand::random::<f64>())
        };
        tokio::spawn(async move {
            tokio::time::sleep(offset).await;
            let mut pace = HeartbeatPace::new(interval);
            loop {
                // As the agent classes an answer: a 5xx or no answer is "unreachable".
                let through = match client.post_heartbeat(&heartbeat).await {
                    Ok(_) => true,
                    Err(e) => !e.status().is_none_or(|s| s.is_server_error()),
                };
                let wait = if through {
                    taken.lock().unwrap()[i].push(Instant::now());
                    pace.taken()
                } else {
                    failed.lock().unwrap().push(Instant::now());
                    if every_interval {
                        interval
                    } else {
                        pace.unreachable()
                    }
                };
                tokio::time::sleep(wait).await;
            }
        });
    }

    tokio::time::sleep(o.warm_up).await;
    let _ = controller.kill();
    let _ = controller.wait();
    let cut = Instant::now();
    tokio::time::sleep(o.outage).await;
    let mut controller = start_controller(&o, &db, port);
    let back = wait_serving(&http, port).await;
    let window = (o.interval * 3).as_secs() as usize;
    tokio::time::sleep(Duration::from_secs(window as u64)).await;
    let _ = controller.kill();
    let _ = controller.wait();

    let taken = taken.lock().unwrap().clone();
    let failed = failed.lock().unwrap().clone();
    let mut delays: Vec<f64> = Vec::new();
    let mut firsts = Vec::new();
    for times in &taken {
        if let Some(first) = times.iter().find(|t| **t >= back) {
            delays.push(first.duration_since(back).as_secs_f64());
            firsts.push(*first);
        }
    }
    delays.sort_by(f64::total_cmp);
    let steady_from = started + o.interval;
    let steady_seconds = (cut - steady_from).as_secs() as usize;
    let steady: Vec<Instant> = taken
        .iter()
        .flatten()
        .copied()
        .filter(|t| *t < cut)
        .collect();
    let steady_buckets = per_second(&steady, steady_from, steady_seconds);
    let arrivals = per_second(&firsts, back, window);
    let outage_attempts = failed.iter().filter(|t| **t >= cut && **t < back).count();
    let rate = o.agents as f64 / o.interval.as_secs_f64();
    println!(
        "retry: {}; start: {}; agents: {}; interval: {:?}; outage: {:?} (controller killed, \
         back {:.1} s after the cut)",
        if o.every_interval {
            "every interval (before)"
        } else {
            "HeartbeatPace (jittered, 1-2 intervals)"
        },
        if o.in_step { "in step" } else { "spread" },
        o.agents,
        o.interval,
        o.outage,
        (back - cut).as_secs_f64()
    );
    println!(
        "back within {window} s: {} of {}; first heartbeat after the return: p50 {:.2} s, \
         p99 {:.2} s, max {:.2} s",
        delays.len(),
        o.agents,
        percentile(&delays, 0.5),
        percentile(&delays, 0.99),
        delays.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "attempts during the outage: {outage_attempts} ({:.1} per agent per minute)",
        outage_attempts as f64 / o.agents as f64 / (back - cut).as_secs_f64() * 60.0
    );
    println!(
        "steady rate {rate:.0}/s; steady peak {}/s; peak of returns {}/s",
        steady_buckets.iter().max().unwrap_or(&0),
        arrivals.iter().max().unwrap_or(&0)
    );
    println!("returns per second after the return: {arrivals:?}");
}
