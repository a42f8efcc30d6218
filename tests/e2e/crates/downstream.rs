//! A downstream team's view of the generated crates: `cargo package` makes each one (cargo's
//! own verify step builds it from its tarball alone, offline), and a crate outside the
//! workspace that depends on the *packaged* crates builds, reads documents, and has no code
//! generator, template engine or HTML among its dependencies.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::workspace;

/// The crates downstream teams import, as `cargo package` names them.
const PACKAGED: &[&str] = &["fleetwire-types", "fleetwire-client"];

/// What a downstream build must not compile: the generator and the site's crates.
const HEAVY_CRATES: &[&str] = &[
    "fleetwire-codegen",
    "typify",
    "typify-impl",
    "schemars",
    "openapiv3",
    "askama",
    "scraper",
    "html5ever",
];

fn cargo(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO"))
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", workspace().join("target"))
        .args(args)
        .output()
        .expect("running cargo")
}

fn succeeded(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Packages the generated crates and unpacks each tarball into `into`; returns their folders.
fn package_and_unpack(into: &Path) -> Vec<(String, PathBuf)> {
    let mut args = vec!["package", "--offline", "--allow-dirty"];
    for name in PACKAGED {
        args.extend(["-p", name]);
    }
    succeeded("cargo package", &cargo(&workspace(), &args));
    // Both generated crates carry the schema set's version, not the workspace's (docs/versioning.md).
    let version = fleetwire_types::SCHEMA_SET_VERSION;
    PACKAGED
        .iter()
        .map(|name| {
            let tarball = workspace()
                .join("target/package")
                .join(format!("{name}-{version}.crate"));
            let out = Command::new("tar")
                .arg("-xzf")
                .arg(&tarball)
                .arg("-C")
                .arg(into)
                .output()
                .expect("running tar");
            succeeded(&format!("unpacking {}", tarball.display()), &out);
            let dir = into.join(format!("{name}-{version}"));
            assert!(
                !dir.join("../../schemas").exists() && !dir.join("tests").exists(),
                "the unpacked crate stands alone"
            );
            (name.to_string(), dir)
        })
        .collect()
}

#[test]
fn an_outside_crate_builds_on_the_packaged_crates_alone() {
    let unpacked = tempfile::tempdir().unwrap();
    let crates = package_and_unpack(unpacked.path());
    let dir = tempfile::tempdir().unwrap();
    let dependencies: String = crates
        .iter()
        .map(|(name, path)| format!("{name} = {{ path = {:?} }}\n", path.display().to_string()))
        .collect();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        format!(
            "[package]\nname = \"fleetwire-downstream-check\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
             [dependencies]\n{dependencies}serde_json = \"1\"\n\n[workspace]\n\n\
             # The packaged client names fleetwire-types by version, as from a registry.\n\
             [patch.crates-io]\n{dependencies}"
        ),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(
        dir.path().join("src/main.rs"),
        r##"
use fleetwire_types::{read, HostReportedState, NodeHeartbeat};

fn main() {
    let path = std::env::args().nth(1).expect("a heartbeat file");
    let heartbeat: NodeHeartbeat = read(&std::fs::read(path).unwrap()).expect("a valid heartbeat").value;
    println!("node {} has {} vms", heartbeat.node_id.as_str(), heartbeat.vms.len());
    let refused = read::<HostReportedState>(br#"{"hostId": "h1"}"#).unwrap_err();
    for v in refused.violations() {
        println!("refused at '{}' ({})", v.instance_path.as_str(), v.keyword);
    }
    // The client takes plain HTTP only when it is chosen.
    let unchosen = fleetwire_client::Client::builder("http://127.0.0.1:9203").build().unwrap_err();
    println!("client: {unchosen}");
    let plain = fleetwire_client::Client::builder("http://127.0.0.1:9203").plain_http().build();
    println!("plain client for {}", plain.expect("a plain client").base_url());
}
"##,
    )
    .unwrap();
    // The workspace's lock file pins the same versions, so the build needs no registry.
    std::fs::copy(
        workspace().join("Cargo.lock"),
        dir.path().join("Cargo.lock"),
    )
    .unwrap();

    let tree = succeeded(
        "cargo tree",
        &cargo(
            dir.path(),
            &[
                "tree",
                "--offline",
                "-e",
                "normal,build",
                "--prefix",
                "none",
            ],
        ),
    );
    for (name, _) in &crates {
        assert!(
            tree.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{tree}"
        );
    }
    let heavy: Vec<&str> = tree
        .lines()
        .filter(|l| HEAVY_CRATES.contains(&l.split_whitespace().next().unwrap_or_default()))
        .collect();
    assert!(heavy.is_empty(), "a downstream build compiles {heavy:?}");

    let fixture = workspace().join("schemas/examples/NodeHeartbeat/valid/ppn-heartbeat.json");
    let stdout = succeeded(
        "the downstream program",
        &cargo(
            dir.path(),
            &[
                "run",
                "--quiet",
                "--offline",
                "--",
                fixture.to_str().unwrap(),
            ],
        ),
    );
    assert!(stdout.contains("has 1 vms"), "{stdout}");
    assert!(stdout.contains("refused at '' (required)"), "{stdout}");
    assert!(stdout.contains("client: http://127.0.0.1:9203"), "{stdout}");
    assert!(
        stdout.contains("plain client for http://127.0.0.1:9203"),
        "{stdout}"
    );
}
