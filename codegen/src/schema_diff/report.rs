//! `diff`'s output: lines for people, or one JSON document for tools.

use super::engine::Diff;

fn side(info: &super::engine::SetInfo) -> String {
    match &info.version {
        Some(v) => format!("{} ({v})", info.label),
        None => format!("{} (no schema-set version)", info.label),
    }
}

/// The report as text: a header, one block per change (breaking first), the verdict.
pub fn text(diff: &Diff) -> String {
    let mut out = format!("schema set: {} → {}\n", side(&diff.base), side(&diff.head));
    if diff.changes.is_empty() {
        out.push_str("no changes\n");
    }
    let ordered = diff
        .breaking()
        .chain(diff.changes.iter().filter(|c| !c.breaking));
    for c in ordered {
        out.push_str(&format!(
            "\n{} {}: {}\n  at {}\n",
            if c.breaking { "BREAKING" } else { "compatible" },
            c.rule.as_str(),
            c.message,
            c.pointer
        ));
        if !c.documents.is_empty() {
            out.push_str(&format!("  in {}\n", c.documents.join(", ")));
        }
        let (breaks, fine): (Vec<_>, Vec<_>) = c.directions.iter().partition(|d| d.breaking);
        let label = |d: &&super::change::DirectionVerdict| {
            format!("{} → {}", d.writer.as_str(), d.reader.as_str())
        };
        if !breaks.is_empty() {
            out.push_str(&format!(
                "  breaks {}\n",
                breaks.iter().map(label).collect::<Vec<_>>().join(", ")
            ));
        }
        if !fine.is_empty() {
            out.push_str(&format!(
                "  compatible for {}\n",
                fine.iter().map(label).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    out.push_str(&format!(
        "\n{} change(s), {} breaking: {}\n",
        diff.changes.len(),
        diff.verdict.breaking,
        diff.verdict.message
    ));
    out
}

/// The report as JSON (`--format json`).
pub fn json(diff: &Diff) -> String {
    let mut text = serde_json::to_string_pretty(diff).unwrap_or_default();
    text.push('\n');
    text
}
