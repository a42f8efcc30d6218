//! A keep-alive connection per simulated node (`--connection-per-node`, implied by mTLS),
//! on which the node sends only its own heartbeats, back to back; and the reconnect storm
//! (`--reconnect-storm`): every connection closed at once, then all reopened at once.
//!
//! The connections are spread over `--threads` threads, each one single-threaded runtime (so
//! the load generator takes as little of the machine as it can, docs/performance.md). The
//! caller steps every thread through the phases together: connect, heartbeats, and for the
//! storm close, then reconnect. With mTLS each connection presents its node's certificate: the
//! controller takes a connection's heartbeats for that node only (docs/security.md).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use hdrhistogram::Histogram;
use hyper::body::Bytes;
use parking_lot::Mutex;
use rustls::ClientConfig;
use tokio::sync::{oneshot, Semaphore};

use super::bodies::node_id;
use super::dial::{Dialer, Stream};
use super::heartbeat_connection::HeartbeatConnection;
use super::report::{micros, micros_histogram, StormReport};

/// Connections each thread opens at once before the heartbeats (not in the storm, which opens
/// all at once): the controller's accept queue is bounded, and a SYN dropped there costs a
/// second's retransmission, which would only blur the time the connecting phase takes.
const CONNECTS_IN_FLIGHT: usize = 64;

/// How long one node of the storm may take to reconnect and be answered before it counts as
/// failed: far beyond the heartbeat interval (10 s) the storm must fit in.
const STORM_NODE_TIMEOUT: Duration = Duration::from_secs(60);

/// What every thread shares.
pub struct Fleet {
    pub dialer: Arc<Dialer>,
    /// With mTLS: each node's rustls settings (its certificate and key), by node index.
    pub identities: Option<Arc<Vec<Arc<ClientConfig>>>>,
    pub bodies: Arc<Vec<Bytes>>,
    /// With `--changing-figures`: where `ram_used_mb` sits in each body.
    pub ram_used_offsets: Option<Arc<Vec<usize>>>,
    /// Each connection's time between heartbeats, under `--rate`.
    pub pace: Option<Duration>,
    pub failed: Arc<AtomicU64>,
    /// `200` answers to heartbeats sent before the measured phase.
    pub warmup_ok: Arc<AtomicU64>,
    /// The first refusal's body, for the operator.
    pub first_refusal: Arc<Mutex<Option<String>>>,
}

impl Fleet {
    async fn open(&self, index: usize) -> anyhow::Result<HeartbeatConnection<Stream>> {
        let identity = self.identities.as_ref().map(|all| all[index].clone());
        let stream = self.dialer.connect(identity).await?;
        Ok(HeartbeatConnection::new(stream, &self.dialer.host))
    }

    fn refused(&self, connection: &HeartbeatConnection<Stream>, status: u16) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_refusal.lock();
        if first.is_none() {
            *first = Some(format!("{status}: {}", connection.refusal));
        }
    }
}

/// One thread's part of a storm.
struct StormPart {
    ok: usize,
    /// From the common start to this thread's last `200`.
    last: Duration,
    per_node: Histogram<u64>,
    first_failure: Option<String>,
}

/// The caller's ends of one thread's phases, each taken when its phase comes.
struct Steps {
    connected: Option<oneshot::Receiver<anyhow::Result<()>>>,
    start: Option<oneshot::Sender<(Instant, Instant)>>,
    measured: Option<oneshot::Receiver<anyhow::Result<Histogram<u64>>>>,
    close: Option<oneshot::Sender<()>>,
    closed: Option<oneshot::Receiver<()>>,
    reconnect: Option<oneshot::Sender<Instant>>,
    stormed: Option<oneshot::Receiver<StormPart>>,
}

/// The thread's ends.
struct ThreadSteps {
    connected: oneshot::Sender<anyhow::Result<()>>,
    start: oneshot::Receiver<(Instant, Instant)>,
    measured: oneshot::Sender<anyhow::Result<Histogram<u64>>>,
    close: oneshot::Receiver<()>,
    closed: oneshot::Sender<()>,
    reconnect: oneshot::Receiver<Instant>,
    stormed: oneshot::Sender<StormPart>,
}

fn steps() -> (Steps, ThreadSteps) {
    let (connected_tx, connected) = oneshot::channel();
    let (start, start_rx) = oneshot::channel();
    let (measured_tx, measured) = oneshot::channel();
    let (close, close_rx) = oneshot::channel();
    let (closed_tx, closed) = oneshot::channel();
    let (reconnect, reconnect_rx) = oneshot::channel();
    let (stormed_tx, stormed) = oneshot::channel();
    (
        Steps {
            connected: Some(connected),
            start: Some(start),
            measured: Some(measured),
            close: Some(close),
            closed: Some(closed),
            reconnect: Some(reconnect),
            stormed: Some(stormed),
        },
        ThreadSteps {
            connected: connected_tx,
            start: start_rx,
            measured: measured_tx,
            close: close_rx,
            closed: closed_tx,
            reconnect: reconnect_rx,
            stormed: stormed_tx,
        },
    )
}

