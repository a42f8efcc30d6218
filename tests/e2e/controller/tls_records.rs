//! The TLS connection of the controller's and the agent's listener (`tls_server`, on rustls's
//! unbuffered API) at its edges, driven by a rustls client over a real socket: bodies of many
//! records, records that arrive a few bytes at a time, a key update, TLS 1.2, close_notify, a
//! record tampered with, and a stranger's certificate. The server is `tls_server::TlsListener`
//! under `http_serve::serve`, as the controller runs it (`support::serve_tls`), with a route
//! that echoes the body.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::support::{install_crypto_provider, read_http_answer as read_answer};

/// A CA, and a certificate with its key (PEM) signed by it for `name`.
struct Ca {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new() -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    fn sign(&self, name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// Serves `POST /echo` (the body back) and `GET /` over TLS with a certificate of `ca`,
/// client certificates of `ca` optional; returns the port.
fn serve(ca: &Ca) -> u16 {
    let (cert, key) = ca.sign("127.0.0.1");
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "hello" }))
        .route(
            "/echo",
            axum::routing::post(|body: axum::body::Bytes| async move { body }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(4 << 20));
    crate::support::serve_tls(&cert, &key, &ca.pem, app)
}

/// A client trusting `ca`, with `identity` (certificate and key PEM) when given, speaking the
/// given TLS versions.
fn client(
    ca: &Ca,
    identity: Option<(String, String)>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_protocol_versions(versions)
        .with_root_certificates(roots);
    Arc::new(match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    })
}

type Stream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn connect(port: u16, config: Arc<rustls::ClientConfig>) -> Stream {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    tcp.set_nodelay(true).unwrap();
    let name = "127.0.0.1".try_into().unwrap();
    rustls::StreamOwned::new(rustls::ClientConnection::new(config, name).unwrap(), tcp)
}

