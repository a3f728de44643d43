//! The processor's circuit breaker: when the handler's failures say a dependency is down,
//! the processor stops receiving for a while instead of cycling messages through their
//! delivery attempts into the dead-letter store (seed 004: "if a dependency is down,
//! stop receiving for a while").
//!
//! The rule is a pure state machine over the injected clock ([`Breaker::admit`],
//! [`Breaker::record`]); the receive loop asks it before each receive and the workers
//! tell it each handler's verdict.
//!
//! - **Closed**: every outcome of the last [`window`](CircuitBreaker::window) is kept.
//!   Once at least [`min_calls`](CircuitBreaker::min_calls) were seen and the share of
//!   failures reaches [`failure_ratio`](CircuitBreaker::failure_ratio), it opens.
//! - **Open**: nothing is received for [`open_for`](CircuitBreaker::open_for): messages
//!   stay available on the server, their delivery counts untouched.
//! - **Half-open**: [`probes`](CircuitBreaker::probes) messages are received and handled.
//!   The first failure among them reopens it (for another `open_for`); once every probe
//!   succeeded it closes, with an empty window.
//!
//! What counts: a handler's `Ok` and a permanent [`HandlerError`](super::HandlerError)
//! are successes (a permanent error is the message's fault: the dependency answered); a
//! transient error and a panic are failures. A message that never reached the handler (a
//! divert of the dead-letter policy, an undecodable message, a lock that ran out while
//! it waited, a handler stopped by the shutdown) says nothing about the dependency and is
//! not counted.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use redrive_core::clock::Timestamp;

use crate::processor::ProcessorBuildError;

/// Most outcomes a closed breaker keeps (the oldest are forgotten first, within the
/// window or not): bounds its memory under any rate.
const MAX_KEPT: usize = 10_000;

/// The circuit breaker of a processor ([`ProcessorOptions::circuit_breaker`](super::ProcessorOptions::circuit_breaker)).
/// See the [module](self) for what it does and what counts as a failure.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct CircuitBreaker {
    /// Outcomes needed within the window before the ratio can open it (default 10, at
    /// least 1).
    pub min_calls: u32,
    /// The share of failures that opens it, above 0 and at most 1 (default 0.5).
    pub failure_ratio: f64,
    /// How far back outcomes count (default 60 s, more than zero).
    pub window: Duration,
    /// How long it stays open before probing (default 30 s, more than zero).
    pub open_for: Duration,
    /// Messages received as probes when half-open (default 1, 1 to 1000).
    pub probes: u32,
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        CircuitBreaker {
            min_calls: 10,
            failure_ratio: 0.5,
            window: Duration::from_secs(60),
            open_for: Duration::from_secs(30),
            probes: 1,
        }
    }
}

impl CircuitBreaker {
    /// The defaults.
    pub fn new() -> Self {
        CircuitBreaker::default()
    }

    /// Sets [`min_calls`](CircuitBreaker::min_calls).
    #[must_use]
    pub fn min_calls(mut self, n: u32) -> Self {
        self.min_calls = n;
        self
    }

    /// Sets [`failure_ratio`](CircuitBreaker::failure_ratio).
    #[must_use]
    pub fn failure_ratio(mut self, r: f64) -> Self {
        self.failure_ratio = r;
        self
    }

    /// Sets [`window`](CircuitBreaker::window).
    #[must_use]
    pub fn window(mut self, d: Duration) -> Self {
        self.window = d;
        self
    }

    /// Sets [`open_for`](CircuitBreaker::open_for).
    #[must_use]
    pub fn open_for(mut self, d: Duration) -> Self {
        self.open_for = d;
        self
    }

    /// Sets [`probes`](CircuitBreaker::probes).
    #[must_use]
    pub fn probes(mut self, n: u32) -> Self {
        self.probes = n;
        self
    }

    pub(crate) fn check(&self) -> Result<(), ProcessorBuildError> {
        let bad = |option: &'static str, reason: &str| {
            Err(ProcessorBuildError::InvalidOption {
                option,
                reason: reason.to_owned(),
            })
        };
        if self.min_calls == 0 {
            return bad("circuit_breaker.min_calls", "must be at least 1");
        }
        if !(self.failure_ratio > 0.0 && self.failure_ratio <= 1.0) {
            return bad(
                "circuit_breaker.failure_ratio",
                "must be above 0 and at most 1",
            );
        }
        if self.window.is_zero() {
            return bad("circuit_breaker.window", "must be more than zero");
        }
        if self.open_for.is_zero() {
            return bad("circuit_breaker.open_for", "must be more than zero");
        }
        if self.probes == 0 || self.probes > 1_000 {
            return bad("circuit_breaker.probes", "must be 1 to 1000");
        }
        Ok(())
    }
}

