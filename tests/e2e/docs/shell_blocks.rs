//! Every shell block of README.md and docs/**/*.md runs against a real fleet, or says why it
//! cannot (the markers of tests/e2e/docs/blocks.rs): each `console` session's commands run in
//! the directory of `fleetwire up` (mTLS, and `--plain-http` for the sessions marked so), and what
//! each prints must match what the doc shows, trycmd's wildcards allowed (snapbox compares).

use std::path::Path;

use snapbox::{Assert, IntoData};

use super::blocks::{doc_files, shell_blocks, Block, Kind, Mode};
use super::docs_fleet::DocsFleet;
use crate::support::workspace;

/// Runs the sessions of `blocks` that run in `fleet`'s mode, in order; one line per failure.
fn run_sessions(fleet: &DocsFleet, root: &Path, blocks: &[Block]) -> Vec<String> {
    let mut failures = Vec::new();
    for block in blocks {
        let Kind::Session { modes, steps } = &block.kind else {
            continue;
        };
        if !modes.contains(&fleet.mode) {
            continue;
        }
        for step in steps {
            let place = format!(
                "{}:{} ({:?} fleet)",
                block
                    .file
                    .strip_prefix(root)
                    .unwrap_or(&block.file)
                    .display(),
                step.line,
                fleet.mode
            );
            let (output, status) = fleet.run(&step.command);
            if status != step.status {
                failures.push(format!(
                    "{place}: `{}` exited {status}, the doc says {}; it printed:\n{output}",
                    step.command, step.status
                ));
                continue;
            }
            if let Err(diff) = Assert::new().try_eq(
                Some(&place),
                output.into_data(),
                step.expected.clone().into_data(),
            ) {
                failures.push(format!(
                    "{place}: `{}` printed what the doc does not show:\n{diff}",
                    step.command
                ));
            }
        }
    }
    failures
}

fn all_blocks(root: &Path) -> Vec<Block> {
    doc_files(root)
        .iter()
        .flat_map(|file| shell_blocks(file, &std::fs::read_to_string(file).unwrap()))
        .collect()
}

#[test]
fn every_shell_block_of_the_docs_runs_or_says_why_not() {
    let root = workspace().canonicalize().unwrap();
    let blocks = all_blocks(&root);
    let mut failures: Vec<String> = blocks
        .iter()
        .filter_map(|b| match &b.kind {
            Kind::Mistake(why) => Some(format!("{}: {why}", b.place(&root))),
            _ => None,
        })
        .collect();
    let count = |mode: Mode| {
        blocks
            .iter()
            .filter(|b| matches!(&b.kind, Kind::Session { modes, .. } if modes.contains(&mode)))
            .count()
    };
    let not_run = blocks
        .iter()
        .filter(|b| matches!(b.kind, Kind::NotRun { .. }))
        .count();
    eprintln!(
        "docs: {} shell blocks; {} sessions on the mTLS fleet, {} on the plain one, {not_run} not run (each says why)",
        blocks.len(),
        count(Mode::Secure),
        count(Mode::Plain)
    );
    for block in &blocks {
        if let Kind::NotRun { reason } = &block.kind {
            eprintln!("  not run: {}: {reason}", block.place(&root));
        }
    }
    for mode in [Mode::Secure, Mode::Plain] {
        if count(mode) == 0 {
            continue;
        }
        let fleet = DocsFleet::up(mode);
        failures.extend(run_sessions(&fleet, &root, &blocks));
    }
    assert!(
        failures.is_empty(),
        "{} of the docs' examples do not do what they say:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The test's own check: a session whose output is not what the doc shows, a wrong exit status
/// and a block with neither a session nor a reason are each caught.
#[test]
fn an_example_that_lies_fails() {
    let doc = "\
<!-- runs-on: plain -->
```console
$ fleetwire validate .fleetwire/agent/reported.json
.fleetwire/agent/reported.json: valid [..]
$ fleetwire nodes list --config .fleetwire/operator.toml
NODE[..]
[..] draining [..]
```

<!-- runs-on: plain -->
```console
$ fleetwire validate nothing-here.json
? 0
```

```sh
fleetwire fleet
```

<!-- not-run: -->
```sh
fleetwire fleet
```
";
    let root = Path::new("/lies");
    let blocks = shell_blocks(&root.join("lies.md"), doc);
    let mistakes: Vec<_> = blocks
        .iter()
        .filter(|b| matches!(b.kind, Kind::Mistake(_)))
        .map(|b| b.line)
        .collect();
    assert_eq!(mistakes, [16, 21], "{blocks:#?}");
    let fleet = DocsFleet::up(Mode::Plain);
    let failures = run_sessions(&fleet, root, &blocks);
    assert_eq!(failures.len(), 2, "{failures:#?}");
    assert!(
        failures[0].contains("lies.md:5") && failures[0].contains("draining"),
        "{}",
        failures[0]
    );
    assert!(
        failures[1].contains("lies.md:12") && failures[1].contains("exited 2"),
        "{}",
        failures[1]
    );
}
