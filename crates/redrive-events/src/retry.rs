//! What happens after a push delivery attempt: the decision table by outcome, and the
//! retry schedule bounded by max attempts and the event's time to live, whichever runs
//! out first.
//!
//! The table is Event Grid's for webhooks, from its documentation "Message delivery and
//! retry" (<https://learn.microsoft.com/azure/event-grid/delivery-and-retry>): 400 Bad
//! Request, 413 Request Entity Too Large, 401 Unauthorized and 403 Forbidden are not
//! retried; every other failure is.
//!
//! | outcome | verdict |
//! | --- | --- |
//! | 2xx | delivered |
//! | 400, 401, 403, 413 | dead-lettered at once (`EndpointRejected`) |
//! | 408, 429, 5xx (not before their `Retry-After`) | retried |
//! | every other status: 1xx, 3xx (redirects are not followed), 404 and the other 4xx | retried |
//! | a timeout, a connection error | retried |
//!
//! # The schedule
//!
//! A retry is scheduled `schedule_ms[n-1]` after attempt `n`, reduced by up to `jitter`
//! of itself. The default schedule is Event Grid's: 10 s, 30 s, 1 min, 5 min, 10 min,
//! 30 min, 1 h. Past the end of the schedule (the default one or a custom one):
//!
//! - a last entry under 1 hour repeats: an explicit short schedule (`[1000]`, "every
//!   second") keeps meaning what it says;
//! - a last entry of 1 hour or more is followed by Event Grid's long tail: the steps of
//!   3 h and 6 h that are longer than it, then every 12 to 24 h (24 h reduced by up to
//!   half, whatever `jitter` is) — so the default goes 1 h, 3 h, 6 h, 12–24 h, … and not
//!   hourly;
//! - a last entry of 12 hours or more repeats (the user asked for that spacing).
//!
//! # Limits
//!
//! When the attempts are used up the event is dead-lettered `MaxDeliveryAttemptsExceeded`
//! at once. The time to live is exact: an event is dead-lettered `TimeToLiveExceeded` when
//! its time to live has passed ([`RetryPolicy::expired`]), not earlier. A retry that falls
//! strictly before the expiry is made as scheduled (the last attempt may land just before
//! it); when the next retry would fall at or after the expiry, no retry is made early —
//! the event waits until the expiry and is dead-lettered then
//! ([`Verdict::ExpireAt`]), as Event Grid expires undelivered events when their time to
//! live ends.

use serde::{Deserialize, Serialize};

use redrive_core::Timestamp;

/// The default schedule, in milliseconds (Event Grid's first seven steps); the long tail
/// follows it (see the module docs).
pub const DEFAULT_SCHEDULE_MS: [u64; 7] = [
    10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000,
];

/// One hour: a schedule whose last entry is this long or longer goes on with the long tail.
pub const LONG_TAIL_FROM_MS: u64 = 3_600_000;

/// The long tail's fixed steps after an hour: 3 h, 6 h.
pub const LONG_TAIL_STEPS_MS: [u64; 2] = [10_800_000, 21_600_000];

/// The long tail's repeating step: 24 h, reduced by up to half (every 12 to 24 h).
pub const LONG_TAIL_REPEAT_MS: u64 = 86_400_000;

/// The status codes an endpoint answers that are not retried (Event Grid, "Message
/// delivery and retry": 400, 413 and, for webhooks, 401 and 403).
pub const NOT_RETRIED: [u16; 4] = [400, 401, 403, 413];

/// A push subscription's retry policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts before the event is dead-lettered (1 to 30, default 10).
    pub max_delivery_attempts: u32,
    /// Minutes after publishing when retrying stops (1 to 1440, default 60).
    pub event_time_to_live_minutes: u32,
    /// Delays after attempt 1, 2, …; past the end, the last repeats when under an hour,
    /// otherwise the long tail follows (see the module docs).
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
    /// The TLS handshake failed or the endpoint's certificate was refused; retried like a
    /// connection failure (a certificate can be renewed or a trust setting fixed in time).
    TlsError,
}

