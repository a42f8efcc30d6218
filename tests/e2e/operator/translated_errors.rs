//! Connection and TLS failures as an operator meets them, each said as what to check, with
//! the underlying error after it (docs/operator-cli.md, "When a command fails"): the URL
//! without its scheme, another fleet's CA file, an agent's port taken for the controller's, a
//! CA file without a certificate, http:// against the HTTPS controller, an expired
//! certificate. One test each, through `fleetwire nodes list` as typed.

use std::path::Path;
use std::process::Output;
use std::sync::Arc;

use crate::support::controller_harness::{ControllerProcess, ADMIN_TOKEN};
use crate::support::up_process::{up_command, UpProcess};
use crate::support::{fleetwire, free_port, without_user_settings};

/// `fleetwire ARGS` with none of the user's own settings (`home` stands for the user's home),
/// from a folder of its own; returns (exit code, standard error).
fn run(home: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut command = fleetwire();
    without_user_settings(command.current_dir(home).args(args), home);
    let Output { status, stderr, .. } = command.output().unwrap();
    (status.code(), String::from_utf8_lossy(&stderr).into_owned())
}

/// The sentence comes first, the underlying error after it.
fn says_before(stderr: &str, advice: &str, underlying: &str) {
    let (a, u) = (stderr.find(advice), stderr.find(underlying));
    assert!(
        matches!((a, u), (Some(a), Some(u)) if a < u),
        "expected {advice:?}, then the underlying {underlying:?}:\n{stderr}"
    );
}

fn token_file(home: &Path) -> String {
    let path = home.join("admin-token");
    std::fs::write(&path, ADMIN_TOKEN).unwrap();
    path.display().to_string()
}

#[test]
fn a_url_without_its_scheme_says_to_write_it() {
    let home = tempfile::tempdir().unwrap();
    let ca = home.path().join("ca.pem");
    std::fs::write(&ca, "").unwrap();
    let (code, err) = run(
        home.path(),
        &[
            "nodes",
            "list",
            "--url",
            "127.0.0.1:9203",
            "--ca-file",
            ca.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    says_before(
        &err,
        "has no scheme: write https://127.0.0.1:9203",
        "relative URL without a base",
    );
}

#[test]
fn another_fleets_ca_file_says_which_file_did_not_sign_the_controller() {
    let controller = ControllerProcess::start_secure(&[]);
    let home = tempfile::tempdir().unwrap();
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let other_ca = home.path().join("other-fleet-ca.pem");
    std::fs::write(&other_ca, other.cert.pem()).unwrap();
    let (code, err) = run(
        home.path(),
        &[
            "nodes",
            "list",
            "--url",
            &controller.url(""),
            "--ca-file",
            other_ca.to_str().unwrap(),
            "--token-file",
            &token_file(home.path()),
        ],
    );
    assert_eq!(code, Some(5), "{err}");
    says_before(
        &err,
        &format!(
            "certificate that the CA file {} did not sign",
            other_ca.display()
        ),
        "UnknownIssuer",
    );
    assert!(err.contains("ca/ca.pem"), "where the right one is: {err}");
}

#[test]
fn the_agents_port_taken_for_the_controllers_says_so() {
    let home = tempfile::tempdir().unwrap();
    let spawn_port = free_port();
    let mut up = UpProcess::start(
        up_command(home.path(), home.path(), free_port(), spawn_port)
            .args(["--node-id", "port-test"]),
    );
    up.wait_for_line("fleetwire is up");
    let state = home.path().join(".fleetwire");
    let (code, err) = run(
        home.path(),
        &[
            "nodes",
            "list",
            "--url",
            &format!("https://127.0.0.1:{spawn_port}"),
            "--ca-file",
            state.join("controller/ca/ca.pem").to_str().unwrap(),
            "--token-file",
            state.join("operator-token").to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(5), "{err}");
    // Since the node CA is apart from the operators' (docs/security.md, issue 28), an agent's
    // certificate is one the operators' CA file never signed: the sentence names both checks,
    // the CA file and whether this address is the controller's.
    says_before(
        &err,
        &format!("and that 127.0.0.1:{spawn_port} is this fleet's controller"),
        "UnknownIssuer",
    );
    assert!(up.ctrl_c().success());
}

#[test]
fn a_ca_file_without_a_certificate_is_named() {
    let home = tempfile::tempdir().unwrap();
    let empty = home.path().join("not-a-ca.pem");
    std::fs::write(&empty, "just words\n").unwrap();
    let (code, err) = run(
        home.path(),
        &[
            "nodes",
            "list",
            "--url",
            "https://127.0.0.1:9203",
            "--ca-file",
            empty.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "CA file {} (flag or environment)",
            empty.display()
        )) && err.contains("no PEM certificate in it")
            && err.contains("fleet CA's certificate"),
        "{err}"
    );
}

#[test]
fn http_against_the_https_controller_says_to_use_https_not_plain_http() {
    let controller = ControllerProcess::start_secure(&[]);
    let home = tempfile::tempdir().unwrap();
    let https = controller.url("");
    let address = https.trim_start_matches("https://").to_string();
    let http = format!("http://{address}");
    // Without --plain-http: the address is asked what it speaks.
    let (code, err) = run(home.path(), &["nodes", "list", "--url", &http]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("use https://{address} with --ca-file"))
            && !err.contains("choose it with --plain-http")
            && !err.contains("choose that with --plain-http"),
        "{err}"
    );
    // With it: the plain request gets no HTTP answer, and the advice is the same.
    let (code, err) = run(
        home.path(),
        &["nodes", "list", "--url", &http, "--plain-http"],
    );
    assert_eq!(code, Some(5), "{err}");
    says_before(
        &err,
        &format!("did not answer plain HTTP: a controller serves HTTPS unless it was started with --plain-http; use https://{address}"),
        "underlying error: list_nodes",
    );
    // A plain controller is still told to be chosen with --plain-http.
    let plain = ControllerProcess::start(&[]);
    let (code, err) = run(home.path(), &["nodes", "list", "--url", &plain.url("")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("choose that with --plain-http"), "{err}");
}

#[test]
fn an_expired_certificate_says_to_check_the_clocks() {
    crate::support::install_crypto_provider();
    let home = tempfile::tempdir().unwrap();
    // A fleet CA, and a server certificate from it that expired yesterday.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let ca_file = home.path().join("ca.pem");
    std::fs::write(&ca_file, AsRef::<rcgen::Certificate>::as_ref(&ca).pem()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(30);
    params.not_after = now - time::Duration::days(1);
    let cert = params.signed_by(&key, &ca).unwrap();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    runtime.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = acceptor.accept(stream).await;
        }
    });
    let (code, err) = run(
        home.path(),
        &[
            "nodes",
            "list",
            "--url",
            &format!("https://127.0.0.1:{port}"),
            "--ca-file",
            ca_file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(5), "{err}");
    says_before(
        &err,
        &format!("the certificate of the server at 127.0.0.1:{port} has expired: check this machine's clock"),
        "certificate expired",
    );
}
