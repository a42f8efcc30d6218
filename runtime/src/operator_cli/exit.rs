//! The operator commands' exit codes: each says what went wrong, so scripts can tell a
//! missing node from a refused token or a controller that is down (docs/operator-cli.md).

use std::process::ExitCode;

use fleetwire_client::{BuildError, Error};

use super::connection::ConnectionError;

/// Why an operator command failed, by what the caller can do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The controller refused the request as it was (400, 409, 413, 415, 422, …): exit 1.
    Refused,
    /// Bad flags, a bad config file, an unreadable CA or token file: exit 2 (as for usage
    /// errors).
    Usage,
    /// The node or VM does not exist (404): exit 3.
    NotFound,
    /// No token, a wrong one, or one whose scope does not allow this (401, 403): exit 4.
    NotAllowed,
    /// No answer: the connection, TLS or a timeout: exit 5.
    Unreachable,
    /// The controller or the fleet could not do it now (5xx: no node has room, the node's
    /// agent failed, the store is unavailable); the same call may succeed later: exit 6.
    Unavailable,
    /// The controller answered what its API document does not allow (another version?): exit 7.
    BadAnswer,
}

impl Failure {
    pub fn code(self) -> u8 {
        match self {
            Failure::Refused => 1,
            Failure::Usage => 2,
            Failure::NotFound => 3,
            Failure::NotAllowed => 4,
            Failure::Unreachable => 5,
            Failure::Unavailable => 6,
            Failure::BadAnswer => 7,
        }
    }

    pub fn of_call(error: &Error) -> Failure {
        match error {
            Error::InvalidRequest { .. } => Failure::Usage,
            Error::Transport { .. } => Failure::Unreachable,
            Error::UnexpectedStatus { .. }
            | Error::InvalidResponse { .. }
            | Error::AnswerTooLarge { .. } => Failure::BadAnswer,
            Error::Api { status, .. } => match status.as_u16() {
                404 => Failure::NotFound,
                401 | 403 => Failure::NotAllowed,
                s if s >= 500 => Failure::Unavailable,
                _ => Failure::Refused,
            },
        }
    }
}

impl From<Failure> for ExitCode {
    fn from(failure: Failure) -> ExitCode {
        ExitCode::from(failure.code())
    }
}

impl From<&ConnectionError> for Failure {
    fn from(_: &ConnectionError) -> Failure {
        Failure::Usage
    }
}

impl From<&BuildError> for Failure {
    fn from(_: &BuildError) -> Failure {
        Failure::Usage
    }
}
