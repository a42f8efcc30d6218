//! Downstream teams' view of the published crates: `cargo package` makes `fleetwire-codegen`,
//! `fleetwire-types` and `fleetwire-client` (offline), and a workspace outside this one builds
//! on the unpacked tarballs alone, offline:
//! - a program on the packaged types and client, with no code generator, template engine or
//!   HTML among its dependencies;
//! - the toolkit's consumer (`tests/toolkit-consumer`, not a member of this workspace), whose
//!   build script runs the packaged `fleetwire-codegen` on its own schemas; its tests run there.
//!
//! Packaging skips cargo's own verify build (`--no-verify`): the outside builds compile every
//! packaged crate from its unpacked tarball with nothing beside it, which is that check, once,
//! with this workspace's profiles so the registry crates the workspace built are reused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::workspace;

/// The crates `cargo package` makes for downstream teams.
const PACKAGED: &[&str] = &["fleetwire-codegen", "fleetwire-types", "fleetwire-client"];

/// What a downstream build on the types and the client must not compile: the generator and
/// the site's crates.
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

/// The target folder of this test's own build (…/target/debug/deps/e2e-…), shared by the
/// nested builds so what the workspace built is reused.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(3)
        .expect("the test binary sits in <target>/<profile>/deps")
        .to_path_buf()
}

fn cargo(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO"))
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target_dir())
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

/// The tarball cargo made for `name`: `<target>/package/<name>-<version>.crate`, the newest
/// (an earlier version's may still lie there).
fn tarball(name: &str) -> PathBuf {
    let dir = target_dir().join("package");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            let file = path.file_name().unwrap_or_default().to_string_lossy();
            file.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
                && file.ends_with(".crate")
        })
        .max_by_key(|path| path.metadata().and_then(|m| m.modified()).ok())
        .unwrap_or_else(|| panic!("no tarball of {name} in {}", dir.display()))
}

/// Packages the crates downstream teams use and unpacks each tarball into `into`; returns their
/// folders by name.
fn package_and_unpack(into: &Path) -> Vec<(String, PathBuf)> {
    let mut args = vec!["package", "--offline", "--allow-dirty", "--no-verify"];
    for name in PACKAGED {
        args.extend(["-p", name]);
    }
    succeeded("cargo package", &cargo(&workspace(), &args));
    PACKAGED
        .iter()
        .map(|name| {
            let tarball = tarball(name);
            let out = Command::new("tar")
                .arg("-xzf")
                .arg(&tarball)
                .arg("-C")
                .arg(into)
                .output()
                .expect("running tar");
            succeeded(&format!("unpacking {}", tarball.display()), &out);
            let folder = tarball.file_stem().expect("a tarball's name");
            let dir = into.join(folder);
            assert!(
                !dir.join("tests").exists() && !dir.join("../schemas").exists(),
                "the unpacked crate stands alone"
            );
            (name.to_string(), dir)
        })
        .collect()
}

