//! Progress while a command waits (a VM starting, a node draining): a spinner with the
//! elapsed time on a terminal, redrawn in place; anywhere else (a pipe, a log file) one plain
//! line per change, so a log reads line by line (issue 30).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// What a command is waiting for, shown on standard error.
pub struct Progress {
    spinner: Option<ProgressBar>,
    last: String,
}

impl Progress {
    pub fn start(what: &str) -> Progress {
        let spinner = std::io::stderr().is_terminal().then(|| {
            let spinner = ProgressBar::new_spinner();
            spinner.set_style(
                ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                    .expect("a valid template"),
            );
            spinner.enable_steady_tick(Duration::from_millis(100));
            spinner
        });
        let mut progress = Progress {
            spinner,
            last: String::new(),
        };
        progress.say(what);
        progress
    }

    /// Shows `what` now: on a terminal in place of the last, elsewhere as a new line when it
    /// changed.
    pub fn say(&mut self, what: &str) {
        if what == self.last {
            return;
        }
        self.last = what.to_string();
        match &self.spinner {
            Some(spinner) => spinner.set_message(what.to_string()),
            None => eprintln!("{what}"),
        }
    }

    /// Clears the spinner, so what the command prints next starts on a clean line.
    pub fn finish(self) {
        if let Some(spinner) = &self.spinner {
            spinner.finish_and_clear();
        }
    }
}
