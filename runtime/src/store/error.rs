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
    /// An existing file is not a store this build can open: refused before anything wrote
    /// to it.
    #[error(
        "refusing to open the store {}: {problem}; the file was left as it is",
        path.display()
    )]
    Unusable { path: PathBuf, problem: Unusable },
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
    /// The `--db` URL is not one this build can use (any password shown as `***`).
    #[error("the database URL {url} is unusable: {cause}")]
    BadUrl { url: String, cause: String },
    /// The PostgreSQL server did not take the connection; `server` is `host:port`.
    #[error("cannot connect to PostgreSQL at {server}: {cause}")]
    Connect { server: String, cause: String },
    /// TLS to the PostgreSQL server could not be set up.
    #[error("cannot set up TLS to PostgreSQL: {cause}")]
    Tls { cause: String },
    /// The write's fence no longer holds the leader lease (docs/controller.md).
    #[error(
        "this controller no longer holds the leader lease (epoch {epoch}); nothing of the \
         batch was written"
    )]
    Fenced { epoch: i64 },
    /// This controller's fleet CA (`ca.pem`) is not the one the store's fleet was enrolled
    /// with (`store::fleet_ca`); both as SHA-256 fingerprints.
    #[error(
        "this controller's fleet CA (ca.pem, SHA-256 {ours}) is not the fleet's: the database \
         records the fleet CA {recorded}, which the nodes and operators trust; serve every \
         controller of one database with the same CA directory (copy the whole ca/ directory \
         of a controller that serves, docs/operations.md)"
    )]
    OtherCa { recorded: String, ours: String },
    /// This controller's node CA (`node-ca.pem`) is not the one the store's fleet records
    /// (`store::fleet_ca`); both as SHA-256 fingerprints.
    #[error(
        "this controller's node CA (node-ca.pem, SHA-256 {ours}) is not the fleet's: the \
         database records the node CA {recorded}, which issued the nodes' certificates; serve \
         every controller of one database with the same CA directory (copy node-ca.pem and \
         node-ca.key, or the whole ca/ directory, of a controller that serves, \
         docs/operations.md)"
    )]
    OtherNodeCa { recorded: String, ours: String },
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

impl StoreError {
    /// A failed PostgreSQL statement, `doing` naming it; a full disk told apart as on SQLite.
    pub fn postgres(doing: &'static str, error: postgres::Error) -> StoreError {
        use postgres::error::SqlState;
        let cause = match error.as_db_error() {
            Some(db) => format!("{}: {}", db.severity(), db.message()),
            None => error.to_string(),
        };
        match error.code() {
            Some(code) if *code == SqlState::DISK_FULL => StoreError::DiskFull { doing, cause },
            Some(code)
                if *code == SqlState::DATA_CORRUPTED || *code == SqlState::INDEX_CORRUPTED =>
            {
                StoreError::Corrupt { doing, cause }
            }
            _ => StoreError::Query { doing, cause },
        }
    }
}

/// Why an existing file is not a store this build may open. Found on a read-only connection
/// before anything writes to the file, so a refused file is left byte for byte as it was
/// (docs/controller.md, "Durability"). Found by `sqlite`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    #[error("it is not a SQLite database ({cause})")]
    NotADatabase { cause: String },
    #[error("it is damaged: {problems}")]
    Damaged { problems: String },
    #[error(
        "it is a SQLite database of something else (tables: {tables}; schema version \
         {version}), not a fleetwire store"
    )]
    Foreign { tables: String, version: u32 },
    #[error(
        "its schema version {found} is newer than this build's {known}: a newer fleetwire \
         wrote it"
    )]
    Newer { found: u32, known: u32 },
}
