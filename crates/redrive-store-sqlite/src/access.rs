//! API tokens and the audit log: token writes and audit appends and retention (writer),
//! token lookups and audit pages (readers).
//!
//! An append reads the newest entry's number and hash inside the writer's transaction and
//! chains the new entries to it with `redrive_core::audit::entry_hash`; only the writer
//! thread writes the file, so appends are serialized by construction.

use redrive_core::Timestamp;
use redrive_core::access::Grant;
use redrive_core::audit::GENESIS_HASH;
use redrive_store::{
    AuditEntry, AuditFields, AuditQuery, MAX_AUDIT_PAGE, NewToken, SqsCredentials, StoreError,
    StoreResult, TokenRecord,
};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};

use crate::error::Db;
use crate::writer::Tx;

const TOKEN_COLS: &str = "id, name, secret_hash, grants, created_by, created_at, expires_at, \
                          revoked_at, sqs_access_key_id, sqs_secret";

const AUDIT_COLS: &str =
    "seq, at, actor_id, actor_name, action, entity, targets, outcome, client, prev_hash, hash";

fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> StoreResult<String> {
    serde_json::to_string(v).map_err(StoreError::backend)
}

fn from_json<T: serde::de::DeserializeOwned>(s: &str) -> StoreResult<T> {
    serde_json::from_str(s).map_err(StoreError::backend)
}

type TokenRow = (
    String,
    String,
    String,
    String,
    String,
    i64,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<String>,
);

fn token_row(r: &Row<'_>) -> rusqlite::Result<TokenRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
    ))
}

fn token_record(row: TokenRow) -> StoreResult<TokenRecord> {
    let (id, name, secret_hash, grants, created_by, created_at, expires_at, revoked_at, key, sec) =
        row;
    let sqs = match (key, sec) {
        (Some(access_key_id), Some(secret_access_key)) => Some(SqsCredentials {
            access_key_id,
            secret_access_key,
        }),
        _ => None,
    };
    Ok(TokenRecord {
        token: NewToken {
            id,
            name,
            secret_hash,
            grants: from_json::<Vec<Grant>>(&grants)?,
            created_by,
            expires_at: expires_at.map(Timestamp),
            sqs,
        },
        created_at: Timestamp(created_at),
        revoked_at: revoked_at.map(Timestamp),
    })
}

fn token_where(conn: &Connection, column: &str, value: &str) -> StoreResult<Option<TokenRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {TOKEN_COLS} FROM tokens WHERE {column} = ?1"
    ))
    .db()?
    .query_row([value], token_row)
    .optional()
    .db()?
    .map(token_record)
    .transpose()
}

// ---- tokens: reads ----------------------------------------------------------------------

pub(crate) fn list_tokens(conn: &Connection) -> StoreResult<Vec<TokenRecord>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {TOKEN_COLS} FROM tokens ORDER BY created_at, id"
        ))
        .db()?;
    let rows = stmt.query_map([], token_row).db()?;
    rows.map(|r| r.db().and_then(token_record)).collect()
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
    let grants: Vec<String> = token.grants.iter().map(ToString::to_string).collect();
    // Without a conflict target, DO NOTHING covers every uniqueness rule: the id, the
    // secret hash, the SQS access key id, and the name among tokens not revoked.
    let inserted = tx
        .conn
        .prepare_cached(&format!(
            "INSERT INTO tokens ({TOKEN_COLS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, ?9) ON CONFLICT DO NOTHING"
        ))
        .db()?
        .execute(params![
            token.id,
            token.name,
            token.secret_hash,
            to_json(&grants)?,
            token.created_by,
            now.0,
            token.expires_at.map(|t| t.0),
            token.sqs.as_ref().map(|s| s.access_key_id.as_str()),
            token.sqs.as_ref().map(|s| s.secret_access_key.as_str()),
        ])
        .db()?;
    if inserted == 0 {
        return Err(StoreError::TokenExists {
            name: token.name.clone(),
        });
    }
    Ok(TokenRecord {
        token: token.clone(),
        created_at: now,
        revoked_at: None,
    })
}

