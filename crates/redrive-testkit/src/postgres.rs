//! The PostgreSQL test database: the one `REDRIVE_TEST_POSTGRES_URL` names (locally, for
//! example, `postgres://postgres@127.0.0.1:5432/test`; in CI, `.ci/postgres-env` creates
//! one per run), and what tests carve out of it.
//!
//! One rule for every suite: without a usable database (the variable unset or empty, or
//! the server not answering a probe, made once per test process) a PostgreSQL test says on
//! stderr why it is skipped, and under CI (`CI` set) it fails instead, since CI must run
//! it. [`url`] skips one test (it returns `None`); [`database`] is for test binaries whose
//! cases cannot skip themselves (the conformance suite's macro runs every case on what its
//! factory returns): it ends the process with success.

use std::io::Write as _;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use redrive_store_postgres::PostgresOptions;

/// The variable naming the test database.
pub const URL_VAR: &str = "REDRIVE_TEST_POSTGRES_URL";

/// How long the reachability probe waits for the server.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The test database's URL, or why there is none (decided once per process).
fn probed() -> &'static Result<String, String> {
    static PROBED: OnceLock<Result<String, String>> = OnceLock::new();
    PROBED.get_or_init(
        || match std::env::var(URL_VAR).ok().filter(|u| !u.trim().is_empty()) {
            None => Err(format!("{URL_VAR} is not set")),
            Some(url) => probe(&url)
                .map(|()| url)
                .map_err(|e| format!("{URL_VAR} is set but PostgreSQL does not answer: {e}")),
        },
    )
}

fn under_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// The test database's URL; without one, `None` after saying that `what` is skipped
/// (under CI: a failure).
pub fn url(what: &str) -> Option<String> {
    match probed() {
        Ok(url) => Some(url.clone()),
        Err(why) => {
            assert!(!under_ci(), "{what} must run in CI, but {why}");
            // Straight to stderr: the harness's capture would swallow `eprintln!`.
            let _ = writeln!(std::io::stderr(), "{what} skipped: {why}");
            None
        }
    }
}

/// The test database's URL; without one, says once that the PostgreSQL cases are skipped
/// and ends the test binary successfully (under CI: fails the case).
pub fn database() -> String {
    match probed() {
        Ok(url) => url.clone(),
        Err(why) => {
            assert!(
                !under_ci(),
                "the PostgreSQL cases must run in CI, but {why} \
                 (.ci/postgres-env provides a database)"
            );
            // One thread prints and exits; any other case reaching this point waits here.
            static ONCE: Mutex<()> = Mutex::new(());
            let _only_one = ONCE.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = writeln!(
                std::io::stderr(),
                "PostgreSQL cases skipped because {why} \
                 (for example {URL_VAR}=postgres://postgres@127.0.0.1:5432/test)"
            );
            std::process::exit(0)
        }
    }
}

/// Connects once and runs `SELECT 1`, on a thread and runtime of its own (the answer is
/// shared by every test of the process, whatever runtime asked first).
fn probe(url: &str) -> Result<(), String> {
    let url = url.to_owned();
    on_own_runtime(move || async move {
        let (client, connection) = tokio::time::timeout(
            PROBE_TIMEOUT,
            tokio_postgres::connect(&url, tokio_postgres::NoTls),
        )
        .await
        .map_err(|_| format!("no answer within {PROBE_TIMEOUT:?}"))?
        .map_err(|e| chain(&e))?;
        let io = tokio::spawn(connection);
        client
            .simple_query("SELECT 1")
            .await
            .map_err(|e| chain(&e))?;
        drop(client);
        let _ = io.await;
        Ok(())
    })
}

/// Runs the future `f` makes on a new thread with a runtime of its own (for `Drop`, which
/// cannot await, and for work shared by tests on different runtimes).
fn on_own_runtime<F, Fut>(f: F) -> Result<(), String>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), String>>,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?
            .block_on(f())
    })
    .join()
    .unwrap_or_else(|_| Err("the helper thread panicked".to_owned()))
}

/// An error with its causes, `outer: inner: ...`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// Runs `sql` (one or more statements) on `url` through a connection of its own.
pub async fn admin_sql(url: &str, sql: &str) {
    if let Err(e) = try_admin_sql(url, sql).await {
        panic!("{sql}: {e}");
    }
}

