//! `fleetwire loadgen`: simulates N nodes heartbeating against a running controller over a
//! fixed number of keep-alive connections, then reports throughput, p50/p99/max latency, and
//! the latency of `GET /v1/fleet` at that fleet size (idle and under load).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::HOST;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::cli_values::parse_duration;

/// `fleetwire loadgen`
#[derive(Debug, Clone, clap::Args)]
pub struct LoadgenArgs {
    /// The controller's base URL (plain HTTP).
    #[arg(
        long,
        env = "FLEETWIRE_LOADGEN_URL",
        default_value = "http://127.0.0.1:9203"
    )]
    pub url: String,
    /// Simulated nodes; each gets its own node id, and all are enrolled before measuring.
    #[arg(long, default_value_t = 10_000)]
    pub nodes: usize,
    /// Keep-alive connections sending heartbeats back to back.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// How long to measure.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// How long the heartbeats run before measuring starts, so that the measured phase is the
    /// steady state: every node has been seen since its enrolment, and the controller's
    /// first full batches after it are written.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Give every heartbeat a new `ram_used_mb`, as a live host's would, so that each one
    /// changes the node's record (and its stored row) instead of only its contact time.
    #[arg(long)]
    pub changing_figures: bool,
    /// Threads sending heartbeats (each runs its share of the connections).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Cap on heartbeats per second over all connections (unlimited when absent).
    #[arg(long)]
    pub rate: Option<u64>,
    /// VMs each simulated node reports in its heartbeats.
    #[arg(long, default_value_t = 1)]
    pub vms_per_node: usize,
    /// How often `GET /v1/fleet` is read (and timed) while the heartbeats run; `0s` for never.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub fleet_every: Duration,
    /// `GET /v1/fleet` requests timed after the heartbeat phase.
    #[arg(long, default_value_t = 20)]
    pub fleet_samples: usize,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub heartbeats_ok: u64,
    /// Refused or failed heartbeats, warm-up included.
    pub heartbeats_failed: u64,
    /// `200` answers during the warm-up (not in `heartbeats_ok` or the latencies).
    pub heartbeats_warmup: u64,
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
    pub fleet_idle: Histogram<u64>,
    pub fleet_under_load: Histogram<u64>,
    /// Size of the last fleet document read.
    pub fleet_bytes: usize,
    /// Nodes in the fleet document, when one was read whole and validated.
    pub fleet_nodes: Option<usize>,
}

fn micros_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

fn ms(us: u64) -> String {
    format!("{:.3} ms", us as f64 / 1000.0)
}

impl Report {
    pub fn per_second(&self) -> f64 {
        self.heartbeats_ok as f64 / self.elapsed.as_secs_f64()
    }

    pub fn render(&self, args: &LoadgenArgs) -> String {
        let l = &self.latency;
        let mut out = format!(
            "fleetwire loadgen: {} nodes, {} connections, {:?} against {}\n\
             heartbeats: {} ok, {} failed, {:.0}/s (after {} in a {:?} warm-up)\n\
             heartbeat latency: p50 {}, p99 {}, p99.9 {}, max {}\n",
            args.nodes,
            args.connections,
            args.duration,
            args.url,
            self.heartbeats_ok,
            self.heartbeats_failed,
            self.per_second(),
            self.heartbeats_warmup,
            args.warmup,
            ms(l.value_at_quantile(0.5)),
            ms(l.value_at_quantile(0.99)),
            ms(l.value_at_quantile(0.999)),
            ms(l.max()),
        );
        for (label, h) in [
            ("idle", &self.fleet_idle),
            ("under load", &self.fleet_under_load),
        ] {
            if h.is_empty() {
                continue;
            }
            let nodes = match self.fleet_nodes {
                Some(nodes) => format!("{nodes} nodes, "),
                None => String::new(),
            };
            out.push_str(&format!(
                "GET /v1/fleet ({nodes}{} bytes), {label}: p50 {}, max {} ({} samples)\n",
                self.fleet_bytes,
                ms(h.value_at_quantile(0.5)),
                ms(h.max()),
                h.len(),
            ));
        }
        out
    }
}

/// The lowest `ram_used_mb` a simulated node reports: every value has five digits, so
/// `--changing-figures` can rewrite it in place.
const RAM_USED_MIN: u64 = 10_000;
const RAM_USED_KEY: &[u8] = b"\"ram_used_mb\":";

