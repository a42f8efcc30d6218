//! `fleetwire-types` is what other teams import: building it (its build script included)
//! compiles no HTML. The reference site is rendered by the runtime's build script, and
//! `fleetwire-codegen`'s `site` feature (askama) is off for this crate's build-dependency.

use std::process::Command;

/// Crates of the reference site and its tests: templating and HTML parsing.
const SITE_CRATES: &[&str] = &[
    "askama",
    "askama_derive",
    "askama_macros",
    "askama_parser",
    "scraper",
    "html5ever",
    "markup5ever",
    "selectors",
    "cssparser",
    "tendril",
    "ego-tree",
];

#[test]
fn the_types_crate_and_its_build_compile_no_html() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "fleetwire-types",
            "-e",
            "normal,build",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8(output.stdout).expect("cargo tree prints UTF-8");
    assert!(
        tree.lines().any(|l| l.starts_with("fleetwire-codegen ")),
        "the build-dependency on fleetwire-codegen is in the tree:\n{tree}"
    );
    let offending: Vec<&str> = tree
        .lines()
        .filter(|line| {
            let name = line.split_whitespace().next().unwrap_or_default();
            SITE_CRATES.contains(&name)
        })
        .collect();
    assert!(
        offending.is_empty(),
        "fleetwire-types depends on site crates:\n{}",
        offending.join("\n")
    );
}
