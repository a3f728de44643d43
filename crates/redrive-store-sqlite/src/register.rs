//! The idempotency register: puts and deletes (writer), pages (readers). The decisions
//! are `redrive_store::skeleton::register`'s.

use redrive_core::Timestamp;
use redrive_core::register::{RegisterEntry, RegisterKey};
use redrive_store::skeleton::register::{self as skeleton, page_limit};
use redrive_store::{RegisterRecord, StoreResult};
use rusqlite::{Connection, Row, params};

use crate::error::Db;
use crate::rows::{Cols, query_all, query_opt};
use crate::writer::Tx;

fn record(r: &Row<'_>) -> StoreResult<RegisterRecord> {
    skeleton::record(&Cols(r))
}

fn get(conn: &Connection, key: &str) -> StoreResult<Option<RegisterRecord>> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(register),
            " FROM idempotency_register WHERE key = ?1"
        ))
        .db()?;
    query_opt(&mut stmt, [key], record)
}

pub(crate) fn put(
    tx: &mut Tx<'_>,
    entry: &RegisterEntry,
    now: Timestamp,
) -> StoreResult<Option<RegisterRecord>> {
    let key = entry.key.to_string();
    let previous = get(tx.conn, &key)?;
    if let Some(write) = skeleton::put(previous.as_ref(), entry, now) {
        tx.conn
            .prepare_cached(concat!(
                "INSERT INTO idempotency_register (",
                redrive_store::columns!(register),
                ") VALUES (?1, ?2, ?3, ?4) ON CONFLICT (key) DO UPDATE SET \
                 answer = excluded.answer, ordering_attribute = excluded.ordering_attribute, \
                 updated_at = excluded.updated_at"
            ))
            .db()?
            .execute(params![
                key,
                write.entry.answer.as_str(),
                write.entry.ordering_attribute,
                write.updated_at.0,
            ])
            .db()?;
    }
    Ok(previous)
}

pub(crate) fn delete(tx: &mut Tx<'_>, key: &RegisterKey) -> StoreResult<Option<RegisterRecord>> {
    let key = key.to_string();
    let previous = get(tx.conn, &key)?;
    if previous.is_some() {
        tx.conn
            .prepare_cached("DELETE FROM idempotency_register WHERE key = ?1")
            .db()?
            .execute([&key])
            .db()?;
    }
    Ok(previous)
}

pub(crate) fn list(
    conn: &Connection,
    after: Option<&str>,
    limit: u32,
) -> StoreResult<Vec<RegisterRecord>> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(register),
            " FROM idempotency_register WHERE ?1 IS NULL OR key > ?1 ORDER BY key LIMIT ?2"
        ))
        .db()?;
    query_all(&mut stmt, params![after, page_limit(limit)], record)
}
