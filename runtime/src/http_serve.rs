//! Serving HTTP/1.1 connections for the controller and the agent's local API with the limits a
//! hostile or broken client meets (docs/reliability/hostile-input.md). `axum::serve` sets none:
//! it runs hyper without a timer, so a client that opens a connection and says nothing, or
//! dribbles its request head a byte at a time, holds a connection and a descriptor forever.
//! Here hyper gets a timer and:
//!
//! - [`HEADER_READ_TIMEOUT`]: a request head (and, between requests, the next one) must arrive
//!   within it, or the connection is closed: idle keep-alive connections go the same way;
//! - [`MAX_HEADER_BYTES`] and [`MAX_HEADERS`]: a larger head is answered `431` and closed;
//! - connections beyond [`connection_limit`] wait in the listen backlog instead of taking the
//!   descriptors the store and the calls to agents need;
//! - [`Lingering`]: a connection closed with a request body unread (an early `413`) is read
//!   out for a moment before it is dropped, so the client gets the answer rather than a reset.
//!
//! The body's own deadline is the reader's (`crate::http::read_body_bytes`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// How long a client may take to send a request head, and how long a keep-alive connection may
/// stay idle between requests. Longer than any heartbeat interval (the agent's default is 10 s),
/// so a node's connection is kept between its heartbeats.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest request head (request line and headers) read: a bearer token and the usual
/// headers take well under 1 KiB.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// The most header fields a request may have.
pub const MAX_HEADERS: usize = 64;

/// Descriptors kept back from connections: the store's files, the listeners, calls to agents
/// and runtimes, the log.
const RESERVED_DESCRIPTORS: u64 = 256;

/// How many connections are served at once: the process's descriptor limit (raised to its hard
/// limit first, as the soft one is often 1024) less [`RESERVED_DESCRIPTORS`].
pub fn connection_limit() -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    // `None` is no limit.
    let limit = getrlimit(Resource::Nofile);
    let (soft, hard) = (
        limit.current.unwrap_or(u64::MAX),
        limit.maximum.unwrap_or(u64::MAX),
    );
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    let soft = if soft < hard && setrlimit(Resource::Nofile, raised).is_ok() {
        hard
    } else {
        soft
    };
    let usable = soft.saturating_sub(RESERVED_DESCRIPTORS).max(16);
    usize::try_from(usable).unwrap_or(usize::MAX)
}

/// How a connection is admitted once accepted, by what its listener knows of the peer.
pub trait Admission {
    /// Whether every peer of this listener waits for a slot, so a slot is taken before
    /// accepting (the rest wait in the listen backlog, holding no descriptor).
    const WAITS_FIRST: bool;
    /// True: it waits for a connection slot. False (a peer that proved nothing where others
    /// can): it is served only within [`STRANGERS_SHARE`] of the slots and closed at once when
    /// that is used up, so that strangers holding connections idle never keep the fleet's
    /// members out (issue 28).
    fn waits_for_a_slot(&self) -> bool;
}

/// Plain TCP: nobody proves anything, and everybody waits for a slot, as before.
impl Admission for std::net::SocketAddr {
    const WAITS_FIRST: bool = true;
    fn waits_for_a_slot(&self) -> bool {
        true
    }
}

/// The part of the connection slots that peers which proved nothing may hold: a half.
pub const STRANGERS_SHARE: usize = 2;

/// Serves every connection `listener` accepts with the service `serve_with` makes for it (from
/// the connection's address), under the limits above, until `shutdown` completes; then lets
/// requests in flight finish (idle connections are closed at once).
pub async fn serve<L, S, F>(
    mut listener: L,
    mut serve_with: F,
    shutdown: impl Future<Output = ()> + Send,
) where
    L: Listener,
    L::Addr: Admission,
    F: FnMut(&L::Addr) -> S,
    S: tower::Service<Request, Response = Response, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let limit = connection_limit();
    let slots = Arc::new(Semaphore::new(limit));
    let strangers = Arc::new(Semaphore::new((limit / STRANGERS_SHARE).max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_header_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADERS)
        .keep_alive(true);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut warned_full = false;
    let mut warned_strangers = false;
    loop {
        // A slot first, for a listener whose peers all wait for one (plain TCP): the rest wait
        // in the listen backlog, holding no descriptor.
        let mut slot = None;
        if L::Addr::WAITS_FIRST {
            slot = Some(tokio::select! {
                slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
                () = &mut shutdown => break,
            });
        }
        let (io, address) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let slot = match slot {
            Some(slot) => (slot, None),
            None if address.waits_for_a_slot() => tokio::select! {
                slot = slots.clone().acquire_owned() => (slot.expect("the semaphore is never closed"), None),
                () = &mut shutdown => break,
            },
            None => match (
                strangers.clone().try_acquire_owned(),
                slots.clone().try_acquire_owned(),
            ) {
                (Ok(stranger), Ok(slot)) => (slot, Some(stranger)),
                _ => {
                    if !warned_strangers {
                        warned_strangers = true;
                        tracing::warn!(
                            share = limit / STRANGERS_SHARE,
                            "connections without a fleet certificate fill their share of the connection slots; more are closed at once"
                        );
                    }
                    drop(io);
                    continue;
                }
            },
        };
        if slots.available_permits() == 0 && !warned_full {
            warned_full = true;
            tracing::warn!(
                limit,
                "serving as many connections as the descriptor limit allows; new ones wait until others close"
            );
        }
        let service = serve_with(&address)
            .map_request(|request: Request<Incoming>| request.map(axum::body::Body::new));
        let connection = http.serve_connection(
            TokioIo::new(Lingering::new(io)),
            TowerToHyperService::new(service),
        );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that went away or was timed out: nothing to report above debug.
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// How long, and how much, a closing connection is read out (see [`Lingering`]).
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 4 << 20;

/// A connection that lingers on close: once the answer is written and the sending side shut,
/// what the client still sends is read and dropped until it closes too, for at most
/// [`LINGER_TIME`] and [`LINGER_BYTES`]. Without it, closing a socket with unread data (the
/// rest of a body refused `413` from its `Content-Length`) makes the kernel send a reset, which
/// can destroy the answer before the client reads it.
pub struct Lingering<T> {
    inner: T,
    linger: Option<(Pin<Box<tokio::time::Sleep>>, usize)>,
}

impl<T> Lingering<T> {
    pub fn new(inner: T) -> Self {
        Lingering {
            inner,
            linger: None,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Lingering<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Lingering<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.linger.is_none() {
            ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
            this.linger = Some((Box::pin(tokio::time::sleep(LINGER_TIME)), 0));
        }
        let (deadline, drained) = this.linger.as_mut().expect("set above");
        let mut scratch = [0u8; 8192];
        loop {
            if deadline.as_mut().poll(cx).is_ready() || *drained >= LINGER_BYTES {
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => *drained += buf.filled().len(),
                // The client is gone: nothing left to protect.
                Poll::Ready(Err(_)) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
