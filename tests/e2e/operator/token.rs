//! `fleetwire token`, the real binary: bootstrap tokens minted in a controller's database
//! (create, list, delete) redeem once and never show their secret except on create's stdout;
//! operator tokens land in a 0600 file the controller can load; `create --url` asks a
//! controller over HTTPS (here a stand-in answering as POST /v1/tokens is documented).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::sync::{Arc, Mutex};

use crate::support::fleetwire;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Json;
use chrono::Utc;
use fleetwire::controller::trust::operator_tokens::{OperatorScope, OperatorTokens};
use fleetwire::store::sqlite::tokens::SqliteBootstrapTokens;
use fleetwire::store::tokens::{BootstrapTokenStore, TokenRefusal};
use serde_json::{json, Value};

fn run(args: &[&str], data_dir: &Path) -> Output {
    fleetwire()
        .arg("token")
        .args(args)
        .env("FLEETWIRE_DATA_DIR", data_dir)
        .env_remove("FLEETWIRE_DB")
        .env_remove("FLEETWIRE_CA_DIR")
        .env_remove("FLEETWIRE_OPERATOR_TOKEN")
        .output()
        .expect("running fleetwire token")
}

/// The database a controller makes when it first starts.
fn controller_database(path: &Path) {
    drop(fleetwire::store::sqlite::SqliteStore::open(path).unwrap());
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn create_list_redeem_and_delete_on_a_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // No database, no token: the controller makes the database.
    let refused = run(&["create", "--node-id", "gpu-01"], &data);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("no controller database"));
    assert!(refused.stdout.is_empty() && !data.exists());
    controller_database(&data.join("controller.sqlite3"));

    let created = run(&["create", "--node-id", "gpu-01", "--ttl", "2h"], &data);
    assert!(created.status.success(), "{}", text(&created.stderr));
    let stdout = text(&created.stdout);
    // The token alone, on one line: what `TOKEN=$(fleetwire token create ...)` takes.
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let token = stdout.trim().to_string();
    token.parse::<fleetwire_types::BootstrapToken>().unwrap();
    let (token_id, secret) = token.split_once('.').unwrap();
    let stderr = text(&created.stderr);
    assert!(!stderr.contains(secret), "{stderr}");
    for hint in [
        token_id,
        "gpu-01",
        "VM_BOOTSTRAP_TOKEN",
        "VM_BOOTSTRAP_TOKEN_FILE",
        "VM_FLEET_CA_FILE",
    ] {
        assert!(stderr.contains(hint), "{hint} missing from: {stderr}");
    }
    assert!(
        stderr.contains(&data.join("ca/ca.pem").display().to_string()),
        "{stderr}"
    );

    let other = run(&["create", "--node-id", "gpu-02"], &data);
    assert!(other.status.success(), "{}", text(&other.stderr));
    let other_token = text(&other.stdout).trim().to_string();

    let listed = run(&["list"], &data);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listing = text(&listed.stdout);
    assert!(
        listing.contains(token_id) && listing.contains("gpu-01") && listing.contains("unused"),
        "{listing}"
    );
    assert!(!listing.contains(secret), "{listing}");
    assert!(!listing.contains(other_token.split_once('.').unwrap().1));
    assert!(!text(&listed.stderr).contains(secret));

    // The printed token redeems once, for its node.
    let store = SqliteBootstrapTokens::open(&data.join("controller.sqlite3")).unwrap();
    assert!(matches!(
        store.redeem(&token, "gpu-02", Utc::now()),
        Err(TokenRefusal::OtherNode { .. })
    ));
    assert_eq!(
        store.redeem(&token, "gpu-01", Utc::now()).unwrap().token_id,
        token_id
    );
    assert!(matches!(
        store.redeem(&token, "gpu-01", Utc::now()),
        Err(TokenRefusal::Used { .. })
    ));
    let listing = text(&run(&["list"], &data).stdout);
    let line = listing.lines().find(|l| l.starts_with(token_id)).unwrap();
    assert!(line.contains("used at"), "{listing}");

    // Delete by id; a whole token is refused without being echoed.
    let other_id = other_token.split_once('.').unwrap().0;
    let pasted = run(&["delete", &other_token], &data);
    assert_eq!(pasted.status.code(), Some(2));
    assert!(!text(&pasted.stderr).contains(&other_token));
    let deleted = run(&["delete", other_id], &data);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    assert!(matches!(
        store.redeem(&other_token, "gpu-02", Utc::now()),
        Err(TokenRefusal::Unknown)
    ));
    let again = run(&["delete", other_id], &data);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains(other_id),
        "{}",
        text(&again.stderr)
    );
    let listing = text(&run(&["list"], &data).stdout);
    assert!(!listing.contains(other_id), "{listing}");
}

