//! Shared by the PostgreSQL test binaries: finding the test database (once per binary,
//! with the CI / skip rule described in `conformance.rs`) and per-test schemas that are
//! dropped again.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::io::Write;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use redrive_store_postgres::PostgresOptions;

/// The variable naming the test database.
const URL_VAR: &str = "REDRIVE_TEST_POSTGRES_URL";

/// How long the reachability probe waits for the server.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The test database's URL, or the end of this case (and binary) when there is none.
pub fn database() -> String {
    static PROBED: OnceLock<Result<String, String>> = OnceLock::new();
    let probed =
        PROBED.get_or_init(
            || match std::env::var(URL_VAR).ok().filter(|u| !u.trim().is_empty()) {
                None => Err(format!("{URL_VAR} is not set")),
                Some(url) => probe(&url)
                    .map(|()| url)
                    .map_err(|e| format!("{URL_VAR} is set but PostgreSQL does not answer: {e}")),
            },
        );
    match probed {
        Ok(url) => url.clone(),
        Err(why) => no_database(why),
    }
}

/// Fails the case under CI; otherwise says once that the cases are skipped and ends the
/// test binary successfully.
fn no_database(why: &str) -> ! {
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!(
            "the PostgreSQL cases must run in CI, but {why} \
             (.ci/postgres-env provides a database)"
        );
    }
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

/// Connects once and runs `SELECT 1`, on a thread of its own (the factory runs inside a
/// case's runtime, and the answer is shared by every case of the binary).
fn probe(url: &str) -> Result<(), String> {
    let url = url.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
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
    })
    .join()
    .unwrap_or_else(|_| Err("the probe panicked".to_owned()))
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

/// Drops the case's schema when the case's `TestStore` goes (on its own thread and
/// runtime: `Drop` cannot await). A failure is reported, not raised.
pub struct SchemaGuard {
    pub url: String,
    pub schema: String,
}

impl SchemaGuard {
    pub fn options(&self) -> PostgresOptions {
        PostgresOptions {
            schema: Some(self.schema.clone()),
            ..PostgresOptions::default()
        }
    }
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        let (url, schema) = (self.url.clone(), self.schema.clone());
        let dropped = std::thread::spawn(move || -> Result<(), String> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| chain(&e))?;
                let io = tokio::spawn(connection);
                client
                    .batch_execute(&format!(
                        "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                    ))
                    .await
                    .map_err(|e| chain(&e))?;
                drop(client);
                let _ = io.await;
                Ok(())
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the cleanup thread panicked".to_owned()));
        if let Err(e) = dropped {
            eprintln!("could not drop test schema {}: {e}", self.schema);
        }
    }
}

impl SchemaGuard {
    /// A fresh schema name on the test database (created by the first connect).
    pub fn fresh() -> SchemaGuard {
        SchemaGuard {
            url: database(),
            schema: format!("rd_test_{:016x}", fastrand::u64(..)),
        }
    }
}
