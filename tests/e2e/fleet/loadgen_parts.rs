//! The load generator's parts, each on its own (the `fleetwire-loadgen` crate, tests/loadgen):
//! its flags, the documents a simulated node sends, the dialer and the operator token, the
//! heartbeat connection, the open-files limit, and the per-node connections over real mTLS.
//! Here rather than as the crate's unit tests so that they run in the one end-to-end test
//! binary (CONTRIBUTING.md, "Where a new test goes").

mod args {
    use clap::Parser;

    use fleetwire_loadgen::args::{LoadgenArgs, Transport};

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: LoadgenArgs,
    }

    fn args(flags: &[&str]) -> LoadgenArgs {
        let mut argv = vec!["loadgen"];
        argv.extend_from_slice(flags);
        Cli::try_parse_from(argv).unwrap().args
    }

    #[test]
    fn https_implies_a_connection_per_node_and_needs_the_ca() {
        let plan = args(&["--url", "https://127.0.0.1:1", "--ca-file", "ca.pem"])
            .plan()
            .unwrap();
        assert_eq!(plan.transport, Transport::Mtls);
        assert!(plan.per_node);
        assert_eq!(plan.connections, 10_000);
        let error = args(&["--url", "https://127.0.0.1:1"]).plan().unwrap_err();
        assert!(error.to_string().contains("--ca-file"), "{error}");
    }

    #[test]
    fn plain_keeps_shared_connections_unless_asked() {
        let plan = args(&["--nodes", "10"]).plan().unwrap();
        assert_eq!((plan.transport, plan.per_node), (Transport::Plain, false));
        assert_eq!(plan.connections, 32);
        let plan = args(&[
            "--nodes",
            "10",
            "--connection-per-node",
            "--reconnect-storm",
        ])
        .plan()
        .unwrap();
        assert_eq!((plan.per_node, plan.connections), (true, 10));
    }

    #[test]
    fn a_storm_needs_a_connection_per_node() {
        let error = args(&["--reconnect-storm"]).plan().unwrap_err();
        assert!(
            error.to_string().contains("--connection-per-node"),
            "{error}"
        );
        let error = args(&["--ca-file", "ca.pem"]).plan().unwrap_err();
        assert!(error.to_string().contains("https:// URL only"), "{error}");
    }
}

mod bodies {
    #[test]
    fn simulated_heartbeats_are_valid_documents() {
        for vms in [0, 1, 3] {
            let body = fleetwire_loadgen::bodies::heartbeat_body(7, vms);
            let hb: fleetwire_types::NodeHeartbeat = fleetwire_types::read_strict(&body).unwrap();
            assert_eq!(hb.vms.len(), vms);
            assert_eq!(hb.wg_ip.0.to_string(), "127.0.0.8");
        }
    }

    #[test]
    fn every_simulated_node_has_an_address_of_its_own() {
        let addresses: std::collections::HashSet<String> = (0..70_000)
            .map(fleetwire_loadgen::bodies::address)
            .collect();
        assert_eq!(addresses.len(), 70_000);
        assert_eq!(fleetwire_loadgen::bodies::address(0), "127.0.0.1");
    }

    #[test]
    fn changing_figures_rewrite_five_digits_in_place() {
        let body = fleetwire_loadgen::bodies::heartbeat_body(1023, 1).to_vec();
        let at = fleetwire_loadgen::bodies::ram_used_at(&body).unwrap();
        let mut changed = body.clone();
        changed[at..at + 5].copy_from_slice(b"59999");
        let hb: fleetwire_types::NodeHeartbeat = fleetwire_types::read_strict(&changed).unwrap();
        assert_eq!(hb.ram_used_mb, 59_999);
        let before: fleetwire_types::NodeHeartbeat = fleetwire_types::read_strict(&body).unwrap();
        assert_eq!(before.ram_used_mb, 10_000 + 1023);
    }

