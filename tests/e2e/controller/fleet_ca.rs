//! The fleet's node CA pinned in the store (`fleetwire::store::fleet_ca`): a controller whose
//! CA is not the one the store's fleet was enrolled with refuses to start, naming both, and
//! leaves the store as it was; with the right CA it serves again (docs/operations.md,
//! "Several controllers").

use std::ffi::OsStr;
use std::path::Path;

use crate::support::controller_harness::*;
use fleetwire::store::postgres::test_schema::test_schema;

/// The SHA-256 of the CA certificate in `dir/ca.pem`, colon-separated hex as the controller
/// writes it.
fn fingerprint(ca_dir: &Path) -> String {
    let pem = std::fs::read(ca_dir.join("ca.pem")).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
    use sha2::Digest;
    sha2::Sha256::digest(&pem.contents)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A secure controller's start on `dir` (its store, its `ca/`) run to its exit.
fn secure_start_exit(dir: &Path, extra: &[&str]) -> (i32, String) {
    let mut args: Vec<&OsStr> = ["--listen", "127.0.0.1:0", "--data-dir"]
        .iter()
        .map(OsStr::new)
        .collect();
    args.push(dir.as_os_str());
    args.extend(extra.iter().map(OsStr::new));
    controller_exit(&args)
}

#[test]
fn a_controller_with_a_new_ca_refuses_the_store_its_fleet_was_enrolled_in() {
    let dir = tempfile::tempdir().unwrap();
    let first = ControllerProcess::start_secure_in(dir.path(), &[]);
    let fleet_ca = fingerprint(&dir.path().join("ca"));
    drop(first);

    // The CA directory lost (a restore without it): the controller would make a new CA.
    std::fs::rename(dir.path().join("ca"), dir.path().join("ca.kept")).unwrap();
    let (code, stderr) = secure_start_exit(dir.path(), &[]);
    assert_eq!(code, 1, "{stderr}");
    let new_ca = fingerprint(&dir.path().join("ca"));
    assert_ne!(new_ca, fleet_ca);
    assert!(stderr.contains("is not the fleet's"), "{stderr}");
    assert!(
        stderr.contains(&fleet_ca) && stderr.contains(&new_ca),
        "{stderr}"
    );
    // The refusal left the recorded CA as it was.
    let recorded: String = rusqlite::Connection::open(dir.path().join("controller.sqlite3"))
        .unwrap()
        .query_row("SELECT sha256 FROM fleet_ca", [], |row| row.get(0))
        .unwrap();
    assert_eq!(recorded, fleet_ca);

    // The fleet's CA put back: it serves.
    std::fs::remove_dir_all(dir.path().join("ca")).unwrap();
    std::fs::rename(dir.path().join("ca.kept"), dir.path().join("ca")).unwrap();
    let _again = ControllerProcess::start_secure_in(dir.path(), &[]);
}

#[test]
fn a_second_controller_on_postgresql_with_its_own_ca_refuses_to_start() {
    let Some(schema) = test_schema() else { return };
    let leader_dir = tempfile::tempdir().unwrap();
    let _leader = ControllerProcess::start_secure_in(leader_dir.path(), &["--db", &schema.url]);
    let fleet_ca = fingerprint(&leader_dir.path().join("ca"));

    let other = tempfile::tempdir().unwrap();
    let (code, stderr) = secure_start_exit(other.path(), &["--db", &schema.url]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("is not the fleet's"), "{stderr}");
    assert!(stderr.contains(&fleet_ca), "{stderr}");
    assert!(
        stderr.contains(&fingerprint(&other.path().join("ca"))),
        "{stderr}"
    );
}
