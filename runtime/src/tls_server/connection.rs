//! One server-side TLS connection over TCP, on rustls's unbuffered API.
//!
//! tokio-rustls keeps a receive buffer of 4 KiB in each connection, where every record lands
//! and is decrypted. With thousands of kept-alive connections a request's record lands in a
//! buffer that has left the cache since the connection's last request, and that buffer was the
//! largest single part of what mTLS adds to a heartbeat (docs/performance.md, "What mTLS costs
//! in memory, counted"). Here the records of every connection are read into one buffer per
//! thread, decrypted there, and only the plaintext is copied on, into the reader's (hyper's)
//! buffer. A connection holds bytes of its own only while a record has arrived in part, its
//! plaintext overflows the reader's buffer, or the socket has not taken an answer yet.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::server::ServerConnectionData;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncodeTlsData, EncryptError, UnbufferedStatus,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Ciphertext read from a socket at once into the thread's buffer: several full records
/// (16 KiB of plaintext and 256 bytes of overhead at most), beside a partial one carried over.
const READ_AT_ONCE: usize = 64 * 1024;
/// The largest record TLS allows on the wire (RFC 8446, 5.2: 2^14 + 256, and its header).
const MAX_RECORD: usize = 16 * 1024 + 256 + 5;
/// Plaintext encrypted per write: four full records.
const WRITE_AT_ONCE: usize = 64 * 1024;
/// A handshake's received bytes: rustls takes handshake messages of up to 64 KiB.
const MAX_HANDSHAKE_BYTES: usize = 0xffff + MAX_RECORD;

