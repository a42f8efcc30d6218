//! The load generator's other requests, through hyper on one keep-alive connection: the
//! timed `GET /v1/fleet` reads, and with mTLS the enrolment's token and registration calls.

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;

use super::dial::Dialer;

/// A hyper connection to the controller, without a client certificate.
pub struct OperatorClient {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: String,
}

impl OperatorClient {
    pub async fn connect(dialer: &Dialer) -> anyhow::Result<OperatorClient> {
        let stream = dialer.anonymous().await?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(OperatorClient {
            sender,
            host: dialer.host.clone(),
        })
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        authorization: Option<&str>,
        body: Bytes,
    ) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
        self.sender.ready().await?;
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.host.as_str());
        if let Some(authorization) = authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        if !body.is_empty() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        Ok(self
            .sender
            .send_request(request.body(Full::new(body))?)
            .await?)
    }

    /// A request whose answer is kept whole: its status and body.
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        authorization: Option<&str>,
        body: Bytes,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let response = self.send(method, path, authorization, body).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    /// A GET whose answer is read to its last byte and counted, not kept: what a timed fleet
    /// read measures (as `curl -o /dev/null` would), apart from what a client then does
    /// with it.
    pub async fn get_timed(
        &mut self,
        path: &str,
        authorization: Option<&str>,
    ) -> anyhow::Result<(StatusCode, usize, Duration)> {
        let sent = Instant::now();
        let response = self
            .send(Method::GET, path, authorization, Bytes::new())
            .await?;
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
}
