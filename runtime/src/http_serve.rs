//! Serving HTTP/1.1 connections for the controller and the agent's local API with the limits a
//! hostile or broken client meets (docs/reliability/hostile-input.md). `axum::serve` sets none:
//! it runs hyper without a timer, so a client that opens a connection and says nothing, or
//! dribbles its request head a byte at a time, holds a connection and a descriptor forever.
//! Here hyper gets a timer and:
//!
//! - [`HEADER_READ_TIMEOUT`]: a request head (and, between requests, the next one) must arrive
//!   within it, or the connection is closed: idle keep-alive connections go the same way;
//! - [`MAX_HEADER_BYTES`] and [`MAX_HEADERS`]: a larger head is answered `431` and closed;
//! - at most [`connection_limit`] connections are served at once, so the store and the calls
//!   to agents keep their descriptors; a newcomer at the cap sheds the connection idle the
//!   longest ([`Tracked`]: first those that never sent a request), so idle connections cannot
//!   keep a node's fresh heartbeat out (issue 28) while a node's own keep-alive connection is
//!   shed only after every silent one;
//! - [`Lingering`]: a connection closed with a request body unread (an early `413`) is read
//!   out for a moment before it is dropped, so the client gets the answer rather than a reset.
//!
//! The body's own deadline is the reader's (`crate::http::read_body_bytes`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
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
    /// True: it takes a connection slot, and at the cap the connection idle the longest is
    /// shed to free one ([`Tracked`]). False (a peer that proved nothing where others can): it
    /// is served only within [`STRANGERS_SHARE`] of the slots and closed at once when that is
    /// used up, so that strangers holding connections idle never keep the fleet's members out
    /// (issue 28).
    fn waits_for_a_slot(&self) -> bool;
}

/// Plain TCP: nobody proves anything; everybody takes a slot, shedding the longest idle
/// connection at the cap.
impl Admission for std::net::SocketAddr {
    fn waits_for_a_slot(&self) -> bool {
        true
    }
}

/// The part of the connection slots that peers which proved nothing may hold: a half.
pub const STRANGERS_SHARE: usize = 2;

/// How long a shed connection gets to close by itself (an answer still being written goes out
/// whole) before it is dropped: one dribbling its request head would otherwise stay open
/// until [`HEADER_READ_TIMEOUT`].
const SHED_GRACE: Duration = Duration::from_secs(1);

/// Shed connections still closing, out of [`RESERVED_DESCRIPTORS`]: a shed connection gives its
/// slot to the newcomer at once and holds one of these until it is closed, so that a newcomer
/// never waits for a slow close and the descriptors in use stay bounded.
const CLOSING: usize = 128;

/// [`Tracked::rank`] of a connection serving a request: never shed.
const BUSY: u64 = u64::MAX;
/// Set in [`Tracked::rank`] once the connection answered a request: it is shed only after every
/// connection that never sent one (a real node's keep-alive connection outranks a silent one).
const SERVED: u64 = 1 << 62;

/// A served connection as the accept loop sees it, to choose which to shed at the cap.
pub struct Tracked {
    /// [`BUSY`] while a request is in service; otherwise the tick of the loop's clock at which
    /// it went idle (accepted, or its last answer), with [`SERVED`] once it answered one. The
    /// lowest is shed first: the silent before the served, the longest idle first.
    rank: AtomicU64,
    /// A logical clock shared by all connections of the server: only the order matters, and a
    /// counter costs the hot path less than reading the time.
    clock: Arc<AtomicU64>,
    shed: Notify,
    /// Set once it is shed: it closes without lingering ([`Lingering`]), as no request of it
    /// is unread.
    shedding: AtomicBool,
    /// The [`CLOSING`] permit the accept loop gives a shed connection, held until it is closed.
    closing: parking_lot::Mutex<Option<OwnedSemaphorePermit>>,
}

impl Tracked {
    fn accepted(clock: &Arc<AtomicU64>) -> Arc<Tracked> {
        Arc::new(Tracked {
            rank: AtomicU64::new(clock.fetch_add(1, Ordering::Relaxed)),
            clock: clock.clone(),
            shed: Notify::new(),
            shedding: AtomicBool::new(false),
            closing: parking_lot::Mutex::new(None),
        })
    }

    fn request(&self) {
        self.rank.store(BUSY, Ordering::Relaxed);
    }

    fn answered(&self) {
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        self.rank.store(SERVED | tick, Ordering::Relaxed);
    }
}