thread_local! {
    /// The thread's buffers: ciphertext read and decrypted in place, and ciphertext encrypted.
    static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

fn invalid(error: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// A server's TLS connection whose handshake is done: `AsyncRead` gives the client's plaintext,
/// `AsyncWrite` sends encrypted answers.
pub struct ServerTls {
    tcp: TcpStream,
    tls: UnbufferedServerConnection,
    /// Received bytes not processed yet: a record that arrived in part.
    partial: Vec<u8>,
    /// Plaintext the reader's buffer had no room for, from `plain_at` on.
    plain: Vec<u8>,
    plain_at: usize,
    /// Encrypted bytes the socket has not taken yet, from `sent` on.
    unsent: Vec<u8>,
    sent: usize,
    /// The client closed its side (close_notify, or the end of its stream).
    read_closed: bool,
    /// close_notify is queued, or a record failed: nothing more is encrypted.
    write_closed: bool,
}

impl ServerTls {
    /// The certificates the client presented and rustls verified, leaf first.
    pub fn peer_certificates(&self) -> Option<&[rustls::pki_types::CertificateDer<'static>]> {
        self.tls.peer_certificates()
    }

    /// Sends what the socket has not taken yet.
    fn poll_send_unsent(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.unsent.len() {
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, &self.unsent[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        // Given back: an answer that waited for the socket is rare.
        self.unsent = Vec::new();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Moves plaintext waiting in `plain` into `buf`.
    fn take_plain(&mut self, buf: &mut ReadBuf<'_>) {
        let n = buf.remaining().min(self.plain.len() - self.plain_at);
        buf.put_slice(&self.plain[self.plain_at..self.plain_at + n]);
        self.plain_at += n;
        if self.plain_at == self.plain.len() {
            self.plain = Vec::new();
            self.plain_at = 0;
        }
    }

    /// Processes the records in `data`: their plaintext goes to `buf`, beyond its room to
    /// `plain`; records rustls answers (a key update's, session tickets) go to `unsent`.
    /// Returns how many bytes of `data` were processed; the rest is a record in part.
    fn process(&mut self, data: &mut [u8], buf: &mut ReadBuf<'_>) -> io::Result<usize> {
        let mut done = 0;
        loop {
            let UnbufferedStatus { mut discard, state } =
                self.tls.process_tls_records(&mut data[done..]);
            let state = match state {
                Ok(state) => state,
                Err(error) => {
                    self.queue_alert(&mut data[done + discard..]);
                    return Err(invalid(error));
                }
            };
            match state {
                ConnectionState::ReadTraffic(mut traffic) => {
                    while let Some(record) = traffic.next_record() {
                        let record = record.map_err(invalid)?;
                        discard += record.discard;
                        let n = buf.remaining().min(record.payload.len());
                        buf.put_slice(&record.payload[..n]);
                        self.plain.extend_from_slice(&record.payload[n..]);
                    }
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    encode_into(&mut encode, &mut self.unsent)?
                }
                ConnectionState::TransmitTlsData(transmit) => transmit.done(),
                ConnectionState::PeerClosed | ConnectionState::Closed => {
                    self.read_closed = true;
                    return Ok(done + discard);
                }
                // Nothing more to process: what follows is a record in part, or nothing.
                ConnectionState::WriteTraffic(_) | ConnectionState::BlockedHandshake => {
                    return Ok(done + discard)
                }
                // 0-RTT data is not enabled (`max_early_data_size` 0), and no other state
                // follows a finished handshake.
                _ => {
                    return Err(io::Error::other(
                        "an unexpected TLS state after the handshake",
                    ))
                }
            }
            done += discard;
        }
    }
}

impl ServerTls {
    /// After an error, moves the alert rustls queued for the client (if any) to `unsent`.
    fn queue_alert(&mut self, rest: &mut [u8]) {
        queue_alert(&mut self.tls, rest, &mut self.unsent);
    }

    /// Runs `with` on the state rustls is in when nothing new has arrived. The bytes of a
    /// record in part go in as they are: rustls may hold places in them (a handshake message
    /// across records), and what it has done with goes from their front.
    fn settled<T>(
        &mut self,
        with: impl FnOnce(
            ConnectionState<'_, '_, ServerConnectionData>,
            &mut Vec<u8>,
            &mut Vec<u8>,
        ) -> io::Result<Option<T>>,
    ) -> io::Result<Option<T>> {
        let UnbufferedStatus { discard, state } = self.tls.process_tls_records(&mut self.partial);
        let outcome = with(state.map_err(invalid)?, &mut self.unsent, &mut self.plain);
        self.partial.drain(..discard);
        outcome
    }
}

/// After an error, appends the alert rustls queued for the client (if any) to `out`. `rest` is
/// what the failed call had not processed: rustls may hold places in it, so it is handed back
/// as it is. Only the one record is taken: rustls queues a single fatal alert, and a second
/// call would process `rest` again (a record that failed to decrypt would fail, and alert,
/// again).
fn queue_alert(tls: &mut UnbufferedServerConnection, rest: &mut [u8], out: &mut Vec<u8>) {
    let UnbufferedStatus { discard: _, state } = tls.process_tls_records(rest);
    if let Ok(ConnectionState::EncodeTlsData(mut encode)) = state {
        let _ = encode_into(&mut encode, out);
    }
}

/// Has `write` put its bytes into `out` from `start` on, and returns how many it put. `out`
/// grows to the size rustls asks for (`too_small`) when it is short, and is never shrunk: the
/// thread's buffer keeps its length from one write to the next.
fn write_grown<E>(
    out: &mut Vec<u8>,
    start: usize,
    mut write: impl FnMut(&mut [u8]) -> Result<usize, E>,
    too_small: impl Fn(&E) -> Option<usize>,
) -> io::Result<usize>
where
    E: std::error::Error + Send + Sync + 'static,
{
    if out.len() < start + 4096 {
        out.resize(start + 4096, 0);
    }
    loop {
        match write(&mut out[start..]) {
            Ok(n) => return Ok(n),
            Err(error) => match too_small(&error) {
                Some(required) => out.resize(start + required, 0),
                None => return Err(io::Error::other(error)),
            },
        }
    }
}

fn encrypt_too_small(error: &EncryptError) -> Option<usize> {
    match error {
        EncryptError::InsufficientSize(size) => Some(size.required_size),
        _ => None,
    }
}

/// Appends the handshake record of `encode` to `out`.
fn encode_into(
    encode: &mut EncodeTlsData<'_, ServerConnectionData>,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    let start = out.len();
    let n = write_grown(
        out,
        start,
        |buf| encode.encode(buf),
        |error| match error {
            EncodeError::InsufficientSize(size) => Some(size.required_size),
            _ => None,
        },
    )?;
    out.truncate(start + n);
    Ok(())
}

impl AsyncRead for ServerTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.plain_at < this.plain.len() {
            this.take_plain(buf);
            return Poll::Ready(Ok(()));
        }
        // A record rustls answered while reading (a key update's) goes out without waiting
        // for the next write; if the socket is full, this task is woken when it drains.
        if this.sent < this.unsent.len() {
            if let Poll::Ready(Err(error)) = this.poll_send_unsent(cx) {
                return Poll::Ready(Err(error));
            }
        }
        let filled_before = buf.filled().len();
        while !this.read_closed && buf.filled().len() == filled_before && this.plain.is_empty() {
            let step = SCRATCH.with_borrow_mut(|(scratch, _)| {
                // Room for a record in part (what the handshake left can be longer) and a read.
                let carried = this.partial.len();
                let room = carried.max(MAX_RECORD) + READ_AT_ONCE;
                if scratch.len() < room {
                    scratch.resize(room, 0);
                }
                scratch[..carried].copy_from_slice(&this.partial);
                let mut read = ReadBuf::new(&mut scratch[carried..carried + READ_AT_ONCE]);
                match Pin::new(&mut this.tcp).poll_read(cx, &mut read) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                    Poll::Ready(Ok(())) => {}
                }
                let arrived = read.filled().len();
                if arrived == 0 {
                    this.read_closed = true;
                    if carried > 0 {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the client closed its connection within a TLS record",
                        )));
                    }
                    return Poll::Ready(Ok(()));
                }
                let data = &mut scratch[..carried + arrived];
                let done = match this.process(data, buf) {
                    Ok(done) => done,
                    Err(error) => {
                        // rustls is not called again: both sides are closed, and what it
                        // holds places in is gone. The client is told why (`process` queued
                        // the alert), when the socket takes it at once.
                        this.read_closed = true;
                        this.write_closed = true;
                        this.partial = Vec::new();
                        let _ = this.poll_send_unsent(cx);
                        return Poll::Ready(Err(error));
                    }
                };
                this.partial.clear();
                if done < data.len() {
                    this.partial.extend_from_slice(&data[done..]);
                }
                if this.partial.is_empty() {
                    this.partial = Vec::new();
                }
                Poll::Ready(Ok(()))
            });
            match step {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            }
            if this.sent < this.unsent.len() {
                if let Poll::Ready(Err(error)) = this.poll_send_unsent(cx) {
                    return Poll::Ready(Err(error));
                }
            }
        }
        if buf.filled().len() == filled_before && !this.plain.is_empty() {
            this.take_plain(buf);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for ServerTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_send_unsent(cx))?;
        if this.write_closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let data = &data[..data.len().min(WRITE_AT_ONCE)];
        SCRATCH.with_borrow_mut(|(_, out)| {
            let mut peer_closed = false;
            let written = loop {
                let encrypted = this.settled(|state, unsent, plain| match state {
                    ConnectionState::WriteTraffic(mut traffic) => {
                        write_grown(out, 0, |buf| traffic.encrypt(data, buf), encrypt_too_small)
                            .map(Some)
                    }
                    // Records rustls queued before this one (a key update's) go first.
                    ConnectionState::EncodeTlsData(mut encode) => {
                        encode_into(&mut encode, unsent).map(|()| None)
                    }
                    ConnectionState::TransmitTlsData(transmit) => {
                        transmit.done();
                        Ok(None)
                    }
                    ConnectionState::ReadTraffic(mut traffic) => {
                        while let Some(record) = traffic.next_record() {
                            plain.extend_from_slice(record.map_err(invalid)?.payload);
                        }
                        Ok(None)
                    }
                    ConnectionState::PeerClosed => {
                        peer_closed = true;
                        Ok(None)
                    }
                    _ => Err(io::ErrorKind::BrokenPipe.into()),
                })?;
                if let Some(n) = encrypted {
                    break n;
                }
            };
            this.read_closed |= peer_closed;
            let mut from = 0;
            // Straight from the thread's buffer when nothing is queued before it (a key
            // update's record would be); what the socket does not take waits in `unsent`.
            if this.unsent.is_empty() {
                while from < written {
                    match Pin::new(&mut this.tcp).poll_write(cx, &out[from..written]) {
                        Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                        Poll::Ready(Ok(n)) => from += n,
                        Poll::Ready(Err(error)) => return Err(error),
                        Poll::Pending => break,
                    }
                }
            }
            this.unsent.extend_from_slice(&out[from..written]);
            Ok(())
        })?;
        if let Poll::Ready(Err(error)) = this.poll_send_unsent(cx) {
            return Poll::Ready(Err(error));
        }
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send_unsent(cx))?;
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.write_closed {
            ready!(this.poll_send_unsent(cx))?;
            this.write_closed = true;
            // close_notify when the connection can still send (best effort otherwise: the
            // socket closes all the same).
            let notify = this.settled(|state, _, _| {
                let ConnectionState::WriteTraffic(mut traffic) = state else {
                    return Ok(None);
                };
                let mut out = Vec::new();
                let n = write_grown(
                    &mut out,
                    0,
                    |buf| traffic.queue_close_notify(buf),
                    encrypt_too_small,
                )?;
                out.truncate(n);
                Ok(Some(out))
            });
            if let Ok(Some(notify)) = notify {
                this.unsent = notify;
            }
        }
        ready!(this.poll_send_unsent(cx))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}

