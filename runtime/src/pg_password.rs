//! Where the controller's PostgreSQL password comes from (docs/controller.md, "PostgreSQL"):
//! never the command line, which `ps` shows to every user of the host, but a password file in
//! libpq's format (`hostname:port:database:username:password`, `*` matching anything, `\`
//! escaping `:` and `\`), named by the URL's `passfile` parameter or by `PGPASSFILE`, else
//! `~/.pgpass`, as libpq reads them. Like the operator token file, a password file that others
//! may read is refused.

use std::path::{Path, PathBuf};

/// Why the password could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordFileError {
    #[error("the password file {path}: {cause}")]
    Unreadable { path: String, cause: String },
    #[error("the password file {path} may be read by others (mode {mode:o}): make it readable by its owner only (chmod 600)")]
    TooOpen { path: String, mode: u32 },
}

/// What a password file line is matched against: the connection's first host, its port,
/// database and user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection<'a> {
    pub host: &'a str,
    pub port: u16,
    pub database: &'a str,
    pub user: &'a str,
}

/// The file to read: `passfile` (the URL's parameter) when given, else `PGPASSFILE`, else
/// `~/.pgpass` when it exists. `None`: no password file.
pub fn password_file(passfile: Option<&str>) -> Option<(PathBuf, bool)> {
    if let Some(named) = passfile {
        return Some((PathBuf::from(named), true));
    }
    if let Some(named) = std::env::var_os("PGPASSFILE").filter(|v| !v.is_empty()) {
        return Some((PathBuf::from(named), true));
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty())?;
    let default = Path::new(&home).join(".pgpass");
    default.exists().then_some((default, false))
}

/// The password for `connection` from `path`, if a line matches (the first that does, as
/// libpq takes it). `named`: the file was named (an error when missing); `~/.pgpass` was not.
pub fn lookup(
    path: &Path,
    named: bool,
    connection: &Connection<'_>,
) -> Result<Option<String>, PasswordFileError> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => return Ok(None),
        Err(e) => {
            return Err(PasswordFileError::Unreadable {
                path: shown,
                cause: e.to_string(),
            })
        }
    };
    let mode = std::fs::metadata(path)
        .map_err(|e| PasswordFileError::Unreadable {
            path: shown.clone(),
            cause: e.to_string(),
        })?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(PasswordFileError::TooOpen {
            path: shown,
            mode: mode & 0o777,
        });
    }
    Ok(find(&text, connection))
}

/// The password of the first line of `text` that matches `connection`.
fn find(text: &str, connection: &Connection<'_>) -> Option<String> {
    let port = connection.port.to_string();
    let wanted = [
        connection.host,
        port.as_str(),
        connection.database,
        connection.user,
    ];
    text.lines()
        .filter(|line| !line.trim_start().starts_with('#') && !line.trim().is_empty())
        .find_map(|line| {
            let fields = split(line);
            if fields.len() != 5 {
                return None;
            }
            let matches = fields[..4]
                .iter()
                .zip(wanted)
                .all(|(field, value)| field == "*" || field == value);
            matches.then(|| fields[4].clone())
        })
}

/// A line's fields: split at unescaped `:`, with `\:` and `\\` unescaped.
fn split(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    fields.last_mut().expect("one field").push(next);
                }
            }
            ':' => fields.push(String::new()),
            c => fields.last_mut().expect("one field").push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const CONNECTION: Connection<'static> = Connection {
        host: "db.example",
        port: 5432,
        database: "fleet",
        user: "fw",
    };

    #[test]
    fn the_first_matching_line_wins_with_wildcards_and_escapes() {
        let text = "# comment\n\
                    other.example:5432:fleet:fw:wrong\n\
                    db.example:5432:fleet:fw:pa\\:ss\\\\word\n\
                    *:*:*:*:fallback\n";
        assert_eq!(find(text, &CONNECTION).as_deref(), Some("pa:ss\\word"));
        let other = Connection {
            user: "someone",
            ..CONNECTION
        };
        assert_eq!(find(text, &other).as_deref(), Some("fallback"));
        assert_eq!(find("db.example:5432:fleet:fw\n", &CONNECTION), None);
    }

    #[test]
    fn a_file_others_may_read_is_refused_and_a_missing_default_is_no_password() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        std::fs::write(&path, "*:*:*:*:s3cret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = lookup(&path, true, &CONNECTION).unwrap_err();
        assert!(matches!(
            refused,
            PasswordFileError::TooOpen { mode: 0o644, .. }
        ));
        assert!(!refused.to_string().contains("s3cret"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            lookup(&path, true, &CONNECTION).unwrap().as_deref(),
            Some("s3cret")
        );
        let missing = dir.path().join("missing");
        assert_eq!(lookup(&missing, false, &CONNECTION), Ok(None));
        assert!(lookup(&missing, true, &CONNECTION).is_err());
    }
}
