//! API tokens and the audit log.
//!
//! Token uniqueness (id, secret hash, SQS access key id, and the name among tokens that
//! are not revoked) is the database's: one `INSERT ... ON CONFLICT DO NOTHING` covers
//! every unique index, and a concurrent insert of the same key waits for the first.
//!
//! Appends from every node form one chain: an append (and a retention pass) locks the one
//! row of `audit_chain` and reads the chain's head from it (the newest entry's number and
//! hash; `FOR UPDATE` returns the row as committed last, so the head is current), so
//! they run one at a time across nodes; it numbers and chains the new entries after the
//! head, inserts them in one statement and moves the head in the same transaction.

use redrive_core::Timestamp;
use redrive_core::audit::ChainHead;
use redrive_store::skeleton::access::{
    self as skeleton, chain, grants_json, new_token, page_limit, pruned, token_exists,
    token_not_found,
};
use redrive_store::skeleton::columns::{invariant, to_json};
use redrive_store::{AuditEntry, AuditFields, AuditQuery, NewToken, StoreResult, TokenRecord};
use tokio_postgres::Row;

use crate::pool::Db;
use crate::rows::{Cols, decode, get};

fn token_record(r: &Row) -> StoreResult<TokenRecord> {
    skeleton::token(&Cols(r))
}

fn audit_entry(r: &Row) -> StoreResult<AuditEntry> {
    skeleton::audit_entry(&Cols(r))
}

// ---- tokens -------------------------------------------------------------------------------

pub(crate) async fn create_token(
    db: &Db<'_>,
    token: &NewToken,
    now: Timestamp,
) -> StoreResult<TokenRecord> {
    let n = db
        .execute(
            concat!(
                "INSERT INTO tokens (",
                redrive_store::columns!(token),
                ") VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8, $9) ON CONFLICT DO NOTHING"
            ),
            &[
                &token.id,
                &token.name,
                &token.secret_hash,
                &grants_json(token)?,
                &token.created_by,
                &now.0,
                &token.expires_at.map(|t| t.0),
                &token.sqs.as_ref().map(|s| s.access_key_id.as_str()),
                &token.sqs.as_ref().map(|s| s.secret_access_key.as_str()),
            ],
        )
        .await?;
    if n == 0 {
        return Err(token_exists(token));
    }
    Ok(new_token(token, now))
}

pub(crate) async fn list_tokens(db: &Db<'_>) -> StoreResult<Vec<TokenRecord>> {
    let rows = db
        .query(
            concat!(
                "SELECT ",
                redrive_store::columns!(token),
                " FROM tokens ORDER BY created_at, id"
            ),
            &[],
        )
        .await?;
    decode(&rows, token_record)
}

pub(crate) async fn find_token(db: &Db<'_>, secret_hash: &str) -> StoreResult<Option<TokenRecord>> {
    db.query_opt(
        concat!(
            "SELECT ",
            redrive_store::columns!(token),
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
            redrive_store::columns!(token),
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
                redrive_store::columns!(token)
            ),
            &[&id, &now.0],
        )
        .await?
        .ok_or_else(|| token_not_found(id))?;
    token_record(&row)
}

// ---- the audit log ------------------------------------------------------------------------

const LOCK_CHAIN: &str = "SELECT head_seq, head_hash FROM audit_chain FOR UPDATE";
const HEAD: &str = "SELECT head_seq, head_hash FROM audit_chain";
const MOVE_HEAD: &str = "UPDATE audit_chain SET head_seq = $1, head_hash = $2";

/// Numbers and chains `entries` after the head `(seq, prev)`, inserts them in one
/// statement and moves the head to the last of them. The chain's row must be locked.
async fn insert_after(
    db: &Db<'_>,
    seq: i64,
    prev: String,
    entries: &[AuditFields],
) -> StoreResult<Vec<AuditEntry>> {
    let out = chain(seq, prev, entries);
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
            redrive_store::columns!(audit),
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
    if let Some(last) = out.last() {
        db.defer(
            MOVE_HEAD,
            vec![Box::new(last.seq), Box::new(last.hash.clone())],
        )
        .await?;
    }
    Ok(out)
}

/// Locks the chain and reads its head. A store without the chain's row refuses.
async fn lock_chain(db: &Db<'_>) -> StoreResult<(i64, String)> {
    let row = db
        .query_opt(LOCK_CHAIN, &[])
        .await?
        .ok_or_else(|| invariant("the audit chain's head is missing"))?;
    Ok((get(&row, 0)?, get(&row, 1)?))
}

/// The chain's head, as committed (`None`: the chain's row is gone).
pub(crate) async fn audit_head(db: &Db<'_>) -> StoreResult<Option<ChainHead>> {
    match db.query_opt(HEAD, &[]).await? {
        Some(r) => Ok(Some(ChainHead {
            seq: get(&r, 0)?,
            hash: get(&r, 1)?,
        })),
        None => Ok(None),
    }
}

pub(crate) async fn append_audit(
    db: &Db<'_>,
    entries: &[AuditFields],
) -> StoreResult<Vec<AuditEntry>> {
    let (seq, prev) = lock_chain(db).await?;
    insert_after(db, seq, prev, entries).await
}

macro_rules! audit_page {
    ($first:literal) => {
        concat!(
            "SELECT ",
            redrive_store::columns!(audit),
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
    decode(&rows, audit_entry)
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
    let record = pruned(fields, through_seq, &through_hash);
    insert_after(db, newest_seq, newest_hash, &[record]).await?;
    Ok(removed)
}