    #[test]
    fn enrolment_documents_are_valid_and_name_the_node() {
        let token: fleetwire_types::CreateBootstrapTokenRequest =
            fleetwire_types::read_strict(&fleetwire_loadgen::bodies::token_request_body(42))
                .unwrap();
        assert_eq!(token.node_id.as_str(), "load-0000042");
        assert_eq!(token.ttl_s, Some(3600));

        let key = rcgen::KeyPair::generate().unwrap();
        let csr = fleetwire::agent::enroll::csr_pem(
            &key,
            "load-0000042",
            std::net::Ipv4Addr::LOCALHOST.into(),
        )
        .unwrap();
        let register: fleetwire_types::RegisterNodeRequest =
            fleetwire_types::read_strict(&fleetwire_loadgen::bodies::register_body(42, &csr))
                .unwrap();
        assert_eq!(register.node_id.as_str(), "load-0000042");
        assert_eq!(register.csr_pem.unwrap().as_str(), csr.as_str());
        assert!(register.smolvm_address.is_none());
        let heartbeat: fleetwire_types::NodeHeartbeat =
            fleetwire_types::read_strict(&fleetwire_loadgen::bodies::heartbeat_body(42, 1))
                .unwrap();
        assert_eq!(heartbeat.node_id, register.node_id);
    }
}

mod dial {
    use fleetwire_loadgen::dial::{Dialer, OperatorToken};

    const TOKEN: &str = "abcdefghijklmnopqrstuvwxyz0123456789._~-";

    #[test]
    fn an_operator_token_is_checked_and_never_shown() {
        let token = OperatorToken::parse(&format!("{TOKEN}\n"), "f").unwrap();
        assert_eq!(token.bearer(), format!("Bearer {TOKEN}"));
        assert_eq!(format!("{token:?}"), "OperatorToken(..)");
        for (text, says) in [
            (format!("{TOKEN},ops,admin"), "more than a token"),
            ("short".to_string(), "not an operator token"),
            (format!("{TOKEN}!"), "not an operator token"),
        ] {
            let error = OperatorToken::parse(&text, "tokens.txt")
                .unwrap_err()
                .to_string();
            assert!(
                error.starts_with("tokens.txt: ") && error.contains(says),
                "{error}"
            );
            assert!(!error.contains(TOKEN), "the error shows the token: {error}");
        }
    }

    #[test]
    fn urls_are_http_or_https_with_a_ca() {
        let plain = Dialer::new("http://127.0.0.1:9203", None).unwrap();
        assert_eq!(plain.host, "127.0.0.1:9203");
        let error = Dialer::new("ftp://127.0.0.1", None).err().unwrap();
        assert!(
            error.to_string().contains("only http:// and https://"),
            "{error}"
        );
        let error = Dialer::new("https://127.0.0.1", None).err().unwrap();
        assert!(error.to_string().contains("--ca-file"), "{error}");
        let error = Dialer::new("https://127.0.0.1", Some("/nonexistent/ca.pem".as_ref()))
            .err()
            .unwrap();
        assert!(
            format!("{error:#}").contains("/nonexistent/ca.pem"),
            "{error:#}"
        );
    }
}

mod heartbeat_connection {
    use fleetwire_loadgen::heartbeat_connection::HeartbeatConnection;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn heartbeats_go_over_any_stream_and_refusals_are_kept() {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let answers = tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut buf = vec![0; 64 * 1024];
            for answer in [
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
                "HTTP/1.1 403 Forbidden\r\nContent-Length: 4\r\n\r\nnope",
            ] {
                let n = server.read(&mut buf).await.unwrap();
                seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                server.write_all(answer.as_bytes()).await.unwrap();
            }
            seen
        });
        let mut connection = HeartbeatConnection::new(client, "controller:9203");
        assert_eq!(connection.post(b"{\"a\":1}", None).await.unwrap(), 200);
        assert_eq!(connection.post(b"{\"a\":1}", None).await.unwrap(), 403);
        assert_eq!(connection.refusal, "nope");
        let seen = answers.await.unwrap();
        assert!(
            seen[0].starts_with("POST /v1/nodes/heartbeat HTTP/1.1\r\nHost: controller:9203\r\n")
        );
        assert!(
            seen[0].ends_with("Content-Length: 7\r\n\r\n{\"a\":1}"),
            "{:?}",
            seen[0]
        );
    }
}

