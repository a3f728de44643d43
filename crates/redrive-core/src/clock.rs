//! Time, injected. Every timing rule in redrive reads a [`Clock`]; production uses the system
//! clock, tests use [`ManualClock`] and move time explicitly instead of sleeping.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Milliseconds since the Unix epoch (UTC). Stored as such in every backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The timestamp as milliseconds since the epoch.
    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// `self + d`, saturating.
    pub fn plus(self, d: Duration) -> Timestamp {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_add(ms))
    }

    /// `self + ms`, saturating.
    pub fn plus_millis(self, ms: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// How long from `earlier` to `self`; zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }

    /// Formats as RFC 3339 with milliseconds, UTC (`2026-11-29T20:07:08.123Z`).
    pub fn to_rfc3339(self) -> String {
        let ms = self.0.rem_euclid(1000);
        let secs = self.0.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
            rem / 3600,
            (rem % 3600) / 60,
            rem % 60
        )
    }

    /// Parses RFC 3339 (`2026-11-29T20:07:08Z`, optional fraction, `Z` or `±hh:mm`).
    pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
        let b = s.as_bytes();
        if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !(b[10] == b'T' || b[10] == b't') {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
        let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
            return None;
        }
        let mut i = 19;
        let mut ms = 0i64;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let frac = s.get(start..i)?;
            if frac.is_empty() {
                return None;
            }
            let padded = format!("{:0<3}", &frac[..frac.len().min(3)]);
            ms = padded.parse().ok()?;
        }
        let offset_secs = match s.get(i..)? {
            "Z" | "z" => 0,
            tz if tz.len() == 6 && (tz.starts_with('+') || tz.starts_with('-')) => {
                let oh: i64 = tz.get(1..3)?.parse().ok()?;
                let om: i64 = tz.get(4..6)?.parse().ok()?;
                let sign = if tz.starts_with('-') { -1 } else { 1 };
                sign * (oh * 3600 + om * 60)
            }
            _ => return None,
        };
        let days = days_from_civil(y, mo, d);
        let secs = days * 86_400 + h * 3600 + mi * 60 + se - offset_secs;
        Some(Timestamp(secs * 1000 + ms))
    }
}

// Howard Hinnant's civil-date algorithms (public domain), used so that the core needs no
// date crate for the one format it prints.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A boxed future that completes when a clock reaches a deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The source of time for every timing rule.
///
/// `sleep_until` lets waiting code (long polls, background sweeps) wait on the same clock
/// that decides visibility, so a test that advances a [`ManualClock`] also wakes them.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
    /// A future that completes once `now() >= deadline`.
    fn sleep_until(&self, deadline: Timestamp) -> Sleep;
}

/// A clock that only moves when told to. Sleepers are woken by [`ManualClock::advance`].
///
/// A test that must wait until something sleeps on the clock (a long poll parked, a
/// worker between passes) awaits [`ManualClock::when_parked`]: it is woken each time a
/// sleep parks, so it never polls.
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<Mutex<ManualInner>>,
}

struct ManualInner {
    now: Timestamp,
    /// The pending sleeps: deadline, the sleep's number, its latest waker. A sleep polled
    /// again replaces its entry, and one dropped before its deadline removes it, so the
    /// list holds exactly the sleeps that wait.
    sleepers: Vec<(Timestamp, u64, Waker)>,
    /// The number of the next sleep.
    next_sleep: u64,
    /// How many times a sleep has parked (entered the list), ever.
    parks: u64,
    /// Who waits for a sleep to park ([`ManualClock::when_parked`]): the wait's number and
    /// its latest waker, woken (and removed) when a sleep parks.
    watchers: Vec<(u64, Waker)>,
    /// The number of the next wait for a park.
    next_watch: u64,
}

impl ManualClock {
    /// A manual clock starting at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            inner: Arc::new(Mutex::new(ManualInner {
                now: start,
                sleepers: Vec::new(),
                next_sleep: 0,
                parks: 0,
                watchers: Vec::new(),
                next_watch: 0,
            })),
        }
    }

    /// Moves time forward by `d` and wakes every sleeper whose deadline has passed.
    pub fn advance(&self, d: Duration) {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let due = {
            let mut g = lock(&self.inner);
            g.now = g.now.plus_millis(ms);
            let now = g.now;
            let (due, keep): (Vec<_>, Vec<_>) =
                g.sleepers.drain(..).partition(|(t, _, _)| *t <= now);
            g.sleepers = keep;
            due
        };
        for (_, _, w) in due {
            w.wake();
        }
    }

    /// Sets the time (forwards only) and wakes due sleepers.
    pub fn set(&self, t: Timestamp) {
        let now = self.now();
        if t > now {
            self.advance(t.since(now));
        }
    }

    /// How many sleepers wait on this clock; lets tests wait until a waiter is parked.
    pub fn sleepers(&self) -> usize {
        lock(&self.inner).sleepers.len()
    }

    /// Whether something sleeps on this clock until exactly `deadline`: lets a test wait
    /// for one waiter by its deadline (the count of [`ManualClock::sleepers`] also grows
    /// when another sleeper is polled again).
    pub fn sleeping_until(&self, deadline: Timestamp) -> bool {
        lock(&self.inner)
            .sleepers
            .iter()
            .any(|(t, _, _)| *t == deadline)
    }

    /// How many times a sleep has parked on this clock, ever: a worker that sleeps on the
    /// clock between passes parks once a pass, so a test that read this before a look
    /// waits for the next pass with `when_parked(|c| c.parks() > seen)`.
    pub fn parks(&self) -> u64 {
        lock(&self.inner).parks
    }

    /// A future that completes once `ready` holds for this clock. It looks when first
    /// polled and again each time a sleep parks on the clock (a new sleeper, the only
    /// change that can make [`ManualClock::sleepers`] grow, [`ManualClock::parks`] count
    /// up or [`ManualClock::sleeping_until`] hold), so a test waits for a waiter to park on
    /// a signal instead of polling: `clock.when_parked(|c| c.sleepers() > before)`.
    pub fn when_parked<F>(&self, ready: F) -> WhenParked<F>
    where
        F: Fn(&ManualClock) -> bool,
    {
        let id = {
            let mut g = lock(&self.inner);
            g.next_watch += 1;
            g.next_watch
        };
        WhenParked {
            clock: self.clone(),
            ready,
            id,
        }
    }
}

