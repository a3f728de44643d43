//! The read pool: a few read-only connections used from `spawn_blocking`. WAL lets them
//! read a committed snapshot while the writer writes; every acknowledged write is visible
//! to reads that start after the acknowledgement.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redrive_store::{StoreError, StoreResult};
use rusqlite::Connection;
use tokio::sync::Semaphore;

use crate::error::{Db, SqliteError, backend};
use crate::schema::open_reader;

pub(crate) struct ReadPool {
    path: PathBuf,
    idle: Arc<Mutex<Vec<Connection>>>,
    permits: Semaphore,
    closed: Arc<AtomicBool>,
}

impl ReadPool {
    pub(crate) fn open(path: PathBuf, size: usize) -> StoreResult<ReadPool> {
        let size = size.max(1);
        let mut idle = Vec::with_capacity(size);
        for _ in 0..size {
            idle.push(open_reader(&path)?);
        }
        Ok(ReadPool {
            path,
            idle: Arc::new(Mutex::new(idle)),
            permits: Semaphore::new(size),
            closed: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Runs `f` on a pooled connection inside one read transaction (one snapshot).
    pub(crate) async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::unavailable(SqliteError::Closed));
        }
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::unavailable(SqliteError::Closed))?;
        let idle = Arc::clone(&self.idle);
        let closed = Arc::clone(&self.closed);
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let pooled = idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
            // A connection lost to a panic is replaced on demand.
            let conn = match pooled {
                Some(c) => c,
                None => open_reader(&path)?,
            };
            let result = in_snapshot(&conn, f);
            if !closed.load(Ordering::Acquire) {
                idle.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(conn);
            }
            result
        })
        .await
        .map_err(|e| {
            if e.is_panic() {
                backend(SqliteError::Panicked)
            } else {
                StoreError::unavailable(SqliteError::Closed)
            }
        })?
    }

    /// Closes every idle connection; later reads fail with `Closed`.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.permits.close();
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

fn in_snapshot<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    conn.prepare_cached("BEGIN").db()?.execute([]).db()?;
    let result = f(conn);
    // A read-only transaction has nothing to lose; ending it just frees the snapshot.
    let end = conn
        .prepare_cached("COMMIT")
        .db()
        .and_then(|mut s| s.execute([]).db());
    match (result, end) {
        (Ok(v), Ok(_)) => Ok(v),
        (Err(e), _) => {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            Err(e)
        }
        (Ok(_), Err(e)) => Err(e),
    }
}
