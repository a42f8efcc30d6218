//! Operators' bearer tokens ([`OperatorTokens`]), read from a file shaped like Kubernetes'
//! static token file: one `token,name,scope` line per token, `#` comments and blank lines
//! ignored, scope `admin` or `read-only` (docs/security.md). Only the SHA-256 digest of each
//! token is kept in memory, and every error names a line number, never a token.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use subtle::{ConditionallySelectable, ConstantTimeEq};

/// What an operator token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorScope {
    /// Reading routes only.
    ReadOnly,
    /// Every operator route.
    Admin,
}

impl OperatorScope {
    /// Whether the scope allows routes that change something.
    pub fn may_write(self) -> bool {
        self == OperatorScope::Admin
    }

    /// As written in the token file.
    pub fn as_str(self) -> &'static str {
        match self {
            OperatorScope::ReadOnly => "read-only",
            OperatorScope::Admin => "admin",
        }
    }

    /// The scope a token file names, if it is one.
    pub fn parse(text: &str) -> Option<OperatorScope> {
        match text {
            "admin" => Some(OperatorScope::Admin),
            "read-only" => Some(OperatorScope::ReadOnly),
            _ => None,
        }
    }
}

impl fmt::Display for OperatorScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a presented token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorToken {
    pub name: String,
    pub scope: OperatorScope,
}

/// Shortest token accepted: 32 characters of the token alphabet are at least 192 bits when
/// random, and `fleetwire token operator` makes 43.
pub const MIN_TOKEN_LEN: usize = 32;
/// Longest operator name.
pub const MAX_NAME_LEN: usize = 64;

/// The known operator tokens, as digests.
pub struct OperatorTokens {
    entries: Vec<Entry>,
}

struct Entry {
    digest: [u8; 32],
    token: OperatorToken,
}

impl fmt::Debug for OperatorTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names and scopes only: digests of weak tokens could be searched offline.
        f.debug_list()
            .entries(self.entries.iter().map(|e| &e.token))
            .finish()
    }
}

/// Why a token file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorTokenFileError {
    #[error("cannot read the operator token file {}: {cause}", path.display())]
    Read { path: PathBuf, cause: String },
    /// Group or others may read or write it: tokens others can read are not secrets, and
    /// tokens others can write let them in.
    #[error(
        "the operator token file {} has mode {mode:04o}, which lets group or others at it: \
         chmod 600 {}",
        path.display(),
        path.display()
    )]
    Permissions { path: PathBuf, mode: u32 },
    #[error("{}, line {line}: {problem}", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        problem: LineProblem,
    },
}

/// What is wrong with one line of a token file. Never quotes the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    #[error("expected three comma-separated fields `token,name,scope`, found {found}")]
    Fields { found: usize },
    #[error(
        "the token is {length} characters; it must be at least {MIN_TOKEN_LEN} \
         (`fleetwire token operator` makes one)"
    )]
    ShortToken { length: usize },
    #[error("the token has a character other than A-Z, a-z, 0-9, '.', '_', '~' and '-'")]
    TokenCharacters,
    #[error("the name must be 1 to {MAX_NAME_LEN} characters of A-Z, a-z, 0-9, '.', '_' and '-'")]
    Name,
    #[error("the scope must be `admin` or `read-only`")]
    Scope,
    #[error("the same token as line {first_line}")]
    DuplicateToken { first_line: usize },
    #[error("the name {name:?} is already on line {first_line}")]
    DuplicateName { name: String, first_line: usize },
}

/// Whether `name` may name an operator token.
pub fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

fn valid_token_character(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"._~-".contains(&b)
}

fn digest(token: &str) -> [u8; 32] {
    crate::bootstrap_token::digest(token.as_bytes())
}

impl OperatorTokens {
    /// No tokens: every operator route refuses.
    pub fn empty() -> OperatorTokens {
        OperatorTokens {
            entries: Vec::new(),
        }
    }

