//! `fleetwire-types` is what other teams import: building it compiles no code generator, no
//! template engine and no HTML (its build script's generator is behind `regenerate`, a feature
//! only this workspace turns on; docs/codegen.md, "One generator path").

use std::process::Command;

/// Crates of the code generator, the reference site and its tests.
const HEAVY_CRATES: &[&str] = &[
    "fleetwire-codegen",
    "typify",
    "typify-impl",
    "schemars",
    "prettyplease",
    "openapiv3",
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
fn the_types_crate_and_its_build_compile_no_generator_and_no_html() {
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
        tree.lines().any(|l| l.starts_with("jsonschema ")),
        "the tree lists the crate's dependencies:\n{tree}"
    );
    let offending: Vec<&str> = tree
        .lines()
        .filter(|line| {
            let name = line.split_whitespace().next().unwrap_or_default();
            HEAVY_CRATES.contains(&name)
        })
        .collect();
    assert!(
        offending.is_empty(),
        "fleetwire-types depends on generator or site crates:\n{}",
        offending.join("\n")
    );
}