pub(crate) fn revoke_token(tx: &mut Tx<'_>, id: &str, now: Timestamp) -> StoreResult<TokenRecord> {
    tx.conn
        .prepare_cached("UPDATE tokens SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1")
        .db()?
        .execute(params![id, now.0])
        .db()?;
    token_where(tx.conn, "id", id)?.ok_or_else(|| StoreError::TokenNotFound { id: id.to_owned() })
}

// ---- the audit log ------------------------------------------------------------------------

fn audit_row(r: &Row<'_>) -> rusqlite::Result<(AuditEntry, String)> {
    Ok((
        AuditEntry {
            seq: r.get(0)?,
            prev_hash: r.get(9)?,
            hash: r.get(10)?,
            fields: AuditFields {
                at: Timestamp(r.get(1)?),
                actor_id: r.get(2)?,
                actor_name: r.get(3)?,
                action: r.get(4)?,
                entity: r.get(5)?,
                targets: Vec::new(),
                outcome: r.get(7)?,
                client: r.get(8)?,
            },
        },
        r.get(6)?,
    ))
}

fn audit_entry((mut entry, targets): (AuditEntry, String)) -> StoreResult<AuditEntry> {
    entry.fields.targets = from_json(&targets)?;
    Ok(entry)
}

/// Appends `entries` after the newest entry, inside the caller's write transaction.
fn append_in(conn: &Connection, entries: &[AuditFields]) -> StoreResult<Vec<AuditEntry>> {
    let newest: Option<(i64, String)> = conn
        .prepare_cached("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1")
        .db()?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .db()?;
    let (mut seq, mut prev) = newest.unwrap_or_else(|| (0, GENESIS_HASH.to_owned()));
    let mut insert = conn
        .prepare_cached(&format!(
            "INSERT INTO audit_log ({AUDIT_COLS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
        ))
        .db()?;
    let mut out = Vec::with_capacity(entries.len());
    for fields in entries {
        seq += 1;
        let hash = redrive_core::audit::entry_hash(seq, &prev, fields);
        insert
            .execute(params![
                seq,
                fields.at.0,
                fields.actor_id,
                fields.actor_name,
                fields.action,
                fields.entity,
                to_json(&fields.targets)?,
                fields.outcome,
                fields.client,
                prev,
                hash,
            ])
            .db()?;
        out.push(AuditEntry {
            seq,
            prev_hash: std::mem::replace(&mut prev, hash.clone()),
            hash,
            fields: fields.clone(),
        });
    }
    Ok(out)
}

pub(crate) fn append_audit(
    tx: &mut Tx<'_>,
    entries: &[AuditFields],
) -> StoreResult<Vec<AuditEntry>> {
    append_in(tx.conn, entries)
}

/// The page size a query asks for, capped: 0 means the cap.
pub(crate) fn page_limit(limit: u32) -> u32 {
    if limit == 0 {
        MAX_AUDIT_PAGE
    } else {
        limit.min(MAX_AUDIT_PAGE)
    }
}

pub(crate) fn list_audit(conn: &Connection, q: &AuditQuery) -> StoreResult<Vec<AuditEntry>> {
    // Only the filters given are in the statement, so each combination has a plan that
    // uses the index of its most selective column (at most 32 statements are cached).
    let mut sql = format!("SELECT {AUDIT_COLS} FROM audit_log WHERE seq > ?1");
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
    values.push(Value::Integer(i64::from(page_limit(q.limit))));
    sql.push_str(&format!(" ORDER BY seq LIMIT ?{}", values.len()));
    let mut stmt = conn.prepare_cached(&sql).db()?;
    let rows = stmt.query_map(params_from_iter(values), audit_row).db()?;
    rows.map(|r| r.db().and_then(audit_entry)).collect()
}

pub(crate) fn prune_audit(
    tx: &mut Tx<'_>,
    before: Timestamp,
    fields: &AuditFields,
) -> StoreResult<u64> {
    let conn = tx.conn;
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
    let mut record = fields.clone();
    record.targets.push(format!("through_seq={through_seq}"));
    record.targets.push(format!("through_hash={through_hash}"));
    append_in(conn, std::slice::from_ref(&record))?;
    Ok(removed as u64)
}