    /// Reads the token file at `path`, refusing it when group or others have any access.
    pub fn load(path: &Path) -> Result<OperatorTokens, OperatorTokenFileError> {
        let read_error = |e: std::io::Error| OperatorTokenFileError::Read {
            path: path.to_path_buf(),
            cause: e.to_string(),
        };
        let mode = std::fs::metadata(path)
            .map_err(read_error)?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(OperatorTokenFileError::Permissions {
                path: path.to_path_buf(),
                mode: mode & 0o7777,
            });
        }
        let text = std::fs::read_to_string(path).map_err(read_error)?;
        OperatorTokens::parse(path, &text)
    }

    /// Reads a token file's text; `path` is only named in errors.
    pub fn parse(path: &Path, text: &str) -> Result<OperatorTokens, OperatorTokenFileError> {
        let mut entries: Vec<(usize, Entry)> = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let failed = |problem| OperatorTokenFileError::Line {
                path: path.to_path_buf(),
                line,
                problem,
            };
            let content = raw.trim();
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = content.split(',').map(str::trim).collect();
            let [token, name, scope] = fields[..] else {
                return Err(failed(LineProblem::Fields {
                    found: fields.len(),
                }));
            };
            if !token.bytes().all(valid_token_character) {
                return Err(failed(LineProblem::TokenCharacters));
            }
            if token.len() < MIN_TOKEN_LEN {
                return Err(failed(LineProblem::ShortToken {
                    length: token.len(),
                }));
            }
            if !valid_name(name) {
                return Err(failed(LineProblem::Name));
            }
            let scope = OperatorScope::parse(scope).ok_or_else(|| failed(LineProblem::Scope))?;
            let digest = digest(token);
            for (first_line, entry) in &entries {
                if entry.digest == digest {
                    return Err(failed(LineProblem::DuplicateToken {
                        first_line: *first_line,
                    }));
                }
                if entry.token.name == name {
                    return Err(failed(LineProblem::DuplicateName {
                        name: name.to_string(),
                        first_line: *first_line,
                    }));
                }
            }
            entries.push((
                line,
                Entry {
                    digest,
                    token: OperatorToken {
                        name: name.to_string(),
                        scope,
                    },
                },
            ));
        }
        Ok(OperatorTokens {
            entries: entries.into_iter().map(|(_, entry)| entry).collect(),
        })
    }

    /// The operator `presented` belongs to. Compares its digest with every entry's in constant
    /// time, so the answer's timing tells nothing about which token came close.
    pub fn find(&self, presented: &str) -> Option<&OperatorToken> {
        let presented = digest(presented);
        let mut found = subtle::Choice::from(0);
        let mut index = 0u32;
        for (i, entry) in self.entries.iter().enumerate() {
            let matches = entry.digest.ct_eq(&presented);
            index.conditional_assign(&(i as u32), matches);
            found |= matches;
        }
        bool::from(found).then(|| &self.entries[index as usize].token)
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a token is named `name`.
    pub fn has_name(&self, name: &str) -> bool {
        self.entries.iter().any(|e| e.token.name == name)
    }
}

