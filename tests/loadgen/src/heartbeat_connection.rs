//! A keep-alive connection that sends heartbeats as prebuilt HTTP/1.1 requests and reads the
//! answers with `httparse`: the measured path of the load generator does no more than a
//! client must, so the controller, not the tool, is what is measured (docs/performance.md).

use anyhow::{anyhow, bail};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::bodies::RAM_USED_MIN;

/// Heartbeats over any stream: plain TCP, or TLS presenting one node's certificate.
pub struct HeartbeatConnection<S> {
    stream: S,
    /// Everything of a request before the `Content-Length` value.
    head: Vec<u8>,
    request: Vec<u8>,
    received: Vec<u8>,
    /// Heartbeats sent, for `--changing-figures`.
    sent: u64,
    /// The body of the last answer that was not `200`.
    pub refusal: String,
}

impl<S: AsyncRead + AsyncWrite + Unpin> HeartbeatConnection<S> {
    /// Heartbeats on `stream`, naming `host` (`host:port`) in their `Host` header.
    pub fn new(stream: S, host: &str) -> HeartbeatConnection<S> {
        let head = format!(
            "POST /v1/nodes/heartbeat HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: "
        )
        .into_bytes();
        HeartbeatConnection {
            stream,
            head,
            request: Vec::with_capacity(4096),
            received: Vec::with_capacity(4096),
            sent: 0,
            refusal: String::new(),
        }
    }

    /// Sends one heartbeat, with a new `ram_used_mb` written at `ram_used_at` when given, and
    /// returns the answer's status (the body of a refusal is kept in `refusal`).
    pub async fn post(&mut self, body: &[u8], ram_used_at: Option<usize>) -> anyhow::Result<u16> {
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
        // TLS buffers what is written until flushed; plain TCP's flush does nothing.
        self.stream.flush().await?;
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

    /// Closes the connection as a client should (TLS: `close_notify`, then the TCP FIN).
    pub async fn close(mut self) {
        // Err: the controller has closed it already; there is nothing left to close.
        let _ = self.stream.shutdown().await;
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
