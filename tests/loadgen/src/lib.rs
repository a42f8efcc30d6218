//! `fleetwire-loadgen`: simulates N nodes heartbeating against a running controller, then
//! reports throughput, p50/p99/max latency, and the latency of `GET /v1/fleet` at that fleet
//! size (idle and under load) (docs/performance.md). A package of its own, beside the tests
//! that drive it, so the production `fleetwire` binary carries none of it; it reuses the
//! `fleetwire` library's enrolment CSR, fleet TLS client and duration flags. The end-to-end
//! tests call [`run`] in a thread of their own and test the parts (tests/e2e/fleet/).
//!
//! Plain HTTP (`http://`): the nodes enroll by heartbeat, and their heartbeats share a fixed
//! number of keep-alive connections, or with `--connection-per-node` each node has its own.
//! mTLS (`https://`, docs/security.md): each node enrolls with a bootstrap token and the CSR of
//! a fresh key, and heartbeats on a connection of its own that presents its certificate.
//! `--reconnect-storm` then drops and reopens every node's connection at once.
//!
//! - `args`: the flags and what they come to together;
//! - `dial`: the controller's address, TLS, connections;
//! - `bodies`: the documents a simulated node sends;
//! - `enroll`: enrolling the nodes;
//! - `heartbeat_connection`: the measured path, prebuilt requests on one connection;
//! - `shared_connections`, `per_node`: the two ways of spreading nodes over connections;
//! - `operator_client`: the enrolment's calls and the fleet reads, through hyper;
//! - `fleet_reads`: the timed `GET /v1/fleet` reads;
//! - `open_files`: the descriptor limit a connection per node needs;
//! - `report`: what was measured, told.

pub mod args;
pub mod bodies;
pub mod dial;
pub mod enroll;
pub mod fleet_reads;
pub mod heartbeat_connection;
pub mod open_files;
pub mod operator_client;
pub mod per_node;
pub mod report;
pub mod shared_connections;

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use hyper::body::Bytes;

pub use args::{LoadgenArgs, Plan, Transport};
pub use bodies::{heartbeat_body, node_id};
pub use report::{Report, StormReport};

use bodies::ram_used_at;
use dial::{Dialer, OperatorToken};
use report::micros_histogram;