/// The future of [`ManualClock::when_parked`].
pub struct WhenParked<F> {
    clock: ManualClock,
    ready: F,
    id: u64,
}

impl<F: Fn(&ManualClock) -> bool> Future for WhenParked<F> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // Registered before looking: a sleep that parks after the look wakes this wait.
        {
            let mut g = lock(&self.clock.inner);
            let id = self.id;
            match g.watchers.iter_mut().find(|(i, _)| *i == id) {
                Some(entry) => entry.1 = cx.waker().clone(),
                None => g.watchers.push((id, cx.waker().clone())),
            }
        }
        if (self.ready)(&self.clock) {
            let id = self.id;
            lock(&self.clock.inner).watchers.retain(|(i, _)| *i != id);
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl<F> Drop for WhenParked<F> {
    fn drop(&mut self) {
        let id = self.id;
        lock(&self.clock.inner).watchers.retain(|(i, _)| *i != id);
    }
}

fn lock(m: &Mutex<ManualInner>) -> std::sync::MutexGuard<'_, ManualInner> {
    // A panic while holding this lock cannot leave the clock inconsistent (every critical
    // section is a single assignment or a drain), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        lock(&self.inner).now
    }

    fn sleep_until(&self, deadline: Timestamp) -> Sleep {
        let id = {
            let mut g = lock(&self.inner);
            g.next_sleep += 1;
            g.next_sleep
        };
        Box::pin(ManualSleep {
            inner: self.inner.clone(),
            deadline,
            id,
        })
    }
}

struct ManualSleep {
    inner: Arc<Mutex<ManualInner>>,
    deadline: Timestamp,
    id: u64,
}

