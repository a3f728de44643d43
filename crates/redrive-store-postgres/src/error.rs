//! Errors of this backend that are not PostgreSQL's own, and the mapping of
//! `tokio-postgres` errors into the neutral [`StoreError`].
//!
//! Transient conditions become [`StoreError::Unavailable`]: the pool timed out or is
//! closed, a connection could not be established (whatever the reason: refused,
//! authentication, the database not accepting connections), an operation ran past its
//! bound (the statement timeout, `57014`, or the client-side bound), the connection failed
//! or was lost, the server is shutting down or out of
//! connections, or a transaction lost a deadlock or serialization conflict (those are
//! retried a few times first, see [`is_retryable`]). Everything else is
//! [`StoreError::Backend`].

use redrive_store::StoreError;
use tokio_postgres::error::SqlState;

/// Failures specific to the PostgreSQL backend. They reach callers inside
/// [`StoreError::Backend`] or [`StoreError::Unavailable`]; tests may downcast the source.
/// (Values that cannot be read or stored are the shared row mapping's
/// `redrive_store::skeleton::RowError`.)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The schema was migrated by a newer redrive: its version is unknown here.
    #[error(
        "the database schema is at version {found}, newer than the {known} this build knows; \
         upgrade redrive or point it at another schema"
    )]
    SchemaTooNew {
        /// Version found in `redrive_schema_migrations`.
        found: u32,
        /// Newest version this build can apply.
        known: u32,
    },
    /// The connection URL could not be parsed.
    #[error("invalid PostgreSQL connection URL: {0}")]
    InvalidUrl(#[source] tokio_postgres::Error),
    /// The pool size is zero.
    #[error("the pool size must be at least 1")]
    EmptyPool,
    /// The store was closed: no more work is accepted.
    #[error("the store is closed")]
    Closed,
    /// No pooled connection became free in time.
    #[error("no database connection became free within {0:?}")]
    PoolTimeout(std::time::Duration),
    /// Opening a new connection took too long.
    #[error("connecting to PostgreSQL took longer than {0:?}")]
    ConnectTimeout(std::time::Duration),
    /// A connection could not be established (refused, unreachable, authentication
    /// failed, the database does not accept connections, too many connections…).
    #[error("could not connect to PostgreSQL: {0}")]
    Connect(#[source] tokio_postgres::Error),
    /// An operation (waiting for a connection, connecting, its statements) took longer
    /// than the store's operation bound; it was abandoned and its connection closed.
    #[error("the database did not answer within {0:?}")]
    OperationTimeout(std::time::Duration),
    /// A redrive parameter of the connection URL is invalid.
    #[error("invalid PostgreSQL connection URL: {0}")]
    InvalidParameter(String),
    /// A transaction lost a deadlock or serialization conflict and was rolled back;
    /// nothing of it was committed. Retried internally a bounded number of times.
    #[error("transaction conflict (rolled back): {0}")]
    Conflict(#[source] tokio_postgres::Error),
    /// A value does not fit the column type (a schema version out of range).
    #[error("value out of range for {0}")]
    OutOfRange(&'static str),
    /// The queue changed (on any node) since this node cached it; the operation is run
    /// again from the start with a fresh look-up.
    #[error("the queue changed since this node last looked it up; running the operation again")]
    StaleQueue,
    /// A rule this backend relies on was broken (a bug); the operation was rolled back.
    #[error("internal invariant broken: {0}")]
    Invariant(&'static str),
}

/// Maps a `tokio-postgres` error into the neutral classification.
pub(crate) fn map_err(e: tokio_postgres::Error) -> StoreError {
    if let Some(code) = e.code() {
        if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
        {
            return StoreError::unavailable(PostgresError::Conflict(e));
        }
        if is_transient_state(code) {
            return StoreError::unavailable(e);
        }
        return StoreError::backend(e);
    }
    // No SQLSTATE: the failure is the connection's (closed, I/O) or a conversion of ours.
    let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
    if e.is_closed() || io {
        StoreError::unavailable(e)
    } else {
        StoreError::backend(e)
    }
}

/// SQLSTATEs that say "try again later" rather than "this is wrong".
fn is_transient_state(code: &SqlState) -> bool {
    let s = code.code();
    // Class 08: connection exceptions.
    s.starts_with("08")
        || *code == SqlState::TOO_MANY_CONNECTIONS
        || *code == SqlState::LOCK_NOT_AVAILABLE
        || *code == SqlState::QUERY_CANCELED
        || *code == SqlState::ADMIN_SHUTDOWN
        || *code == SqlState::CRASH_SHUTDOWN
        || *code == SqlState::CANNOT_CONNECT_NOW
        || *code == SqlState::READ_ONLY_SQL_TRANSACTION
}

/// Whether the error is a deadlock or serialization conflict: the transaction was rolled
/// back by the server and may be run again from the start.
pub(crate) fn is_retryable(e: &StoreError) -> bool {
    match e {
        StoreError::Unavailable { source } => source
            .downcast_ref::<PostgresError>()
            .is_some_and(|p| matches!(p, PostgresError::Conflict(_) | PostgresError::StaleQueue)),
        _ => false,
    }
}

/// `.db()?` on `tokio-postgres` results.
pub(crate) trait DbExt<T> {
    /// Maps the error into a [`StoreError`].
    fn db(self) -> Result<T, StoreError>;
}

impl<T> DbExt<T> for Result<T, tokio_postgres::Error> {
    fn db(self) -> Result<T, StoreError> {
        self.map_err(map_err)
    }
}

/// A backend error wrapping one of ours.
pub(crate) fn backend(e: PostgresError) -> StoreError {
    StoreError::backend(e)
}

/// A transient error wrapping one of ours.
pub(crate) fn unavailable(e: PostgresError) -> StoreError {
    StoreError::unavailable(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_conflicts_are_retryable() {
        assert!(!is_retryable(&unavailable(PostgresError::Closed)));
        assert!(!is_retryable(&backend(PostgresError::EmptyPool)));
        assert!(!is_retryable(&StoreError::LockLost));
    }
}