/// A phase's end, once: a second take is the caller's mistake.
fn take<T>(slot: &mut Option<T>) -> anyhow::Result<T> {
    slot.take()
        .ok_or_else(|| anyhow!("the load threads' phases were stepped out of order"))
}

/// Why a thread's end of a phase went quiet: it stopped (panicked) before reaching it.
const THREAD_GONE: &str = "a load thread stopped";

/// The threads, between phases.
pub struct Running {
    threads: Vec<Steps>,
    nodes: usize,
}

/// Starts `threads` threads, each opening the connections of its share of the nodes.
pub fn start(fleet: Arc<Fleet>, threads: usize) -> anyhow::Result<Running> {
    let nodes = fleet.bodies.len();
    let threads = threads.clamp(1, nodes);
    let mut all = Vec::with_capacity(threads);
    for thread in 0..threads {
        let share = nodes * thread / threads..nodes * (thread + 1) / threads;
        let (steps, thread_steps) = steps();
        let fleet = fleet.clone();
        std::thread::Builder::new()
            .name(format!("loadgen-{thread}"))
            .spawn(move || run_thread(fleet, share, thread_steps))
            .context("starting a load thread")?;
        all.push(steps);
    }
    Ok(Running {
        threads: all,
        nodes,
    })
}

impl Running {
    /// Waits until every connection is open.
    pub async fn connected(&mut self) -> anyhow::Result<()> {
        for steps in &mut self.threads {
            take(&mut steps.connected)?
                .await
                .map_err(|_| anyhow!(THREAD_GONE))??;
        }
        Ok(())
    }

    /// The heartbeats: warm-up until `measure_from`, measured until `deadline`; the latency
    /// of every measured `200`.
    pub async fn heartbeats(
        &mut self,
        measure_from: Instant,
        deadline: Instant,
    ) -> anyhow::Result<Histogram<u64>> {
        for steps in &mut self.threads {
            take(&mut steps.start)?
                .send((measure_from, deadline))
                .map_err(|_| anyhow!(THREAD_GONE))?;
        }
        let mut latency = micros_histogram();
        for steps in &mut self.threads {
            let measured = take(&mut steps.measured)?;
            latency.add(measured.await.map_err(|_| anyhow!(THREAD_GONE))??)?;
        }
        Ok(latency)
    }

    /// The storm: every connection closed at once; once all are, every node reconnects at
    /// once and sends one heartbeat.
    pub async fn storm(mut self) -> anyhow::Result<StormReport> {
        for steps in &mut self.threads {
            take(&mut steps.close)?
                .send(())
                .map_err(|_| anyhow!(THREAD_GONE))?;
        }
        for steps in &mut self.threads {
            take(&mut steps.closed)?
                .await
                .map_err(|_| anyhow!(THREAD_GONE))?;
        }
        let since = Instant::now();
        for steps in &mut self.threads {
            take(&mut steps.reconnect)?
                .send(since)
                .map_err(|_| anyhow!(THREAD_GONE))?;
        }
        let mut report = StormReport {
            nodes: self.nodes,
            reconnected: 0,
            last_answered: Duration::ZERO,
            per_node: micros_histogram(),
            first_failure: None,
        };
        for steps in &mut self.threads {
            let part = take(&mut steps.stormed)?
                .await
                .map_err(|_| anyhow!(THREAD_GONE))?;
            report.reconnected += part.ok;
            report.last_answered = report.last_answered.max(part.last);
            report.per_node.add(part.per_node)?;
            report.first_failure = report.first_failure.or(part.first_failure);
        }
        Ok(report)
    }
}

/// One thread: its runtime, and its share of the nodes through the phases.
fn run_thread(fleet: Arc<Fleet>, share: Range<usize>, steps: ThreadSteps) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = steps.connected.send(Err(error.into()));
            return;
        }
    };
    // Every `let _ =` below: the caller has gone (it failed elsewhere and is telling why).
    runtime.block_on(async move {
        let connections = match open_all(&fleet, share.clone()).await {
            Ok(connections) => connections,
            Err(error) => {
                let _ = steps.connected.send(Err(error));
                return;
            }
        };
        let _ = steps.connected.send(Ok(()));
        let Ok((measure_from, deadline)) = steps.start.await else {
            return;
        };
        let connections = match heartbeats(&fleet, connections, measure_from, deadline).await {
            Ok((latency, connections)) => {
                let _ = steps.measured.send(Ok(latency));
                connections
            }
            Err(error) => {
                let _ = steps.measured.send(Err(error));
                return;
            }
        };
        if steps.close.await.is_err() {
            return;
        }
        close_all(connections).await;
        let _ = steps.closed.send(());
        let Ok(since) = steps.reconnect.await else {
            return;
        };
        let _ = steps
            .stormed
            .send(reconnect_all(&fleet, share, since).await);
    });
}