/// Where the five digits of `ram_used_mb` sit in a body from [`heartbeat_body`].
fn ram_used_at(body: &[u8]) -> Option<usize> {
    body.windows(RAM_USED_KEY.len())
        .position(|w| w == RAM_USED_KEY)
        .map(|at| at + RAM_USED_KEY.len())
}

/// A heartbeat body for simulated node `index`, the PPN fields plus fleetwire's.
pub fn heartbeat_body(index: usize, vms: usize) -> Bytes {
    let node_id = format!("load-{index:07}");
    let vms: Vec<serde_json::Value> = (0..vms)
        .map(|v| {
            serde_json::json!({
                "vm_id": format!("{node_id}-vm{v}"), "vm_type": "small", "state": "Running",
                "ram_alloc_mb": 512, "vcpu_count": 1, "started_at": "2026-11-30T09:00:00Z",
                "tenant_id": "tenant-a", "host_ports": [{"host_port": 20000 + v, "guest_port": 22, "protocol": "tcp"}]
            })
        })
        .collect();
    let body = serde_json::json!({
        "node_id": node_id,
        // Simulated nodes claim the loopback address: nothing is ever sent to them.
        "wg_ip": "127.0.0.1",
        "hostname": format!("host-{index}"),
        "ram_total_mb": 65536, "ram_used_mb": RAM_USED_MIN + (index % 1024) as u64,
        "cpu_cores": 16, "cpu_load_pct": 12.5, "kvm_available": index % 2 == 0,
        "vms": vms,
        "boot_id": "9b2c1f0e-5d7a-4c3b-8e6f-0a1b2c3d4e5f",
        "timestamp_utc": "2026-11-30T09:30:00.123456Z",
        "spawn_port": 9204, "runtime_boot_id": "4242-1700000000000000000",
        "disk_free_gb": 400, "disk_total_gb": 1000, "cpu_usage": 1.5,
        "memory_usage_mb": 4096, "disk_usage_gb": 60, "agent_version": "0.1.0"
    });
    Bytes::from(serde_json::to_vec(&body).expect("JSON"))
}

struct Target {
    addr: SocketAddr,
    host: String,
}

fn target(url: &str) -> anyhow::Result<Target> {
    let uri: hyper::Uri = url
        .parse()
        .with_context(|| format!("{url:?} is not a URL"))?;
    if uri.scheme_str() != Some("http") {
        bail!("only http:// URLs are supported, not {url:?}");
    }
    let host = uri.host().ok_or_else(|| anyhow!("{url:?} has no host"))?;
    let port = uri.port_u16().unwrap_or(80);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))?
        .next()
        .ok_or_else(|| anyhow!("{host} does not resolve"))?;
    Ok(Target {
        addr,
        host: format!("{host}:{port}"),
    })
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(target: &Target) -> anyhow::Result<Sender> {
    let stream = TcpStream::connect(target.addr)
        .await
        .with_context(|| format!("connecting to {}", target.addr))?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// `GET path`: the answer's status and body (`GET /v1/fleet` is megabytes: hyper reads it).
async fn get(
    sender: &mut Sender,
    target: &Target,
    path: &str,
) -> anyhow::Result<(StatusCode, Bytes)> {
    let response = send_get(sender, target, path).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// A GET whose answer is read to its last byte and counted, not kept: what a timed fleet
/// read measures (as `curl -o /dev/null` would), apart from what a client then does with it.
async fn get_timed(
    sender: &mut Sender,
    target: &Target,
    path: &str,
) -> anyhow::Result<(StatusCode, usize, Duration)> {
    let sent = Instant::now();
    let response = send_get(sender, target, path).await?;
    let status = response.status();
    let mut body = response.into_body();
    let mut bytes = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            bytes += data.len();
        }
    }
    Ok((status, bytes, sent.elapsed()))
}

async fn send_get(
    sender: &mut Sender,
    target: &Target,
    path: &str,
) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
    sender.ready().await?;
    let request = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(HOST, target.host.as_str())
        .body(Full::new(Bytes::new()))?;
    Ok(sender.send_request(request).await?)
}

