//! Retries of transient failures: exponential backoff with full jitter, waiting on the
//! client's [`Clock`](redrive_core::Clock), honouring the server's `Retry-After`.
//!
//! # What is retried
//!
//! A failure is transient when the server is unavailable or shutting down (503), the token
//! is over its rate (429), the connection failed, or no answer came in time. Whether a
//! transient failure is retried depends on the operation, because a request that was sent
//! and got no answer may have been carried out:
//!
//! | operation | retried after | why |
//! | --- | --- | --- |
//! | send with a message id, publish (events carry ids) | any transient failure | a repeat is a duplicate the entity's duplicate-detection window drops (without a window, a repeat after a lost answer can enqueue twice: at-least-once) |
//! | send without a message id | never | nothing tells a repeat from a new message |
//! | receive, receive deferred, accept a session, renew a lock or a session lock, reads | any transient failure | a repeat changes nothing the first did not; a receive whose answer was lost leaves its messages locked until their lock expires, then they are delivered again |
//! | complete, abandon, defer, dead-letter, release a session, cancel a scheduled message, management changes | only failures that prove nothing happened: a connection never made, a 429 or 503 answer (a refused request changes nothing) | a repeat of one that was applied answers `lock_lost` (or `not_found`) although it succeeded |

use std::time::Duration;

/// How transient failures are retried. The defaults are Service Bus's
/// (`ServiceBusRetryOptions`): 3 retries, 0.8 s, at most 60 s, exponential.
///
/// The wait before retry `n` (from 0) is drawn uniformly from zero to
/// `min(max_delay, delay × 2ⁿ)` ("full jitter", so clients that failed together do not
/// retry together), and is never shorter than the server's `Retry-After`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryOptions {
    /// Retries after the first attempt (0: none).
    pub max_retries: u32,
    /// The base delay, doubled with each retry.
    pub delay: Duration,
    /// The longest computed delay (a longer `Retry-After` is still honoured).
    pub max_delay: Duration,
    /// Whether the delay is drawn at random below its bound.
    pub jitter: Jitter,
}

/// Whether a retry's delay is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Jitter {
    /// Uniform between zero and the exponential bound.
    #[default]
    Full,
    /// Exactly the exponential bound (predictable; for tests and single clients).
    None,
}

impl Default for RetryOptions {
    fn default() -> Self {
        RetryOptions {
            max_retries: 3,
            delay: Duration::from_millis(800),
            max_delay: Duration::from_secs(60),
            jitter: Jitter::Full,
        }
    }
}

impl RetryOptions {
    /// The defaults (3 retries, 0.8 s base, 60 s maximum, full jitter).
    pub fn new() -> Self {
        RetryOptions::default()
    }

    /// No retries: every failure is returned as it happens.
    pub fn none() -> Self {
        RetryOptions {
            max_retries: 0,
            ..RetryOptions::default()
        }
    }

    /// Sets the number of retries after the first attempt (at most 100).
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// Sets the base delay.
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }

    /// Sets the longest computed delay.
    pub fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// Sets the jitter.
    pub fn jitter(mut self, j: Jitter) -> Self {
        self.jitter = j;
        self
    }

    /// The bound of the wait before retry `retry` (from 0): `min(max_delay, delay × 2ⁿ)`.
    pub fn bound(&self, retry: u32) -> Duration {
        let factor = 2u32.checked_pow(retry).unwrap_or(u32::MAX);
        self.delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// The wait before retry `retry` given a draw `unit` in `[0, 1]` (ignored without
    /// jitter) and the server's `Retry-After`: the jittered bound, or the server's delay
    /// when that is longer.
    pub fn wait(&self, retry: u32, unit: f64, retry_after: Option<Duration>) -> Duration {
        let bound = self.bound(retry);
        let computed = match self.jitter {
            Jitter::None => bound,
            Jitter::Full => bound.mul_f64(unit.clamp(0.0, 1.0)),
        };
        match retry_after {
            Some(server) if server > computed => server,
            _ => computed,
        }
    }

    pub(crate) fn check(&self) -> Result<(), crate::BuildError> {
        let bad = |option, reason: &str| {
            Err(crate::BuildError::InvalidOption {
                option,
                reason: reason.to_owned(),
            })
        };
        if self.max_retries > 100 {
            return bad("retry.max_retries", "at most 100");
        }
        if self.delay > self.max_delay {
            return bad("retry.delay", "must not exceed retry.max_delay");
        }
        if self.max_delay > Duration::from_secs(3_600) {
            return bad("retry.max_delay", "at most one hour");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_doubles_up_to_the_maximum() {
        let r = RetryOptions::new()
            .delay(Duration::from_millis(100))
            .max_delay(Duration::from_millis(1_000));
        let bounds: Vec<u128> = (0..6).map(|n| r.bound(n).as_millis()).collect();
        assert_eq!(bounds, [100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(r.bound(200), Duration::from_millis(1_000), "no overflow");
    }

    #[test]
    fn full_jitter_draws_below_the_bound_and_none_is_the_bound() {
        let r = RetryOptions::new().delay(Duration::from_millis(100));
        assert_eq!(r.wait(2, 0.0, None), Duration::ZERO);
        assert_eq!(r.wait(2, 0.5, None), Duration::from_millis(200));
        assert_eq!(r.wait(2, 1.0, None), Duration::from_millis(400));
        assert_eq!(r.wait(2, 7.0, None), Duration::from_millis(400), "clamped");
        let fixed = r.clone().jitter(Jitter::None);
        assert_eq!(fixed.wait(2, 0.0, None), Duration::from_millis(400));
    }

    #[test]
    fn retry_after_is_a_floor_even_above_the_maximum() {
        let r = RetryOptions::new()
            .delay(Duration::from_millis(100))
            .max_delay(Duration::from_millis(500))
            .jitter(Jitter::None);
        assert_eq!(
            r.wait(0, 1.0, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(
            r.wait(3, 1.0, Some(Duration::from_millis(10))),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn inconsistent_options_are_refused() {
        assert!(RetryOptions::new().check().is_ok());
        assert!(RetryOptions::new().max_retries(101).check().is_err());
        assert!(
            RetryOptions::new()
                .delay(Duration::from_secs(10))
                .max_delay(Duration::from_secs(1))
                .check()
                .is_err()
        );
    }
}