mod open_files {
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one_and_too_many_is_refused() {
        let hard = fleetwire_loadgen::open_files::raise_for(1).unwrap();
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(limit.current.unwrap_or(u64::MAX), hard);
        if hard < u64::MAX / 2 {
            let error = fleetwire_loadgen::open_files::raise_for(hard as usize).unwrap_err();
            assert!(error.to_string().contains("the hard limit is"), "{error}");
        }
    }
}

mod per_node {
    //! The per-node connections over real mTLS: a server that requires a certificate from the
    //! test CA and answers a heartbeat only when the body's node_id is the one the connection's
    //! certificate names, as the controller does (docs/security.md).

    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use fleetwire::tls_server::{certified_key, server_config, ClientCerts, ReloadableCert};
    use fleetwire_loadgen::bodies::{heartbeat_body, node_id};
    use fleetwire_loadgen::dial::Dialer;

    /// Full handshakes and heartbeats the test server saw; resumed handshakes apart.
    #[derive(Default)]
    struct Seen {
        full_handshakes: AtomicUsize,
        resumed: AtomicUsize,
        heartbeats: AtomicU64,
    }

    /// Serves one connection: every heartbeat answered 200 when it names the certificate's
    /// node, 403 when not.
    async fn serve(
        mut tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        seen: Arc<Seen>,
    ) {
        let (_, connection) = tls.get_ref();
        match connection.handshake_kind() {
            Some(rustls::HandshakeKind::Full) => {
                seen.full_handshakes.fetch_add(1, Ordering::SeqCst)
            }
            _ => seen.resumed.fetch_add(1, Ordering::SeqCst),
        };
        let peer = connection
            .peer_certificates()
            .expect("a client certificate")[0]
            .clone();
        let (_, cert) = x509_parser::parse_x509_certificate(&peer).unwrap();
        let named = cert
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        let mut buffer = Vec::new();
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut request = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(head)) = request.parse(&buffer) {
                let length: usize = request
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                    .unwrap();
                if buffer.len() >= head + length {
                    let body: serde_json::Value =
                        serde_json::from_slice(&buffer[head..head + length]).unwrap();
                    buffer.drain(..head + length);
                    let answer: &[u8] = if body["node_id"] == named.as_str() {
                        seen.heartbeats.fetch_add(1, Ordering::SeqCst);
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
                    } else {
                        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 5\r\n\r\nwrong"
                    };
                    if tls.write_all(answer).await.is_err() {
                        return;
                    }
                    continue;
                }
            }
            let mut chunk = [0u8; 8192];
            match tls.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// A test fleet CA, and a server on 127.0.0.1 that requires its client certificates.
    struct TestServer {
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
        dialer: Arc<Dialer>,
        seen: Arc<Seen>,
        _dir: tempfile::TempDir,
    }

    impl TestServer {
        async fn start() -> TestServer {
            fleetwire::tls::install_crypto_provider();
            let ca_key = rcgen::KeyPair::generate().unwrap();
            let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let ca = ca_params.self_signed(&ca_key).unwrap();
            let issuer = rcgen::Issuer::new(ca_params, ca_key);
            let server_key = rcgen::KeyPair::generate().unwrap();
            let mut server_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            // The controller's mark: the load generator, like an agent, takes no other server.
            server_params.distinguished_name.push(
                rcgen::DnType::OrganizationName,
                fleetwire::fleet_identity::CONTROLLER_ORGANIZATION,
            );
            server_params
                .subject_alt_names
                .push(rcgen::SanType::IpAddress(
                    std::net::Ipv4Addr::LOCALHOST.into(),
                ));
            let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();
            let served =
                certified_key(&server_cert.pem(), &server_key.serialize_pem(), "test").unwrap();
            let config = server_config(
                ReloadableCert::new(served),
                &ca.pem(),
                None,
                ClientCerts::Required,
            )
            .unwrap();

            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let seen = Arc::new(Seen::default());
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            tokio::spawn({
                let seen = seen.clone();
                async move {
                    loop {
                        let (tcp, _) = listener.accept().await.unwrap();
                        let (acceptor, seen) = (acceptor.clone(), seen.clone());
                        tokio::spawn(async move {
                            if let Ok(tls) = acceptor.accept(tcp).await {
                                serve(tls, seen).await;
                            }
                        });
                    }
                }
            });
            let dir = tempfile::tempdir().unwrap();
            let ca_file = dir.path().join("ca.pem");
            std::fs::write(&ca_file, ca.pem()).unwrap();
            let url = format!("https://127.0.0.1:{port}");
            TestServer {
                issuer,
                dialer: Arc::new(Dialer::new(&url, Some(&ca_file)).unwrap()),
                seen,
                _dir: dir,
            }
        }

