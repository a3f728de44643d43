//! Errors of this backend that are not SQLite's own, and the mapping of SQLite errors into
//! the neutral [`StoreError`].

use redrive_store::{StoreError, StoreResult};
use rusqlite::ErrorCode;

/// Failures specific to the SQLite backend. They reach callers inside
/// [`StoreError::Backend`] or [`StoreError::Unavailable`]; tests may downcast the source.
/// (Values that cannot be read or stored are the shared row mapping's
/// `redrive_store::skeleton::RowError`.)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteError {
    /// The database was written by a newer redrive: its schema version is unknown here.
    #[error(
        "the database schema is at version {found}, newer than the {known} this build knows; \
         upgrade redrive or open another file"
    )]
    SchemaTooNew {
        /// Version found in `schema_migrations`.
        found: i64,
        /// Newest version this build can apply.
        known: i64,
    },
    /// The database could not be put in WAL mode.
    #[error("could not enable WAL journal mode (journal mode is {mode:?})")]
    NoWal {
        /// The journal mode SQLite reported instead.
        mode: String,
    },
    /// Creating the parent directory of the database failed.
    #[error("could not create directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Creating a database file or restricting its permissions failed.
    #[error("could not set owner-only permissions on {path}: {source}")]
    Permissions {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Another process (or another store in this one) has the database open: one process
    /// serves a database file at a time.
    #[error(
        "the database {path} is open in another process (it holds {lock}); one process \
         serves a data directory at a time: stop it first"
    )]
    InUse {
        /// The database file.
        path: String,
        /// The lock file held.
        lock: String,
    },
    /// The lock file beside the database could not be created or locked.
    #[error("could not lock {path}: {source}")]
    LockFile {
        /// The lock file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The store was closed: no more work is accepted.
    #[error("the store is closed")]
    Closed,
    /// The writer could not start its transaction because the database is locked by
    /// another process; nothing was written.
    #[error("the database is busy: {0}")]
    Busy(String),
    /// The operation panicked inside the writer; its changes were rolled back.
    #[error("the storage operation panicked and was rolled back")]
    Panicked,
    /// Another operation of the same transaction failed after writing; the transaction
    /// was rolled back whole, this operation with it. Nothing of it happened: try again.
    #[error("the storage transaction was rolled back by another operation in it; retry")]
    RolledBack,
}

/// Maps a SQLite error: busy and locked are transient, everything else is a backend error.
pub(crate) fn map_err(e: rusqlite::Error) -> StoreError {
    if is_busy(&e) {
        StoreError::unavailable(e)
    } else {
        StoreError::backend(e)
    }
}

/// Whether the error is SQLITE_BUSY or SQLITE_LOCKED.
pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// `.db()?` on rusqlite results.
pub(crate) trait Db<T> {
    /// Maps the error into a [`StoreError`].
    fn db(self) -> StoreResult<T>;
}

impl<T> Db<T> for rusqlite::Result<T> {
    fn db(self) -> StoreResult<T> {
        self.map_err(map_err)
    }
}

/// A backend error wrapping one of ours.
pub(crate) fn backend(e: SqliteError) -> StoreError {
    StoreError::backend(e)
}
