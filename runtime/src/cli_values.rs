//! Parsers of command-line values, for clap's `value_parser`. A leaf module: the argument
//! structs of every subcommand (`controller`, `agent`, ...) and the `fleetwire-loadgen` crate use it.

use std::time::Duration;

/// A flag value that is not a duration.
#[derive(Debug, thiserror::Error)]
#[error("{text:?} is not a duration like 30s, 500ms or 24h: {reason}")]
pub struct NotADuration {
    text: String,
    reason: humantime::DurationError,
}

/// A duration flag (`30s`, `500ms`, `24h`).
pub fn parse_duration(text: &str) -> Result<Duration, NotADuration> {
    humantime::parse_duration(text).map_err(|reason| NotADuration {
        text: text.to_string(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit_and_refusals_show_the_expected_form() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(
            parse_duration("24h").unwrap(),
            Duration::from_secs(24 * 3600)
        );
        let refusal = parse_duration("ten").unwrap_err().to_string();
        assert!(
            refusal.starts_with("\"ten\" is not a duration like 30s"),
            "{refusal}"
        );
    }
}