impl Future for ManualSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut g = lock(&self.inner);
        if g.now >= self.deadline {
            return Poll::Ready(());
        }
        let id = self.id;
        if let Some(entry) = g.sleepers.iter_mut().find(|(_, i, _)| *i == id) {
            entry.2 = cx.waker().clone();
            return Poll::Pending;
        }
        g.sleepers.push((self.deadline, id, cx.waker().clone()));
        g.parks += 1;
        // A new sleeper: whoever waits for one looks again (woken outside the lock).
        let watchers = std::mem::take(&mut g.watchers);
        drop(g);
        for (_, w) in watchers {
            w.wake();
        }
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        let id = self.id;
        lock(&self.inner).sleepers.retain(|(_, i, _)| *i != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips() {
        let t = Timestamp(1_795_000_000_123);
        let s = t.to_rfc3339();
        assert_eq!(Timestamp::parse_rfc3339(&s), Some(t));
        assert_eq!(Timestamp(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Timestamp::parse_rfc3339("1970-01-01T01:00:00+01:00"),
            Some(Timestamp(0))
        );
        assert_eq!(Timestamp::parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn manual_clock_wakes_sleepers_on_advance() {
        let clock = ManualClock::new(Timestamp(1_000));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut sleep = clock.sleep_until(Timestamp(2_000));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        assert_eq!(clock.sleepers(), 1);
        assert!(clock.sleeping_until(Timestamp(2_000)));
        assert!(!clock.sleeping_until(Timestamp(1_999)));
        clock.advance(Duration::from_millis(999));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        clock.advance(Duration::from_millis(1));
        assert!(sleep.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn a_sleep_polled_again_or_dropped_is_counted_once_or_not_at_all() {
        let clock = ManualClock::new(Timestamp(1_000));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut a = clock.sleep_until(Timestamp(2_000));
        let mut b = clock.sleep_until(Timestamp(3_000));
        assert!(a.as_mut().poll(&mut cx).is_pending());
        assert!(a.as_mut().poll(&mut cx).is_pending());
        assert!(b.as_mut().poll(&mut cx).is_pending());
        assert_eq!(clock.sleepers(), 2);
        drop(a);
        assert_eq!(clock.sleepers(), 1);
        assert!(!clock.sleeping_until(Timestamp(2_000)));
        assert!(clock.sleeping_until(Timestamp(3_000)));
        clock.advance(Duration::from_millis(2_000));
        assert_eq!(clock.sleepers(), 0);
        assert!(b.as_mut().poll(&mut cx).is_ready());
    }

    /// A waker that counts its wakes.
    struct Count(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(std::sync::atomic::AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    fn wakes(c: &Count) -> usize {
        c.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[test]
    fn a_wait_for_a_park_is_woken_by_a_new_sleeper_and_not_before() {
        let clock = ManualClock::new(Timestamp(1_000));
        let noop = Context::from_waker(Waker::noop());
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let mut parked = Box::pin(clock.when_parked(|c| c.sleepers() > 0));
        assert!(parked.as_mut().poll(&mut cx).is_pending());
        assert_eq!(wakes(&count), 0);

        // Time moving and a sleep made but not yet polled: nothing parked, no wake.
        clock.advance(Duration::from_millis(5));
        let mut sleep = clock.sleep_until(Timestamp(2_000));
        assert_eq!(wakes(&count), 0);

        let mut noop = noop;
        assert!(sleep.as_mut().poll(&mut noop).is_pending());
        assert_eq!(wakes(&count), 1, "the park wakes the wait");
        assert!(parked.as_mut().poll(&mut cx).is_ready());

        // A sleep polled again is not a new park.
        assert_eq!(clock.parks(), 1);
        let mut again = Box::pin(clock.when_parked(|c| c.parks() > 1));
        assert!(again.as_mut().poll(&mut cx).is_pending());
        assert!(sleep.as_mut().poll(&mut noop).is_pending());
        assert_eq!(wakes(&count), 1);
        assert!(again.as_mut().poll(&mut cx).is_pending());
        assert_eq!(clock.parks(), 1);
        // Woken and parked again (a worker's next pass): a new park.
        clock.advance(Duration::from_millis(1_000));
        let mut next = clock.sleep_until(Timestamp(3_000));
        assert!(next.as_mut().poll(&mut noop).is_pending());
        assert_eq!((clock.parks(), clock.sleepers()), (2, 1));
        assert_eq!(wakes(&count), 2);
        assert!(again.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn a_wait_for_a_deadline_completes_only_when_that_deadline_parks() {
        let clock = ManualClock::new(Timestamp(1_000));
        let mut noop = Context::from_waker(Waker::noop());
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let mut at = Box::pin(clock.when_parked(|c| c.sleeping_until(Timestamp(5_000))));
        assert!(at.as_mut().poll(&mut cx).is_pending());

        let mut other = clock.sleep_until(Timestamp(4_000));
        assert!(other.as_mut().poll(&mut noop).is_pending());
        assert_eq!(wakes(&count), 1, "woken to look again");
        assert!(at.as_mut().poll(&mut cx).is_pending(), "not its deadline");

        let mut that = clock.sleep_until(Timestamp(5_000));
        assert!(that.as_mut().poll(&mut noop).is_pending());
        assert_eq!(wakes(&count), 2);
        assert!(at.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn a_wait_already_satisfied_is_ready_at_once_and_a_dropped_one_is_forgotten() {
        let clock = ManualClock::new(Timestamp(1_000));
        let mut noop = Context::from_waker(Waker::noop());
        let mut sleep = clock.sleep_until(Timestamp(2_000));
        assert!(sleep.as_mut().poll(&mut noop).is_pending());
        let mut ready = Box::pin(clock.when_parked(|c| c.sleepers() == 1));
        assert!(ready.as_mut().poll(&mut noop).is_ready());
        assert!(lock(&clock.inner).watchers.is_empty());

        let mut waiting = Box::pin(clock.when_parked(|c| c.sleepers() > 5));
        assert!(waiting.as_mut().poll(&mut noop).is_pending());
        assert_eq!(lock(&clock.inner).watchers.len(), 1);
        drop(waiting);
        assert!(lock(&clock.inner).watchers.is_empty());
    }

    #[test]
    fn a_wait_on_another_thread_wakes_when_a_sleep_parks() {
        let clock = ManualClock::new(Timestamp(1_000));
        let watcher = clock.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiting = std::thread::spawn(move || {
            // A minimal executor: park the thread until woken, then poll again.
            struct Unpark(std::thread::Thread);
            impl std::task::Wake for Unpark {
                fn wake(self: Arc<Self>) {
                    self.0.unpark();
                }
            }
            let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
            let mut cx = Context::from_waker(&waker);
            let mut parked = Box::pin(watcher.when_parked(|c| c.sleepers() > 0));
            let mut first = true;
            while parked.as_mut().poll(&mut cx).is_pending() {
                if first {
                    tx.send(()).unwrap();
                    first = false;
                }
                std::thread::park();
            }
        });
        rx.recv().unwrap();
        let mut noop = Context::from_waker(Waker::noop());
        let mut sleep = clock.sleep_until(Timestamp(2_000));
        assert!(sleep.as_mut().poll(&mut noop).is_pending());
        waiting.join().unwrap();
    }
}
