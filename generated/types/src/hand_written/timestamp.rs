//! `Timestamp`: an instant as the schemas write it, with its offset.
//!
//! This replaces the type typify would generate (chrono's lenient `DateTime<Utc>` parser accepts
//! a space for `T`, for one): it accepts exactly what the `Timestamp` definition does, its
//! `pattern` (taken from the schema at build time) and a real RFC 3339 date and time.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use chrono::{DateTime, FixedOffset, SecondsFormat, Timelike, Utc};

use crate::facts::TIMESTAMP_PATTERN;

/// An ISO 8601 / RFC 3339 instant with an offset, e.g. `2026-11-30T09:30:00.123456Z`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<FixedOffset>);

impl Timestamp {
    /// The current time, in UTC.
    pub fn now() -> Self {
        Utc::now().into()
    }

    /// The instant in UTC.
    pub fn utc(&self) -> DateTime<Utc> {
        self.0.with_timezone(&Utc)
    }

    /// The instant with the offset it was written with.
    pub fn as_datetime(&self) -> &DateTime<FixedOffset> {
        &self.0
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(t: DateTime<Utc>) -> Self {
        Timestamp(t.fixed_offset())
    }
}

impl From<DateTime<FixedOffset>> for Timestamp {
    fn from(t: DateTime<FixedOffset>) -> Self {
        Timestamp(t)
    }
}

/// Why a string is not a `Timestamp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimestampError(String);

impl fmt::Display for TimestampError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TimestampError {}

fn pattern() -> &'static regress::Regex {
    static PATTERN: OnceLock<regress::Regex> = OnceLock::new();
    PATTERN.get_or_init(|| {
        regress::Regex::new(TIMESTAMP_PATTERN).expect("the schema's Timestamp pattern compiles")
    })
}

impl FromStr for Timestamp {
    type Err = TimestampError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if pattern().find(s).is_none() {
            return Err(TimestampError(format!(
                "{s:?} does not match {TIMESTAMP_PATTERN:?}"
            )));
        }
        let parsed = DateTime::parse_from_rfc3339(s)
            .map_err(|e| TimestampError(format!("{s:?} is not a date-time: {e}")))?;
        // Second 60 is a leap second, which comes at 23:59:60 UTC only (RFC 3339 §5.7, and the
        // schema's `date-time` format as validators check it); chrono takes it at any minute.
        // chrono holds it as second 59 with a nanosecond count past one second.
        if parsed.nanosecond() >= 1_000_000_000 {
            let utc = parsed.with_timezone(&Utc);
            if (utc.hour(), utc.minute()) != (23, 59) {
                return Err(TimestampError(format!(
                    "{s:?} is not a date-time: second 60 (a leap second) comes only at 23:59:60 UTC"
                )));
            }
        }
        Ok(Timestamp(parsed))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Timestamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 timestamp")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Timestamp, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leap_second_is_taken_at_23_59_60_utc_only() {
        // The cases of the JSON Schema test suite's `date-time` format.
        for valid in [
            "1998-12-31T23:59:60Z",
            "1998-12-31T15:59:60.123-08:00",
            "2026-11-30T09:30:59.999Z",
        ] {
            let parsed: Timestamp = valid.parse().unwrap_or_else(|e| panic!("{valid}: {e}"));
            assert_eq!(parsed.to_string().parse::<Timestamp>().unwrap(), parsed);
        }
        for invalid in [
            "2026-11-30T09:30:60.123Z",
            "1998-12-31T23:58:60Z",
            "1998-12-30T22:59:60Z",
            "1998-12-31T23:59:61Z",
            "1998-12-31T23:59:60+01:00",
        ] {
            let error = invalid.parse::<Timestamp>().unwrap_err().to_string();
            assert!(error.contains(invalid), "{invalid}: {error}");
        }
    }
}
