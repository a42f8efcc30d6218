//! Why the store failed ([`StoreError`]): each variant says which step failed, and its message
//! is the one logs and `503 store_unavailable` answers show.

use std::path::PathBuf;

use super::contact_log::ContactLogError;

/// Why the store failed. `Clone`: one failed batch answers every request waiting on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The database's directory could not be created.
    #[error("cannot create the directory {}: {cause}", dir.display())]
    CreateDirectory { dir: PathBuf, cause: String },
    /// The database file could not be opened.
    #[error("cannot open {}: {cause}", path.display())]
    Open { path: PathBuf, cause: String },
    /// The database would not switch to write-ahead logging.
    #[error("the database refused WAL mode ({mode})")]
    NoWal { mode: String },
    /// The database was migrated by a newer controller: left alone.
    #[error(
        "the database is at schema version {found}, newer than this controller's {known}: \
         refusing to touch it"
    )]
    NewerSchema { found: u32, known: u32 },
    /// A schema migration failed (and was rolled back).
    #[error("migration {version} failed: {cause}")]
    Migration { version: u32, cause: String },
    /// A statement failed for want of disk space.
    #[error("{doing}: {cause}")]
    DiskFull { doing: &'static str, cause: String },
    /// The database file is damaged, or not a database.
    #[error("{doing}: {cause}")]
    Corrupt { doing: &'static str, cause: String },
    /// Any other statement that failed; `doing` names it.
    #[error("{doing}: {cause}")]
    Query { doing: &'static str, cause: String },
    /// A row of the contact log could not be read or decoded.
    #[error("contact log batch {batch}: {cause}")]
    ContactLogRow { batch: i64, cause: String },
    /// A batch's contact times could not be encoded.
    #[error(transparent)]
    ContactLog(#[from] ContactLogError),
    /// A stored contact time (migration 5's `liveness` table) is not a time.
    #[error("the last contact time of node {node_id:?} is unreadable: {cause}")]
    UnreadableContactTime { node_id: String, cause: String },
    /// A document handed to the store is not UTF-8 text.
    #[error("a document is not UTF-8: {cause}")]
    NotUtf8 { cause: String },
    /// The writer thread is gone (the process is shutting down).
    #[error("the store writer has stopped")]
    WriterStopped,
    /// The writer thread went away while a caller waited for it.
    #[error("the store writer stopped before {doing}")]
    WriterStoppedBefore { doing: &'static str },
}

impl StoreError {
    /// A failed statement, `doing` naming it, told apart by what SQLite says went wrong.
    pub fn sqlite(doing: &'static str, error: rusqlite::Error) -> StoreError {
        let cause = error.to_string();
        match error.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => StoreError::DiskFull { doing, cause },
            Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase) => {
                StoreError::Corrupt { doing, cause }
            }
            _ => StoreError::Query { doing, cause },
        }
    }
}