/// Why a handshake ended without a connection.
#[derive(Debug)]
pub enum HandshakeEnd {
    /// It failed: the client was sent the alert when there was one.
    Failed(io::Error),
    /// `give_up` resolved while the client owed the next bytes.
    GaveUp,
}

/// Runs the server's side of a handshake on `tcp`. While waiting for the client, `give_up`
/// ends it when the client owes the next bytes (`owes_bytes` says it does: nothing of its
/// unread in the socket); otherwise `declined` is called and `give_up` asked again.
pub async fn accept<G, F>(
    tcp: TcpStream,
    config: Arc<rustls::ServerConfig>,
    mut give_up: G,
    owes_bytes: impl Fn(&TcpStream) -> bool,
    mut declined: impl FnMut(),
) -> Result<ServerTls, HandshakeEnd>
where
    G: FnMut() -> F,
    F: Future<Output = ()>,
{
    let mut tcp = tcp;
    let mut tls = UnbufferedServerConnection::new(config)
        .map_err(|error| HandshakeEnd::Failed(invalid(error)))?;
    let mut incoming = vec![0u8; 4096];
    let mut used = 0;
    let mut outgoing = Vec::new();
    let mut plain = Vec::new();
    loop {
        let UnbufferedStatus { discard, state } = tls.process_tls_records(&mut incoming[..used]);
        let mut need_bytes = false;
        match state {
            Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                encode_into(&mut encode, &mut outgoing).map_err(HandshakeEnd::Failed)?
            }
            Ok(ConnectionState::TransmitTlsData(transmit)) => {
                tokio::io::AsyncWriteExt::write_all(&mut tcp, &outgoing)
                    .await
                    .map_err(HandshakeEnd::Failed)?;
                outgoing.clear();
                transmit.done();
            }
            Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                // The client's first request, in the same flight as its `Finished`.
                while let Some(record) = traffic.next_record() {
                    let record = record.map_err(|error| HandshakeEnd::Failed(invalid(error)))?;
                    plain.extend_from_slice(record.payload);
                }
            }
            // In TLS 1.3 the server may send once its own flight is out; the handshake is done
            // when the client's certificate and `Finished` are read (checked below).
            Ok(ConnectionState::WriteTraffic(_) | ConnectionState::BlockedHandshake) => {
                need_bytes = true
            }
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                return Err(closed_in_handshake())
            }
            Ok(_) => {
                return Err(HandshakeEnd::Failed(io::Error::other(
                    "an unexpected TLS state in the handshake",
                )))
            }
            Err(error) => {
                // The client is told why, as far as the socket takes it at once.
                queue_alert(&mut tls, &mut incoming[discard..used], &mut outgoing);
                let mut sent = 0;
                while sent < outgoing.len() {
                    match tcp.try_write(&outgoing[sent..]) {
                        Ok(n) if n > 0 => sent += n,
                        _ => break,
                    }
                }
                return Err(HandshakeEnd::Failed(invalid(error)));
            }
        }
        incoming.copy_within(discard..used, 0);
        used -= discard;
        if need_bytes && !tls.is_handshaking() {
            incoming.truncate(used);
            return Ok(ServerTls {
                tcp,
                tls,
                partial: incoming,
                plain,
                plain_at: 0,
                unsent: Vec::new(),
                sent: 0,
                read_closed: false,
                write_closed: false,
            });
        }
        if !need_bytes {
            continue;
        }
        if used == incoming.len() {
            if used >= MAX_HANDSHAKE_BYTES {
                return Err(HandshakeEnd::Failed(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a handshake message larger than 64 KiB",
                )));
            }
            incoming.resize((used + 4096).min(MAX_HANDSHAKE_BYTES), 0);
        }
        let n = loop {
            match tcp.try_read(&mut incoming[used..]) {
                Ok(n) => break n,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Err(HandshakeEnd::Failed(error)),
            }
            tokio::select! {
                ready = tcp.readable() => ready.map_err(HandshakeEnd::Failed)?,
                () = give_up() => {
                    if owes_bytes(&tcp) {
                        return Err(HandshakeEnd::GaveUp);
                    }
                    // The client's bytes are here, unread: the server owes the next step.
                    declined();
                }
            }
        };
        if n == 0 {
            return Err(closed_in_handshake());
        }
        used += n;
    }
}

fn closed_in_handshake() -> HandshakeEnd {
    HandshakeEnd::Failed(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the client closed the connection in the handshake",
    ))
}
