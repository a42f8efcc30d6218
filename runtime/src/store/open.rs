//! Which database the controller keeps its state in (`--db`, [`Database`]), and opening its
//! node store and bootstrap tokens there ([`open`]): a path is SQLite, a `postgres://` or
//! `postgresql://` URL is PostgreSQL (docs/controller.md, "The database").

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use super::backend::Store;
use super::error::StoreError;
use super::postgres::tokens::PostgresBootstrapTokens;
use super::postgres::{redacted, PostgresStore};
use super::sqlite::SqliteStore;
use super::{sqlite::tokens::SqliteBootstrapTokens, tokens::BootstrapTokenStore};

/// The controller's database.
#[derive(Clone, PartialEq, Eq)]
pub enum Database {
    /// A SQLite file (the embedded default).
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL (it may hold a password: shown only redacted).
    Postgres(String),
}

impl Database {
    /// The default: `controller.sqlite3` in the data directory.
    pub fn in_data_dir(data_dir: &std::path::Path) -> Database {
        Database::Sqlite(data_dir.join("controller.sqlite3"))
    }
}

impl FromStr for Database {
    type Err = String;

    fn from_str(text: &str) -> Result<Database, String> {
        if text.is_empty() {
            return Err("the database is empty: a file path or a postgres:// URL".into());
        }
        let scheme = text.split_once("://").map(|(scheme, _)| scheme);
        match scheme {
            Some(s)
                if s.eq_ignore_ascii_case("postgres") || s.eq_ignore_ascii_case("postgresql") =>
            {
                Ok(Database::Postgres(text.to_string()))
            }
            Some(other) => Err(format!(
                "{}: the scheme {other}:// is not a database this controller can use \
                 (postgres:// or postgresql://, or a SQLite file path)",
                redacted(text)
            )),
            None => Ok(Database::Sqlite(PathBuf::from(text))),
        }
    }
}

impl fmt::Display for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Database::Sqlite(path) => write!(f, "{}", path.display()),
            Database::Postgres(url) => f.write_str(&redacted(url)),
        }
    }
}

/// Never the password, in debug output either.
impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Database::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            Database::Postgres(_) => f.debug_tuple("Postgres").field(&self.to_string()).finish(),
        }
    }
}

/// The database of a `--db` value (`None`: `controller.sqlite3` in `data_dir`), or why it is
/// none, as `--db`'s error.
pub fn parse_db(db: Option<&str>, data_dir: &std::path::Path) -> Result<Database, String> {
    match db {
        None => Ok(Database::in_data_dir(data_dir)),
        Some(text) => text.parse().map_err(|e| format!("--db: {e}")),
    }
}

/// A database's node store and bootstrap tokens.
pub type Opened = (Box<dyn Store>, Arc<dyn BootstrapTokenStore>);

/// The node store and bootstrap tokens of `db`, migrated. Blocking (PostgreSQL connects):
/// from an async runtime, call it through `block_in_place` or `spawn_blocking`.
pub fn open(db: &Database) -> Result<Opened, StoreError> {
    match db {
        Database::Sqlite(path) => {
            let store = SqliteStore::open(path)?;
            let tokens = SqliteBootstrapTokens::open(path)?;
            Ok((Box::new(store), Arc::new(tokens)))
        }
        Database::Postgres(url) => {
            let (store, tokens) = open_postgres(url)?;
            Ok((Box::new(store), Arc::new(tokens)))
        }
    }
}

/// The PostgreSQL node store (migrated) and bootstrap tokens of `url`, as their own types: the
/// leader election fences the store ([`PostgresStore::fenced`]).
pub fn open_postgres(url: &str) -> Result<(PostgresStore, PostgresBootstrapTokens), StoreError> {
    let store = PostgresStore::connect(url)?;
    let tokens = PostgresBootstrapTokens::connect(url)?;
    Ok((store, tokens))
}

/// The bootstrap tokens of `db` alone (the `fleetwire token` commands).
pub fn open_tokens(db: &Database) -> Result<Arc<dyn BootstrapTokenStore>, StoreError> {
    Ok(match db {
        Database::Sqlite(path) => Arc::new(SqliteBootstrapTokens::open(path)?),
        Database::Postgres(url) => Arc::new(PostgresBootstrapTokens::connect(url)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_sqlite_and_postgres_urls_postgres() {
        assert_eq!(
            "/var/lib/fleetwire/c.sqlite3".parse::<Database>().unwrap(),
            Database::Sqlite("/var/lib/fleetwire/c.sqlite3".into())
        );
        for url in [
            "postgres://u@h/db",
            "postgresql://u@h:5433/db?sslmode=require",
        ] {
            assert_eq!(
                url.parse::<Database>().unwrap(),
                Database::Postgres(url.into())
            );
        }
        let error = "mysql://u:hunter2@h/db".parse::<Database>().unwrap_err();
        assert!(error.contains("mysql://"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }

    #[test]
    fn display_and_debug_hide_the_password() {
        let db: Database =
            "postgres://fw:hunter2@db.example:5432/fleet?password=s3cret&sslmode=verify-full"
                .parse()
                .unwrap();
        for shown in [db.to_string(), format!("{db:?}")] {
            assert!(
                !shown.contains("hunter2") && !shown.contains("s3cret"),
                "{shown}"
            );
            assert!(shown.contains("fw:***@db.example:5432/fleet"), "{shown}");
        }
    }

    #[test]
    fn an_unreachable_server_is_named_without_the_password() {
        // Port 1 on loopback: nothing listens there.
        let Err(error) = open(&Database::Postgres(
            "postgres://fw:hunter2@127.0.0.1:1/fleet".into(),
        )) else {
            panic!("connected to port 1");
        };
        let message = error.to_string();
        assert!(
            message.starts_with("cannot connect to PostgreSQL at 127.0.0.1:1: "),
            "{message}"
        );
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn a_bad_url_is_refused_naming_what_is_wrong() {
        for (url, says) in [
            ("postgres://fw@h/db?sslmode=sometimes", "sslmode=sometimes"),
            ("postgres://fw:pw@h/db?frobnicate=1", "frobnicate"),
            ("postgres://fw@h/db?sslrootcert=/ca.pem", "sslrootcert"),
        ] {
            let Err(error) = open(&Database::Postgres(url.into())) else {
                panic!("{url} was opened");
            };
            let message = error.to_string();
            assert!(message.contains(says), "{url}: {message}");
            assert!(!message.contains(":pw@"), "{message}");
        }
    }
}
