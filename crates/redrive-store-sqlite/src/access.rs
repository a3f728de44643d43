//! API tokens and the audit log: token writes and audit appends and retention (writer),
//! token lookups and audit pages (readers).
//!
//! An append reads the chain's head (`audit_head`: the newest entry's number and hash)
//! inside the writer's transaction, chains the new entries to it with
//! `redrive_core::audit::entry_hash` and moves the head to the last of them; only the
//! writer thread writes the file, so appends are serialized by construction.

use redrive_core::Timestamp;
use redrive_core::audit::ChainHead;
use redrive_store::skeleton::access::{
    self as skeleton, chain, grants_json, new_token, page_limit, pruned, token_exists,
    token_not_found,
};
use redrive_store::skeleton::columns::{invariant, to_json};
use redrive_store::{AuditEntry, AuditFields, AuditQuery, NewToken, StoreResult, TokenRecord};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};

use crate::error::Db;
use crate::rows::{Cols, query_all, query_opt};
use crate::writer::Tx;

fn token(r: &Row<'_>) -> StoreResult<TokenRecord> {
    skeleton::token(&Cols(r))
}

fn token_where(conn: &Connection, column: &str, value: &str) -> StoreResult<Option<TokenRecord>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            concat!(
                "SELECT ",
                redrive_store::columns!(token),
                " FROM tokens WHERE {} = ?1"
            ),
            column
        ))
        .db()?;
    query_opt(&mut stmt, [value], token)
}

// ---- tokens: reads ----------------------------------------------------------------------

pub(crate) fn list_tokens(conn: &Connection) -> StoreResult<Vec<TokenRecord>> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(token),
            " FROM tokens ORDER BY created_at, id"
        ))
        .db()?;
    query_all(&mut stmt, [], token)
}

pub(crate) fn find_token(conn: &Connection, secret_hash: &str) -> StoreResult<Option<TokenRecord>> {
    token_where(conn, "secret_hash", secret_hash)
}

pub(crate) fn find_token_by_sqs_key(
    conn: &Connection,
    access_key_id: &str,
) -> StoreResult<Option<TokenRecord>> {
    token_where(conn, "sqs_access_key_id", access_key_id)
}

// ---- tokens: writes ---------------------------------------------------------------------

pub(crate) fn create_token(
    tx: &mut Tx<'_>,
    token: &NewToken,
    now: Timestamp,
) -> StoreResult<TokenRecord> {
    // Without a conflict target, DO NOTHING covers every uniqueness rule: the id, the
    // secret hash, the SQS access key id, and the name among tokens not revoked.
    let inserted = tx
        .conn
        .prepare_cached(concat!(
            "INSERT INTO tokens (",
            redrive_store::columns!(token),
            ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, ?9) ON CONFLICT DO NOTHING"
        ))
        .db()?
        .execute(params![
            token.id,
            token.name,
            token.secret_hash,
            grants_json(token)?,
            token.created_by,
            now.0,
            token.expires_at.map(|t| t.0),
            token.sqs.as_ref().map(|s| s.access_key_id.as_str()),
            token.sqs.as_ref().map(|s| s.secret_access_key.as_str()),
        ])
        .db()?;
    if inserted == 0 {
        return Err(token_exists(token));
    }
    Ok(new_token(token, now))
}

pub(crate) fn revoke_token(tx: &mut Tx<'_>, id: &str, now: Timestamp) -> StoreResult<TokenRecord> {
    tx.conn
        .prepare_cached("UPDATE tokens SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1")
        .db()?
        .execute(params![id, now.0])
        .db()?;
    token_where(tx.conn, "id", id)?.ok_or_else(|| token_not_found(id))
}

// ---- the audit log ------------------------------------------------------------------------

/// The chain's head (`None`: its row is gone).
pub(crate) fn audit_head(conn: &Connection) -> StoreResult<Option<ChainHead>> {
    conn.prepare_cached("SELECT seq, hash FROM audit_head WHERE id = 1")
        .db()?
        .query_row([], |r| {
            Ok(ChainHead {
                seq: r.get(0)?,
                hash: r.get(1)?,
            })
        })
        .optional()
        .db()
}

/// The head an append follows: a store without one refuses to append.
fn head_for_append(conn: &Connection) -> StoreResult<ChainHead> {
    audit_head(conn)?.ok_or_else(|| invariant("the audit chain's head is missing"))
}

