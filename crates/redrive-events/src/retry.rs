//! What happens after a push delivery attempt: the decision table by outcome, and the
//! retry schedule bounded by max attempts and the event's time to live, whichever runs
//! out first.
//!
//! | outcome | verdict |
//! | --- | --- |
//! | 2xx | delivered |
//! | 408, 429 (not before its `Retry-After`), 5xx | retried |
//! | a timeout, a connection error | retried |
//! | 1xx, 3xx (redirects are not followed) | retried |
//! | 400, 413 and every other 4xx | dead-lettered at once (`EndpointRejected`) |
//!
//! A retry is scheduled `schedule[n-1]` after attempt `n` (10 s, 30 s, 1 min, 5 min,
//! 10 min, 30 min, 1 h, then hourly by default), reduced by up to `jitter` of itself; when
//! the attempts are used up the event is dead-lettered `MaxDeliveryAttemptsExceeded`, and
//! when the next attempt would fall after the event's time to live,
//! `TimeToLiveExceeded`.

use serde::{Deserialize, Serialize};

use redrive_core::Timestamp;

/// The default schedule, in milliseconds; the last entry repeats.
pub const DEFAULT_SCHEDULE_MS: [u64; 7] = [
    10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000,
];

/// A push subscription's retry policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts before the event is dead-lettered (1 to 30, default 10).
    pub max_delivery_attempts: u32,
    /// Minutes after publishing when retrying stops (1 to 1440, default 60).
    pub event_time_to_live_minutes: u32,
    /// Delays after attempt 1, 2, …; the last repeats.
    pub schedule_ms: Vec<u64>,
    /// Fraction of each delay randomised away (0 to 1, default 0.1).
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_delivery_attempts: 10,
            event_time_to_live_minutes: 60,
            schedule_ms: DEFAULT_SCHEDULE_MS.to_vec(),
            jitter: 0.1,
        }
    }
}

/// What one attempt ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The endpoint answered with this status (and `Retry-After`, in milliseconds).
    Status {
        /// HTTP status.
        status: u16,
        /// `Retry-After`, if the answer carried one.
        retry_after_ms: Option<u64>,
    },
    /// No answer within the delivery timeout.
    Timeout,
    /// The connection failed (refused, reset, DNS…).
    ConnectionError,
}

/// Why a push subscription gave an event up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// Every attempt was used.
    MaxDeliveryAttemptsExceeded,
    /// The event's time to live ran out before the next attempt.
    TimeToLiveExceeded,
    /// The endpoint answered with a permanent 4xx status.
    EndpointRejected(u16),
}

impl GiveUp {
    /// The `deadLetterReason` code.
    pub fn reason(self) -> &'static str {
        match self {
            GiveUp::MaxDeliveryAttemptsExceeded => "MaxDeliveryAttemptsExceeded",
            GiveUp::TimeToLiveExceeded => "TimeToLiveExceeded",
            GiveUp::EndpointRejected(_) => "EndpointRejected",
        }
    }
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Done.
    Delivered,
    /// Try again at this time.
    RetryAt(Timestamp),
    /// Dead-letter it.
    DeadLetter(GiveUp),
}

/// A policy outside its ranges.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid retry policy: {0}")]
pub struct RetryPolicyError(pub String);

