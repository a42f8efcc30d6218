//! Every file of the kept corpora (`corpus/<target>/`) and of the crashes the fuzzer found
//! (`crashes/<target>/`, each fixed in the code) through its target's checks: the fuzz targets
//! as regression tests, without a fuzzer (docs/reliability/parser-fuzz.md).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use fleetwire_fuzz::targets::{Target, TARGETS};

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs every file of `folder/<target>/`; returns how many ran and the failures.
fn replay(target: &Target, folder: &str) -> (usize, Vec<String>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(folder)
        .join(target.name);
    (target.prepare)();
    let files = files(&dir);
    let failures = files
        .iter()
        .filter_map(|path| {
            let data = std::fs::read(path).expect("reading a corpus file");
            catch_unwind(AssertUnwindSafe(|| (target.check)(&data)))
                .err()
                .map(|panic| {
                    let why = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    format!("{}: {why}", path.display())
                })
        })
        .collect();
    (files.len(), failures)
}

fn run(name: &str) {
    let target = TARGETS.iter().find(|t| t.name == name).expect("a target");
    let (seeds, mut failures) = replay(target, "corpus");
    assert!(seeds > 0, "no corpus for {name}");
    let (_, crash_failures) = replay(target, "crashes");
    failures.extend(crash_failures);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_documents_corpus_and_crashes_hold_their_properties() {
    run("documents");
}

#[test]
fn the_desired_intake_corpus_and_crashes_hold_their_properties() {
    run("desired_intake");
}

#[test]
fn the_csr_corpus_and_crashes_hold_their_properties() {
    run("csr");
}

#[test]
fn the_contact_log_corpus_and_crashes_hold_their_properties() {
    run("contact_log");
}

#[test]
fn every_target_has_a_test_here() {
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(names, ["documents", "desired_intake", "csr", "contact_log"]);
}
