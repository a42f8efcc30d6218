//! What the workspace's manifests promise, checked against cargo's own view of them
//! (`cargo metadata`, which reads and resolves but builds nothing):
//!
//! - the number of test executables `cargo test --workspace` builds and runs stays at most
//!   [`MOST_TEST_BINARIES`]: every test binary links its crate and its dependencies again, and
//!   cargo runs them one after another (CONTRIBUTING.md, "Where a new test goes");
//! - each crate's `rust-version` is the true one: the newest `rust-version` in the tree of what
//!   building it compiles (normal and build dependencies, for this platform), so an older
//!   toolchain is told so by cargo instead of failing in a dependency;
//! - every member takes the workspace's lints, and they deny `unsafe_code`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

use crate::support::workspace;

/// The budget of test executables (the house rule of CONTRIBUTING.md).
const MOST_TEST_BINARIES: usize = 12;

fn cargo_metadata(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO"))
        .current_dir(workspace())
        .args(["metadata", "--format-version", "1", "--locked"])
        .args(args)
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON")
}

fn strs(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn cargo_test_builds_at_most_twelve_test_binaries() {
    let metadata = cargo_metadata(&["--no-deps"]);
    let mut binaries = Vec::new();
    for package in metadata["packages"].as_array().unwrap() {
        let defaults: BTreeSet<&str> = strs(&package["features"]["default"]).into_iter().collect();
        for target in package["targets"].as_array().unwrap() {
            let kinds = strs(&target["kind"]);
            let tested = target["test"].as_bool() == Some(true)
                && kinds
                    .iter()
                    .any(|k| ["lib", "rlib", "bin", "test", "proc-macro"].contains(k));
            // A target whose required features are off by default is not built by
            // `cargo test --workspace`.
            let built = strs(&target["required-features"])
                .iter()
                .all(|f| defaults.contains(f));
            if tested && built {
                binaries.push(format!(
                    "{} {} {}",
                    package["name"].as_str().unwrap(),
                    kinds.join(","),
                    target["name"].as_str().unwrap()
                ));
            }
        }
    }
    // Past the harness's capture: the count is for whoever runs the tests to see.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "cargo test --workspace builds {} test binaries (at most {MOST_TEST_BINARIES}):\n  {}",
        binaries.len(),
        binaries.join("\n  ")
    );
    assert!(
        binaries.len() <= MOST_TEST_BINARIES,
        "{} test binaries, more than {MOST_TEST_BINARIES}: make the new test a module of its \
         crate's one test binary (or of tests/e2e), or mark a target without tests `test = false`:\n  {}",
        binaries.len(),
        binaries.join("\n  ")
    );
}

/// `1.85` or `1.85.1` as a comparable triple.
fn version(text: &str) -> (u64, u64, u64) {
    let mut parts = text.split('.').map(|p| p.parse::<u64>().unwrap());
    (
        parts.next().unwrap(),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

fn host_triple() -> String {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc -vV");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .expect("rustc -vV names the host")
}

#[test]
fn every_crate_declares_the_rust_version_its_dependency_tree_needs() {
    let metadata = cargo_metadata(&["--filter-platform", &host_triple()]);
    let packages: BTreeMap<&str, &Value> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    // Each package's dependencies that building it compiles: normal and build, not dev.
    let mut compiled: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for node in metadata["resolve"]["nodes"].as_array().unwrap() {
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["kind"].as_str() != Some("dev"))
            })
            .map(|d| d["pkg"].as_str().unwrap())
            .collect();
        compiled.insert(node["id"].as_str().unwrap(), deps);
    }
    let mut wrong = Vec::new();
    for member in strs(&metadata["workspace_members"]) {
        let package = packages[member];
        if package["publish"] == serde_json::json!([]) {
            continue; // not published: no toolchain but the workspace's builds it
        }
        let name = package["name"].as_str().unwrap();
        // The newest rust-version in its tree, and a dependency that asks for it.
        let mut needed = ((0, 0, 0), String::from("(nothing)"));
        let mut seen = BTreeSet::new();
        // An optional dependency its default features leave off is not compiled for its users
        // (the generated crates' `regenerate`, which only this workspace turns on).
        let optional_off: BTreeSet<&str> = package["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["optional"] == true)
            .filter_map(|d| d["name"].as_str())
            .filter(|name| {
                !strs(&package["features"]["default"])
                    .iter()
                    .any(|f| *f == *name || *f == format!("dep:{name}"))
            })
            .collect();
        let mut stack: Vec<&str> = compiled[member]
            .iter()
            .copied()
            .filter(|id| !optional_off.contains(packages[id]["name"].as_str().unwrap()))
            .collect();
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            let dep = packages[id];
            if let Some(v) = dep["rust_version"].as_str() {
                if version(v) > needed.0 {
                    needed = (
                        version(v),
                        format!(
                            "{} {} (rust-version {v})",
                            dep["name"].as_str().unwrap(),
                            dep["version"].as_str().unwrap()
                        ),
                    );
                }
            }
            stack.extend(compiled[id].iter().copied());
        }
        let declared = package["rust_version"].as_str().map(version);
        if declared != Some(needed.0) {
            wrong.push(format!(
                "{name}: declares {:?}, its tree needs {}.{}.{} ({})",
                package["rust_version"].as_str(),
                needed.0 .0,
                needed.0 .1,
                needed.0 .2,
                needed.1
            ));
        }
    }
    assert!(wrong.is_empty(), "rust-version:\n{}", wrong.join("\n"));
}

/// One manifest, parsed.
fn manifest(path: &std::path::Path) -> toml::Table {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.parse()
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// `unsafe_code` is denied for the whole workspace, and every member takes the workspace's
/// lints: new unsafe code needs an `#[allow(unsafe_code)]` a reviewer sees, with its
/// `// SAFETY:` note (CONTRIBUTING.md; rustix wraps the system calls made by hand).
#[test]
fn every_member_takes_the_workspace_lints_which_deny_unsafe_code() {
    let root = manifest(&workspace().join("Cargo.toml"));
    let level = root
        .get("workspace")
        .and_then(|w| w.get("lints"))
        .and_then(|l| l.get("rust"))
        .and_then(|r| r.get("unsafe_code"))
        .and_then(|u| u.as_str().or_else(|| u.get("level")?.as_str()));
    assert!(
        matches!(level, Some("deny" | "forbid")),
        "[workspace.lints.rust] unsafe_code is {level:?}, not deny"
    );
    let metadata = cargo_metadata(&["--no-deps"]);
    let members: BTreeSet<&str> = strs(&metadata["workspace_members"]).into_iter().collect();
    let mut without = Vec::new();
    for package in metadata["packages"].as_array().unwrap() {
        if !members.contains(package["id"].as_str().unwrap()) {
            continue;
        }
        let path = std::path::Path::new(package["manifest_path"].as_str().unwrap());
        let takes = manifest(path)
            .get("lints")
            .and_then(|l| l.get("workspace"))
            .and_then(toml::Value::as_bool);
        if takes != Some(true) {
            without.push(path.display().to_string());
        }
    }
    assert!(members.len() >= 6, "{members:?}");
    assert!(
        without.is_empty(),
        "without `[lints] workspace = true`:\n{}",
        without.join("\n")
    );
}
