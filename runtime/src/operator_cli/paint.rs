//! Colours for people: a state word in green when all is well, yellow while it changes, red
//! when it failed. The escape codes are always written here; what prints them
//! (`anstream`, in `commands`) strips them unless the stream is a terminal and `NO_COLOR` is
//! unset (https://no-color.org), so files, pipes and scripts never see them.

use anstyle::{AnsiColor, Style};

const GOOD: Style = AnsiColor::Green.on_default();
const CHANGING: Style = AnsiColor::Yellow.on_default();
const BAD: Style = AnsiColor::Red.on_default().bold();

/// The style of a state word: a node's status (`ready,cordoned` by its first part and its
/// flags) or a VM's state.
fn style_of(word: &str) -> Option<Style> {
    let mut parts = word.split(',');
    let first = parts.next().unwrap_or_default();
    let flagged = parts.next().is_some();
    match first {
        "unreachable" | "Error" => Some(BAD),
        "registering" | "draining" | "Provisioning" | "Stopped" => Some(CHANGING),
        "ready" | "Running" if flagged => Some(CHANGING),
        "ready" | "Running" => Some(GOOD),
        _ => None,
    }
}

/// `word` with its colour, if it has one.
pub fn word(word: &str) -> String {
    match style_of(word) {
        Some(style) => format!("{style}{word}{style:#}"),
        None => word.to_string(),
    }
}

/// `text` in the colour of an error (the `error:` of a message).
pub fn error(text: &str) -> String {
    format!("{BAD}{text}{BAD:#}")
}

/// `text` in the colour of a warning.
pub fn warning(text: &str) -> String {
    format!("{CHANGING}{text}{CHANGING:#}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_coloured_by_what_they_say() {
        assert_eq!(word("ready"), "\u{1b}[32mready\u{1b}[0m");
        assert!(word("ready,cordoned").starts_with("\u{1b}[33m"));
        assert!(word("Error").starts_with("\u{1b}[1m\u{1b}[31m") || word("Error").contains("31"));
        assert_eq!(word("process"), "process");
    }
}