/// Runs the load and returns what it measured.
pub async fn measure(args: &LoadgenArgs, log: &mut dyn Write) -> anyhow::Result<Report> {
    let plan = args.plan()?;
    let operator = match plan.transport {
        Transport::Mtls => Some(OperatorToken::load(args.operator_token_file.as_deref())?),
        Transport::Plain => None,
    };
    let dialer = Arc::new(Dialer::new(&args.url, args.ca_file.as_deref())?);
    let limit = open_files::raise_for(plan.connections)?;
    if plan.per_node {
        writeln!(
            log,
            "fleetwire-loadgen: open-files limit {limit} ({} connections)",
            plan.connections
        )?;
    }
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        (0..args.nodes)
            .map(|i| heartbeat_body(i, args.vms_per_node))
            .collect(),
    );

    // Enroll every node first, so the measured phase is the steady state of a full fleet.
    let enrolling_since = Instant::now();
    let identities = match &operator {
        Some(operator) => Some(Arc::new(
            enroll::by_registration(&dialer, operator, args.nodes).await?,
        )),
        None => {
            enroll::by_heartbeat(&dialer, &bodies, args.connections).await?;
            None
        }
    };
    let enrollment = enrolling_since.elapsed();
    writeln!(
        log,
        "fleetwire-loadgen: enrolled {} nodes in {enrollment:.1?}",
        args.nodes
    )?;

    let failed = Arc::new(AtomicU64::new(0));
    let warmup_ok = Arc::new(AtomicU64::new(0));
    let pace = args
        .rate
        .map(|rate| Duration::from_secs_f64(plan.connections as f64 / rate.max(1) as f64));
    let ram_used_offsets = if args.changing_figures {
        let offsets = bodies
            .iter()
            .map(|body| ram_used_at(body).context("a simulated heartbeat has no ram_used_mb"))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Some(Arc::new(offsets))
    } else {
        None
    };

    // The measured phase: heartbeat connections on their own threads, each thread one
    // single-threaded runtime, so the load generator takes as little of the machine as it can.
    let (measure_from, heartbeats, connecting, first_refusal) = if plan.per_node {
        let fleet = Arc::new(per_node::Fleet {
            dialer: dialer.clone(),
            identities,
            bodies: bodies.clone(),
            ram_used_offsets,
            pace,
            failed: failed.clone(),
            warmup_ok: warmup_ok.clone(),
            first_refusal: Default::default(),
        });
        let connecting_since = Instant::now();
        let mut running = per_node::start(fleet.clone(), args.threads)?;
        running.connected().await?;
        let connecting = connecting_since.elapsed();
        writeln!(
            log,
            "fleetwire-loadgen: opened {} connections in {connecting:.1?}",
            plan.connections
        )?;
        let measure_from = Instant::now() + args.warmup;
        let deadline = measure_from + args.duration;
        let heartbeats = tokio::spawn(async move {
            let latency = running.heartbeats(measure_from, deadline).await?;
            anyhow::Ok((latency, running))
        });
        (
            measure_from,
            Heartbeats::PerNode(heartbeats),
            Some(connecting),
            Some(fleet.first_refusal.clone()),
        )
    } else {
        let measure_from = Instant::now() + args.warmup;
        let deadline = measure_from + args.duration;
        let threads = args.threads.clamp(1, args.connections);
        let cursor = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::with_capacity(threads);
        for thread in 0..threads {
            let connections = (args.connections + threads - 1 - thread) / threads;
            let dialer = dialer.clone();
            let load = shared_connections::Load {
                bodies: bodies.clone(),
                cursor: cursor.clone(),
                failed: failed.clone(),
                warmup_ok: warmup_ok.clone(),
                measure_from,
                deadline,
                pace,
                ram_used_offsets: ram_used_offsets.clone(),
            };
            workers.push(
                std::thread::Builder::new()
                    .name(format!("loadgen-{thread}"))
                    .spawn(move || load.run_thread(&dialer, connections))
                    .context("starting a load thread")?,
            );
        }
        (measure_from, Heartbeats::Shared(workers), None, None)
    };
    writeln!(
        log,
        "fleetwire-loadgen: warming up for {:?}, then measuring for {:?}",
        args.warmup, args.duration
    )?;

    // Fleet reads while the heartbeats run.
    let authorization = operator.as_ref().map(OperatorToken::bearer);
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(fleet_reads::under_load(
        dialer.clone(),
        authorization.clone(),
        args.fleet_every,
        measure_from,
        stop.clone(),
    ));
    tokio::time::sleep_until(measure_from.into()).await;
    let (latency, running) = match heartbeats {
        Heartbeats::PerNode(task) => {
            let (latency, running) = task.await??;
            (latency, Some(running))
        }
        Heartbeats::Shared(workers) => {
            let joined = tokio::task::spawn_blocking(move || {
                workers
                    .into_iter()
                    .map(|w| w.join().map_err(|_| anyhow!("a load thread panicked"))?)
                    .collect::<anyhow::Result<Vec<_>>>()
            })
            .await??;
            let mut latency = micros_histogram();
            for histogram in joined {
                latency.add(histogram)?;
            }
            (latency, None)
        }
    };
    let elapsed = measure_from.elapsed();
    stop.store(true, Ordering::Relaxed);
    let under_load = sampler.await??;
    if let Some(refusal) = first_refusal.and_then(|first| first.lock().take()) {
        writeln!(log, "fleetwire-loadgen: first refused heartbeat: {refusal}")?;
    }

    // The storm, after the measured phase so that it measures nothing but itself.
    let storm = match running {
        Some(running) if args.reconnect_storm => {
            writeln!(
                log,
                "fleetwire-loadgen: reconnect storm: closing and reopening {} connections",
                plan.connections
            )?;
            Some(running.storm().await?)
        }
        _ => None,
    };

    // The fleet at rest.
    let at_rest = fleet_reads::at_rest(
        &dialer,
        authorization.as_deref(),
        args.fleet_samples,
        args.nodes,
    )
    .await?;
    Ok(Report {
        plan,
        enrollment,
        connecting,
        heartbeats_ok: latency.len(),
        heartbeats_failed: failed.load(Ordering::Relaxed),
        heartbeats_warmup: warmup_ok.load(Ordering::Relaxed),
        elapsed,
        latency,
        fleet_bytes: if at_rest.latency.is_empty() {
            under_load.bytes
        } else {
            at_rest.bytes
        },
        fleet_nodes: at_rest.nodes,
        fleet_idle: at_rest.latency,
        fleet_under_load: under_load.latency,
        storm,
    })
}

/// The measured phase under way.
enum Heartbeats {
    PerNode(
        tokio::task::JoinHandle<anyhow::Result<(hdrhistogram::Histogram<u64>, per_node::Running)>>,
    ),
    Shared(Vec<std::thread::JoinHandle<anyhow::Result<hdrhistogram::Histogram<u64>>>>),
}

/// `fleetwire-loadgen` with its flags parsed: the report to `out`, progress and errors to
/// `log`; what the binary runs, and what the end-to-end tests run in a thread of their own
/// (tests/e2e/fleet/loadgen.rs). Failure when the run did not complete, a heartbeat was
/// refused, or a node did not reconnect in the storm.
pub fn run(args: &LoadgenArgs, out: &mut dyn Write, log: &mut dyn Write) -> ExitCode {
    fleetwire::tls::install_crypto_provider();
    // Enrollment and the fleet reads; the heartbeats run on threads of their own.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = writeln!(log, "fleetwire-loadgen: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(measure(args, log)) {
        Ok(report) => {
            let _ = write!(out, "{}", report.render(args));
            let _ = out.flush();
            let storm_failed = report
                .storm
                .as_ref()
                .is_some_and(|storm| storm.reconnected < storm.nodes);
            if report.heartbeats_failed > 0 || storm_failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => {
            let _ = writeln!(log, "fleetwire-loadgen: {error:#}");
            ExitCode::FAILURE
        }
    }
}