async fn try_admin_sql(url: &str, sql: &str) -> Result<(), String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("connect: {}", chain(&e)))?;
    let io = tokio::spawn(connection);
    client.batch_execute(sql).await.map_err(|e| chain(&e))?;
    drop(client);
    let _ = io.await;
    Ok(())
}

/// Runs `sql` on `url` from `Drop` (on a runtime of its own); a failure is reported on
/// stderr as a failure to drop `what`, not raised.
fn drop_with(url: String, sql: String, what: &str) {
    if let Err(e) = on_own_runtime(move || async move { try_admin_sql(&url, &sql).await }) {
        let _ = writeln!(std::io::stderr(), "could not drop {what}: {e}");
    }
}

/// A fresh `rd_test_<random>` schema on a database, created by the first store that
/// connects with [`SchemaGuard::options`] and dropped (with everything in it) when the
/// guard goes, pass or fail. A failure to drop it is reported, not raised.
pub struct SchemaGuard {
    /// The database.
    pub url: String,
    /// The schema's name.
    pub schema: String,
}

impl SchemaGuard {
    /// A new schema name on the database at `url`.
    pub fn fresh(url: &str) -> SchemaGuard {
        SchemaGuard {
            url: url.to_owned(),
            schema: format!("rd_test_{:016x}", fastrand::u64(..)),
        }
    }

    /// Store options selecting the schema.
    pub fn options(&self) -> PostgresOptions {
        PostgresOptions {
            schema: Some(self.schema.clone()),
            ..PostgresOptions::default()
        }
    }

    /// The database URL with the schema as its `schema` parameter (what `redrive serve
    /// --store` takes).
    pub fn store_url(&self) -> String {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}schema={}", self.url, self.schema)
    }
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        drop_with(
            self.url.clone(),
            format!(
                "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS \"{}\" CASCADE",
                self.schema
            ),
            &format!("test schema {}", self.schema),
        );
    }
}

/// A database of its own, `rd_db_<random>`, created on the test database's server and
/// dropped (`WITH (FORCE)`) when this goes: for tests that take a whole database out of
/// service.
pub struct FreshDatabase {
    /// The database it was created from (and is dropped through).
    pub admin: String,
    /// Its name.
    pub name: String,
    /// A URL of the new database: `admin` with the database name replaced.
    pub url: String,
}

impl FreshDatabase {
    /// Creates the database through `admin`, a URL of the test database.
    pub async fn create(admin: &str) -> FreshDatabase {
        let name = format!("rd_db_{:016x}", fastrand::u64(..));
        admin_sql(admin, &format!("CREATE DATABASE {name}")).await;
        let (before_query, query) = admin
            .split_once('?')
            .map_or((admin, None), |(a, q)| (a, Some(q)));
        let base = before_query
            .rsplit_once('/')
            .map_or(before_query, |(b, _)| b);
        let url = match query {
            Some(q) => format!("{base}/{name}?{q}"),
            None => format!("{base}/{name}"),
        };
        FreshDatabase {
            admin: admin.to_owned(),
            name,
            url,
        }
    }

    /// Refuses new connections to the database and ends the open ones (a database being
    /// taken out of service).
    pub async fn refuse_connections(&self) {
        admin_sql(
            &self.admin,
            &format!("ALTER DATABASE {} ALLOW_CONNECTIONS false", self.name),
        )
        .await;
        // A connection that was past its database check when connections stopped is not
        // in `pg_stat_activity` yet: terminate until none is left (bounded; a handshake
        // in flight ends within milliseconds on this machine's own server).
        for _ in 0..200 {
            if self.terminate_backends().await == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!(
            "connections to {} kept coming after they were refused",
            self.name
        );
    }

    /// Terminates every backend of the database (but the asking one); answers how many
    /// there were.
    async fn terminate_backends(&self) -> i64 {
        let (client, connection) = tokio_postgres::connect(&self.admin, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect {}: {}", self.admin, chain(&e)));
        let io = tokio::spawn(connection);
        let rows = client
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
                &[&self.name],
            )
            .await
            .unwrap_or_else(|e| panic!("terminate the backends of {}: {}", self.name, chain(&e)));
        drop(client);
        let _ = io.await;
        i64::try_from(rows.len()).unwrap_or(i64::MAX)
    }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        drop_with(
            self.admin.clone(),
            format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            &format!("test database {}", self.name),
        );
    }
}
