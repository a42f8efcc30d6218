//! A bearer token held by the client: sent in the `Authorization` header and nowhere else,
//! never shown by `Debug` or `Display`, nor quoted by any error (docs/security.md).

use std::fmt;

/// An operator token or a bootstrap token. Its text leaves the value only through
/// [`BearerToken::expose`], which the client calls to build the header (marked sensitive).
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(String);

impl BearerToken {
    /// Wraps a token; surrounding white space (a trailing newline of a token file) is dropped.
    pub fn new(token: impl Into<String>) -> BearerToken {
        let token = token.into();
        BearerToken(token.trim().to_string())
    }

    /// The token's text, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

impl From<String> for BearerToken {
    fn from(token: String) -> BearerToken {
        BearerToken::new(token)
    }
}

impl From<&str> for BearerToken {
    fn from(token: &str) -> BearerToken {
        BearerToken::new(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_never_shown() {
        let token = BearerToken::new("s3cret-token\n");
        assert_eq!(token.expose(), "s3cret-token");
        assert!(!format!("{token:?}").contains("s3cret"));
    }
}
