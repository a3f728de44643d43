//! Leases: work that runs on one process at a time (the sweep) is elected through them.

use redrive_core::Timestamp;
use redrive_store::StoreResult;

use crate::error::Db;
use crate::writer::Tx;

/// Takes or renews lease `name` for `holder` until `until` when it is free, expired at
/// `now`, or already the holder's. One statement, so atomic.
pub(crate) fn try_take(
    tx: &mut Tx<'_>,
    name: &str,
    holder: &str,
    until: Timestamp,
    now: Timestamp,
) -> StoreResult<bool> {
    let changed = tx
        .conn
        .prepare_cached(
            "INSERT INTO leases (name, holder, expires_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             expires_at = excluded.expires_at \
             WHERE leases.holder = excluded.holder OR leases.expires_at <= ?4",
        )
        .db()?
        .execute(rusqlite::params![name, holder, until.0, now.0])
        .db()?;
    Ok(changed == 1)
}
