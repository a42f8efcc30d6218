//! `fleetwire-codegen docs --out DIR` through its binary: a folder any static host serves as
//! it is (an index.html, relative links only, every link and asset a file in the folder, every
//! anchor on its page), every page stating the schema set's version, commit and hash, and a
//! changelog whose entries link to the fields they change (docs/reference-site.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use scraper::{Html, Selector};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_fleetwire-codegen");

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sel(s: &str) -> Selector {
    Selector::parse(s).unwrap()
}

fn docs(workspace: &Path, out: &Path, env: &[(&str, &str)]) {
    let mut cmd = Command::new(BIN);
    cmd.arg("--workspace")
        .arg(workspace)
        .arg("docs")
        .arg("--out")
        .arg(out)
        .env_remove("FLEETWIRE_COMMIT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let run = cmd.output().unwrap();
    assert!(
        run.status.success(),
        "docs --out: {}",
        String::from_utf8_lossy(&run.stderr)
    );
}

fn files_under(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out
}

/// `href` on page `page` (both relative to the site root) → the file and fragment it names;
/// `None` for a link off the site (`https:`, `mailto:`).
fn resolve(page: &Path, href: &str) -> Result<Option<(PathBuf, String)>, String> {
    if href.contains("://") || href.starts_with("mailto:") {
        return Ok(None);
    }
    if href.starts_with('/') {
        return Err(format!(
            "`{href}` is absolute: it breaks under any other prefix"
        ));
    }
    let (path, fragment) = href.split_once('#').unwrap_or((href, ""));
    let mut target = if path.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().unwrap_or(Path::new("")).join(path)
    };
    // Fold `..` and `.`; a link may not leave the folder.
    let mut parts: Vec<Component> = Vec::new();
    for c in target.components() {
        match c {
            Component::ParentDir => {
                parts
                    .pop()
                    .ok_or_else(|| format!("`{href}` leaves the folder"))?;
            }
            Component::CurDir => {}
            other => parts.push(other),
        }
    }
    target = parts.iter().collect();
    if path.ends_with('/') || target.as_os_str().is_empty() {
        target.push("index.html");
    }
    Ok(Some((target, fragment.to_string())))
}

/// Every problem with the links of the site in `dir`; the pages parsed, by path.
fn check_links(dir: &Path) -> (Vec<String>, BTreeMap<PathBuf, Html>) {
    let files = files_under(dir);
    let pages: BTreeMap<PathBuf, Html> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "html"))
        .map(|p| {
            let text = std::fs::read_to_string(dir.join(p)).unwrap();
            (p.clone(), Html::parse_document(&text))
        })
        .collect();
    let ids: BTreeMap<&PathBuf, BTreeSet<String>> = pages
        .iter()
        .map(|(p, html)| {
            let ids = html
                .select(&sel("[id]"))
                .filter_map(|e| e.value().attr("id").map(str::to_string))
                .collect();
            (p, ids)
        })
        .collect();
    let mut problems = Vec::new();
    for (page, html) in &pages {
        for (selector, attr) in [
            ("a[href]", "href"),
            ("link[href]", "href"),
            ("script[src]", "src"),
            ("img[src]", "src"),
        ] {
            for el in html.select(&sel(selector)) {
                let href = el.value().attr(attr).unwrap();
                match resolve(page, href) {
                    Err(why) => problems.push(format!("{}: {why}", page.display())),
                    Ok(None) if selector != "a[href]" => problems.push(format!(
                        "{}: the asset `{href}` is not in the folder",
                        page.display()
                    )),
                    Ok(None) => {}
                    Ok(Some((target, fragment))) => {
                        if !files.contains(&target) {
                            problems.push(format!(
                                "{}: `{href}` → no file {}",
                                page.display(),
                                target.display()
                            ));
                        } else if !fragment.is_empty()
                            && !ids.get(&target).is_some_and(|ids| ids.contains(&fragment))
                        {
                            problems.push(format!(
                                "{}: `{href}` → no anchor #{fragment} in {}",
                                page.display(),
                                target.display()
                            ));
                        }
                    }
                }
            }
        }
    }
    (problems, pages)
}

fn text_of(html: &Html, selector: &str) -> Option<String> {
    html.select(&sel(selector))
        .next()
        .map(|e| e.text().collect::<String>())
}

