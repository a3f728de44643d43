//! Opening connections and applying the versioned schema migrations.

use std::path::Path;
use std::time::Duration;

use redrive_store::StoreResult;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::error::{Db, SqliteError, backend};

/// The migrations, applied in order at open. A version is never edited once released; a
/// schema change adds the next one.
pub(crate) const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("migrations/0001_initial.sql")),
    (2, include_str!("migrations/0002_leases.sql")),
    (3, include_str!("migrations/0003_topics.sql")),
    (4, include_str!("migrations/0004_message_bodies.sql")),
    (5, include_str!("migrations/0005_access.sql")),
    (6, include_str!("migrations/0006_register.sql")),
    (7, include_str!("migrations/0007_replay.sql")),
    (8, include_str!("migrations/0008_cases.sql")),
    (9, include_str!("migrations/0009_move_tasks.sql")),
    (10, include_str!("migrations/0010_replay_plans.sql")),
    (11, include_str!("migrations/0011_move_plans.sql")),
    (12, include_str!("migrations/0012_case_failure_index.sql")),
    (13, include_str!("migrations/0013_intent_entities.sql")),
    (14, include_str!("migrations/0014_audit_head.sql")),
    (
        15,
        include_str!("migrations/0015_undecodable_dead_letters.sql"),
    ),
    (16, include_str!("migrations/0016_message_last_attempt.sql")),
    (17, include_str!("migrations/0017_route_evidence.sql")),
    (18, include_str!("migrations/0018_case_groups.sql")),
    (19, include_str!("migrations/0019_failure_signatures.sql")),
    (20, include_str!("migrations/0020_open_cases_by_queue.sql")),
    (21, include_str!("migrations/0021_policy_versions.sql")),
    (22, include_str!("migrations/0022_signature_backfill.sql")),
    (
        23,
        include_str!("migrations/0023_signature_counts_on_insert.sql"),
    ),
    (24, include_str!("migrations/0024_memory_locks.sql")),
];

/// The newest schema version this build knows (re-exported as `SCHEMA_VERSION`).
pub const LATEST_VERSION: i64 = 24;

/// How long a connection waits for a lock held by another connection before giving up
/// with SQLITE_BUSY (mapped to `Unavailable`).
#[cfg(not(test))]
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Short in unit tests, which provoke SQLITE_BUSY on purpose.
#[cfg(test)]
const BUSY_TIMEOUT: Duration = Duration::from_millis(100);

/// Statements kept prepared per connection.
const STATEMENT_CACHE: usize = 128;

/// Settings every connection gets.
///
/// The query planner stability guarantee (QPSG) keeps a statement's plan independent of
/// the values bound to it. Without it, SQLite marks a cached statement as depending on a
/// parameter whenever the planner looks at that parameter's value — a `LIMIT ?`, or a term
/// compared with a partial index's condition — and then prepares the statement again (parse
/// and plan) every time a new value is bound, which made every receive re-prepare its
/// queries. No query here relies on value-dependent plans (`hot_queries_use_indexes`).
fn configure(conn: &Connection) -> StoreResult<()> {
    conn.busy_timeout(BUSY_TIMEOUT).db()?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .db()?;
    Ok(())
}

/// Opens the write connection: creates the file, WAL mode, synchronous=FULL.
pub(crate) fn open_writer(path: &Path) -> StoreResult<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .db()?;
    configure(&conn)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .db()?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(backend(SqliteError::NoWal { mode }));
    }
    // FULL: the WAL is synced at every commit, so an acknowledged write survives power loss.
    conn.pragma_update(None, "synchronous", "FULL").db()?;
    conn.pragma_update(None, "foreign_keys", "OFF").db()?;
    // 16 MiB of page cache for the writer.
    conn.pragma_update(None, "cache_size", -16_384).db()?;
    // temp_store stays SQLite's default (files, kept in memory up to 64 KiB each): a
    // statement journal held wholly in memory is a list of 1 KiB chunks that SQLite walks
    // from its start each time a statement inside a savepoint ends, so with every job of
    // a group in its own savepoint and triggers on dead letters and message bodies, that
    // walk grew with the job and took 40 % of the writer's time when dead-lettering
    // (docs/benchmarks.md, "Statement journals").
    Ok(conn)
}

/// Opens one read-only connection of the read pool.
pub(crate) fn open_reader(path: &Path) -> StoreResult<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .db()?;
    configure(&conn)?;
    conn.pragma_update(None, "query_only", "ON").db()?;
    Ok(conn)
}

/// Applies every migration newer than the database's version, each in its own
/// transaction. Refuses a database whose version is newer than this build knows.
pub(crate) fn migrate(conn: &Connection) -> StoreResult<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER NOT NULL PRIMARY KEY)",
    )
    .db()?;
    let current = current_version(conn)?;
    if current > LATEST_VERSION {
        return Err(backend(SqliteError::SchemaTooNew {
            found: current,
            known: LATEST_VERSION,
        }));
    }
    for &(version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        conn.execute_batch("BEGIN IMMEDIATE").db()?;
        let applied = conn.execute_batch(sql).and_then(|()| {
            conn.execute(
                "INSERT INTO schema_migrations (version) VALUES (?1)",
                [version],
            )
        });
        match applied {
            Ok(_) => conn.execute_batch("COMMIT").db()?,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(crate::error::map_err(e));
            }
        }
        tracing::info!(version, "applied schema migration");
    }
    Ok(())
}

/// The highest applied migration, 0 for a new database.
pub(crate) fn current_version(conn: &Connection) -> StoreResult<i64> {
    let v: Option<i64> = conn
        .query_row("SELECT max(version) FROM schema_migrations", [], |r| {
            r.get(0)
        })
        .optional()
        .db()?
        .flatten();
    Ok(v.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order_up_to_latest() {
        for (i, (v, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*v, i64::try_from(i).unwrap() + 1);
        }
        assert_eq!(MIGRATIONS.last().unwrap().0, LATEST_VERSION);
    }
}
