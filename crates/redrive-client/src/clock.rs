//! The production clock: wall time for timestamps, tokio timers for sleeping.
//!
//! `redrive-core` holds the [`Clock`] trait and the tests' [`ManualClock`]
//! (re-exported here), but it depends on no runtime, so a clock that sleeps with tokio
//! lives with each runtime user: the broker's and this one.
//!
//! [`ManualClock`]: redrive_core::ManualClock

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redrive_core::clock::{Clock, Sleep, Timestamp};

/// Wall-clock time (UTC milliseconds) with tokio sleeps; the default of
/// [`ClientBuilder::clock`](crate::ClientBuilder::clock).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Timestamp(ms)
    }

    fn sleep_until(&self, deadline: Timestamp) -> Sleep {
        let wait = deadline.since(self.now());
        // A day at most per sleep: tokio's timer wheel has a horizon, and no rule of this
        // client waits longer.
        Box::pin(tokio::time::sleep(wait.min(Duration::from_secs(86_400))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn sleeps_until_the_deadline_on_tokio_time() {
        let clock = SystemClock;
        let start = tokio::time::Instant::now();
        let deadline = clock.now().plus(Duration::from_millis(1_500));
        clock.sleep_until(deadline).await;
        assert!(start.elapsed() >= Duration::from_millis(1_499));
        assert!(
            clock.now().as_millis() > 1_700_000_000_000,
            "wall time, in ms"
        );
    }
}