/// The heartbeat load one thread sends.
struct Load {
    bodies: Arc<Vec<Bytes>>,
    /// The next simulated node to heartbeat, shared by every connection.
    cursor: Arc<AtomicUsize>,
    failed: Arc<AtomicU64>,
    /// `200` answers to heartbeats sent before `measure_from`.
    warmup_ok: Arc<AtomicU64>,
    /// Heartbeats sent before this are warm-up: counted apart and not timed.
    measure_from: Instant,
    deadline: Instant,
    pace: Option<Duration>,
    /// With `--changing-figures`: where `ram_used_mb` sits in each body.
    ram_used_offsets: Option<Arc<Vec<usize>>>,
}

impl Load {
    /// Runs `connections` heartbeat connections on this thread until the deadline; the latency
    /// of every `200`.
    fn run_thread(self, target: &Target, connections: usize) -> anyhow::Result<Histogram<u64>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let load = Arc::new(self);
        runtime.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..connections {
                let connection = HeartbeatConnection::open(target).await?;
                tasks.spawn(load.clone().run_connection(connection));
            }
            let mut latency = micros_histogram();
            while let Some(done) = tasks.join_next().await {
                latency.add(done??)?;
            }
            Ok(latency)
        })
    }

    async fn run_connection(
        self: Arc<Self>,
        mut connection: HeartbeatConnection,
    ) -> anyhow::Result<Histogram<u64>> {
        let mut latency = micros_histogram();
        let mut due = Instant::now();
        loop {
            if let Some(pace) = self.pace {
                due += pace;
                tokio::time::sleep_until(due.into()).await;
            }
            let sent = Instant::now();
            if sent >= self.deadline {
                return Ok(latency);
            }
            let i = self.cursor.fetch_add(1, Ordering::Relaxed) % self.bodies.len();
            let ram_used_at = self.ram_used_offsets.as_ref().map(|at| at[i]);
            let status = connection.post(&self.bodies[i], ram_used_at).await?;
            let us = sent.elapsed().as_micros().max(1) as u64;
            if status == 200 && sent < self.measure_from {
                self.warmup_ok.fetch_add(1, Ordering::Relaxed);
            } else if status == 200 {
                latency.record(us.min(600_000_000)).expect("within bounds");
            } else {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A keep-alive connection that sends heartbeats as prebuilt HTTP/1.1 requests and reads the
/// answers with `httparse`: the measured path of the load generator does no more than a
/// client must, so the controller, not the tool, is what is measured.
struct HeartbeatConnection {
    stream: TcpStream,
    /// Everything of a request before the `Content-Length` value.
    head: Vec<u8>,
    request: Vec<u8>,
    received: Vec<u8>,
    /// Heartbeats sent, for `--changing-figures`.
    sent: u64,
    /// The body of the last answer that was not `200`.
    refusal: String,
}

impl HeartbeatConnection {
    async fn open(target: &Target) -> anyhow::Result<HeartbeatConnection> {
        let stream = TcpStream::connect(target.addr)
            .await
            .with_context(|| format!("connecting to {}", target.addr))?;
        stream.set_nodelay(true)?;
        let head = format!(
            "POST /v1/nodes/heartbeat HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: ",
            target.host
        )
        .into_bytes();
        Ok(HeartbeatConnection {
            stream,
            head,
            request: Vec::with_capacity(4096),
            received: Vec::with_capacity(4096),
            sent: 0,
            refusal: String::new(),
        })
    }

    /// Sends one heartbeat, with a new `ram_used_mb` written at `ram_used_at` when given, and
    /// returns the answer's status (the body of a refusal is kept in `refusal`).
    async fn post(&mut self, body: &[u8], ram_used_at: Option<usize>) -> anyhow::Result<u16> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.request.clear();
        self.request.extend_from_slice(&self.head);
        self.request
            .extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        self.request.extend_from_slice(b"\r\n\r\n");
        let body_at = self.request.len();
        self.request.extend_from_slice(body);
        if let Some(offset) = ram_used_at {
            self.sent += 1;
            let at = body_at + offset;
            let value = RAM_USED_MIN + self.sent % 50_000;
            self.request[at..at + 5].copy_from_slice(itoa::Buffer::new().format(value).as_bytes());
        }
        self.stream.write_all(&self.request).await?;
        loop {
            if let Some((status, head, length)) = parse_answer(&self.received)? {
                if status != 200 {
                    self.refusal = String::from_utf8_lossy(&self.received[head..length]).into();
                }
                self.received.drain(..length);
                return Ok(status);
            }
            self.received.reserve(4096);
            if self.stream.read_buf(&mut self.received).await? == 0 {
                bail!("the controller closed the connection");
            }
        }
    }
}

/// The status, head length and total length of the HTTP/1.1 answer at the start of `bytes`,
/// once all of it has arrived.
fn parse_answer(bytes: &[u8]) -> anyhow::Result<Option<(u16, usize, usize)>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut answer = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(head) = answer.parse(bytes)? else {
        return Ok(None);
    };
    let status = answer.code.unwrap_or_default();
    let mut body = 0;
    for header in answer.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            body = std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| anyhow!("the answer has an unreadable Content-Length"))?;
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            bail!("a heartbeat answer came chunked; expected a Content-Length");
        }
    }
    Ok((bytes.len() >= head + body).then_some((status, head, head + body)))
}