/// The request `POST /echo` with `body`.
fn echo_request(body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST /echo HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// The records the client has queued, taken out to be sent by hand.
fn records_of(stream: &mut Stream) -> Vec<u8> {
    let mut records = Vec::new();
    while stream.conn.wants_write() {
        stream.conn.write_tls(&mut records).unwrap();
    }
    records
}

/// Bytes that do not repeat within a record, so a record misplaced or dropped shows.
fn body_of(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn bodies_of_many_records_cross_both_ways_intact() {
    let ca = Ca::new();
    let port = serve(&ca);
    let mut stream = connect(port, client(&ca, None, rustls::DEFAULT_VERSIONS));
    // Several requests on one connection: a small one, one of 19 full records, one of 3 MiB
    // (more than the server reads or encrypts at once).
    for len in [10, 300 * 1024, 3 << 20] {
        let body = body_of(len);
        stream.write_all(&echo_request(&body)).unwrap();
        let (status, answer) = read_answer(&mut stream);
        assert_eq!(status, 200, "for a body of {len} bytes");
        assert!(answer == body, "the body of {len} bytes came back changed");
    }
}

#[test]
fn records_that_arrive_a_few_bytes_at_a_time_are_put_together() {
    let ca = Ca::new();
    let port = serve(&ca);
    let mut stream = connect(port, client(&ca, None, rustls::DEFAULT_VERSIONS));
    stream.write_all(&echo_request(b"first")).unwrap();
    assert_eq!(read_answer(&mut stream), (200, b"first".to_vec()));
    // The next request's records, sent 7 bytes per TCP segment: the server reads a record in
    // part many times over.
    let body = body_of(40 * 1024);
    stream
        .conn
        .writer()
        .write_all(&echo_request(&body))
        .unwrap();
    let records = records_of(&mut stream);
    for piece in records.chunks(7) {
        stream.sock.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_micros(50));
    }
    let (status, answer) = read_answer(&mut stream);
    assert_eq!(status, 200);
    assert!(answer == body, "the body sent in pieces came back changed");
}

#[test]
fn a_key_update_of_the_client_is_followed() {
    let ca = Ca::new();
    let port = serve(&ca);
    let mut stream = connect(port, client(&ca, None, &[&rustls::version::TLS13]));
    stream.write_all(&echo_request(b"before")).unwrap();
    assert_eq!(read_answer(&mut stream), (200, b"before".to_vec()));
    // The client's new keys, and a request for the server to update its own (RFC 8446, 4.6.3):
    // the server's answer must come under its new keys, which the client checks.
    stream.conn.refresh_traffic_keys().unwrap();
    for round in 0..3 {
        let body = format!("after {round}");
        stream.write_all(&echo_request(body.as_bytes())).unwrap();
        assert_eq!(read_answer(&mut stream), (200, body.into_bytes()));
    }
}

#[test]
fn a_tls12_client_is_served() {
    let ca = Ca::new();
    let port = serve(&ca);
    let mut stream = connect(port, client(&ca, None, &[&rustls::version::TLS12]));
    let body = body_of(50 * 1024);
    stream.write_all(&echo_request(&body)).unwrap();
    let (status, answer) = read_answer(&mut stream);
    assert_eq!(status, 200);
    assert!(answer == body);
    assert_eq!(
        stream.conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
}

#[test]
fn close_notify_of_the_client_is_answered_with_the_servers() {
    let ca = Ca::new();
    let port = serve(&ca);
    let mut stream = connect(port, client(&ca, None, rustls::DEFAULT_VERSIONS));
    stream.write_all(&echo_request(b"one")).unwrap();
    assert_eq!(read_answer(&mut stream), (200, b"one".to_vec()));
    stream.conn.send_close_notify();
    stream.flush().unwrap();
    // A clean end: the server's close_notify, not a truncated stream (rustls reports that as
    // an `UnexpectedEof` error).
    let mut rest = Vec::new();
    let read = stream.read_to_end(&mut rest);
    assert!(read.is_ok(), "the server did not close cleanly: {read:?}");
    assert!(rest.is_empty());
}

#[test]
fn a_tampered_record_ends_its_connection_with_an_alert_and_no_other() {
    let ca = Ca::new();
    let port = serve(&ca);
    let mut other = connect(port, client(&ca, None, rustls::DEFAULT_VERSIONS));
    other.write_all(&echo_request(b"other")).unwrap();
    assert_eq!(read_answer(&mut other), (200, b"other".to_vec()));

    let mut stream = connect(port, client(&ca, None, rustls::DEFAULT_VERSIONS));
    stream.write_all(&echo_request(b"fine")).unwrap();
    assert_eq!(read_answer(&mut stream), (200, b"fine".to_vec()));
    stream
        .conn
        .writer()
        .write_all(&echo_request(b"tampered"))
        .unwrap();
    let mut records = records_of(&mut stream);
    // A bit of the ciphertext flipped, past the record's header.
    records[10] ^= 0x01;
    stream.sock.write_all(&records).unwrap();
    let mut rest = Vec::new();
    let error = stream.read_to_end(&mut rest).unwrap_err();
    assert!(
        error.to_string().contains("BadRecordMac"),
        "the client was not told of the bad record: {error}"
    );

    other.write_all(&echo_request(b"still")).unwrap();
    assert_eq!(read_answer(&mut other), (200, b"still".to_vec()));
}

#[test]
fn a_strangers_certificate_is_refused_with_an_alert() {
    let ca = Ca::new();
    let port = serve(&ca);
    let stranger = Ca::new();
    let mut stream = connect(
        port,
        client(&ca, Some(stranger.sign("n1")), rustls::DEFAULT_VERSIONS),
    );
    let error = stream
        .write_all(&echo_request(b"hello"))
        .and_then(|()| stream.read(&mut [0; 64]))
        .unwrap_err();
    assert!(
        error.to_string().contains("received fatal alert"),
        "the client was not told why: {error}"
    );
    // A known certificate is served on the same listener.
    let mut stream = connect(
        port,
        client(&ca, Some(ca.sign("n1")), rustls::DEFAULT_VERSIONS),
    );
    stream.write_all(&echo_request(b"known")).unwrap();
    assert_eq!(read_answer(&mut stream), (200, b"known".to_vec()));
}
