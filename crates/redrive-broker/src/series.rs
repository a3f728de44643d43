//! The per-queue time series of this node: what was sent, received, completed, abandoned,
//! dead-lettered (by reason) and pushed, in ten-second points over the last hour, kept in
//! memory for the console's charts (`GET /v1/queues/{name}/series`).
//!
//! Bounded twice: each queue keeps at most [`SERIES_POINTS`] points (older ones fall off
//! as time moves on), and at most [`MAX_SERIES_ENTITIES`] queues are kept (recording for
//! one more drops the queue touched least recently, counted in
//! `redrive_series_entities_dropped_total`). Points are bucketed by the broker's injected
//! clock, so tests move a manual clock rather than sleep.
//!
//! Counters are 32-bit and saturate (4.29 billion events in ten seconds). Recording is
//! one map lookup under a read lock and one short `std::sync::Mutex` section
//! of the queue's own ring, never held across an await. In steady state nothing is
//! allocated: a queue's ring is a fixed array written in place, and the reasons of its
//! dead letters are interned once per queue (at most [`MAX_REASONS`], later ones counted
//! under [`OTHER_REASON`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use redrive_core::Timestamp;

/// Length of one point's interval (ms).
pub const SERIES_INTERVAL_MS: i64 = 10_000;

/// Points kept per queue: one hour of ten-second points.
pub const SERIES_POINTS: usize = 360;

/// Queues kept at most; recording for one more drops the least recently touched. A
/// queue's ring is 360 points of 64 bytes (about 23 KiB, made at its first event), so the
/// series take at most about 46 MiB.
pub const MAX_SERIES_ENTITIES: usize = 2_000;

/// Distinct dead-letter reasons kept per queue; later reasons count under
/// [`OTHER_REASON`].
pub const MAX_REASONS: usize = 8;

/// The reason under which dead letters of a reason beyond the first [`MAX_REASONS`] of a
/// queue are counted.
pub const OTHER_REASON: &str = "other";

/// What happened to a queue's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesEvent {
    /// Stored by a send or a publish.
    Sent,
    /// Handed out by a receive.
    Received,
    /// Settled complete.
    Completed,
    /// Settled abandon.
    Abandoned,
    /// Accepted by a push endpoint.
    PushDelivered,
    /// A push attempt that failed.
    PushFailed,
}

/// One point: the counts of one interval. `bucket` is the interval's number since the
/// epoch (`-1`: never written).
#[derive(Debug, Clone, Copy)]
struct Point {
    bucket: i64,
    sent: u32,
    received: u32,
    completed: u32,
    abandoned: u32,
    push_delivered: u32,
    push_failed: u32,
    /// Dead letters by the index of their reason in the queue's `reasons`.
    dead_lettered: [u32; MAX_REASONS],
}

impl Point {
    const EMPTY: Point = Point {
        bucket: -1,
        sent: 0,
        received: 0,
        completed: 0,
        abandoned: 0,
        push_delivered: 0,
        push_failed: 0,
        dead_lettered: [0; MAX_REASONS],
    };
}

/// One queue's ring: point `b` lives at `b % SERIES_POINTS` while it is one of the last
/// [`SERIES_POINTS`] intervals.
struct Ring {
    points: Box<[Point; SERIES_POINTS]>,
    /// Interned dead-letter reasons; the last slot is [`OTHER_REASON`] once the others are
    /// taken.
    reasons: Vec<Box<str>>,
}

impl Ring {
    fn new() -> Ring {
        Ring {
            points: Box::new([Point::EMPTY; SERIES_POINTS]),
            reasons: Vec::with_capacity(MAX_REASONS),
        }
    }

    /// The point of `bucket`, cleared first when the slot held an older interval.
    fn point(&mut self, bucket: i64) -> &mut Point {
        let slot = &mut self.points[slot_of(bucket)];
        if slot.bucket != bucket {
            *slot = Point {
                bucket,
                ..Point::EMPTY
            };
        }
        slot
    }

    fn reason_index(&mut self, reason: &str) -> usize {
        if let Some(i) = self.reasons.iter().position(|r| &**r == reason) {
            return i;
        }
        if self.reasons.len() + 1 < MAX_REASONS {
            self.reasons.push(reason.into());
            return self.reasons.len() - 1;
        }
        if self.reasons.len() + 1 == MAX_REASONS {
            self.reasons.push(OTHER_REASON.into());
        }
        MAX_REASONS - 1
    }
}

fn slot_of(bucket: i64) -> usize {
    // `rem_euclid` of a positive modulus is in 0..SERIES_POINTS.
    usize::try_from(bucket.rem_euclid(SERIES_POINTS as i64)).unwrap_or(0)
}

fn bucket_of(at: Timestamp) -> i64 {
    at.0.div_euclid(SERIES_INTERVAL_MS)
}

struct Entity {
    ring: Mutex<Ring>,
    /// The recorder's tick at its last touch: the least recent is dropped first.
    touched: AtomicU64,
}