/// This workspace's `[profile.*]` tables, as text: the outside workspace builds with them, so
/// the registry crates this workspace compiled are not compiled again.
fn profiles() -> String {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let mut in_profile = false;
    let mut out = String::new();
    for line in manifest.lines() {
        if line.starts_with('[') {
            in_profile = line.starts_with("[profile.");
        }
        if in_profile {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(out.contains("[profile.dev]"), "{out}");
    out
}

/// A program on the packaged types and client: reads a heartbeat, shows a refusal, builds a
/// client.
const DOWNSTREAM_MAIN: &str = r##"
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
"##;

/// Copies the toolkit's consumer (its sources, schemas and tests, not a build of it) into `to`,
/// its path dependencies on this workspace pointed at the unpacked packages instead.
fn copy_toolkit_consumer(to: &Path, packaged: &[(String, PathBuf)]) {
    let from = workspace().join("tests/toolkit-consumer");
    let out = Command::new("cp")
        .arg("-r")
        .arg(&from)
        .arg(to)
        .output()
        .expect("running cp");
    succeeded("copying the toolkit consumer", &out);
    for stale in ["target", "Cargo.lock"] {
        let _ = std::fs::remove_dir_all(to.join(stale));
        let _ = std::fs::remove_file(to.join(stale));
    }
    let manifest_path = to.join("Cargo.toml");
    let mut manifest = std::fs::read_to_string(&manifest_path).unwrap();
    let path_of = |name: &str| {
        let (_, dir) = packaged.iter().find(|(n, _)| n == name).unwrap();
        format!("path = {:?}", dir.display().to_string())
    };
    for (in_workspace, name) in [
        ("path = \"../../generated/types\"", "fleetwire-types"),
        ("path = \"../../codegen\"", "fleetwire-codegen"),
    ] {
        assert!(
            manifest.contains(in_workspace),
            "the consumer's manifest names {in_workspace}"
        );
        manifest = manifest.replace(in_workspace, &path_of(name));
    }
    // A member of the outside workspace here, not a workspace of its own.
    let before = manifest.len();
    manifest = manifest.replace("\n[workspace]\n", "\n");
    assert_ne!(
        manifest.len(),
        before,
        "the consumer declares its own workspace"
    );
    std::fs::write(&manifest_path, manifest).unwrap();
}

#[test]
fn an_outside_workspace_builds_on_the_packaged_crates_alone() {
    let unpacked = tempfile::tempdir().unwrap();
    let packaged = package_and_unpack(unpacked.path());

    // The toolkit carries what it renders and reads: its templates and assets, nothing of
    // this workspace's.
    let codegen = &packaged[0].1;
    for file in [
        "askama.toml",
        "site/templates/base.html",
        "site/static/site.css",
        "src/build_script.rs",
    ] {
        assert!(
            codegen.join(file).is_file(),
            "the codegen package has {file}"
        );
    }

    let outside = tempfile::tempdir().unwrap();
    let root = outside.path();
    let dependencies: String = packaged
        .iter()
        .map(|(name, path)| format!("{name} = {{ path = {:?} }}\n", path.display().to_string()))
        .collect();
    std::fs::write(
        root.join("Cargo.toml"),
        format!(
            "[workspace]\nresolver = \"2\"\nmembers = [\"downstream-check\", \"toolkit-consumer\"]\n\n\
             # The packaged client names fleetwire-types by version, as from a registry.\n\
             [patch.crates-io]\n{dependencies}\n{}",
            profiles()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("downstream-check/src")).unwrap();
    std::fs::write(
        root.join("downstream-check/Cargo.toml"),
        "[package]\nname = \"fleetwire-downstream-check\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\nfleetwire-types = \"0.2.0\"\nfleetwire-client = \"0.2.0\"\n",
    )
    .unwrap();
    std::fs::write(root.join("downstream-check/src/main.rs"), DOWNSTREAM_MAIN).unwrap();
    copy_toolkit_consumer(&root.join("toolkit-consumer"), &packaged);
    // This workspace's lock file pins the same versions, so the build needs no registry.
    std::fs::copy(workspace().join("Cargo.lock"), root.join("Cargo.lock")).unwrap();

    // The program on the types and the client compiles no generator.
    let tree = succeeded(
        "cargo tree",
        &cargo(
            root,
            &[
                "tree",
                "--offline",
                "-p",
                "fleetwire-downstream-check",
                "-e",
                "normal,build",
                "--prefix",
                "none",
            ],
        ),
    );
    for name in ["fleetwire-types", "fleetwire-client"] {
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
            root,
            &[
                "run",
                "--quiet",
                "--offline",
                "-p",
                "fleetwire-downstream-check",
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

    // The toolkit's consumer: its build script runs the packaged generator on its schemas, and
    // its tests read the generated documents with the packaged reader.
    let tests = cargo(
        root,
        &["test", "--offline", "-p", "fleetwire-toolkit-consumer"],
    );
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&tests.stdout),
        String::from_utf8_lossy(&tests.stderr)
    );
    assert!(
        tests.status.success(),
        "the toolkit consumer's tests failed (offline: a crate it needs that this workspace does \
         not, such as uuid, is fetched by `cargo fetch --manifest-path tests/toolkit-consumer/Cargo.toml`):\n{report}"
    );
    assert!(report.contains("test result: ok."), "{report}");
    let ran = report
        .lines()
        .filter(|l| l.starts_with("test ") && l.ends_with("... ok"))
        .count();
    assert!(ran >= 8, "the consumer's tests ran ({ran}):\n{report}");
}
