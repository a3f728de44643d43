//! Leases: work that runs on one process at a time (the sweep) is elected through them.

use redrive_core::Timestamp;
use redrive_store::StoreResult;

use crate::pool::Db;

/// Takes or renews lease `name` for `holder` until `until` when it is free, expired at
/// `now`, or already the holder's. One statement: of two nodes asking at once, the second
/// waits on the row (or the key) and then sees the first one's lease.
pub(crate) async fn try_take(
    db: &Db<'_>,
    name: &str,
    holder: &str,
    until: Timestamp,
    now: Timestamp,
) -> StoreResult<bool> {
    let taken = db
        .query_opt(
            "INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             expires_at = excluded.expires_at \
             WHERE leases.holder = excluded.holder OR leases.expires_at <= $4 \
             RETURNING 1",
            &[&name, &holder, &until.0, &now.0],
        )
        .await?;
    Ok(taken.is_some())
}
