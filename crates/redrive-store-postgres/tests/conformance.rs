//! The shared conformance suite, run against a fresh PostgreSQL schema per case.
//!
//! The database is the one `REDRIVE_TEST_POSTGRES_URL` names (locally, for example,
//! `postgres://postgres@127.0.0.1:5432/test`; in CI, `.ci/postgres-env` creates one per
//! run). Each case gets its own `rd_test_<random>` schema, created by the store's
//! migrations at connect and dropped when the case's `TestStore` is dropped (pass or
//! fail); its `reopen` closes the store and connects again to the same schema.
//!
//! Without a usable database (the variable unset, or the server not answering), whether
//! the cases run is decided once, in the factory, by `redrive_testkit::postgres::database`:
//! under CI (`CI` set) every case fails with the reason; otherwise one line says why the
//! PostgreSQL cases are skipped and the test binary ends successfully at once. (A case
//! cannot skip itself: the suite's macro runs it on whatever the factory returns, so
//! "skip" ends the process with success before any case body runs; the line is written to
//! stderr directly so that the test harness's output capture does not swallow it.)

use std::sync::{Arc, Mutex};

use redrive_store::Store;
use redrive_store_conformance::TestStore;
use redrive_store_postgres::PostgresStore;

use redrive_testkit::postgres::{SchemaGuard, database};

/// A new store on a fresh schema of the test database.
async fn fresh() -> TestStore {
    let guard = SchemaGuard::fresh(&database());
    let first = Arc::new(
        PostgresStore::connect(&guard.url, guard.options())
            .await
            .expect("connect to the test database"),
    );
    let current = Mutex::new(Arc::clone(&first));
    let reopen = move || -> Arc<dyn Store> {
        let mut cur = current.lock().expect("not poisoned");
        // A restart: the old instance stops taking work, a new one connects.
        cur.close();
        let store = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current()
                .block_on(PostgresStore::connect(&guard.url, guard.options()))
        })
        .expect("reconnect to the test schema");
        *cur = Arc::new(store);
        Arc::clone(&*cur) as Arc<dyn Store>
    };
    TestStore {
        store: first,
        reopen: Some(Box::new(reopen)),
    }
}

redrive_store_conformance::store_conformance_tests!(fresh);
