//! A clock aligned with the database's: every node that shares one database reads the
//! same timeline, whatever its own clock says, so lock expiry and visibility are decided
//! on one time base and a node whose clock runs ahead cannot expire another node's lock
//! early.
//!
//! The clock keeps an offset, `database time − local time`, measured by reading
//! `clock_timestamp()` and taking the local time halfway through the round trip (the
//! best of a few samples, the one with the shortest round trip); `now()` is the local time
//! plus the offset. The offset is measured again every `refresh` in the background; its
//! error is at most half the round trip of the sample it came from, plus the local
//! clock's drift since (parts per million). If a measurement fails, the last offset is
//! kept and the failure logged.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redrive_core::clock::{Clock, Sleep, Timestamp};
use redrive_store::{StoreError, StoreResult};
use tokio_postgres::Client;

use crate::error::DbExt;

/// Samples per measurement; the one with the shortest round trip wins.
const SAMPLES: usize = 5;

/// The local time source, replaceable in tests to play a skewed node.
pub type LocalTime = Arc<dyn Fn() -> i64 + Send + Sync>;

/// A [`Clock`] that follows the database's clock.
pub struct DatabaseClock {
    offset_ms: Arc<AtomicI64>,
    local: LocalTime,
    task: tokio::task::JoinHandle<()>,
}

/// The offset `database − local` from one sample: the database read `db_ms` between the
/// local readings `before_ms` and `after_ms`.
pub fn offset_of(before_ms: i64, db_ms: i64, after_ms: i64) -> i64 {
    db_ms - (before_ms + (after_ms - before_ms) / 2)
}

fn system_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

async fn measure(client: &Client, local: &LocalTime) -> StoreResult<(i64, i64)> {
    let mut best: Option<(i64, i64)> = None; // (round trip, offset)
    for _ in 0..SAMPLES {
        let before = local();
        let row = client
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                &[],
            )
            .await
            .db()?;
        let after = local();
        let db: i64 = row.get(0);
        let rtt = after - before;
        if best.is_none_or(|(r, _)| rtt < r) {
            best = Some((rtt, offset_of(before, db, after)));
        }
    }
    best.ok_or_else(|| StoreError::backend(std::io::Error::other("no clock sample")))
}

impl DatabaseClock {
    /// Measures the offset against the database at `url` and keeps it fresh every
    /// `refresh`. Fails if the first measurement fails.
    pub async fn start(url: &str, refresh: Duration) -> StoreResult<DatabaseClock> {
        DatabaseClock::start_with(url, refresh, Arc::new(system_ms)).await
    }

    /// As [`DatabaseClock::start`], with `local` as the node's own clock.
    pub async fn start_with(
        url: &str,
        refresh: Duration,
        local: LocalTime,
    ) -> StoreResult<DatabaseClock> {
        let config = crate::parse_url(url)?;
        let client = crate::pool::connect_one(&config, None).await?;
        let (rtt, offset) = measure(&client, &local).await?;
        tracing::info!(
            offset_ms = offset,
            round_trip_ms = rtt,
            "clock aligned with the database"
        );
        let offset_ms = Arc::new(AtomicI64::new(offset));
        let task = {
            let offset_ms = offset_ms.clone();
            let local = local.clone();
            tokio::spawn(async move {
                let mut client = Some(client);
                loop {
                    tokio::time::sleep(refresh).await;
                    if client.is_none() {
                        client = crate::pool::connect_one(&config, None).await.ok();
                    }
                    let Some(c) = &client else { continue };
                    match measure(c, &local).await {
                        Ok((_, off)) => offset_ms.store(off, Ordering::Relaxed),
                        Err(e) => {
                            tracing::warn!(error = %e, "clock alignment failed; keeping the last offset");
                            client = None;
                        }
                    }
                }
            })
        };
        Ok(DatabaseClock {
            offset_ms,
            local,
            task,
        })
    }

    /// The current offset `database − local`, in milliseconds.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }
}

impl Drop for DatabaseClock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Clock for DatabaseClock {
    fn now(&self) -> Timestamp {
        Timestamp((self.local)().saturating_add(self.offset_ms()))
    }

    fn sleep_until(&self, deadline: Timestamp) -> Sleep {
        let wait = deadline.since(self.now());
        Box::pin(tokio::time::sleep(wait.min(Duration::from_secs(86_400))))
    }
}

#[cfg(test)]
mod tests {
    use super::offset_of;

    #[test]
    fn the_offset_is_taken_at_the_middle_of_the_round_trip() {
        // A node 5 s behind the database, 10 ms round trip.
        assert_eq!(offset_of(1_000, 6_005, 1_010), 5_000);
        // A node 3 s ahead.
        assert_eq!(offset_of(10_000, 7_001, 10_002), -3_000);
    }
}
