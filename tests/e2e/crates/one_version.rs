//! One version story (docs/versioning.md, "One version"): the binary, every crate of the
//! workspace, the schema set, the reference site and the changelog say the same version, and
//! agree on whether it is released: a release has its copy under `schemas/releases/<version>`
//! and a dated changelog heading; unreleased work says so, and after which release, in the
//! changelog's heading, `fleetwire --version` and the site's version line.

use crate::support::{fleetwire, workspace};

/// `## [X] - REST`: the newest version heading of CHANGELOG.md.
fn changelog_head(text: &str) -> (String, String) {
    let line = text
        .lines()
        .find(|l| l.starts_with("## ["))
        .expect("CHANGELOG.md has a version heading");
    let (version, rest) = line["## [".len()..]
        .split_once(']')
        .expect("## [version] - date");
    (
        version.to_string(),
        rest.trim_start_matches([' ', '-']).trim().to_string(),
    )
}

#[test]
fn the_binary_the_crates_the_schema_set_the_site_and_the_changelog_say_one_version() {
    let root = workspace();
    let set: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("schemas/schema-set.json")).unwrap(),
    )
    .unwrap();
    let version = set["version"].as_str().unwrap().to_string();

    // Every crate of the workspace: the shared version, and the generated crates' own.
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        manifest["workspace"]["package"]["version"].as_str(),
        Some(version.as_str()),
        "Cargo.toml's workspace version is not the schema set's {version}"
    );
    for (name, dep) in manifest["workspace"]["dependencies"].as_table().unwrap() {
        if dep.get("path").is_some() {
            assert_eq!(
                dep.get("version").and_then(|v| v.as_str()),
                Some(version.as_str()),
                "the workspace's dependency on {name} is not at {version}"
            );
        }
    }
    assert_eq!(env!("CARGO_PKG_VERSION"), version, "the fleetwire crate");
    assert_eq!(fleetwire_types::SCHEMA_SET_VERSION, version);

    // Released or not: the copy under schemas/releases/ decides.
    let released = root.join("schemas/releases").join(&version).is_dir();
    let last_release = std::fs::read_dir(root.join("schemas/releases"))
        .unwrap()
        .filter_map(|e| semver::Version::parse(&e.ok()?.file_name().to_string_lossy()).ok())
        .filter(|v| v < &semver::Version::parse(&version).unwrap())
        .max()
        .expect("an earlier release");
    let release_line = if released {
        format!("release {version}")
    } else {
        format!("unreleased work after release {last_release}")
    };

    let (head, when) = changelog_head(&std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap());
    assert_eq!(head, version, "CHANGELOG.md's newest heading");
    if released {
        assert!(
            chrono::NaiveDate::parse_from_str(&when, "%Y-%m-%d").is_ok(),
            "{version} is released (schemas/releases/{version}): its changelog heading has its date, not {when:?}"
        );
    } else {
        assert_eq!(
            when, "Unreleased",
            "{version} is not released (no schemas/releases/{version}): its changelog heading says so"
        );
    }

    let output = fleetwire().arg("--version").output().unwrap();
    let said = String::from_utf8(output.stdout).unwrap();
    assert_eq!(said.trim(), format!("fleetwire {version} ({release_line})"));

    // The site, as the controller serves it: the header and the version line.
    let page = fleetwire::reference_site::get("index.html").unwrap();
    let html = scraper::Html::parse_document(std::str::from_utf8(page.bytes).unwrap());
    let text = |css: &str| -> String {
        html.select(&scraper::Selector::parse(css).unwrap())
            .next()
            .unwrap_or_else(|| panic!("{css} on the site's index"))
            .text()
            .collect()
    };
    assert_eq!(text("#version-line .stamp-version"), version);
    assert_eq!(text("#version-line .stamp-release"), release_line);
    let header = text("header .stamp");
    assert!(
        header.starts_with(&format!("v{version}")) && header.contains("unreleased") != released,
        "the header's version: {header:?}"
    );
}
