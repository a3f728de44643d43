//! The failure signatures of dead letters written before schema 19, filled in when the
//! store connects.
//!
//! A record written before version 19 has no signature and stays out of the aggregate of
//! failures (`GET /v1/failures`). Masking its description is Rust, not SQL, so the store
//! does it at connect, after the migrations: in batches of at most [`BATCH`] records
//! (fewer when their bodies pass
//! [`MAX_CLAIM_BYTES`](redrive_store::skeleton::replay::MAX_CLAIM_BYTES)), in id order,
//! each batch its own transaction. A batch computes each record's shape with
//! [`FailureShape::of`], as the insert path does, keeps the shapes' fields in
//! `failure_signatures`, and sets the records' `signature` and `source`; the trigger of
//! schema 22 counts each into its area's aggregate as the insert trigger counts a new
//! record.
//!
//! Completion is not recorded apart: the records left to do are those of the partial
//! index `dead_letters_unsigned`, so once none is left, every later connect costs one
//! probe of an empty index. A backfill cut short (a crash, a failed batch) leaves the
//! rest without a signature, and the next connect resumes with them. A record done
//! already is never counted again, whichever node did it: the UPDATE asks for
//! `signature IS NULL`, which PostgreSQL checks again on the row's latest version. A row
//! this build cannot read keeps no signature and is passed over (and counted in the log)
//! at each connect.

use redrive_store::StoreResult;
use redrive_store::failure::FailureShape;
use redrive_store::skeleton::replay::claim_cut;

use crate::pool::Db;
use crate::rows::{checked_record, get, insert_signatures};

/// The most records one batch reads.
pub(crate) const BATCH: i64 = 500;

/// What a backfill did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Backfilled {
    /// Records that got their signature.
    pub(crate) signed: u64,
    /// Records passed over because their row cannot be read.
    pub(crate) unreadable: u64,
}

/// What one batch did, and the last id it looked at (`None`: none was left).
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// The batch's records.
    pub(crate) done: Backfilled,
    /// The id the next batch starts after.
    pub(crate) last: Option<String>,
}

/// One batch, in the caller's transaction: the records without a signature after id
/// `after`.
pub(crate) async fn batch(db: &Db<'_>, after: &str) -> StoreResult<Batch> {
    let order = db
        .query(
            "SELECT id, octet_length(body)::bigint FROM dead_letters \
             WHERE signature IS NULL AND id > $1 ORDER BY id LIMIT $2",
            &[&after, &BATCH],
        )
        .await?;
    let mut sizes = Vec::with_capacity(order.len());
    for row in &order {
        let n: Option<i64> = get(row, 1)?;
        sizes.push(n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0));
    }
    let take = claim_cut(sizes);
    let mut ids: Vec<String> = Vec::with_capacity(take);
    for row in order.iter().take(take) {
        ids.push(get(row, 0)?);
    }
    let mut out = Batch {
        last: ids.last().cloned(),
        ..Batch::default()
    };
    if ids.is_empty() {
        return Ok(out);
    }
    let rows = db
        .query(
            concat!(
                "SELECT ",
                redrive_store::columns!(dead_letter),
                " FROM dead_letters WHERE id = ANY($1::text[]) AND signature IS NULL \
                 ORDER BY id"
            ),
            &[&ids],
        )
        .await?;
    let mut shapes = Vec::with_capacity(rows.len());
    let (mut id, mut signature, mut source) = (Vec::new(), Vec::new(), Vec::new());
    for row in &rows {
        match checked_record(row) {
            Ok(record) => {
                let shape = FailureShape::of(&record);
                let sig = shape.id();
                id.push(record.id);
                signature.push(sig.clone());
                source.push(shape.source.clone());
                shapes.push((sig, shape));
            }
            Err(u) => {
                tracing::warn!(queue = %u.queue, id = %u.id, reason = %u.reason,
                    "a dead letter without a failure signature cannot be read; left without one");
                out.done.unreadable += 1;
            }
        }
    }
    insert_signatures(db, &shapes).await?;
    out.done.signed = db
        .execute(
            "UPDATE dead_letters d SET signature = v.signature, source = v.source \
             FROM unnest($1::text[], $2::text[], $3::text[]) AS v(id, signature, source) \
             WHERE d.id = v.id AND d.signature IS NULL",
            &[&id, &signature, &source],
        )
        .await?;
    Ok(out)
}
