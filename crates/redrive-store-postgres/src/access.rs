//! API tokens and the audit log.
//!
//! Token uniqueness (id, secret hash, SQS access key id, and the name among tokens that
//! are not revoked) is the database's: one `INSERT ... ON CONFLICT DO NOTHING` covers
//! every unique index, and a concurrent insert of the same key waits for the first.
//!
//! Appends from every node form one chain: an append (and a retention pass) first locks
//! the one row of `audit_chain`, so they run one at a time across nodes, and only then —
//! in a later statement, hence a later snapshot under `READ COMMITTED` — reads the newest
//! entry, numbers and chains the new ones after it, and inserts them in one statement.

use redrive_core::Timestamp;
use redrive_core::access::Grant;
use redrive_core::audit::{GENESIS_HASH, entry_hash};
use redrive_store::{
    AuditEntry, AuditFields, AuditQuery, MAX_AUDIT_PAGE, NewToken, SqsCredentials, StoreError,
    StoreResult, TokenRecord,
};
use tokio_postgres::Row;

use crate::pool::{Db, Owned};
use crate::rows::get;

macro_rules! token_cols {
    () => {
        "id, name, secret_hash, grants, created_by, created_at, expires_at, revoked_at, \
         sqs_access_key_id, sqs_secret"
    };
}

macro_rules! audit_cols {
    () => {
        "seq, at, actor_id, actor_name, action, entity, targets, outcome, client, prev_hash, \
         hash"
    };
}

fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> StoreResult<String> {
    serde_json::to_string(v).map_err(StoreError::backend)
}

fn from_json<T: serde::de::DeserializeOwned>(s: &str) -> StoreResult<T> {
    serde_json::from_str(s).map_err(StoreError::backend)
}

fn token_record(r: &Row) -> StoreResult<TokenRecord> {
    let key: Option<String> = get(r, 8)?;
    let secret: Option<String> = get(r, 9)?;
    let sqs = match (key, secret) {
        (Some(access_key_id), Some(secret_access_key)) => Some(SqsCredentials {
            access_key_id,
            secret_access_key,
        }),
        _ => None,
    };
    Ok(TokenRecord {
        token: NewToken {
            id: get(r, 0)?,
            name: get(r, 1)?,
            secret_hash: get(r, 2)?,
            grants: from_json::<Vec<Grant>>(&get::<String>(r, 3)?)?,
            created_by: get(r, 4)?,
            expires_at: get::<Option<i64>>(r, 6)?.map(Timestamp),
            sqs,
        },
        created_at: Timestamp(get(r, 5)?),
        revoked_at: get::<Option<i64>>(r, 7)?.map(Timestamp),
    })
}

fn audit_entry(r: &Row) -> StoreResult<AuditEntry> {
    Ok(AuditEntry {
        seq: get(r, 0)?,
        prev_hash: get(r, 9)?,
        hash: get(r, 10)?,
        fields: AuditFields {
            at: Timestamp(get(r, 1)?),
            actor_id: get(r, 2)?,
            actor_name: get(r, 3)?,
            action: get(r, 4)?,
            entity: get(r, 5)?,
            targets: from_json(&get::<String>(r, 6)?)?,
            outcome: get(r, 7)?,
            client: get(r, 8)?,
        },
    })
}

// ---- tokens -------------------------------------------------------------------------------

