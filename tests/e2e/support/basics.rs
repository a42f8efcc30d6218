//! What every end-to-end test needs: the real `fleetwire` binary, the workspace, free ports,
//! processes that are killed when a test ends, waiting with a deadline, the TLS provider.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Installs ring as the test process's rustls provider (once). reqwest is built with
/// `rustls-no-provider` (the workspace's `Cargo.toml`), so every client, plain or not, needs
/// it before it is built: call this before `reqwest::Client::builder()` or
/// `reqwest::blocking::get`.
pub fn install_crypto_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `fleetwire` binary. This test target belongs to the `fleetwire` package
/// (runtime/Cargo.toml), so cargo builds the binary, with the same features, before the test and
/// names it here: no second build.
pub fn fleetwire_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fleetwire"))
}

/// `command` run as a user whose home is `home` (an empty folder of the test's), so that none
/// of the caller's own fleetwire settings reach it: no `FLEETWIRE_*` variable, no config file
/// of the user's.
pub fn without_user_settings<'a>(
    command: &'a mut Command,
    home: &std::path::Path,
) -> &'a mut Command {
    command
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"));
    for name in [
        "FLEETWIRE_URL",
        "FLEETWIRE_CA_FILE",
        "FLEETWIRE_TOKEN_FILE",
        "FLEETWIRE_CONFIG",
        "FLEETWIRE_PLAIN_HTTP",
        "FLEETWIRE_DATA_DIR",
        "NO_COLOR",
        "CLICOLOR_FORCE",
    ] {
        command.env_remove(name);
    }
    command
}

/// A `Command` for the `fleetwire` binary.
pub fn fleetwire() -> Command {
    Command::new(fleetwire_bin())
}

/// A fleet's CA directory made by `fleetwire ca init --dir <ca>`, as an operator makes one.
pub fn ca_init(ca: &std::path::Path) {
    let init = fleetwire()
        .args(["ca", "init", "--dir"])
        .arg(ca)
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
}

/// Sends `signal` to process `pid` (one the test started); false when it is gone already.
pub fn send_signal(pid: u32, signal: rustix::process::Signal) -> bool {
    rustix::process::Pid::from_raw(pid as i32)
        .is_some_and(|pid| rustix::process::kill_process(pid, signal).is_ok())
}

/// `id` as one URL path segment: every byte but RFC 3986's unreserved ones percent-encoded.
pub fn url_segment(id: &str) -> String {
    let mut out = String::new();
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A TCP port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local addr")
        .port()
}

/// A child process that is killed (SIGKILL) and reaped when dropped, so a failing test never
/// leaves a server behind.
pub struct Running {
    pub child: Child,
}

impl Running {
    pub fn spawn(command: &mut Command) -> Running {
        Running {
            child: command.spawn().expect("spawning a test process"),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGKILL and waits for the process to go.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `probe` every 50 ms until it returns `Some`, or panics after `timeout` naming `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `program` is on this machine (an executable on `PATH`), for a test that needs a program
/// a newcomer's machine may lack. Missing, the test is skipped with a line saying what to
/// install (`install`), written past the test harness's capture so that `cargo test` shows it;
/// under `CI=true`, where `.ci/run` installs every such program, its absence fails the test.
pub fn have_program(program: &str, install: &str) -> bool {
    // Found on PATH as an executable file: not by running it, since programs answer
    // `--version` differently (OpenSSL 3 refuses it: `openssl version`).
    use std::os::unix::fs::PermissionsExt;
    let found = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    });
    if found {
        return true;
    }
    let why = format!("`{program}` is not on this machine: {install}");
    assert!(
        std::env::var("CI").map_or(true, |ci| ci != "true"),
        "CI=true and {why}"
    );
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipped ({}): {why}",
        std::thread::current().name().unwrap_or("a test")
    );
    false
}

/// Serves `app` over HTTPS as the controller serves its port (`tls_server::TlsListener` under
/// `http_serve::serve`) with the certificate `cert_pem` and its key, client certificates of
/// `client_ca_pem` optional, on a thread of its own; returns the port. Lives as long as the
/// test process.
pub fn serve_tls(cert_pem: &str, key_pem: &str, client_ca_pem: &str, app: axum::Router) -> u16 {
    install_crypto_provider();
    let certified =
        fleetwire::tls_server::certified_key(cert_pem, key_pem, "the test server").unwrap();
    let config = fleetwire::tls_server::server_config(
        fleetwire::tls_server::ReloadableCert::new(certified),
        client_ca_pem,
        None,
        fleetwire::tls_server::ClientCerts::Optional,
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let tcp = tokio::net::TcpListener::from_std(listener).unwrap();
            let tls = fleetwire::tls_server::TlsListener::new(tcp, config).unwrap();
            fleetwire::http_serve::serve(
                tls,
                |peer: &fleetwire::tls_server::Peer| {
                    fleetwire::tls_server::WithPeer::new(app.clone(), peer.clone())
                },
                std::future::pending(),
            )
            .await;
        });
    });
    port
}

/// Reads one HTTP/1.1 answer from a blocking stream (plain or TLS): its status and its body,
/// framed by the `Content-Length` the answer must carry. Panics, saying what arrived, when the
/// stream ends or fails before the head is whole.
pub fn read_http_answer(stream: &mut impl std::io::Read) -> (u16, Vec<u8>) {
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            other => panic!(
                "the connection ended within an answer's head: {other:?} after {:?}",
                String::from_utf8_lossy(&head)
            ),
        }
    }
    let head = String::from_utf8(head).unwrap();
    let status = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("an answer without a Content-Length: {head:?}"));
    let mut body = vec![0; length];
    stream.read_exact(&mut body).unwrap();
    (status, body)
}