/// Where a breaker stands, as [`ProcessorStats::breaker`](super::ProcessorStats::breaker)
/// shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum BreakerState {
    /// Receiving (also: the processor has no breaker).
    #[default]
    Closed,
    /// Not receiving until the open duration has passed.
    Open,
    /// Receiving probe messages only.
    HalfOpen,
}

/// What one handled delivery says about the dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Success,
    Failure,
    /// Says nothing (never reached the handler, or not its dependency's fault either way).
    Ignored,
}

/// What the receive loop may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Receive as usual.
    Any,
    /// Receive at most this many (probes, reserved for the caller: give back what the
    /// receive did not return with [`Breaker::unused_probes`]).
    Probes(u32),
    /// Do not receive before this instant.
    Until(Timestamp),
    /// Half-open with every probe out: wait for their verdicts.
    AwaitProbes,
}

/// A change of state a [`Breaker::record`] or [`Breaker::admit`] made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    /// Opened from closed: failures and calls in the window.
    Opened { failures: u32, calls: u32 },
    /// A probe failed: open again.
    Reopened,
    /// The open duration passed.
    HalfOpened,
    /// Every probe succeeded.
    Closed,
}

struct Inner {
    state: BreakerState,
    /// Closed: the outcomes in the window (true: a failure), oldest first.
    calls: VecDeque<(Timestamp, bool)>,
    /// Open: when it may half-open.
    open_until: Timestamp,
    /// Half-open: probes not handed out yet, and handed out without a verdict.
    probes_left: u32,
    probes_out: u32,
    /// Half-open: probes that succeeded.
    probes_ok: u32,
}

/// A breaker's state, shared by the receive loop and the workers (a short std mutex: no
/// critical section awaits).
pub(crate) struct Breaker {
    cfg: CircuitBreaker,
    inner: Mutex<Inner>,
    /// Woken at every verdict while half-open, so a receive loop awaiting probes looks
    /// again.
    pub(crate) changed: tokio::sync::Notify,
}