/// Runs the load and returns what it measured.
pub async fn measure(args: &LoadgenArgs) -> anyhow::Result<Report> {
    if args.nodes == 0 || args.connections == 0 {
        bail!("--nodes and --connections must be above 0");
    }
    let target = Arc::new(target(&args.url)?);
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        (0..args.nodes)
            .map(|i| heartbeat_body(i, args.vms_per_node))
            .collect(),
    );

    // Enroll every node first, so the measured phase is the steady state of a full fleet.
    let enrolling_since = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut enrolling = tokio::task::JoinSet::new();
    for _ in 0..args.connections {
        let (target, bodies, next) = (target.clone(), bodies.clone(), next.clone());
        enrolling.spawn(async move {
            let mut connection = HeartbeatConnection::open(&target).await?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else {
                    return anyhow::Ok(());
                };
                let status = connection.post(body, None).await?;
                if status != 200 {
                    bail!("enrolling a node: {status}: {}", connection.refusal);
                }
            }
        });
    }
    while let Some(done) = enrolling.join_next().await {
        done??;
    }

    eprintln!(
        "fleetwire loadgen: enrolled {} nodes in {:.1?}; warming up for {:?}",
        args.nodes,
        enrolling_since.elapsed(),
        args.warmup
    );

    // The measured phase: heartbeat connections on their own threads, each thread one
    // single-threaded runtime, so the load generator takes as little of the machine as it can.
    let failed = Arc::new(AtomicU64::new(0));
    let warmup_ok = Arc::new(AtomicU64::new(0));
    let cursor = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let pace = args
        .rate
        .map(|rate| Duration::from_secs_f64(args.connections as f64 / rate.max(1) as f64));
    let threads = args.threads.clamp(1, args.connections);
    let ram_used_offsets = if args.changing_figures {
        let offsets = bodies
            .iter()
            .map(|body| ram_used_at(body).context("a simulated heartbeat has no ram_used_mb"))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Some(Arc::new(offsets))
    } else {
        None
    };
    let measure_from = Instant::now() + args.warmup;
    let deadline = measure_from + args.duration;
    let mut workers = Vec::with_capacity(threads);
    for thread in 0..threads {
        let connections = (args.connections + threads - 1 - thread) / threads;
        let (target, bodies, failed, cursor) = (
            target.clone(),
            bodies.clone(),
            failed.clone(),
            cursor.clone(),
        );
        let load = Load {
            bodies,
            cursor,
            failed,
            warmup_ok: warmup_ok.clone(),
            measure_from,
            deadline,
            pace,
            ram_used_offsets: ram_used_offsets.clone(),
        };
        workers.push(
            std::thread::Builder::new()
                .name(format!("loadgen-{thread}"))
                .spawn(move || load.run_thread(&target, connections))
                .context("starting a load thread")?,
        );
    }
    // Fleet reads while the heartbeats run.
    let sampler = {
        let (target, stop, every) = (target.clone(), stop.clone(), args.fleet_every);
        tokio::spawn(async move {
            let (mut fleet, mut size) = (micros_histogram(), 0);
            if every.is_zero() {
                return anyhow::Ok((fleet, size));
            }
            let mut sender = connect(&target).await?;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(every).await;
                let measured = Instant::now() >= measure_from;
                let (status, bytes, took) = get_timed(&mut sender, &target, "/v1/fleet").await?;
                if status == StatusCode::OK && measured && !stop.load(Ordering::Relaxed) {
                    fleet.record(took.as_micros().max(1) as u64)?;
                    size = bytes;
                }
            }
            anyhow::Ok((fleet, size))
        })
    };
    tokio::time::sleep_until(measure_from.into()).await;
    eprintln!("fleetwire loadgen: measuring for {:?}", args.duration);
    let mut latency = micros_histogram();
    let joined = tokio::task::spawn_blocking(move || {
        workers
            .into_iter()
            .map(|w| w.join().map_err(|_| anyhow!("a load thread panicked"))?)
            .collect::<anyhow::Result<Vec<_>>>()
    })
    .await??;
    let elapsed = measure_from.elapsed();
    stop.store(true, Ordering::Relaxed);
    for histogram in joined {
        latency.add(histogram)?;
    }
    let (fleet_under_load, size_under_load) = sampler.await??;

    // The fleet at rest.
    let mut fleet_idle = micros_histogram();
    let mut sender = connect(&target).await?;
    let (mut fleet_bytes, mut fleet_nodes) = (size_under_load, None);
    for _ in 0..args.fleet_samples {
        let (status, bytes, took) = get_timed(&mut sender, &target, "/v1/fleet").await?;
        if status != StatusCode::OK {
            bail!("GET /v1/fleet answered {status}");
        }
        fleet_idle.record(took.as_micros().max(1) as u64)?;
        fleet_bytes = bytes;
    }
    if args.fleet_samples > 0 {
        // Once more, kept whole and read through the validated reader (untimed).
        let (status, body) = get(&mut sender, &target, "/v1/fleet").await?;
        if status != StatusCode::OK {
            bail!("GET /v1/fleet answered {status}");
        }
        let fleet: fleetwire_types::FleetStatus = fleetwire_types::read(&body)
            .map_err(|e| anyhow!("GET /v1/fleet answered an invalid FleetStatus: {e}"))?
            .value;
        if fleet.nodes.len() < args.nodes {
            bail!(
                "the fleet lists {} nodes, fewer than the {} enrolled",
                fleet.nodes.len(),
                args.nodes
            );
        }
        fleet_nodes = Some(fleet.nodes.len());
    }
    Ok(Report {
        heartbeats_ok: latency.len(),
        heartbeats_failed: failed.load(Ordering::Relaxed),
        heartbeats_warmup: warmup_ok.load(Ordering::Relaxed),
        elapsed,
        latency,
        fleet_idle,
        fleet_under_load,
        fleet_bytes,
        fleet_nodes,
    })
}

