//! The fleet's CAs pinned in the store (`fleetwire::store::fleet_ca`): a controller whose
//! fleet CA (`ca.pem`) or node CA (`node-ca.pem`) is not the one the store's fleet was enrolled
//! with refuses to start, naming the file and both fingerprints, and leaves the store as it
//! was; with the right CAs it serves again (docs/operations.md, "Several controllers").

use std::ffi::OsStr;
use std::path::Path;

use crate::support::controller_harness::*;
use fleetwire::store::postgres::test_schema::test_schema;

/// The SHA-256 of the CA certificate in `dir/ca.pem`, colon-separated hex as the controller
/// writes it.
fn fingerprint(ca_dir: &Path) -> String {
    fingerprint_of(&ca_dir.join("ca.pem"))
}

/// The SHA-256 of the certificate in the PEM file `file`, as [`fingerprint`].
fn fingerprint_of(file: &Path) -> String {
    let pem = std::fs::read(file).unwrap();
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

/// A CA directory of another fleet, made by `fleetwire ca init` in `dir/ca`.
fn other_ca_dir(dir: &Path) -> std::path::PathBuf {
    let ca = dir.join("ca");
    crate::support::ca_init(&ca);
    ca
}

#[test]
fn a_data_dir_whose_node_ca_was_swapped_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca");
    let first = ControllerProcess::start_secure_in(dir.path(), &[]);
    let node_ca = fingerprint_of(&ca.join("node-ca.pem"));
    drop(first);

    // The node CA of another fleet in its place; ca.pem is the fleet's.
    let elsewhere = tempfile::tempdir().unwrap();
    let other = other_ca_dir(elsewhere.path());
    for file in ["node-ca.pem", "node-ca.key"] {
        std::fs::rename(ca.join(file), dir.path().join(file)).unwrap();
        std::fs::copy(other.join(file), ca.join(file)).unwrap();
    }
    let swapped = fingerprint_of(&ca.join("node-ca.pem"));
    assert_ne!(swapped, node_ca);
    let (code, stderr) = secure_start_exit(dir.path(), &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("the node CA in node-ca.pem of {}", ca.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains(&node_ca) && stderr.contains(&swapped),
        "{stderr}"
    );
    assert!(
        stderr.contains("copy node-ca.pem and node-ca.key"),
        "{stderr}"
    );
    // The refusal left the recorded node CA as it was.
    let recorded: String = rusqlite::Connection::open(dir.path().join("controller.sqlite3"))
        .unwrap()
        .query_row("SELECT node_sha256 FROM fleet_ca", [], |row| row.get(0))
        .unwrap();
    assert_eq!(recorded, node_ca);

    // The fleet's node CA put back: it serves.
    for file in ["node-ca.pem", "node-ca.key"] {
        std::fs::rename(dir.path().join(file), ca.join(file)).unwrap();
    }
    let _again = ControllerProcess::start_secure_in(dir.path(), &[]);
}

#[test]
fn a_standby_on_postgresql_given_the_fleet_ca_but_not_the_node_ca_refuses_to_start() {
    let Some(schema) = test_schema() else { return };
    let leader_dir = tempfile::tempdir().unwrap();
    let _leader = ControllerProcess::start_secure_in(leader_dir.path(), &["--db", &schema.url]);
    let leader_ca = leader_dir.path().join("ca");
    let node_ca = fingerprint_of(&leader_ca.join("node-ca.pem"));

    // The standby was given ca.pem and ca.key alone: it makes a node CA of its own.
    let standby = tempfile::tempdir().unwrap();
    let ca = standby.path().join("ca");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir(&ca).unwrap();
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o700)).unwrap();
        for file in ["ca.pem", "ca.key"] {
            std::fs::copy(leader_ca.join(file), ca.join(file)).unwrap();
        }
        std::fs::set_permissions(ca.join("ca.key"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
    }
    let (code, stderr) = secure_start_exit(standby.path(), &["--db", &schema.url]);
    assert_eq!(code, 1, "{stderr}");
    let own = fingerprint_of(&ca.join("node-ca.pem"));
    assert_ne!(own, node_ca);
    assert!(
        stderr.contains(&format!("the node CA in node-ca.pem of {}", ca.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains(&node_ca) && stderr.contains(&own),
        "{stderr}"
    );

    // Given the whole directory, it stands by.
    for file in ["node-ca.pem", "node-ca.key"] {
        std::fs::copy(leader_ca.join(file), ca.join(file)).unwrap();
    }
    let _standby =
        ControllerProcess::start_secure_standby_in(standby.path(), &["--db", &schema.url]);
}
