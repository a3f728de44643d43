//! The production clock: wall time for timestamps, tokio timers for sleeping.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redrive_core::clock::{Clock, Sleep, Timestamp};

/// Wall-clock time (UTC milliseconds) with tokio sleeps.
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
        Box::pin(tokio::time::sleep(wait.min(Duration::from_secs(86_400))))
    }
}