#[test]
fn docs_out_is_a_folder_any_static_host_serves_and_every_page_says_its_version() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("site");
    docs(&workspace(), &out, &[]);
    assert!(out.join("index.html").is_file());
    assert!(out.join("changelog.html").is_file());
    let (problems, pages) = check_links(&out);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(pages.len() > 20, "{} pages", pages.len());

    let bundle = fleetwire_codegen::Bundle::load(&workspace().join("schemas")).unwrap();
    let set = bundle.set.expect("schemas/schema-set.json");
    let head = Command::new("git")
        .arg("-C")
        .arg(workspace())
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    for (page, html) in &pages {
        let at = page.display();
        assert_eq!(
            text_of(html, "#version-line .stamp-version").as_deref(),
            Some(set.version.to_string().as_str()),
            "{at}"
        );
        let hash = html
            .select(&sel("#version-line .stamp-hash"))
            .next()
            .and_then(|e| e.value().attr("title").map(str::to_string));
        assert_eq!(hash.as_deref(), Some(set.hash.as_str()), "{at}");
        let commit = text_of(html, "#version-line .stamp-commit").unwrap();
        assert!(
            !head.is_empty() && head.starts_with(commit.trim_end_matches("+changes")),
            "{at}: commit {commit}, HEAD {head}"
        );
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

#[test]
fn the_changelog_marks_unreleased_breaking_changes_and_links_each_to_its_field() {
    // A copy of the schemas outside any git checkout, released as they are, then changed.
    let tmp = tempfile::tempdir().unwrap();
    let schemas = tmp.path().join("schemas");
    copy_tree(&workspace().join("schemas"), &schemas);
    let _ = std::fs::remove_dir_all(schemas.join("releases"));
    let release = Command::new(BIN)
        .arg("--workspace")
        .arg(tmp.path())
        .arg("release")
        .output()
        .unwrap();
    assert!(
        release.status.success(),
        "{}",
        String::from_utf8_lossy(&release.stderr)
    );
    let node = schemas.join("node.schema.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&node).unwrap()).unwrap();
    let health = &mut doc["$defs"]["Health"];
    health["required"] = serde_json::json!(["status", "version"]);
    health["properties"]["store"]["description"] = "Other words.".into();
    std::fs::write(&node, serde_json::to_string_pretty(&doc).unwrap()).unwrap();

    let out = tmp.path().join("site");
    docs(tmp.path(), &out, &[("FLEETWIRE_COMMIT", "0123456789ab")]);
    let (problems, pages) = check_links(&out);
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    let changelog = &pages[Path::new("changelog.html")];
    let unreleased = changelog
        .select(&sel("section#unreleased"))
        .next()
        .expect("an Unreleased section");
    let badge = unreleased.select(&sel("h2 .badge.breaking")).next();
    assert_eq!(
        badge.map(|b| b.text().collect::<String>()).as_deref(),
        Some("1 breaking")
    );
    let entries: Vec<(bool, String, String)> = unreleased
        .select(&sel("li.change"))
        .map(|li| {
            let link = li.select(&sel("a")).next().expect("a link to the field");
            (
                li.value()
                    .has_class("breaking", scraper::CaseSensitivity::CaseSensitive),
                link.value().attr("href").unwrap().to_string(),
                li.text().collect::<String>(),
            )
        })
        .collect();
    let made_required = entries
        .iter()
        .find(|(_, href, _)| href == "Health.html#Health.version")
        .unwrap_or_else(|| panic!("{entries:?}"));
    assert!(made_required.0, "{made_required:?}");
    assert!(
        made_required.2.contains("made-required"),
        "{made_required:?}"
    );
    assert!(
        made_required.2.contains("Breaks controller → operator"),
        "{made_required:?}"
    );
    let described = entries
        .iter()
        .find(|(_, href, _)| href == "Health.html#Health.store")
        .unwrap_or_else(|| panic!("{entries:?}"));
    assert!(!described.0 && described.2.contains("description-changed"));
    // The release it is compared with is listed below it, with its tag.
    let version = fleetwire_codegen::Bundle::load(&schemas)
        .unwrap()
        .set
        .unwrap()
        .version;
    let released = changelog
        .select(&sel("section.release"))
        .nth(1)
        .expect("the release below the unreleased changes");
    let id = format!("v{version}");
    assert_eq!(released.value().attr("id"), Some(id.as_str()));
    let tag = format!("schemas-v{version}");
    assert!(released.text().collect::<String>().contains(&tag));

    // Outside git, the commit comes from FLEETWIRE_COMMIT, else is unknown.
    let index = &pages[Path::new("index.html")];
    assert_eq!(
        text_of(index, "#version-line .stamp-commit").as_deref(),
        Some("0123456789ab")
    );
    let plain = tmp.path().join("plain");
    docs(tmp.path(), &plain, &[]);
    let html = Html::parse_document(&std::fs::read_to_string(plain.join("index.html")).unwrap());
    assert_eq!(
        text_of(&html, "#version-line .stamp-commit").as_deref(),
        Some("unknown")
    );
}
