//! `fleetwire-client` is what other teams and the operator CLI import: what it compiles into a
//! program is the types, an HTTP client and TLS, never the code generator, a template engine or
//! the server. (The types crate's own build script is `fleetwire-types`' concern, checked by
//! its `light_dependencies` test.)

use std::process::Command;

/// Crates a client program must not link: the generator, the site, the server side.
const HEAVY_CRATES: &[&str] = &[
    "fleetwire-codegen",
    "fleetwire",
    "typify",
    "askama",
    "scraper",
    "axum",
    "rusqlite",
    "rcgen",
];

#[test]
fn the_client_links_no_generator_site_or_server() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "fleetwire-client",
            "-e",
            "normal",
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
        tree.lines().any(|l| l.starts_with("fleetwire-types ")),
        "the client is built on fleetwire-types:\n{tree}"
    );
    let offending: Vec<&str> = tree
        .lines()
        .filter(|line| HEAVY_CRATES.contains(&line.split_whitespace().next().unwrap_or_default()))
        .collect();
    assert!(
        offending.is_empty(),
        "fleetwire-client links heavy crates:\n{}",
        offending.join("\n")
    );
}
