//! The heartbeats over a few shared keep-alive connections (plain HTTP only): every connection
//! cycles through all the simulated nodes, so few connections carry a large fleet's load.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use hyper::body::Bytes;
use tokio::net::TcpStream;

use super::dial::{Dialer, Stream};
use super::heartbeat_connection::HeartbeatConnection;
use super::report::{micros, micros_histogram};

/// The heartbeat load one thread sends.
pub struct Load {
    pub bodies: Arc<Vec<Bytes>>,
    /// The next simulated node to heartbeat, shared by every connection.
    pub cursor: Arc<AtomicUsize>,
    pub failed: Arc<AtomicU64>,
    /// `200` answers to heartbeats sent before `measure_from`.
    pub warmup_ok: Arc<AtomicU64>,
    /// Heartbeats sent before this are warm-up: counted apart and not timed.
    pub measure_from: Instant,
    pub deadline: Instant,
    pub pace: Option<Duration>,
    /// With `--changing-figures`: where `ram_used_mb` sits in each body.
    pub ram_used_offsets: Option<Arc<Vec<usize>>>,
}

impl Load {
    /// Runs `connections` heartbeat connections on this thread until the deadline; the latency
    /// of every `200`.
    pub fn run_thread(self, dialer: &Dialer, connections: usize) -> anyhow::Result<Histogram<u64>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let load = Arc::new(self);
        runtime.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..connections {
                let stream = match dialer.connect(None).await? {
                    Stream::Plain(tcp) => tcp,
                    Stream::Tls(_) => anyhow::bail!("shared connections are plain HTTP only"),
                };
                let connection = HeartbeatConnection::new(stream, &dialer.host);
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
        mut connection: HeartbeatConnection<TcpStream>,
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
            if status == 200 && sent < self.measure_from {
                self.warmup_ok.fetch_add(1, Ordering::Relaxed);
            } else if status == 200 {
                latency
                    .record(micros(sent.elapsed()))
                    .expect("within bounds");
            } else {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