#[test]
fn bad_arguments_exit_2_and_list_needs_a_database() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["create", "--node-id", "n1", "--ttl", "30s"][..],
        &["create", "--node-id", "n1", "--ttl", "8d"],
        &["create", "--node-id", "-n1"],
        &["delete", "abc"],
    ] {
        let output = run(args, dir.path());
        assert_eq!(output.status.code(), Some(2), "{args:?}");
    }
    let listed = run(&["list"], &dir.path().join("none"));
    assert_eq!(listed.status.code(), Some(1));
    assert!(text(&listed.stderr).contains("no controller database"));
    // --db names the file outright.
    let db = dir.path().join("elsewhere/c.sqlite3");
    controller_database(&db);
    let created = run(
        &["create", "--node-id", "n1", "--db", db.to_str().unwrap()],
        &dir.path().join("unused"),
    );
    assert!(created.status.success(), "{}", text(&created.stderr));
    assert!(db.exists() && !dir.path().join("unused").exists());
}

#[test]
fn operator_tokens_go_to_a_0600_file_the_controller_loads() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("etc/operator-tokens");
    let file_arg = file.to_str().unwrap();
    let admin = run(
        &[
            "operator", "--name", "alice", "--scope", "admin", "--file", file_arg,
        ],
        dir.path(),
    );
    assert!(admin.status.success(), "{}", text(&admin.stderr));
    let admin_token = text(&admin.stdout).trim().to_string();
    assert_eq!(admin_token.len(), 43);
    assert!(!text(&admin.stderr).contains(&admin_token));
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let reader = run(
        &[
            "operator",
            "--name",
            "ci",
            "--scope",
            "read-only",
            "--file",
            file_arg,
        ],
        dir.path(),
    );
    assert!(reader.status.success(), "{}", text(&reader.stderr));
    let reader_token = text(&reader.stdout).trim().to_string();

    let duplicate = run(
        &[
            "operator",
            "--name",
            "alice",
            "--scope",
            "read-only",
            "--file",
            file_arg,
        ],
        dir.path(),
    );
    assert_eq!(duplicate.status.code(), Some(1));
    assert!(text(&duplicate.stderr).contains("alice"));

    let tokens = OperatorTokens::load(&file).unwrap();
    assert_eq!(tokens.len(), 2);
    let alice = tokens.find(&admin_token).unwrap();
    assert_eq!(
        (alice.name.as_str(), alice.scope),
        ("alice", OperatorScope::Admin)
    );
    let ci = tokens.find(&reader_token).unwrap();
    assert_eq!(
        (ci.name.as_str(), ci.scope),
        ("ci", OperatorScope::ReadOnly)
    );
    // Existing lines, comments included, are kept.
    let content = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("# operators\n{content}")).unwrap();
    let third = run(
        &[
            "operator", "--name", "bob", "--scope", "admin", "--file", file_arg,
        ],
        dir.path(),
    );
    assert!(third.status.success(), "{}", text(&third.stderr));
    let content = std::fs::read_to_string(&file).unwrap();
    assert!(content.starts_with("# operators\n"), "{content}");
    assert_eq!(OperatorTokens::load(&file).unwrap().len(), 3);
}

/// What the stand-in controller saw.
#[derive(Default)]
struct Seen {
    bodies: Vec<Value>,
}

const GOOD_OPERATOR_TOKEN: &str = "opopopopopopopopopopopopopopopopopopopopop1";

async fn create_token(
    State(seen): State<Arc<Mutex<Seen>>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let authorized = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {GOOD_OPERATOR_TOKEN}"));
    if !authorized {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"code": "unauthorized", "message": "no known operator token"})),
        );
    }
    seen.lock().unwrap().bodies.push(body.clone());
    (
        StatusCode::CREATED,
        Json(json!({
            "token": "abcdef.0123456789abcdef",
            "token_id": "abcdef",
            "node_id": body["node_id"],
            "expires_at": "2026-12-01T12:00:00Z",
        })),
    )
}

/// A stand-in of the controller's HTTPS port: a CA, a server certificate for 127.0.0.1 and
/// `POST /v1/tokens`; its certificate carries the controller's mark when `marked`. Returns the
/// CA's PEM and the port; the server lives as long as the test process.
fn https_stand_in(seen: Arc<Mutex<Seen>>, marked: bool) -> (String, u16) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let server_key = rcgen::KeyPair::generate().unwrap();
    // The controller's mark, which the client asks of a controller (docs/security.md).
    let mut server_params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    if marked {
        server_params.distinguished_name.push(
            rcgen::DnType::OrganizationName,
            fleetwire_client::CONTROLLER_ORGANIZATION,
        );
    }
    let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();
    let app = axum::Router::new()
        .route("/v1/tokens", post(create_token))
        .with_state(seen);
    let port = crate::support::serve_tls(
        &server_cert.pem(),
        &server_key.serialize_pem(),
        &ca_pem,
        app,
    );
    (ca_pem, port)
}

