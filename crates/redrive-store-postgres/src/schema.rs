//! The versioned schema migrations, applied at connect (and by `redrive migrate`).
//!
//! All pending migrations run in one transaction that first takes a transaction-level
//! advisory lock keyed by the schema's name, so that several nodes starting at once
//! migrate one after the other: the first applies, the others find nothing to do. A
//! schema whose recorded version is newer than this build knows is refused with
//! [`PostgresError::SchemaTooNew`] before anything is changed.

use redrive_store::StoreResult;
use tokio_postgres::Client;

use crate::error::{DbExt, PostgresError, backend};
use crate::pool::quote_ident;

/// The migrations, applied in order. A version is never edited once released; a schema
/// change adds the next one.
const MIGRATIONS: &[(u32, &str)] = &[
    (1, include_str!("migrations/0001_initial.sql")),
    (2, include_str!("migrations/0002_leases.sql")),
    (3, include_str!("migrations/0003_topics.sql")),
    (4, include_str!("migrations/0004_queue_sequences.sql")),
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
];

/// The newest schema version this build knows (re-exported as `SCHEMA_VERSION`).
pub const LATEST_VERSION: u32 = 22;

/// First key of the advisory lock that serialises migrations ("rdrv"); the second key is
/// a hash of the schema name, so that migrations of different schemas do not wait on
/// each other.
const LOCK_CLASS: i32 = 0x7264_7276;

/// Applies every migration newer than the schema's version and returns the version now
/// in force. With `schema`, creates that schema first if it does not exist; the
/// connection's search path must already name it (see `pool::on_connect_sql`).
pub(crate) async fn migrate(client: &mut Client, schema: Option<&str>) -> StoreResult<u32> {
    let tx = client.transaction().await.db()?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1::int4, \
         hashtext(coalesce($2::text, current_schema(), '')))",
        &[&LOCK_CLASS, &schema],
    )
    .await
    .db()?;
    if let Some(schema) = schema {
        let quoted = quote_ident(schema);
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {quoted}; SET search_path TO {quoted};"
        ))
        .await
        .db()?;
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS redrive_schema_migrations \
         (version integer NOT NULL PRIMARY KEY)",
    )
    .await
    .db()?;
    let current: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM redrive_schema_migrations",
            &[],
        )
        .await
        .db()?
        .try_get(0usize)
        .db()?;
    let current =
        u32::try_from(current).map_err(|_| backend(PostgresError::OutOfRange("schema version")))?;
    if current > LATEST_VERSION {
        return Err(backend(PostgresError::SchemaTooNew {
            found: current,
            known: LATEST_VERSION,
        }));
    }
    for &(version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tx.batch_execute(sql).await.db()?;
        let v = i32::try_from(version)
            .map_err(|_| backend(PostgresError::OutOfRange("schema version")))?;
        tx.execute(
            "INSERT INTO redrive_schema_migrations (version) VALUES ($1)",
            &[&v],
        )
        .await
        .db()?;
        tracing::info!(
            version,
            schema = schema.unwrap_or("(search path)"),
            "applied schema migration"
        );
    }
    tx.commit().await.db()?;
    Ok(current.max(LATEST_VERSION))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order_up_to_latest() {
        for (i, (v, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*v, u32::try_from(i).unwrap() + 1);
        }
        assert_eq!(MIGRATIONS.last().unwrap().0, LATEST_VERSION);
    }
}