impl RetryPolicy {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), RetryPolicyError> {
        if !(1..=30).contains(&self.max_delivery_attempts) {
            return Err(RetryPolicyError(
                "max_delivery_attempts must be 1 to 30".into(),
            ));
        }
        if !(1..=1440).contains(&self.event_time_to_live_minutes) {
            return Err(RetryPolicyError(
                "event_time_to_live_minutes must be 1 to 1440".into(),
            ));
        }
        if self.schedule_ms.is_empty()
            || self.schedule_ms.iter().any(|d| *d == 0 || *d > 86_400_000)
        {
            return Err(RetryPolicyError(
                "schedule_ms needs 1 or more delays of 1 ms to 24 h".into(),
            ));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(RetryPolicyError("jitter must be 0 to 1".into()));
        }
        Ok(())
    }

    /// The instant after which the event published at `published_at` is not retried.
    pub fn expires_at(&self, published_at: Timestamp) -> Timestamp {
        published_at.plus_millis(i64::from(self.event_time_to_live_minutes) * 60_000)
    }

    /// The verdict after attempt number `attempt` (1-based) ended with `outcome` at `now`.
    /// `seed` makes the jitter deterministic per event.
    pub fn decide(
        &self,
        outcome: &AttemptOutcome,
        attempt: u32,
        published_at: Timestamp,
        now: Timestamp,
        seed: u64,
    ) -> Verdict {
        let retry_after = match *outcome {
            AttemptOutcome::Status { status, .. } if (200..300).contains(&status) => {
                return Verdict::Delivered;
            }
            AttemptOutcome::Status {
                status,
                retry_after_ms,
            } if status == 408 || status == 429 || status >= 500 => retry_after_ms,
            AttemptOutcome::Status { status, .. } if (400..500).contains(&status) => {
                return Verdict::DeadLetter(GiveUp::EndpointRejected(status));
            }
            AttemptOutcome::Status { .. }
            | AttemptOutcome::Timeout
            | AttemptOutcome::ConnectionError => None,
        };
        if attempt >= self.max_delivery_attempts {
            return Verdict::DeadLetter(GiveUp::MaxDeliveryAttemptsExceeded);
        }
        let delay = self.delay_ms(attempt, seed).max(retry_after.unwrap_or(0));
        let next = now.plus_millis(i64::try_from(delay).unwrap_or(i64::MAX));
        if next > self.expires_at(published_at) {
            return Verdict::DeadLetter(GiveUp::TimeToLiveExceeded);
        }
        Verdict::RetryAt(next)
    }

    /// The delay after attempt `attempt` (1-based), jitter applied.
    pub fn delay_ms(&self, attempt: u32, seed: u64) -> u64 {
        let i = usize::try_from(attempt.max(1) - 1).unwrap_or(usize::MAX);
        let base = self
            .schedule_ms
            .get(i)
            .or(self.schedule_ms.last())
            .copied()
            .unwrap_or(0);
        redrive_core::Backoff::Exponential {
            initial_ms: base.max(1),
            max_ms: base.max(1),
            jitter: self.jitter,
        }
        .delay_ms(1, seed ^ u64::from(attempt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timestamp = Timestamp(1_800_000_000_000);

    fn status(s: u16) -> AttemptOutcome {
        AttemptOutcome::Status {
            status: s,
            retry_after_ms: None,
        }
    }

    #[test]
    fn the_decision_table() {
        let p = RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        };
        let retry = Verdict::RetryAt(T.plus_millis(10_000));
        for (outcome, expected) in [
            (status(200), Verdict::Delivered),
            (status(204), Verdict::Delivered),
            (status(408), retry),
            (status(429), retry),
            (status(500), retry),
            (status(503), retry),
            (status(302), retry),
            (AttemptOutcome::Timeout, retry),
            (AttemptOutcome::ConnectionError, retry),
            (
                status(400),
                Verdict::DeadLetter(GiveUp::EndpointRejected(400)),
            ),
            (
                status(413),
                Verdict::DeadLetter(GiveUp::EndpointRejected(413)),
            ),
            (
                status(404),
                Verdict::DeadLetter(GiveUp::EndpointRejected(404)),
            ),
        ] {
            assert_eq!(p.decide(&outcome, 1, T, T, 0), expected, "{outcome:?}");
        }
        let throttled = AttemptOutcome::Status {
            status: 429,
            retry_after_ms: Some(120_000),
        };
        assert_eq!(
            p.decide(&throttled, 1, T, T, 0),
            Verdict::RetryAt(T.plus_millis(120_000))
        );
    }

    #[test]
    fn the_schedule_walks_then_repeats_hourly_and_stops_at_the_limits() {
        let p = RetryPolicy {
            jitter: 0.0,
            max_delivery_attempts: 30,
            event_time_to_live_minutes: 1440,
            ..RetryPolicy::default()
        };
        let delays: Vec<u64> = (1..=9).map(|n| p.delay_ms(n, 0)).collect();
        assert_eq!(
            delays,
            [
                10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000, 3_600_000,
                3_600_000
            ]
        );
        let five = RetryPolicy {
            max_delivery_attempts: 5,
            ..p.clone()
        };
        assert_eq!(
            five.decide(&status(500), 5, T, T, 0),
            Verdict::DeadLetter(GiveUp::MaxDeliveryAttemptsExceeded)
        );
        // Default policy: 60 minutes. After attempt 7 (at 10s+30s+1m+5m+10m+30m = 46m40s)
        // the next is an hour later: past the time to live.
        let d = RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        };
        let mut now = T;
        let mut attempt = 1;
        loop {
            match d.decide(&status(500), attempt, T, now, 0) {
                Verdict::RetryAt(next) => {
                    now = next;
                    attempt += 1;
                }
                Verdict::DeadLetter(why) => {
                    assert_eq!(why, GiveUp::TimeToLiveExceeded);
                    break;
                }
                Verdict::Delivered => unreachable!(),
            }
        }
        assert_eq!(attempt, 7, "seven attempts fit into the hour");
        assert_eq!(now, T.plus_millis(2_800_000));
    }

    #[test]
    fn jitter_only_shortens_and_is_deterministic() {
        let p = RetryPolicy {
            jitter: 0.5,
            ..RetryPolicy::default()
        };
        for seed in 0..50 {
            let d = p.delay_ms(2, seed);
            assert!((15_000..=30_000).contains(&d), "{d}");
            assert_eq!(d, p.delay_ms(2, seed));
        }
    }

    #[test]
    fn out_of_range_policies_are_refused() {
        for bad in [
            RetryPolicy {
                max_delivery_attempts: 0,
                ..RetryPolicy::default()
            },
            RetryPolicy {
                max_delivery_attempts: 31,
                ..RetryPolicy::default()
            },
            RetryPolicy {
                event_time_to_live_minutes: 1441,
                ..RetryPolicy::default()
            },
            RetryPolicy {
                schedule_ms: vec![],
                ..RetryPolicy::default()
            },
            RetryPolicy {
                jitter: 2.0,
                ..RetryPolicy::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        RetryPolicy::default().validate().unwrap();
    }
}