/// `fleetwire loadgen`.
pub fn run(args: LoadgenArgs) -> ExitCode {
    // Enrollment and the fleet reads; the heartbeats run on threads of their own.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("fleetwire loadgen: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(measure(&args)) {
        Ok(report) => {
            print!("{}", report.render(&args));
            if report.heartbeats_failed > 0 {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => {
            eprintln!("fleetwire loadgen: {error:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn simulated_heartbeats_are_valid_documents() {
        for vms in [0, 1, 3] {
            let body = super::heartbeat_body(7, vms);
            let hb: fleetwire_types::NodeHeartbeat = fleetwire_types::read_strict(&body).unwrap();
            assert_eq!(hb.vms.len(), vms);
            assert_eq!(hb.wg_ip.0, std::net::Ipv4Addr::LOCALHOST);
        }
    }

    #[test]
    fn changing_figures_rewrite_five_digits_in_place() {
        let body = super::heartbeat_body(1023, 1).to_vec();
        let at = super::ram_used_at(&body).unwrap();
        let mut changed = body.clone();
        changed[at..at + 5].copy_from_slice(b"59999");
        let hb: fleetwire_types::NodeHeartbeat = fleetwire_types::read_strict(&changed).unwrap();
        assert_eq!(hb.ram_used_mb, 59_999);
        let before: fleetwire_types::NodeHeartbeat = fleetwire_types::read_strict(&body).unwrap();
        assert_eq!(before.ram_used_mb, 10_000 + 1023);
    }
}