/// Appends `entries` after the chain's head `(seq, prev)` and moves the head to the last
/// of them, inside the caller's write transaction.
fn append_after(
    conn: &Connection,
    seq: i64,
    prev: String,
    entries: &[AuditFields],
) -> StoreResult<Vec<AuditEntry>> {
    let out = chain(seq, prev, entries);
    let mut insert = conn
        .prepare_cached(concat!(
            "INSERT INTO audit_log (",
            redrive_store::columns!(audit),
            ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
        ))
        .db()?;
    for e in &out {
        let f = &e.fields;
        insert
            .execute(params![
                e.seq,
                f.at.0,
                f.actor_id,
                f.actor_name,
                f.action,
                f.entity,
                to_json(&f.targets)?,
                f.outcome,
                f.client,
                e.prev_hash,
                e.hash,
            ])
            .db()?;
    }
    if let Some(last) = out.last() {
        conn.prepare_cached("UPDATE audit_head SET seq = ?1, hash = ?2 WHERE id = 1")
            .db()?
            .execute(params![last.seq, last.hash])
            .db()?;
    }
    Ok(out)
}

pub(crate) fn append_audit(
    tx: &mut Tx<'_>,
    entries: &[AuditFields],
) -> StoreResult<Vec<AuditEntry>> {
    append_on(tx.conn, entries)
}

/// Appends `entries` at the chain's head inside the transaction open on `conn` (the
/// writer's, or the open's before the writer starts).
pub(crate) fn append_on(
    conn: &Connection,
    entries: &[AuditFields],
) -> StoreResult<Vec<AuditEntry>> {
    let head = head_for_append(conn)?;
    append_after(conn, head.seq, head.hash, entries)
}

pub(crate) fn list_audit(conn: &Connection, q: &AuditQuery) -> StoreResult<Vec<AuditEntry>> {
    // Only the filters given are in the statement, so each combination has a plan that
    // uses the index of its most selective column (at most 32 statements are cached).
    let mut sql = concat!(
        "SELECT ",
        redrive_store::columns!(audit),
        " FROM audit_log WHERE seq > ?1"
    )
    .to_owned();
    let mut values: Vec<Value> = vec![Value::Integer(q.after_seq.unwrap_or(0))];
    let mut add = |clause: &str, v: Value| {
        values.push(v);
        sql.push_str(&format!(" AND {clause} ?{}", values.len()));
    };
    if let Some(a) = &q.actor_id {
        add("actor_id =", Value::Text(a.clone()));
    }
    if let Some(e) = &q.entity {
        add("entity =", Value::Text(e.clone()));
    }
    if let Some(a) = &q.action {
        add("action =", Value::Text(a.clone()));
    }
    if let Some(t) = q.from {
        add("at >=", Value::Integer(t.0));
    }
    if let Some(t) = q.to {
        add("at <", Value::Integer(t.0));
    }
    values.push(Value::Integer(page_limit(q.limit)));
    sql.push_str(&format!(" ORDER BY seq LIMIT ?{}", values.len()));
    let mut stmt = conn.prepare_cached(&sql).db()?;
    query_all(&mut stmt, params_from_iter(values), |r| {
        skeleton::audit_entry(&Cols(r))
    })
}

pub(crate) fn prune_audit(
    tx: &mut Tx<'_>,
    before: Timestamp,
    fields: &AuditFields,
) -> StoreResult<u64> {
    let conn = tx.conn;
    let head = head_for_append(conn)?;
    let Some(newest) = conn
        .prepare_cached("SELECT max(seq) FROM audit_log")
        .db()?
        .query_row([], |r| r.get::<_, Option<i64>>(0))
        .db()?
    else {
        return Ok(0);
    };
    // Only a prefix of the log can go (the rest must stay linked to what is left): the
    // entries before the first one that is not older than `before`, and never the newest.
    let first_kept: Option<i64> = conn
        .prepare_cached("SELECT min(seq) FROM audit_log WHERE at >= ?1")
        .db()?
        .query_row([before.0], |r| r.get(0))
        .db()?;
    let through = first_kept.unwrap_or(newest).min(newest) - 1;
    let last_removed: Option<(i64, String)> = conn
        .prepare_cached("SELECT seq, hash FROM audit_log WHERE seq <= ?1 ORDER BY seq DESC LIMIT 1")
        .db()?
        .query_row([through], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .db()?;
    let Some((through_seq, through_hash)) = last_removed else {
        return Ok(0);
    };
    let removed = conn
        .prepare_cached("DELETE FROM audit_log WHERE seq <= ?1")
        .db()?
        .execute([through_seq])
        .db()?;
    append_after(
        conn,
        head.seq,
        head.hash,
        &[pruned(fields, through_seq, &through_hash)],
    )?;
    Ok(removed as u64)
}