/// A new operator token: 32 bytes from the thread's CSPRNG in unpadded base64url, 43
/// characters, all of the token file's alphabet.
pub fn generate_token() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.~_-";

    fn parse(text: &str) -> Result<OperatorTokens, OperatorTokenFileError> {
        OperatorTokens::parse(Path::new("/etc/fleetwire/operator-tokens"), text)
    }

    fn refusal(text: &str) -> (usize, LineProblem, String) {
        let error = parse(text).unwrap_err();
        match &error {
            OperatorTokenFileError::Line { line, problem, .. } => {
                (*line, problem.clone(), error.to_string())
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn lines_give_names_and_scopes_and_comments_and_blank_lines_are_skipped() {
        let tokens = parse(&format!(
            "# operators\n\n{A},alice,admin\n  {B} , ci.bot-1 , read-only  \r\n"
        ))
        .unwrap();
        assert_eq!(tokens.len(), 2);
        let alice = tokens.find(A).unwrap();
        assert_eq!(
            (alice.name.as_str(), alice.scope),
            ("alice", OperatorScope::Admin)
        );
        assert!(alice.scope.may_write());
        let bot = tokens.find(B).unwrap();
        assert_eq!(
            (bot.name.as_str(), bot.scope),
            ("ci.bot-1", OperatorScope::ReadOnly)
        );
        assert!(!bot.scope.may_write());
        assert_eq!(tokens.find(&A[1..]), None);
        assert_eq!(tokens.find(""), None);
        assert!(OperatorTokens::empty().find(A).is_none());
    }

    #[test]
    fn each_malformed_line_is_refused_by_number_without_quoting_the_token() {
        let short = "abcdefghijklmnopqrstuvwxyz01234";
        let cases = [
            (format!("{A},alice"), LineProblem::Fields { found: 2 }),
            (
                format!("{A},alice,admin,x"),
                LineProblem::Fields { found: 4 },
            ),
            (
                format!("{short},alice,admin"),
                LineProblem::ShortToken { length: 31 },
            ),
            (format!("{A}!,alice,admin"), LineProblem::TokenCharacters),
            (format!("{A} x,alice,admin"), LineProblem::TokenCharacters),
            (format!("{A},,admin"), LineProblem::Name),
            (format!("{A},al ice,admin"), LineProblem::Name),
            (format!("{A},{},admin", "n".repeat(65)), LineProblem::Name),
            (format!("{A},alice,root"), LineProblem::Scope),
            (format!("{A},alice,Admin"), LineProblem::Scope),
        ];
        for (line, expected) in cases {
            let text = format!("# first\n{line}\n");
            let (number, problem, message) = refusal(&text);
            assert_eq!((number, &problem), (2, &expected), "{line}");
            assert!(
                !message.contains(A) && !message.contains(short),
                "{message}"
            );
            assert!(
                message.starts_with("/etc/fleetwire/operator-tokens, line 2: "),
                "{message}"
            );
        }
        // A name of exactly 64 characters is fine.
        parse(&format!("{A},{},admin", "n".repeat(64))).unwrap();
    }

    #[test]
    fn duplicate_tokens_and_names_are_refused() {
        let (line, problem, message) = refusal(&format!("{A},alice,admin\n{A},bob,admin\n"));
        assert_eq!(
            (line, problem),
            (2, LineProblem::DuplicateToken { first_line: 1 })
        );
        assert!(!message.contains(A), "{message}");
        let (line, problem, _) = refusal(&format!("{A},alice,admin\n\n{B},alice,read-only\n"));
        assert_eq!(
            (line, problem),
            (
                3,
                LineProblem::DuplicateName {
                    name: "alice".into(),
                    first_line: 1
                }
            )
        );
    }

    #[test]
    fn a_file_others_may_read_is_refused_naming_path_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("operator-tokens");
        std::fs::write(&path, format!("{A},alice,admin\n")).unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let error = OperatorTokens::load(&path).unwrap_err();
            assert_eq!(
                error,
                OperatorTokenFileError::Permissions {
                    path: path.clone(),
                    mode
                }
            );
            let message = error.to_string();
            assert!(message.contains(&format!("{mode:04o}")), "{message}");
            assert!(
                message.contains(&format!("chmod 600 {}", path.display())),
                "{message}"
            );
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let tokens = OperatorTokens::load(&path).unwrap();
            assert_eq!(tokens.find(A).unwrap().name, "alice");
        }
        let missing = OperatorTokens::load(&dir.path().join("none")).unwrap_err();
        assert!(missing.to_string().contains("none"), "{missing}");
    }

    #[test]
    fn debug_shows_names_and_scopes_not_digests() {
        let tokens = parse(&format!("{A},alice,admin\n")).unwrap();
        let shown = format!("{tokens:?}");
        assert!(
            shown.contains("alice") && shown.contains("Admin"),
            "{shown}"
        );
        let hex: String = digest(A).iter().map(|b| format!("{b:02x}")).collect();
        assert!(!shown.contains(&hex) && !shown.contains(A), "{shown}");
        assert!(!shown.contains("digest"), "{shown}");
    }

    #[test]
    fn generated_tokens_are_43_base64url_characters_and_load() {
        let a = generate_token();
        let b = generate_token();
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert!(a.bytes().all(valid_token_character), "{a}");
        let tokens = parse(&format!("{a},alice,admin\n{b},bob,read-only\n")).unwrap();
        assert_eq!(tokens.find(&b).unwrap().name, "bob");
    }
}