/// Why a push subscription gave an event up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// Every attempt was used.
    MaxDeliveryAttemptsExceeded,
    /// The event's time to live has passed.
    TimeToLiveExceeded,
    /// The endpoint answered with a status that is not retried (400, 401, 403, 413).
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
    /// No retry is left before the time to live passes: wait until this instant (the
    /// expiry) and dead-letter it `TimeToLiveExceeded` then, without another attempt.
    ExpireAt(Timestamp),
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

    /// The instant the time to live of the event published at `published_at` passes: from
    /// then on it is not attempted.
    pub fn expires_at(&self, published_at: Timestamp) -> Timestamp {
        published_at.plus_millis(i64::from(self.event_time_to_live_minutes) * 60_000)
    }

    /// Whether the time to live of the event published at `published_at` has passed at
    /// `now` (the event is dead-lettered `TimeToLiveExceeded` rather than attempted).
    pub fn expired(&self, published_at: Timestamp, now: Timestamp) -> bool {
        now >= self.expires_at(published_at)
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
            AttemptOutcome::Status { status, .. } if NOT_RETRIED.contains(&status) => {
                return Verdict::DeadLetter(GiveUp::EndpointRejected(status));
            }
            AttemptOutcome::Status {
                status,
                retry_after_ms,
            } if status == 408 || status == 429 || status >= 500 => retry_after_ms,
            AttemptOutcome::Status { .. }
            | AttemptOutcome::Timeout
            | AttemptOutcome::ConnectionError
            | AttemptOutcome::TlsError => None,
        };
        if attempt >= self.max_delivery_attempts {
            return Verdict::DeadLetter(GiveUp::MaxDeliveryAttemptsExceeded);
        }
        if self.expired(published_at, now) {
            return Verdict::DeadLetter(GiveUp::TimeToLiveExceeded);
        }
        let delay = self.delay_ms(attempt, seed).max(retry_after.unwrap_or(0));
        let next = now.plus_millis(i64::try_from(delay).unwrap_or(i64::MAX));
        let expires = self.expires_at(published_at);
        if next >= expires {
            return Verdict::ExpireAt(expires);
        }
        Verdict::RetryAt(next)
    }

    /// The delay after attempt `attempt` (1-based), jitter applied.
    pub fn delay_ms(&self, attempt: u32, seed: u64) -> u64 {
        let n = usize::try_from(attempt.max(1)).unwrap_or(usize::MAX);
        let Some(&last) = self.schedule_ms.last() else {
            return 0;
        };
        let (base, jitter) = match self.schedule_ms.get(n - 1) {
            Some(&d) => (d, self.jitter),
            None if !(LONG_TAIL_FROM_MS..LONG_TAIL_REPEAT_MS / 2).contains(&last) => {
                (last, self.jitter)
            }
            None => {
                let past = n - self.schedule_ms.len();
                match LONG_TAIL_STEPS_MS
                    .iter()
                    .filter(|s| **s > last)
                    .nth(past - 1)
                {
                    Some(&d) => (d, self.jitter),
                    None => (LONG_TAIL_REPEAT_MS, 0.5),
                }
            }
        };
        redrive_core::Backoff::Exponential {
            initial_ms: base.max(1),
            max_ms: base.max(1),
            jitter,
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

    const MIN: u64 = 60_000;
    const HOUR: u64 = 3_600_000;

    #[test]
    fn the_decision_table() {
        let p = RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        };
        let retry = Verdict::RetryAt(T.plus_millis(10_000));
        let rejected = |s| (status(s), Verdict::DeadLetter(GiveUp::EndpointRejected(s)));
        for (outcome, expected) in [
            (status(200), Verdict::Delivered),
            (status(204), Verdict::Delivered),
            // Not retried: Event Grid's 400, 413 and, for webhooks, 401 and 403.
            rejected(400),
            rejected(401),
            rejected(403),
            rejected(413),
            // Every other failure is retried, 404 and the other 4xx included.
            (status(404), retry),
            (status(405), retry),
            (status(408), retry),
            (status(410), retry),
            (status(422), retry),
            (status(429), retry),
            (status(499), retry),
            (status(500), retry),
            (status(503), retry),
            (status(599), retry),
            (status(102), retry),
            (status(302), retry),
            (AttemptOutcome::Timeout, retry),
            (AttemptOutcome::ConnectionError, retry),
            (AttemptOutcome::TlsError, retry),
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
        // A rejection dead-letters at once even with attempts and time left, and a
        // retried status on the last attempt is `MaxDeliveryAttemptsExceeded`.
        assert_eq!(
            p.decide(&status(404), 10, T, T, 0),
            Verdict::DeadLetter(GiveUp::MaxDeliveryAttemptsExceeded)
        );
    }

    #[test]
    fn the_default_schedule_goes_on_three_six_then_twelve_to_twenty_four_hours() {
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
                10_000,
                30_000,
                MIN,
                5 * MIN,
                10 * MIN,
                30 * MIN,
                HOUR,
                3 * HOUR,
                6 * HOUR
            ]
        );
        // Then every 12 to 24 h, jittered whatever the policy's jitter, and not hourly.
        let mut seen = std::collections::HashSet::new();
        for seed in 0..200 {
            for n in 10..=14 {
                let d = p.delay_ms(n, seed);
                assert!((12 * HOUR..=24 * HOUR).contains(&d), "{n}: {d}");
                assert_eq!(d, p.delay_ms(n, seed), "deterministic");
                seen.insert(d / HOUR);
            }
        }
        assert!(seen.len() > 6, "spread over the range: {seen:?}");
        // Within max attempts.
        let five = RetryPolicy {
            max_delivery_attempts: 5,
            ..p.clone()
        };
        assert_eq!(
            five.decide(&status(500), 5, T, T, 0),
            Verdict::DeadLetter(GiveUp::MaxDeliveryAttemptsExceeded)
        );
        // Within the time to live (24 h): after attempt 8 (at 1 h 46 min 40 s) the 3 h
        // step fits; after attempt 10 at 12 h 1 min no 12–24 h step does, so the event
        // waits for the expiry.
        let at8 = T.plus_millis(6_400_000);
        assert_eq!(
            p.decide(&status(500), 8, T, at8, 0),
            Verdict::RetryAt(at8.plus_millis(10_800_000))
        );
        for seed in 0..50 {
            assert_eq!(
                p.decide(&status(500), 10, T, T.plus_millis(43_260_000), seed),
                Verdict::ExpireAt(T.plus_millis(86_400_000))
            );
        }
    }

    #[test]
    fn an_explicit_schedule_is_kept() {
        let at = |schedule: &[u64]| {
            let p = RetryPolicy {
                jitter: 0.0,
                schedule_ms: schedule.to_vec(),
                ..RetryPolicy::default()
            };
            (1..=6).map(|n| p.delay_ms(n, 7)).collect::<Vec<_>>()
        };
        // Under an hour at its end: the last entry repeats.
        assert_eq!(at(&[1_000]), [1_000; 6]);
        assert_eq!(
            at(&[1_000, 59 * MIN]),
            [1_000, 59 * MIN, 59 * MIN, 59 * MIN, 59 * MIN, 59 * MIN]
        );
        // An hour or more: the tail's steps longer than it, then 12–24 h.
        let two = at(&[2 * HOUR]);
        assert_eq!(two[..3], [2 * HOUR, 3 * HOUR, 6 * HOUR]);
        assert!(two[3..].iter().all(|d| (12 * HOUR..=24 * HOUR).contains(d)));
        let four = at(&[4 * HOUR]);
        assert_eq!(four[..2], [4 * HOUR, 6 * HOUR]);
        assert!(
            four[2..]
                .iter()
                .all(|d| (12 * HOUR..=24 * HOUR).contains(d))
        );
        // 12 h or more: it repeats.
        assert_eq!(at(&[13 * HOUR]), [13 * HOUR; 6]);
    }

    #[test]
    fn the_time_to_live_is_exact_on_a_manual_timeline() {
        // A one-minute time to live; retries after 10 s, 30 s, then every 19.999 s.
        let p = RetryPolicy {
            jitter: 0.0,
            event_time_to_live_minutes: 1,
            schedule_ms: vec![10_000, 30_000, 19_999],
            ..RetryPolicy::default()
        };
        let expiry = T.plus_millis(60_000);
        assert_eq!(p.expires_at(T), expiry);
        assert!(!p.expired(T, T.plus_millis(59_999)));
        assert!(p.expired(T, expiry));
        let fail = status(503);
        let mut now = T;
        let mut times = vec![now];
        let mut attempt = 1;
        let end = loop {
            match p.decide(&fail, attempt, T, now, 0) {
                Verdict::RetryAt(next) => {
                    assert!(next < expiry, "{next:?}");
                    now = next;
                    times.push(now);
                    attempt += 1;
                }
                other => break other,
            }
        };
        // The last attempt lands just before the expiry; the next one (at 79.998 s)
        // would fall after it, so the event waits for the expiry, not dead-lettered
        // at 59.999 s.
        assert_eq!(
            times,
            [0, 10_000, 40_000, 59_999].map(|ms| T.plus_millis(ms))
        );
        assert_eq!(end, Verdict::ExpireAt(expiry));
        // A retry that would fall exactly at the expiry is not made either.
        let exact = RetryPolicy {
            schedule_ms: vec![10_000, 30_000, 20_000],
            ..p.clone()
        };
        assert_eq!(
            exact.decide(&fail, 3, T, T.plus_millis(40_000), 0),
            Verdict::ExpireAt(expiry)
        );
        // An attempt that ends after the expiry (a slow endpoint) is given up at once.
        assert_eq!(
            p.decide(&AttemptOutcome::Timeout, 4, T, T.plus_millis(60_500), 0),
            Verdict::DeadLetter(GiveUp::TimeToLiveExceeded)
        );
        // Default policy: seven attempts fit into the hour (the last at 46 min 40 s);
        // the 1 h step would not, so the event waits until the hour has passed.
        let d = RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        };
        let mut now = T;
        let mut attempt = 1;
        let end = loop {
            match d.decide(&status(500), attempt, T, now, 0) {
                Verdict::RetryAt(next) => {
                    now = next;
                    attempt += 1;
                }
                other => break other,
            }
        };
        assert_eq!(attempt, 7);
        assert_eq!(now, T.plus_millis(2_800_000));
        assert_eq!(end, Verdict::ExpireAt(T.plus_millis(3_600_000)));
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
