//! The shell blocks of README.md and docs/**/*.md, as the docs test reads them (issue 31, "Docs
//! that run"; CONTRIBUTING.md, "Docs that run").
//!
//! A fenced block tagged `console`, `sh`, `bash` or `shell` is one of three things:
//! - a **session** (`console`): `$ command` lines, each followed by the output it prints
//!   (standard output and error as they interleave), trycmd's format: `[..]` stands for any text
//!   within a line, a line `...` for any lines, and a line `? N` after the output for an exit
//!   status other than 0. A command line ending in `\` goes on at the next line.
//! - **not run**, saying why in an HTML comment the line before the fence:
//!   `<!-- not-run: needs a second host -->`;
//! - anything else is a mistake the test names: a block that talks to a fleet or a file either
//!   runs, with its output in the doc, or says why it cannot.
//!
//! Where a session runs is said the same way: `<!-- runs-on: plain -->` (the fleet of
//! `fleetwire up --plain-http`), `<!-- runs-on: secure plain -->` (both); by default a session
//! runs on the mTLS fleet of `fleetwire up` (tests/e2e/docs/docs_fleet.rs).

use std::path::{Path, PathBuf};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

/// The two fleets a session can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Secure,
    Plain,
}

/// One command of a session and what the doc says it prints.
#[derive(Debug, Clone)]
pub struct Step {
    pub command: String,
    pub expected: String,
    pub status: i32,
    /// The line of the doc the command starts on.
    pub line: usize,
}

/// What a shell block is.
#[derive(Debug, Clone)]
pub enum Kind {
    Session {
        modes: Vec<Mode>,
        steps: Vec<Step>,
    },
    NotRun {
        reason: String,
    },
    /// A block the test cannot take, with why (a mistake of the doc).
    Mistake(String),
}

#[derive(Debug, Clone)]
pub struct Block {
    pub file: PathBuf,
    pub line: usize,
    pub kind: Kind,
}

impl Block {
    /// `docs/controller.md:15`, relative to the workspace.
    pub fn place(&self, root: &Path) -> String {
        let file = self.file.strip_prefix(root).unwrap_or(&self.file);
        format!("{}:{}", file.display(), self.line)
    }
}

const SHELL_TAGS: &[&str] = &["console", "sh", "bash", "shell"];

/// The markdown files the test reads: README.md, then docs/ (and its folders) by name.
pub fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut folders = vec![root.join("docs")];
    let mut docs = Vec::new();
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                docs.push(path);
            }
        }
    }
    docs.sort();
    files.extend(docs);
    files
}

/// Every shell block of `text` (the contents of `file`).
pub fn shell_blocks(file: &Path, text: &str) -> Vec<Block> {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut blocks = Vec::new();
    // The markers an HTML comment just before the fence gave, and where that comment ended.
    let mut markers: Option<(usize, Vec<(String, String)>)> = None;
    let mut open: Option<(usize, String, String)> = None;
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Html(html) => {
                let found = parse_markers(&html);
                if !found.is_empty() {
                    markers = Some((range.end, found));
                }
            }
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                let tag = info.split_whitespace().next().unwrap_or("").to_string();
                open = Some((range.start, tag, String::new()));
            }
            Event::Text(t) => {
                if let Some((_, _, body)) = open.as_mut() {
                    body.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => {
                let Some((start, tag, body)) = open.take() else {
                    continue;
                };
                // A marker counts only for the fence right after it (blank space between).
                let marks = markers
                    .take()
                    .filter(|(end, _)| text[*end..start].trim().is_empty())
                    .map(|(_, m)| m)
                    .unwrap_or_default();
                if !SHELL_TAGS.contains(&tag.as_str()) {
                    continue;
                }
                let line = line_of(start);
                let kind = classify(&tag, &body, line + 1, &marks);
                blocks.push(Block {
                    file: file.to_path_buf(),
                    line,
                    kind,
                });
            }
            _ => {}
        }
    }
    blocks
}

/// `<!-- not-run: why -->`, `<!-- runs-on: plain -->`: (key, value), one marker a comment.
fn parse_markers(html: &str) -> Vec<(String, String)> {
    let Some(inner) = html
        .trim()
        .strip_prefix("<!--")
        .and_then(|s| s.strip_suffix("-->"))
    else {
        return Vec::new();
    };
    let Some((key, value)) = inner.split_once(':') else {
        return Vec::new();
    };
    let key = key.trim();
    match ["not-run", "runs-on"].contains(&key) {
        true => vec![(key.to_string(), value.trim().to_string())],
        false => Vec::new(),
    }
}

fn classify(tag: &str, body: &str, first_line: usize, marks: &[(String, String)]) -> Kind {
    let mark = |key: &str| marks.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    if let Some(reason) = mark("not-run") {
        if reason.is_empty() {
            return Kind::Mistake("`<!-- not-run: -->` without a reason".into());
        }
        return Kind::NotRun { reason };
    }
    if tag != "console" {
        return Kind::Mistake(format!(
            "a `{tag}` block the test cannot run: write it as a `console` session (`$ command`, \
             then what it prints) or say why it cannot run (`<!-- not-run: REASON -->` the line \
             before the fence)"
        ));
    }
    let modes = match mark("runs-on") {
        None => vec![Mode::Secure],
        Some(list) => {
            let mut modes = Vec::new();
            for word in list.split_whitespace() {
                match word {
                    "secure" => modes.push(Mode::Secure),
                    "plain" => modes.push(Mode::Plain),
                    other => {
                        return Kind::Mistake(format!(
                            "`runs-on: {other}`: a session runs on `secure`, `plain` or both"
                        ))
                    }
                }
            }
            modes
        }
    };
    match session(body, first_line) {
        Ok(steps) => Kind::Session { modes, steps },
        Err(why) => Kind::Mistake(why),
    }
}

/// The steps of a `console` block.
fn session(body: &str, first_line: usize) -> Result<Vec<Step>, String> {
    let mut steps: Vec<Step> = Vec::new();
    let mut lines = body.lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        if let Some(command) = line.strip_prefix("$ ") {
            let mut command = command.to_string();
            while command.ends_with('\\') {
                let Some((_, next)) = lines.next() else {
                    return Err(format!(
                        "line {}: the command goes on past the block",
                        first_line + n
                    ));
                };
                command.push('\n');
                command.push_str(next);
            }
            steps.push(Step {
                command,
                expected: String::new(),
                status: 0,
                line: first_line + n,
            });
            continue;
        }
        let Some(step) = steps.last_mut() else {
            return Err(format!(
                "line {}: a session starts with a `$ ` command line",
                first_line + n
            ));
        };
        if let Some(status) = line.strip_prefix("? ") {
            step.status = status.trim().parse().map_err(|_| {
                format!(
                    "line {}: `? {status}`: an exit status is a number",
                    first_line + n
                )
            })?;
            continue;
        }
        step.expected.push_str(line);
        step.expected.push('\n');
    }
    if steps.is_empty() {
        return Err("an empty session".into());
    }
    Ok(steps)
}
