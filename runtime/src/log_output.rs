//! The log output of the long-running programs (controller and agent): tracing to standard
//! error, as text or JSON lines, filtered by `RUST_LOG` (default `info`). Colours only when
//! standard error is a terminal and `NO_COLOR` is unset (https://no-color.org): a log file
//! (`fleetwire up` writes the children's logs to files, systemd's journal, a pipe) never gets
//! escape codes (issue 30).

use std::io::IsTerminal;

/// Whether the log may be coloured: standard error is a terminal, and `NO_COLOR` is unset or
/// empty.
pub fn colours() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Installs the log subscriber (once: a second call leaves the first in place); `json` for
/// JSON lines.
pub fn init(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours())
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