/// The series of every queue this node recorded for, bounded as the module says.
pub(crate) struct Series {
    entities: RwLock<HashMap<Box<str>, Arc<Entity>>>,
    /// A counter that orders touches (cheaper than reading a clock).
    tick: AtomicU64,
    /// Queues dropped to stay within the cap.
    pub(crate) dropped: AtomicU64,
    cap: usize,
}

impl Default for Series {
    fn default() -> Self {
        Series::with_cap(MAX_SERIES_ENTITIES)
    }
}

/// A queue's points as read: oldest first, one per interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesPointView {
    /// The start of the interval.
    pub at: Timestamp,
    /// Sent.
    pub sent: u64,
    /// Received.
    pub received: u64,
    /// Completed.
    pub completed: u64,
    /// Abandoned.
    pub abandoned: u64,
    /// Dead-lettered, by reason (only reasons with some).
    pub dead_lettered: Vec<(String, u64)>,
    /// Push deliveries accepted.
    pub push_delivered: u64,
    /// Push attempts failed.
    pub push_failed: u64,
}

impl Series {
    pub(crate) fn with_cap(cap: usize) -> Series {
        Series {
            entities: RwLock::new(HashMap::new()),
            tick: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            cap: cap.max(1),
        }
    }

    /// The entity of `queue`, made (dropping the least recently touched one when full)
    /// when it has none.
    fn entity(&self, queue: &str) -> Arc<Entity> {
        let tick = self.tick.fetch_add(1, Ordering::Relaxed);
        {
            let map = self.entities.read().unwrap_or_else(|p| p.into_inner());
            if let Some(e) = map.get(queue) {
                e.touched.store(tick, Ordering::Relaxed);
                return e.clone();
            }
        }
        let mut map = self.entities.write().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = map.get(queue) {
            e.touched.store(tick, Ordering::Relaxed);
            return e.clone();
        }
        while map.len() >= self.cap {
            let oldest = map
                .iter()
                .min_by_key(|(_, e)| e.touched.load(Ordering::Relaxed))
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    map.remove(&k);
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
                None => break,
            }
        }
        let e = Arc::new(Entity {
            ring: Mutex::new(Ring::new()),
            touched: AtomicU64::new(tick),
        });
        map.insert(queue.into(), e.clone());
        e
    }

    /// Counts `n` events of `what` on `queue` at `at`.
    pub(crate) fn record(&self, queue: &str, what: SeriesEvent, n: u64, at: Timestamp) {
        if n == 0 {
            return;
        }
        let e = self.entity(queue);
        let mut ring = e.ring.lock().unwrap_or_else(|p| p.into_inner());
        let p = ring.point(bucket_of(at));
        let field = match what {
            SeriesEvent::Sent => &mut p.sent,
            SeriesEvent::Received => &mut p.received,
            SeriesEvent::Completed => &mut p.completed,
            SeriesEvent::Abandoned => &mut p.abandoned,
            SeriesEvent::PushDelivered => &mut p.push_delivered,
            SeriesEvent::PushFailed => &mut p.push_failed,
        };
        *field = field.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
    }

    /// Counts one dead letter of `queue` for `reason` at `at`.
    pub(crate) fn dead_lettered(&self, queue: &str, reason: &str, at: Timestamp) {
        let e = self.entity(queue);
        let mut ring = e.ring.lock().unwrap_or_else(|p| p.into_inner());
        let i = ring.reason_index(reason);
        let p = ring.point(bucket_of(at));
        p.dead_lettered[i] = p.dead_lettered[i].saturating_add(1);
    }

    /// The last [`SERIES_POINTS`] intervals of `queue` up to the one holding `now`, oldest
    /// first (zero points where nothing was recorded, all zero for a queue never seen).
    /// Reading does not touch the queue.
    pub(crate) fn points(&self, queue: &str, now: Timestamp) -> Vec<SeriesPointView> {
        let last = bucket_of(now);
        let first = last - (SERIES_POINTS as i64 - 1);
        let entity = {
            let map = self.entities.read().unwrap_or_else(|p| p.into_inner());
            map.get(queue).cloned()
        };
        let (points, reasons) = match &entity {
            Some(e) => {
                let ring = e.ring.lock().unwrap_or_else(|p| p.into_inner());
                (Some(ring.points.clone()), ring.reasons.clone())
            }
            None => (None, Vec::new()),
        };
        (first..=last)
            .map(|b| {
                let p = points
                    .as_ref()
                    .map(|ps| ps[slot_of(b)])
                    .filter(|p| p.bucket == b)
                    .unwrap_or(Point::EMPTY);
                SeriesPointView {
                    at: Timestamp(b * SERIES_INTERVAL_MS),
                    sent: p.sent.into(),
                    received: p.received.into(),
                    completed: p.completed.into(),
                    abandoned: p.abandoned.into(),
                    dead_lettered: reasons
                        .iter()
                        .zip(p.dead_lettered)
                        .filter(|(_, n)| *n > 0)
                        .map(|(r, n)| (r.to_string(), u64::from(n)))
                        .collect(),
                    push_delivered: p.push_delivered.into(),
                    push_failed: p.push_failed.into(),
                }
            })
            .collect()
    }

    /// Forgets `queue` (deleted).
    pub(crate) fn forget(&self, queue: &str) {
        self.entities
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(queue);
    }

    /// How many queues are kept now.
    pub(crate) fn len(&self) -> usize {
        self.entities
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_core::{Clock, ManualClock};

    fn start() -> ManualClock {
        // On an interval's boundary, so that `+ 10 s` is the next point.
        ManualClock::new(Timestamp(1_700_000_000_000))
    }

    #[test]
    fn events_land_in_the_point_of_their_interval_oldest_first() {
        let clock = start();
        let s = Series::default();
        s.record("orders", SeriesEvent::Sent, 3, clock.now());
        s.record("orders", SeriesEvent::Received, 2, clock.now());
        clock.advance(std::time::Duration::from_millis(9_999));
        s.record("orders", SeriesEvent::Completed, 1, clock.now());
        clock.advance(std::time::Duration::from_millis(1));
        s.dead_lettered("orders", "MaxDeliveryCountExceeded", clock.now());
        s.record("orders", SeriesEvent::Abandoned, 1, clock.now());
        let points = s.points("orders", clock.now());
        assert_eq!(points.len(), SERIES_POINTS);
        let (before, last) = (&points[SERIES_POINTS - 2], &points[SERIES_POINTS - 1]);
        assert_eq!(
            last.at,
            clock.now(),
            "the newest point is the current interval"
        );
        assert_eq!(before.at.0, clock.now().0 - SERIES_INTERVAL_MS);
        assert_eq!((before.sent, before.received, before.completed), (3, 2, 1));
        assert_eq!(
            last.dead_lettered,
            vec![("MaxDeliveryCountExceeded".to_owned(), 1)]
        );
        assert_eq!(last.abandoned, 1);
        assert!(points.windows(2).all(|w| w[0].at < w[1].at), "oldest first");
        assert!(points[..SERIES_POINTS - 2].iter().all(|p| p.sent == 0));
    }

    #[test]
    fn points_older_than_an_hour_roll_over() {
        let clock = start();
        let s = Series::default();
        s.record("orders", SeriesEvent::Sent, 5, clock.now());
        // Still there 359 intervals later, as the oldest point.
        clock.advance(std::time::Duration::from_millis(359 * 10_000));
        let points = s.points("orders", clock.now());
        assert_eq!(points[0].sent, 5);
        // One interval more and it has fallen off, even before anything is recorded …
        clock.advance(std::time::Duration::from_millis(10_000));
        assert!(s.points("orders", clock.now()).iter().all(|p| p.sent == 0));
        // … and a new event in the same slot starts from zero.
        s.record("orders", SeriesEvent::Sent, 1, clock.now());
        let points = s.points("orders", clock.now());
        assert_eq!(points[SERIES_POINTS - 1].sent, 1);
        assert_eq!(points.iter().map(|p| p.sent).sum::<u64>(), 1);
    }

    #[test]
    fn the_least_recently_touched_queue_is_dropped_and_counted() {
        let clock = start();
        let s = Series::with_cap(3);
        for q in ["a", "b", "c"] {
            s.record(q, SeriesEvent::Sent, 1, clock.now());
        }
        // `a` is touched again, so `b` is the least recent.
        s.record("a", SeriesEvent::Sent, 1, clock.now());
        s.record("d", SeriesEvent::Sent, 1, clock.now());
        assert_eq!(s.len(), 3);
        assert_eq!(s.dropped.load(Ordering::Relaxed), 1);
        let sent = |q: &str| s.points(q, clock.now()).iter().map(|p| p.sent).sum::<u64>();
        assert_eq!((sent("a"), sent("b"), sent("c"), sent("d")), (2, 0, 1, 1));
        // Reading does not make a queue recent nor keep one.
        s.record("e", SeriesEvent::Sent, 1, clock.now());
        assert_eq!(sent("c"), 0, "c was the least recent");
        assert_eq!(s.dropped.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn reasons_beyond_the_cap_count_as_other() {
        let clock = start();
        let s = Series::default();
        for i in 0..MAX_REASONS + 2 {
            s.dead_lettered("orders", &format!("R{i}"), clock.now());
        }
        let last = s.points("orders", clock.now()).pop().unwrap();
        assert_eq!(last.dead_lettered.len(), MAX_REASONS);
        assert_eq!(
            last.dead_lettered.last().unwrap(),
            &(OTHER_REASON.to_owned(), 3)
        );
        assert_eq!(last.dead_lettered.iter().map(|(_, n)| n).sum::<u64>(), 10);
    }
}