#[test]
fn create_over_the_api_posts_the_request_and_prints_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (ca_pem, port) = https_stand_in(seen.clone(), true);
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let token_file = dir.path().join("operator-token");
    std::fs::write(&token_file, format!("{GOOD_OPERATOR_TOKEN}\n")).unwrap();
    let url = format!("https://127.0.0.1:{port}");
    let data = dir.path().join("data");

    let created = run(
        &[
            "create",
            "--node-id",
            "gpu-07",
            "--ttl",
            "10m",
            "--url",
            &url,
            "--ca-file",
            ca_file.to_str().unwrap(),
            "--bearer-file",
            token_file.to_str().unwrap(),
        ],
        &data,
    );
    assert!(created.status.success(), "{}", text(&created.stderr));
    assert_eq!(text(&created.stdout), "abcdef.0123456789abcdef\n");
    let stderr = text(&created.stderr);
    assert!(!stderr.contains("0123456789abcdef"), "{stderr}");
    assert!(!stderr.contains(GOOD_OPERATOR_TOKEN), "{stderr}");
    assert!(
        stderr.contains("abcdef") && stderr.contains("gpu-07"),
        "{stderr}"
    );
    assert_eq!(
        seen.lock().unwrap().bodies,
        [json!({"node_id": "gpu-07", "ttl_s": 600})]
    );
    // API mode touches no local database.
    assert!(!data.exists());

    // The token from the environment; a wrong one is answered 401, shown as the ApiError.
    let refused = fleetwire()
        .args(["token", "create", "--node-id", "gpu-07", "--url", &url])
        .args(["--ca-file", ca_file.to_str().unwrap()])
        .env(
            "FLEETWIRE_OPERATOR_TOKEN",
            "wrong-wrong-wrong-wrong-wrong-wrong-wrong",
        )
        .env("FLEETWIRE_DATA_DIR", &data)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        text(&refused.stderr).trim(),
        "fleetwire token create: 401 unauthorized: no known operator token"
    );
    assert!(refused.stdout.is_empty());

    // A CA the server's certificate does not chain to: refused by TLS, nothing printed.
    let stranger_key = rcgen::KeyPair::generate().unwrap();
    let mut stranger = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    stranger.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let stranger_file = dir.path().join("stranger.pem");
    std::fs::write(
        &stranger_file,
        stranger.self_signed(&stranger_key).unwrap().pem(),
    )
    .unwrap();
    let untrusted = run(
        &[
            "create",
            "--node-id",
            "gpu-07",
            "--url",
            &url,
            "--ca-file",
            stranger_file.to_str().unwrap(),
            "--bearer-file",
            token_file.to_str().unwrap(),
        ],
        &data,
    );
    assert_eq!(
        untrusted.status.code(),
        Some(1),
        "{}",
        text(&untrusted.stderr)
    );
    assert!(untrusted.stdout.is_empty());
    assert!(!text(&untrusted.stderr).contains(GOOD_OPERATOR_TOKEN));
    assert_eq!(seen.lock().unwrap().bodies.len(), 1);

    // A server the CA vouches for, but without the controller's mark (a node's certificate
    // may name the controller's address): refused by TLS, the token not sent.
    let (unmarked_ca, unmarked_port) = https_stand_in(seen.clone(), false);
    let unmarked_file = dir.path().join("unmarked-ca.pem");
    std::fs::write(&unmarked_file, &unmarked_ca).unwrap();
    let unmarked_url = format!("https://127.0.0.1:{unmarked_port}");
    let unmarked = run(
        &[
            "create",
            "--node-id",
            "gpu-07",
            "--url",
            &unmarked_url,
            "--ca-file",
            unmarked_file.to_str().unwrap(),
            "--bearer-file",
            token_file.to_str().unwrap(),
        ],
        &data,
    );
    assert_eq!(
        unmarked.status.code(),
        Some(1),
        "{}",
        text(&unmarked.stderr)
    );
    assert!(unmarked.stdout.is_empty());
    assert_eq!(seen.lock().unwrap().bodies.len(), 1);

    // Plain http, a missing --ca-file and a missing operator token are usage errors.
    let token_arg = token_file.to_str().unwrap();
    for args in [
        vec![
            "create",
            "--node-id",
            "n",
            "--url",
            "http://127.0.0.1:9203",
            "--ca-file",
            "x",
            "--bearer-file",
            token_arg,
        ],
        vec![
            "create",
            "--node-id",
            "n",
            "--url",
            &url,
            "--bearer-file",
            token_arg,
        ],
        vec![
            "create",
            "--node-id",
            "n",
            "--url",
            &url,
            "--ca-file",
            ca_file.to_str().unwrap(),
        ],
    ] {
        let output = run(&args, &data);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&output.stderr)
        );
        assert!(!text(&output.stderr).contains(GOOD_OPERATOR_TOKEN));
    }
}
