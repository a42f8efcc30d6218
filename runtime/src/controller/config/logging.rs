//! The controller's log output: tracing to stderr, as text or JSON lines, filtered by
//! `RUST_LOG` (default `info`).

use crate::controller::config::arguments::LogFormat;

/// Installs the log subscriber (once: a second call leaves the first in place).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
