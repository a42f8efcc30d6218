//! A crate outside the workspace depends on `fleetwire-types` by path and builds with nothing
//! else: the generated crate is self-contained (its build script regenerates from `schemas/`).

use std::process::Command;

use fleetwire_e2e::workspace;

#[test]
fn an_outside_crate_builds_and_reads_documents_with_fleetwire_types() {
    let dir = tempfile::tempdir().unwrap();
    let types_path = workspace().join("generated").canonicalize().unwrap();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        format!(
            "[package]\nname = \"fleetwire-downstream-check\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
             [dependencies]\nfleetwire-types = {{ path = {:?} }}\nserde_json = \"1\"\n\n[workspace]\n",
            types_path.display().to_string()
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
    println!("refused with {} violations", refused.violations().len());
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
    let target = workspace().join("target");
    let out = Command::new(env!("CARGO"))
        .current_dir(dir.path())
        .env("CARGO_TARGET_DIR", &target)
        .args(["run", "--quiet", "--offline", "--"])
        .arg(workspace().join("schemas/examples/NodeHeartbeat/valid/ppn-heartbeat.json"))
        .output()
        .expect("running cargo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "downstream build failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("has 1 vms"), "{stdout}");
    assert!(stdout.contains("refused with"), "{stdout}");
}