pub(crate) async fn create_token(
    db: &Db<'_>,
    token: &NewToken,
    now: Timestamp,
) -> StoreResult<TokenRecord> {
    let grants: Vec<String> = token.grants.iter().map(ToString::to_string).collect();
    let n = db
        .execute(
            concat!(
                "INSERT INTO tokens (",
                token_cols!(),
                ") VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8, $9) ON CONFLICT DO NOTHING"
            ),
            &[
                &token.id,
                &token.name,
                &token.secret_hash,
                &to_json(&grants)?,
                &token.created_by,
                &now.0,
                &token.expires_at.map(|t| t.0),
                &token.sqs.as_ref().map(|s| s.access_key_id.as_str()),
                &token.sqs.as_ref().map(|s| s.secret_access_key.as_str()),
            ],
        )
        .await?;
    if n == 0 {
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

pub(crate) async fn list_tokens(db: &Db<'_>) -> StoreResult<Vec<TokenRecord>> {
    let rows = db
        .query(
            concat!(
                "SELECT ",
                token_cols!(),
                " FROM tokens ORDER BY created_at, id"
            ),
            &[],
        )
        .await?;
    rows.iter().map(token_record).collect()
}

pub(crate) async fn find_token(db: &Db<'_>, secret_hash: &str) -> StoreResult<Option<TokenRecord>> {
    db.query_opt(
        concat!(
            "SELECT ",
            token_cols!(),
            " FROM tokens WHERE secret_hash = $1"
        ),
        &[&secret_hash],
    )
    .await?
    .as_ref()
    .map(token_record)
    .transpose()
}

pub(crate) async fn find_token_by_sqs_key(
    db: &Db<'_>,
    access_key_id: &str,
) -> StoreResult<Option<TokenRecord>> {
    db.query_opt(
        concat!(
            "SELECT ",
            token_cols!(),
            " FROM tokens WHERE sqs_access_key_id = $1"
        ),
        &[&access_key_id],
    )
    .await?
    .as_ref()
    .map(token_record)
    .transpose()
}

pub(crate) async fn revoke_token(
    db: &Db<'_>,
    id: &str,
    now: Timestamp,
) -> StoreResult<TokenRecord> {
    let row = db
        .query_opt(
            concat!(
                "UPDATE tokens SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1 \
                 RETURNING ",
                token_cols!()
            ),
            &[&id, &now.0],
        )
        .await?
        .ok_or_else(|| StoreError::TokenNotFound { id: id.to_owned() })?;
    token_record(&row)
}

// ---- the audit log ------------------------------------------------------------------------

const LOCK_CHAIN: &str = "SELECT id FROM audit_chain FOR UPDATE";
const NEWEST: &str = "SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1";

/// Numbers and chains `entries` after `(seq, prev)` and inserts them in one statement.
/// The chain's row must be locked.
async fn insert_after(
    db: &Db<'_>,
    mut seq: i64,
    mut prev: String,
    entries: &[AuditFields],
) -> StoreResult<Vec<AuditEntry>> {
    let mut out = Vec::with_capacity(entries.len());
    for fields in entries {
        seq += 1;
        let hash = entry_hash(seq, &prev, fields);
        out.push(AuditEntry {
            seq,
            prev_hash: std::mem::replace(&mut prev, hash.clone()),
            hash,
            fields: fields.clone(),
        });
    }
    let seqs: Vec<i64> = out.iter().map(|e| e.seq).collect();
    let ats: Vec<i64> = out.iter().map(|e| e.fields.at.0).collect();
    let actor_ids: Vec<&str> = out.iter().map(|e| e.fields.actor_id.as_str()).collect();
    let actor_names: Vec<&str> = out.iter().map(|e| e.fields.actor_name.as_str()).collect();
    let actions: Vec<&str> = out.iter().map(|e| e.fields.action.as_str()).collect();
    let entities: Vec<Option<&str>> = out.iter().map(|e| e.fields.entity.as_deref()).collect();
    let targets: Vec<String> = out
        .iter()
        .map(|e| to_json(&e.fields.targets))
        .collect::<StoreResult<_>>()?;
    let outcomes: Vec<&str> = out.iter().map(|e| e.fields.outcome.as_str()).collect();
    let clients: Vec<Option<&str>> = out.iter().map(|e| e.fields.client.as_deref()).collect();
    let prevs: Vec<&str> = out.iter().map(|e| e.prev_hash.as_str()).collect();
    let hashes: Vec<&str> = out.iter().map(|e| e.hash.as_str()).collect();
    db.execute(
        concat!(
            "INSERT INTO audit_log (",
            audit_cols!(),
            ") SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], \
             $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], \
             $11::text[])"
        ),
        &[
            &seqs,
            &ats,
            &actor_ids,
            &actor_names,
            &actions,
            &entities,
            &targets,
            &outcomes,
            &clients,
            &prevs,
            &hashes,
        ],
    )
    .await?;
    Ok(out)
}

/// Locks the chain and reads its newest entry (`(0, GENESIS_HASH)` for an empty log).
async fn lock_chain(db: &Db<'_>) -> StoreResult<(i64, String)> {
    let none = || -> Owned { Vec::new() };
    let mut results = db
        .pipeline(vec![(LOCK_CHAIN, none()), (NEWEST, none())])
        .await?
        .into_iter();
    let (Some(locked), Some(newest)) = (results.next(), results.next()) else {
        return Err(StoreError::backend(crate::error::PostgresError::Invariant(
            "a pipeline returned fewer results than statements",
        )));
    };
    if locked?.is_empty() {
        return Err(StoreError::backend(crate::error::PostgresError::Invariant(
            "the audit chain's row is missing",
        )));
    }
    match newest?.first() {
        Some(r) => Ok((get(r, 0)?, get(r, 1)?)),
        None => Ok((0, GENESIS_HASH.to_owned())),
    }
}

pub(crate) async fn append_audit(
    db: &Db<'_>,
    entries: &[AuditFields],
) -> StoreResult<Vec<AuditEntry>> {
    let (seq, prev) = lock_chain(db).await?;
    insert_after(db, seq, prev, entries).await
}

/// The page size a query asks for, capped: 0 means the cap.
fn page_limit(limit: u32) -> i64 {
    i64::from(if limit == 0 {
        MAX_AUDIT_PAGE
    } else {
        limit.min(MAX_AUDIT_PAGE)
    })
}

macro_rules! audit_page {
    ($first:literal) => {
        concat!(
            "SELECT ",
            audit_cols!(),
            " FROM audit_log WHERE seq > $1 AND ",
            $first,
            " AND ($2::text IS NULL OR actor_id = $2) \
              AND ($3::text IS NULL OR entity = $3) \
              AND ($4::text IS NULL OR action = $4) \
              AND ($5::bigint IS NULL OR at >= $5) \
              AND ($6::bigint IS NULL OR at < $6) \
             ORDER BY seq LIMIT $7"
        )
    };
}

pub(crate) async fn list_audit(db: &Db<'_>, q: &AuditQuery) -> StoreResult<Vec<AuditEntry>> {
    // One statement per leading filter, so that a plan prepared once (a generic plan)
    // still walks the index of that column in `seq` order.
    let sql = if q.actor_id.is_some() {
        audit_page!("actor_id = $2")
    } else if q.entity.is_some() {
        audit_page!("entity = $3")
    } else if q.action.is_some() {
        audit_page!("action = $4")
    } else {
        audit_page!("true")
    };
    let rows = db
        .query(
            sql,
            &[
                &q.after_seq.unwrap_or(0),
                &q.actor_id,
                &q.entity,
                &q.action,
                &q.from.map(|t| t.0),
                &q.to.map(|t| t.0),
                &page_limit(q.limit),
            ],
        )
        .await?;
    rows.iter().map(audit_entry).collect()
}

pub(crate) async fn prune_audit(
    db: &Db<'_>,
    before: Timestamp,
    fields: &AuditFields,
) -> StoreResult<u64> {
    let (newest_seq, newest_hash) = lock_chain(db).await?;
    // Only a prefix of the log can go (what is left must still link): the entries before
    // the first one that is not older than `before`, and never the newest.
    let last_removed = db
        .query_opt(
            "SELECT seq, hash FROM audit_log WHERE seq < $1 \
               AND seq < coalesce((SELECT min(seq) FROM audit_log WHERE at >= $2), $1) \
             ORDER BY seq DESC LIMIT 1",
            &[&newest_seq, &before.0],
        )
        .await?;
    let Some(row) = last_removed else {
        return Ok(0);
    };
    let through_seq: i64 = get(&row, 0)?;
    let through_hash: String = get(&row, 1)?;
    let removed = db
        .execute("DELETE FROM audit_log WHERE seq <= $1", &[&through_seq])
        .await?;
    let mut record = fields.clone();
    record.targets.push(format!("through_seq={through_seq}"));
    record.targets.push(format!("through_hash={through_hash}"));
    insert_after(db, newest_seq, newest_hash, std::slice::from_ref(&record)).await?;
    Ok(removed)
}