/// Tells the connection idle the longest among `live` to close, handing it `closing` to hold
/// meanwhile (pruning those already closed); false when every one is serving a request.
fn shed_longest_idle(live: &mut Vec<Arc<Tracked>>, closing: OwnedSemaphorePermit) -> bool {
    // A connection's task holds the other reference while it runs.
    live.retain(|tracked| Arc::strong_count(tracked) > 1);
    loop {
        let victim = live
            .iter()
            .map(|tracked| (tracked.rank.load(Ordering::Relaxed), tracked))
            .filter(|(rank, _)| *rank != BUSY)
            .min_by_key(|(rank, _)| *rank);
        let Some((rank, tracked)) = victim else {
            return false;
        };
        // Marked busy, so not chosen twice while it closes; unless a request came meanwhile
        // (then another is chosen).
        if tracked
            .rank
            .compare_exchange(rank, BUSY, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            tracked.shedding.store(true, Ordering::Relaxed);
            *tracked.closing.lock() = Some(closing);
            tracked.shed.notify_one();
            tracing::debug!(
                ever_served = rank & SERVED != 0,
                "shed the longest idle connection for a new one"
            );
            return true;
        }
    }
}

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
    let closing = Arc::new(Semaphore::new(CLOSING));
    // Every connection's task holds a receiver (never polled): once all are dropped, every
    // connection ended.
    let (ended, alive) = tokio::sync::watch::channel(());
    // Set before every connection is told to close: then requests in flight finish, however
    // long they take.
    let stopping = Arc::new(AtomicBool::new(false));
    let clock = Arc::new(AtomicU64::new(0));
    let mut live: Vec<Arc<Tracked>> = Vec::new();
    // Closed connections are pruned from `live` when it doubles (amortised).
    let mut prune_at = 64;
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
        let (io, address) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let slot = if address.waits_for_a_slot() {
            match slots.clone().try_acquire_owned() {
                Ok(slot) => (slot, None),
                Err(_) => {
                    if !warned_full {
                        warned_full = true;
                        tracing::warn!(
                            limit,
                            "serving as many connections as the descriptor limit allows; the longest idle ones are closed for new ones"
                        );
                    }
                    // One accepted connection waits here at most: the rest wait in the listen
                    // backlog, holding no descriptor. The shed connection frees its slot at
                    // once; with every connection busy, this one waits for one to end.
                    let closing = tokio::select! {
                        permit = closing.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
                        () = &mut shutdown => break,
                    };
                    shed_longest_idle(&mut live, closing);
                    tokio::select! {
                        slot = slots.clone().acquire_owned() => (slot.expect("the semaphore is never closed"), None),
                        () = &mut shutdown => break,
                    }
                }
            }
        } else {
            match (
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
            }
        };
        let tracked = Tracked::accepted(&clock);
        if live.len() >= prune_at {
            live.retain(|tracked| Arc::strong_count(tracked) > 1);
            prune_at = (2 * live.len()).max(64);
        }
        live.push(tracked.clone());
        let (on_request, on_answer) = (tracked.clone(), tracked.clone());
        let service = serve_with(&address)
            .map_request(move |request: Request<Incoming>| {
                on_request.request();
                request.map(axum::body::Body::new)
            })
            .map_response(move |response| {
                on_answer.answered();
                response
            });
        let connection = http.serve_connection(
            TokioIo::new(Lingering::new(io, tracked.clone())),
            TowerToHyperService::new(service),
        );
        let (alive, stopping) = (alive.clone(), stopping.clone());
        tokio::spawn(async move {
            let mut slot = Some(slot);
            let mut connection = std::pin::pin!(connection);
            // One signal to wait for besides the connection (shed, or the server stopping):
            // the heartbeat's hot path polls it on every wake-up.
            let ended = tokio::select! {
                ended = connection.as_mut() => Some(ended),
                () = tracked.shed.notified() => {
                    // An idle connection closes at once; one serving a request finishes it.
                    connection.as_mut().graceful_shutdown();
                    if stopping.load(Ordering::Relaxed) {
                        Some(connection.as_mut().await)
                    } else {
                        // Its slot is the newcomer's; a permit of CLOSING is held instead.
                        let closing = tracked.closing.lock().take();
                        drop(slot.take());
                        let ended = tokio::time::timeout(SHED_GRACE, connection.as_mut()).await.ok();
                        drop(closing);
                        ended
                    }
                }
            };
            // A client that went away or was timed out: nothing to report above debug.
            if let Some(Err(error)) = ended {
                tracing::debug!(%error, "connection ended");
            }
            drop(alive);
            drop(slot);
        });
    }
    drop(listener);
    stopping.store(true, Ordering::Relaxed);
    for tracked in live.drain(..) {
        tracked.shed.notify_one();
    }
    drop(alive);
    ended.closed().await;
}

/// How long, and how much, a closing connection is read out (see [`Lingering`]).
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 4 << 20;

/// A connection that lingers on close: once the answer is written and the sending side shut,
/// what the client still sends is read and dropped until it closes too, for at most
/// [`LINGER_TIME`] and [`LINGER_BYTES`]. Without it, closing a socket with unread data (the
/// rest of a body refused `413` from its `Content-Length`) makes the kernel send a reset, which
/// can destroy the answer before the client reads it.
///
/// A connection shed at the cap ([`Tracked`]) closes without lingering: it has no request
/// unread, and its descriptor is wanted back.
pub struct Lingering<T> {
    inner: T,
    linger: Option<(Pin<Box<tokio::time::Sleep>>, usize)>,
    tracked: Arc<Tracked>,
}

impl<T> Lingering<T> {
    pub fn new(inner: T, tracked: Arc<Tracked>) -> Self {
        Lingering {
            inner,
            linger: None,
            tracked,
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
            if this.tracked.shedding.load(Ordering::Relaxed) {
                return Poll::Ready(Ok(()));
            }
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