impl Breaker {
    pub(crate) fn new(cfg: CircuitBreaker) -> Breaker {
        Breaker {
            cfg,
            inner: Mutex::new(Inner {
                state: BreakerState::Closed,
                calls: VecDeque::new(),
                open_until: Timestamp(0),
                probes_left: 0,
                probes_out: 0,
                probes_ok: 0,
            }),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn state(&self) -> BreakerState {
        self.lock().state
    }

    /// When an open breaker half-opens; `None` unless open.
    pub(crate) fn open_until(&self) -> Option<Timestamp> {
        let g = self.lock();
        (g.state == BreakerState::Open).then_some(g.open_until)
    }

    /// What the receive loop may do at `now`; half-opens an open breaker whose time is up.
    pub(crate) fn admit(&self, now: Timestamp) -> (Admit, Option<Transition>) {
        let mut g = self.lock();
        let mut transition = None;
        if g.state == BreakerState::Open {
            if now < g.open_until {
                return (Admit::Until(g.open_until), None);
            }
            g.state = BreakerState::HalfOpen;
            g.probes_left = self.cfg.probes;
            g.probes_out = 0;
            g.probes_ok = 0;
            transition = Some(Transition::HalfOpened);
        }
        let admit = match g.state {
            BreakerState::Closed => Admit::Any,
            _ if g.probes_left == 0 => Admit::AwaitProbes,
            _ => {
                let n = g.probes_left;
                g.probes_left = 0;
                g.probes_out += n;
                Admit::Probes(n)
            }
        };
        (admit, transition)
    }

    /// Gives back probes reserved by [`admit`](Breaker::admit) that the receive did not
    /// use (fewer messages than asked for).
    pub(crate) fn unused_probes(&self, n: u32) {
        let mut g = self.lock();
        if g.state == BreakerState::HalfOpen {
            let n = n.min(g.probes_out);
            g.probes_out -= n;
            g.probes_left += n;
        }
    }

    /// Records one delivery's verdict at `now`; the change of state it made, if any.
    pub(crate) fn record(&self, now: Timestamp, verdict: Verdict) -> Option<Transition> {
        let mut g = self.lock();
        let t = match g.state {
            BreakerState::Closed => {
                let failed = match verdict {
                    Verdict::Success => false,
                    Verdict::Failure => true,
                    Verdict::Ignored => return None,
                };
                g.calls.push_back((now, failed));
                let window = self.cfg.window;
                while g
                    .calls
                    .front()
                    .is_some_and(|(t, _)| now.since(*t) >= window)
                    || g.calls.len() > MAX_KEPT
                {
                    g.calls.pop_front();
                }
                let calls = u32::try_from(g.calls.len()).unwrap_or(u32::MAX);
                let failures =
                    u32::try_from(g.calls.iter().filter(|(_, f)| *f).count()).unwrap_or(u32::MAX);
                if calls >= self.cfg.min_calls
                    && f64::from(failures) >= self.cfg.failure_ratio * f64::from(calls)
                {
                    g.state = BreakerState::Open;
                    g.open_until = now.plus(self.cfg.open_for);
                    g.calls.clear();
                    Some(Transition::Opened { failures, calls })
                } else {
                    None
                }
            }
            // A verdict of a delivery received before it opened: the dependency's state
            // is being found out by the probes, or will be.
            BreakerState::Open => None,
            BreakerState::HalfOpen => {
                if g.probes_out == 0 {
                    // Received before the breaker opened; not a probe.
                    return None;
                }
                g.probes_out -= 1;
                match verdict {
                    Verdict::Failure => {
                        g.state = BreakerState::Open;
                        g.open_until = now.plus(self.cfg.open_for);
                        g.probes_left = 0;
                        g.probes_out = 0;
                        Some(Transition::Reopened)
                    }
                    Verdict::Ignored => {
                        // Not a probe after all: another message probes in its place.
                        g.probes_left += 1;
                        None
                    }
                    Verdict::Success => {
                        g.probes_ok += 1;
                        if g.probes_ok >= self.cfg.probes {
                            g.state = BreakerState::Closed;
                            g.calls.clear();
                            Some(Transition::Closed)
                        } else {
                            None
                        }
                    }
                }
            }
        };
        drop(g);
        self.changed.notify_waiters();
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp(1_000_000 + ms)
    }

    fn breaker() -> Breaker {
        Breaker::new(
            CircuitBreaker::new()
                .min_calls(4)
                .failure_ratio(0.5)
                .window(Duration::from_secs(10))
                .open_for(Duration::from_secs(30))
                .probes(2),
        )
    }

    #[test]
    fn opens_at_the_ratio_once_enough_calls_are_in_the_window() {
        let b = breaker();
        assert_eq!(b.record(at(0), Verdict::Failure), None);
        assert_eq!(b.record(at(1), Verdict::Failure), None, "below min_calls");
        assert_eq!(b.record(at(2), Verdict::Success), None);
        assert_eq!(b.record(at(3), Verdict::Ignored), None, "not counted");
        assert_eq!(
            b.record(at(4), Verdict::Success),
            Some(Transition::Opened {
                failures: 2,
                calls: 4
            })
        );
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.admit(at(5)), (Admit::Until(at(30_004)), None));
    }

    #[test]
    fn old_outcomes_leave_the_window() {
        let b = breaker();
        b.record(at(0), Verdict::Failure);
        b.record(at(1), Verdict::Failure);
        b.record(at(2), Verdict::Failure);
        // 10 s later the three failures are out of the window.
        assert_eq!(b.record(at(10_002), Verdict::Success), None);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn half_opens_after_the_open_duration_then_closes_on_good_probes() {
        let b = breaker();
        for i in 0..4 {
            b.record(at(i), Verdict::Failure);
        }
        let (admit, t) = b.admit(at(30_003));
        assert_eq!((admit, t), (Admit::Probes(2), Some(Transition::HalfOpened)));
        // One message came back; one probe is given back and asked for again.
        b.unused_probes(1);
        assert_eq!(b.admit(at(30_004)).0, Admit::Probes(1));
        assert_eq!(b.admit(at(30_005)).0, Admit::AwaitProbes);
        assert_eq!(b.record(at(30_006), Verdict::Ignored), None);
        assert_eq!(
            b.admit(at(30_007)).0,
            Admit::Probes(1),
            "an ignored probe is replaced"
        );
        assert_eq!(b.record(at(30_008), Verdict::Success), None);
        assert_eq!(
            b.record(at(30_009), Verdict::Success),
            Some(Transition::Closed)
        );
        assert_eq!(b.admit(at(30_010)).0, Admit::Any);
    }

    #[test]
    fn a_failed_probe_reopens_it() {
        let b = breaker();
        for i in 0..4 {
            b.record(at(i), Verdict::Failure);
        }
        b.admit(at(30_003));
        assert_eq!(
            b.record(at(30_004), Verdict::Failure),
            Some(Transition::Reopened)
        );
        assert_eq!(b.admit(at(30_005)).0, Admit::Until(at(60_004)));
    }

    #[test]
    fn bad_options_are_refused() {
        for cb in [
            CircuitBreaker::new().min_calls(0),
            CircuitBreaker::new().failure_ratio(0.0),
            CircuitBreaker::new().failure_ratio(1.5),
            CircuitBreaker::new().failure_ratio(f64::NAN),
            CircuitBreaker::new().window(Duration::ZERO),
            CircuitBreaker::new().open_for(Duration::ZERO),
            CircuitBreaker::new().probes(0),
        ] {
            assert!(cb.check().is_err(), "{cb:?}");
        }
        assert!(CircuitBreaker::new().check().is_ok());
    }
}
