//! The changelog page's content (`changelog.html`, docs/reference-site.md): each release's
//! changes against the release before it, and the unreleased ones, from `schema_diff`; each
//! change linked to the field's anchor on its page.

use crate::model::{Model, API_PAGE, INDEX_PAGE};
use crate::releases::{tag, HistoryEntry};
use crate::schema_diff::Change;

/// The page's file name.
pub const CHANGELOG_PAGE: &str = "changelog.html";

/// One release (or the unreleased changes) on the page.
pub struct ReleaseView {
    pub anchor: String,
    pub title: String,
    /// The git tag of the release's commit; empty for the unreleased changes.
    pub tag: String,
    /// The release compared with; empty for the first release.
    pub since: String,
    pub hash: String,
    pub breaking: usize,
    pub entries: Vec<EntryView>,
}

pub struct EntryView {
    pub breaking: bool,
    pub rule: String,
    /// What the link shows: `Definition.field`, `Definition` or `METHOD /path`.
    pub target: String,
    /// The anchor on the site; empty when the thing is gone from it (removed).
    pub href: String,
    /// The sentence, without the subject the link already names, as (is code, text) runs: the
    /// engine marks names with backticks.
    pub message: Vec<(bool, String)>,
    pub pointer: String,
    /// The directions it breaks, and those it does not (`writer → reader`, comma-separated).
    pub breaks: String,
    pub compatible_for: String,
}

/// The site's link to what `change` is about, if the current site still shows it: the field's
/// row, else its definition's section, else the operation.
fn href(model: &Model, change: &Change) -> String {
    if let Some(t) = model.type_doc(&change.subject) {
        let page = model
            .home
            .get(&t.name)
            .map(String::as_str)
            .unwrap_or(INDEX_PAGE);
        let field = format!("{}.{}", t.name, change.field);
        let is_row = !change.field.is_empty() && t.all_rows().any(|r| r.anchor == field);
        return format!("{page}#{}", if is_row { &field } else { &t.name });
    }
    let operation = model.api.as_ref().and_then(|api| {
        api.operations()
            .find(|op| format!("{} {}", op.method, op.path) == change.subject)
    });
    operation.map_or_else(String::new, |op| format!("{API_PAGE}#{}", op.id))
}

/// `text` split at backticks: every odd run is code.
fn code_runs(text: &str) -> Vec<(bool, String)> {
    text.split('`')
        .enumerate()
        .filter(|(_, run)| !run.is_empty())
        .map(|(i, run)| (i % 2 == 1, run.to_string()))
        .collect()
}

fn entry(model: &Model, change: &Change) -> EntryView {
    let join = |breaking: bool| {
        change
            .directions
            .iter()
            .filter(|d| d.breaking == breaking)
            .map(|d| format!("{} → {}", d.writer.as_str(), d.reader.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    EntryView {
        breaking: change.breaking,
        rule: change.rule.as_str(),
        target: if change.field.is_empty() {
            change.subject.clone()
        } else {
            format!("{}.{}", change.subject, change.field)
        },
        href: href(model, change),
        message: code_runs(
            change
                .message
                .strip_prefix(&format!("{}: ", change.subject))
                .unwrap_or(&change.message),
        ),
        pointer: change.pointer.clone(),
        breaks: join(true),
        compatible_for: join(false),
    }
}

/// Every entry of the model's changelog, newest first; breaking changes first in each.
pub fn views(model: &Model) -> Vec<ReleaseView> {
    model
        .changelog
        .iter()
        .map(|e: &HistoryEntry| {
            let mut entries: Vec<EntryView> = e
                .diff
                .iter()
                .flat_map(|d| d.changes.iter())
                .map(|c| entry(model, c))
                .collect();
            entries.sort_by_key(|e| !e.breaking);
            ReleaseView {
                anchor: e
                    .version
                    .as_ref()
                    .map_or_else(|| "unreleased".to_string(), |v| format!("v{v}")),
                title: e
                    .version
                    .as_ref()
                    .map_or_else(|| "Unreleased".to_string(), |v| v.to_string()),
                tag: e.version.as_ref().map(tag).unwrap_or_default(),
                since: e
                    .diff
                    .as_ref()
                    .and_then(|d| d.base.version.clone())
                    .unwrap_or_default(),
                hash: e.hash.clone(),
                breaking: entries.iter().filter(|e| e.breaking).count(),
                entries,
            }
        })
        .collect()
}
