//! Timed `GET /v1/fleet` reads: while the heartbeats run, and after them at rest, the last one
//! kept whole and read through the validated reader (docs/performance.md, "A timed fleet read").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use hdrhistogram::Histogram;
use hyper::body::Bytes;
use hyper::{Method, StatusCode};

use super::dial::Dialer;
use super::operator_client::OperatorClient;
use super::report::{micros, micros_histogram};

/// What the reads measured.
pub struct FleetReads {
    pub latency: Histogram<u64>,
    /// Size of the last fleet document read.
    pub bytes: usize,
    /// Nodes in the fleet document, when one was read whole and validated.
    pub nodes: Option<usize>,
}

/// Reads the fleet every `every` until `stop`, timing the reads that start from `measure_from`
/// on; `0s` reads nothing.
pub async fn under_load(
    dialer: Arc<Dialer>,
    authorization: Option<String>,
    every: Duration,
    measure_from: Instant,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<FleetReads> {
    let mut reads = FleetReads {
        latency: micros_histogram(),
        bytes: 0,
        nodes: None,
    };
    if every.is_zero() {
        return Ok(reads);
    }
    let mut client = OperatorClient::connect(&dialer).await?;
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(every).await;
        let measured = Instant::now() >= measure_from;
        let (status, bytes, took) = client
            .get_timed("/v1/fleet", authorization.as_deref())
            .await?;
        if status == StatusCode::OK && measured && !stop.load(Ordering::Relaxed) {
            reads.latency.record(micros(took))?;
            reads.bytes = bytes;
        }
    }
    Ok(reads)
}

/// `samples` timed reads of the fleet at rest, then one kept whole and validated, which must
/// list at least the `enrolled` nodes.
pub async fn at_rest(
    dialer: &Dialer,
    authorization: Option<&str>,
    samples: usize,
    enrolled: usize,
) -> anyhow::Result<FleetReads> {
    let mut reads = FleetReads {
        latency: micros_histogram(),
        bytes: 0,
        nodes: None,
    };
    if samples == 0 {
        return Ok(reads);
    }
    let mut client = OperatorClient::connect(dialer).await?;
    for _ in 0..samples {
        let (status, bytes, took) = client.get_timed("/v1/fleet", authorization).await?;
        if status != StatusCode::OK {
            bail!("GET /v1/fleet answered {status}");
        }
        reads.latency.record(micros(took))?;
        reads.bytes = bytes;
    }
    // Once more, kept whole and read through the validated reader (untimed).
    let (status, body) = client
        .call(Method::GET, "/v1/fleet", authorization, Bytes::new())
        .await?;
    if status != StatusCode::OK {
        bail!("GET /v1/fleet answered {status}");
    }
    let fleet: fleetwire_types::FleetStatus = fleetwire_types::read(&body)
        .map_err(|e| anyhow!("GET /v1/fleet answered an invalid FleetStatus: {e}"))?
        .value;
    if fleet.nodes.len() < enrolled {
        bail!(
            "the fleet lists {} nodes, fewer than the {enrolled} enrolled",
            fleet.nodes.len(),
        );
    }
    reads.nodes = Some(fleet.nodes.len());
    Ok(reads)
}