/// Opens every node's connection of `share`, [`CONNECTS_IN_FLIGHT`] at once.
async fn open_all(
    fleet: &Arc<Fleet>,
    share: Range<usize>,
) -> anyhow::Result<Vec<(usize, HeartbeatConnection<Stream>)>> {
    let permits = Arc::new(Semaphore::new(CONNECTS_IN_FLIGHT));
    let mut opening = tokio::task::JoinSet::new();
    for index in share {
        let (fleet, permits) = (fleet.clone(), permits.clone());
        opening.spawn(async move {
            let _permit = permits.acquire().await?;
            let connection = fleet
                .open(index)
                .await
                .with_context(|| format!("connecting {}", node_id(index)))?;
            anyhow::Ok((index, connection))
        });
    }
    let mut connections = Vec::with_capacity(opening.len());
    while let Some(opened) = opening.join_next().await {
        connections.push(opened??);
    }
    Ok(connections)
}

/// Every connection sends its node's heartbeats until the deadline; the measured latencies,
/// and the connections back for the storm.
async fn heartbeats(
    fleet: &Arc<Fleet>,
    connections: Vec<(usize, HeartbeatConnection<Stream>)>,
    measure_from: Instant,
    deadline: Instant,
) -> anyhow::Result<(Histogram<u64>, Vec<HeartbeatConnection<Stream>>)> {
    // One histogram for the thread: one per connection would take megabytes each.
    let latency = Arc::new(Mutex::new(micros_histogram()));
    let mut running = tokio::task::JoinSet::new();
    for (index, mut connection) in connections {
        let (fleet, latency) = (fleet.clone(), latency.clone());
        running.spawn(async move {
            let body = &fleet.bodies[index];
            let ram_used_at = fleet.ram_used_offsets.as_ref().map(|at| at[index]);
            let mut due = Instant::now();
            loop {
                if let Some(pace) = fleet.pace {
                    due += pace;
                    tokio::time::sleep_until(due.into()).await;
                }
                let sent = Instant::now();
                if sent >= deadline {
                    return anyhow::Ok(connection);
                }
                let status = connection
                    .post(body, ram_used_at)
                    .await
                    .with_context(|| format!("{}'s heartbeat", node_id(index)))?;
                if status == 200 && sent < measure_from {
                    fleet.warmup_ok.fetch_add(1, Ordering::Relaxed);
                } else if status == 200 {
                    latency
                        .lock()
                        .record(micros(sent.elapsed()))
                        .expect("within bounds");
                } else {
                    fleet.refused(&connection, status);
                }
            }
        });
    }
    let mut connections = Vec::with_capacity(running.len());
    while let Some(done) = running.join_next().await {
        connections.push(done??);
    }
    drop(running);
    let latency = Arc::try_unwrap(latency)
        .map_err(|_| anyhow!("a heartbeat task outlived its phase"))?
        .into_inner();
    Ok((latency, connections))
}

/// Closes every connection at once.
async fn close_all(connections: Vec<HeartbeatConnection<Stream>>) {
    let mut closing = tokio::task::JoinSet::new();
    for connection in connections {
        closing.spawn(connection.close());
    }
    closing.join_all().await;
}

/// The storm's part of this thread: every node of `share` reconnects at once (a new TCP
/// connection and, with mTLS, a full handshake) and sends one heartbeat.
async fn reconnect_all(fleet: &Arc<Fleet>, share: Range<usize>, since: Instant) -> StormPart {
    let mut reconnecting = tokio::task::JoinSet::new();
    for index in share {
        let fleet = fleet.clone();
        reconnecting.spawn(async move {
            let began = Instant::now();
            let attempt = async {
                let mut connection = fleet.open(index).await?;
                let status = connection.post(&fleet.bodies[index], None).await?;
                if status != 200 {
                    anyhow::bail!("answered {status}: {}", connection.refusal);
                }
                // Kept open until the thread's storm is over: a node stays connected.
                anyhow::Ok(connection)
            };
            let outcome = match tokio::time::timeout(STORM_NODE_TIMEOUT, attempt).await {
                Ok(outcome) => outcome,
                Err(_) => Err(anyhow!("no answer within {STORM_NODE_TIMEOUT:?}")),
            };
            (index, began.elapsed(), since.elapsed(), outcome)
        });
    }
    let mut part = StormPart {
        ok: 0,
        last: Duration::ZERO,
        per_node: micros_histogram(),
        first_failure: None,
    };
    let mut kept = Vec::with_capacity(reconnecting.len());
    while let Some(done) = reconnecting.join_next().await {
        match done {
            Ok((_, took, at, Ok(connection))) => {
                part.ok += 1;
                part.last = part.last.max(at);
                part.per_node.record(micros(took)).expect("within bounds");
                kept.push(connection);
            }
            Ok((index, _, _, Err(error))) => {
                part.first_failure
                    .get_or_insert_with(|| format!("{}: {error:#}", node_id(index)));
            }
            Err(error) => {
                part.first_failure
                    .get_or_insert_with(|| format!("a reconnecting task failed: {error}"));
            }
        }
    }
    close_all(kept).await;
    part
}
