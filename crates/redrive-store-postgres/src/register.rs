//! The idempotency register. The decisions are `redrive_store::skeleton::register`'s.
//!
//! A put first tries to insert (`ON CONFLICT DO NOTHING`, which waits for a concurrent
//! insert of the same key): a new key has no previous entry. Otherwise it locks the
//! existing row, so two puts of one key answer each other's entry as the previous one.

use redrive_core::Timestamp;
use redrive_core::register::{RegisterEntry, RegisterKey};
use redrive_store::skeleton::columns::invariant;
use redrive_store::skeleton::register::{self as skeleton, page_limit};
use redrive_store::{RegisterRecord, StoreResult};
use tokio_postgres::Row;

use crate::pool::Db;
use crate::rows::{Cols, decode};

fn record(r: &Row) -> StoreResult<RegisterRecord> {
    skeleton::record(&Cols(r))
}

async fn locked(db: &Db<'_>, key: &str) -> StoreResult<Option<RegisterRecord>> {
    db.query_opt(
        concat!(
            "SELECT ",
            redrive_store::columns!(register),
            " FROM idempotency_register WHERE key = $1 FOR UPDATE"
        ),
        &[&key],
    )
    .await?
    .as_ref()
    .map(record)
    .transpose()
}

pub(crate) async fn put(
    db: &Db<'_>,
    entry: &RegisterEntry,
    now: Timestamp,
) -> StoreResult<Option<RegisterRecord>> {
    let key = entry.key.to_string();
    // A delete between the insert that met the row and the lock that looks for it sends
    // the put round again; twice in a row is not a race a caller can make.
    for _ in 0..3 {
        if let Some(w) = skeleton::put(None, entry, now) {
            let n = db
                .execute(
                    concat!(
                        "INSERT INTO idempotency_register (",
                        redrive_store::columns!(register),
                        ") VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO NOTHING"
                    ),
                    &[
                        &key,
                        &w.entry.answer.as_str(),
                        &w.entry.ordering_attribute,
                        &w.updated_at.0,
                    ],
                )
                .await?;
            if n == 1 {
                return Ok(None);
            }
        }
        let Some(previous) = locked(db, &key).await? else {
            continue;
        };
        if let Some(w) = skeleton::put(Some(&previous), entry, now) {
            db.execute(
                "UPDATE idempotency_register SET answer = $2, ordering_attribute = $3, \
                 updated_at = $4 WHERE key = $1",
                &[
                    &key,
                    &w.entry.answer.as_str(),
                    &w.entry.ordering_attribute,
                    &w.updated_at.0,
                ],
            )
            .await?;
        }
        return Ok(Some(previous));
    }
    Err(invariant("a register entry kept vanishing under its put"))
}

pub(crate) async fn delete(db: &Db<'_>, key: &RegisterKey) -> StoreResult<Option<RegisterRecord>> {
    let key = key.to_string();
    db.query_opt(
        concat!(
            "DELETE FROM idempotency_register WHERE key = $1 RETURNING ",
            redrive_store::columns!(register)
        ),
        &[&key],
    )
    .await?
    .as_ref()
    .map(record)
    .transpose()
}

pub(crate) async fn list(
    db: &Db<'_>,
    after: Option<&str>,
    limit: u32,
) -> StoreResult<Vec<RegisterRecord>> {
    let rows = db
        .query(
            concat!(
                "SELECT ",
                redrive_store::columns!(register),
                " FROM idempotency_register WHERE $1::text IS NULL OR key > $1 \
                 ORDER BY key LIMIT $2"
            ),
            &[&after, &page_limit(limit)],
        )
        .await?;
    decode(&rows, record)
}