        /// rustls settings presenting a fresh certificate that names `name`.
        fn identity(&self, name: &str) -> Arc<rustls::ClientConfig> {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            let cert = params.signed_by(&key, &self.issuer).unwrap();
            self.dialer
                .node_config(&cert.pem(), &key.serialize_pem())
                .unwrap()
        }

        fn fleet(
            &self,
            identities: Vec<Arc<rustls::ClientConfig>>,
        ) -> Arc<fleetwire_loadgen::per_node::Fleet> {
            Arc::new(fleetwire_loadgen::per_node::Fleet {
                dialer: self.dialer.clone(),
                bodies: Arc::new(
                    (0..identities.len())
                        .map(|i| heartbeat_body(i, 1))
                        .collect(),
                ),
                identities: Some(Arc::new(identities)),
                ram_used_offsets: None,
                pace: None,
                failed: Arc::new(AtomicU64::new(0)),
                warmup_ok: Arc::new(AtomicU64::new(0)),
                first_refusal: Default::default(),
            })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_node_heartbeats_with_its_own_certificate_and_the_storm_shakes_hands_in_full() {
        let server = TestServer::start().await;
        let nodes = 5;
        let fleet = server.fleet((0..nodes).map(|i| server.identity(&node_id(i))).collect());
        let seen = &server.seen;

        let mut running = fleetwire_loadgen::per_node::start(fleet.clone(), 2).unwrap();
        running.connected().await.unwrap();
        let now = Instant::now();
        let latency = running
            .heartbeats(
                now + Duration::from_millis(100),
                now + Duration::from_millis(400),
            )
            .await
            .unwrap();
        assert_eq!(
            fleet.failed.load(Ordering::SeqCst),
            0,
            "{:?}",
            fleet.first_refusal.lock()
        );
        assert!(!latency.is_empty() && fleet.warmup_ok.load(Ordering::SeqCst) > 0);
        let storm = running.storm().await.unwrap();
        assert_eq!((storm.nodes, storm.reconnected), (nodes, nodes));
        assert!(storm.first_failure.is_none(), "{:?}", storm.first_failure);
        assert_eq!(storm.per_node.len(), nodes as u64);
        // Every reconnection was a full handshake: resumption is off (docs/performance.md).
        assert_eq!(seen.full_handshakes.load(Ordering::SeqCst), 2 * nodes);
        assert_eq!(seen.resumed.load(Ordering::SeqCst), 0);
        assert_eq!(
            seen.heartbeats.load(Ordering::SeqCst),
            latency.len() + fleet.warmup_ok.load(Ordering::SeqCst) + nodes as u64
        );
    }

    #[tokio::test]
    async fn a_node_that_speaks_for_another_is_refused_and_counted() {
        // Node 0's connection presents a certificate naming load-0000001: every heartbeat is
        // refused, and the refusal's body is kept for the operator.
        let server = TestServer::start().await;
        let fleet = server.fleet(vec![server.identity(&node_id(1))]);
        let mut running = fleetwire_loadgen::per_node::start(fleet.clone(), 1).unwrap();
        running.connected().await.unwrap();
        let now = Instant::now();
        let latency = running
            .heartbeats(now, now + Duration::from_millis(100))
            .await
            .unwrap();
        assert_eq!(latency.len(), 0);
        assert!(fleet.failed.load(Ordering::SeqCst) > 0);
        assert_eq!(fleet.first_refusal.lock().as_deref(), Some("403: wrong"));
        assert_eq!(server.seen.heartbeats.load(Ordering::SeqCst), 0);
    }
}
