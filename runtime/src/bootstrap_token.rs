//! Bootstrap tokens in Kubernetes' bootstrap-token format: a 6-character public id, a dot and a
//! 16-character secret, all `[a-z0-9]` (`abcdef.0123456789abcdef`). The id names the token in
//! logs, listings and errors; only the secret's SHA-256 digest is stored (docs/security.md).
//! A leaf module: the store and the command line build on it.

use std::fmt;

/// Characters of the public id.
pub const ID_LEN: usize = 6;
/// Characters of the secret: 16 of 36 symbols, about 82 bits, more than enough for a token
/// that is single use, bound to one node id and expires within a week.
pub const SECRET_LEN: usize = 16;
/// The one alphabet of both parts, as in Kubernetes.
const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// The SHA-256 digest of a secret: what the store keeps instead of the secret.
pub type SecretDigest = [u8; 32];

/// A token's secret part. Debug and Display never show it; [`TokenSecret::expose`] does, for
/// the one place that hands the token to its user.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecret(String);

impl TokenSecret {
    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Its SHA-256 digest.
    pub fn digest(&self) -> SecretDigest {
        digest(self.0.as_bytes())
    }
}

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(<redacted>)")
    }
}

impl fmt::Display for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A bootstrap token split into its id and its secret, freshly generated or as presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitToken {
    /// The public part: safe to log.
    pub id: String,
    pub secret: TokenSecret,
}

/// A presented token that is not in the bootstrap-token format. It says what the format is,
/// never what was presented (that may be a secret pasted into the wrong place).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "not a bootstrap token: one is {ID_LEN} characters, a dot and {SECRET_LEN} characters, \
     all lower-case letters and digits ({length} characters were given)"
)]
pub struct MalformedToken {
    /// Length of what was presented, which a user may compare against the format.
    pub length: usize,
}

impl SplitToken {
    /// A new token from the thread's CSPRNG (rand's `ThreadRng`, seeded from the OS),
    /// each character uniform over the alphabet.
    pub fn generate() -> SplitToken {
        SplitToken {
            id: random_text(ID_LEN),
            secret: TokenSecret(random_text(SECRET_LEN)),
        }
    }

    /// Splits and checks a presented token.
    pub fn parse(presented: &str) -> Result<SplitToken, MalformedToken> {
        let malformed = || MalformedToken {
            length: presented.chars().count(),
        };
        let (id, secret) = presented.split_once('.').ok_or_else(malformed)?;
        let well_formed = |part: &str, len: usize| {
            part.len() == len && part.bytes().all(|b| ALPHABET.contains(&b))
        };
        if !well_formed(id, ID_LEN) || !well_formed(secret, SECRET_LEN) {
            return Err(malformed());
        }
        Ok(SplitToken {
            id: id.to_string(),
            secret: TokenSecret(secret.to_string()),
        })
    }

    /// The whole token, `id.secret`: a secret, for the one place that hands it to its user.
    pub fn expose(&self) -> String {
        format!("{}.{}", self.id, self.secret.expose())
    }
}

/// SHA-256 of `bytes`.
pub fn digest(bytes: &[u8]) -> SecretDigest {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

fn random_text(len: usize) -> String {
    (0..len)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_has_the_kubernetes_format_and_parses_back() {
        let token = SplitToken::generate();
        let text = token.expose();
        assert_eq!(text.len(), ID_LEN + 1 + SECRET_LEN);
        // The generated wire type checks the schema's own pattern.
        text.parse::<fleetwire_types::BootstrapToken>().unwrap();
        token
            .id
            .parse::<fleetwire_types::BootstrapTokenId>()
            .unwrap();
        assert_eq!(SplitToken::parse(&text).unwrap(), token);
    }

    #[test]
    fn generated_tokens_differ() {
        let a = SplitToken::generate();
        let b = SplitToken::generate();
        assert_ne!(a.id, b.id);
        assert_ne!(a.secret, b.secret);
    }

    #[test]
    fn malformed_tokens_are_refused_without_being_quoted() {
        for bad in [
            "",
            "abcdef",
            "abcdef0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdefg.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abcdef.0123456789abcdef0",
            "ABCDEF.0123456789abcdef",
            "abcdef.0123456789ABCDEF",
            "abcdef.0123456789abcde-",
            "abcdef.01234.6789abcdef",
            "abcdef:0123456789abcdef",
            "abcdéf.0123456789abcdef",
        ] {
            let refusal = SplitToken::parse(bad).unwrap_err().to_string();
            assert!(refusal.starts_with("not a bootstrap token"), "{refusal}");
            if !bad.is_empty() {
                assert!(!refusal.contains(bad), "{refusal}");
            }
        }
    }

    #[test]
    fn the_secret_never_shows_in_debug_or_display() {
        let token = SplitToken::parse("abcdef.0123456789abcdef").unwrap();
        let shown = format!("{token:?} {} {:?}", token.secret, token.secret);
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
        assert!(shown.contains("abcdef"), "{shown}");
        assert_eq!(token.secret.expose(), "0123456789abcdef");
    }

    #[test]
    fn the_digest_is_sha256_of_the_secret() {
        let token = SplitToken::parse("abcdef.0123456789abcdef").unwrap();
        // printf 0123456789abcdef | sha256sum
        let expected = "9f9f5111f7b27a781f1f1ddde5ebc2dd2b796bfc7365c9c28b548e564176929f";
        let hex: String = token
            .secret
            .digest()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, expected);
    }
}
