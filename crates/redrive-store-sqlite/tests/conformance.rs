//! The shared conformance suite, run against a fresh SQLite file per case.

use std::sync::{Arc, Mutex};

use redrive_store::Store;
use redrive_store_conformance::TestStore;
use redrive_store_sqlite::{SqliteOptions, SqliteStore};

/// A new store in its own temporary directory. The directory lives as long as the reopen
/// closure (held by the `TestStore`), so the file outlives every store opened on it.
async fn fresh() -> TestStore {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nested").join("redrive.db");
    let first = Arc::new(SqliteStore::open(&path, SqliteOptions::default()).expect("open"));
    let current = Mutex::new(Arc::clone(&first));
    let reopen = move || -> Arc<dyn Store> {
        let _keep = &dir;
        let mut cur = current.lock().expect("not poisoned");
        // A restart: the old instance stops (its queued work done), a new one opens.
        cur.close();
        *cur = Arc::new(SqliteStore::open(&path, SqliteOptions::default()).expect("reopen"));
        Arc::clone(&*cur) as Arc<dyn Store>
    };
    TestStore {
        store: first,
        reopen: Some(Box::new(reopen)),
    }
}

redrive_store_conformance::store_conformance_tests!(fresh);
