//! `ReceiveRequestAttemptId` on FIFO queues: the answers of recent receives, so that a
//! retried `ReceiveMessage` gets the same messages with the same receipt handles.
//!
//! AWS documents the parameter in the `ReceiveMessage` API reference
//! (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html>,
//! `ReceiveRequestAttemptId`): it applies only to FIFO queues; it can be used only for 5
//! minutes after a `ReceiveMessage`; a retry with the same id is possible "if none of the
//! messages have been modified (deleted or had their visibility changes)"; during a
//! visibility timeout, retries with the same id "return the same messages and receipt
//! handles", and a retry within the deduplication interval resets the visibility timeout.
//!
//! AWS does not say what a retry answers once a message was modified; here it is served as
//! a new receive, which never hands a message out again under an old handle. Entries are
//! per caller, queue and id (one caller cannot replay another's in-flight messages). The 5
//! minutes count from the receive that answered; a retry does not extend them. The map is
//! kept per process: a retry that reaches another node (sharing a PostgreSQL
//! store) is served there as a new receive. It is bounded: entries end 5 minutes after
//! their receive on the broker's clock, at most [`MAX_ENTRIES`] are kept and at most
//! [`MAX_BYTES`] of answers, the oldest going first. A retry whose entry is gone is a new
//! receive.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use redrive_core::Timestamp;
use serde_json::Value;

/// How long after its receive an attempt id can be retried (AWS: 5 minutes).
pub(crate) const ATTEMPT_WINDOW_MS: i64 = 5 * 60 * 1_000;
/// Most receives kept.
pub(crate) const MAX_ENTRIES: usize = 10_000;
/// Most bytes of kept answers (bodies, attributes and handles as counted by
/// [`value_bytes`]).
pub(crate) const MAX_BYTES: usize = 64 * 1024 * 1024;

/// Whose receive it was: the caller (so that one caller cannot replay another's in-flight
/// messages), the queue and the attempt id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct AttemptKey {
    actor: String,
    queue: String,
    attempt: String,
}

impl AttemptKey {
    pub(crate) fn new(actor: &str, queue: &str, attempt: &str) -> Self {
        AttemptKey {
            actor: actor.to_owned(),
            queue: queue.to_owned(),
            attempt: attempt.to_owned(),
        }
    }
}

/// What a receive answered.
#[derive(Debug)]
pub(crate) struct Recorded {
    /// The messages, in the SQS shape, as answered.
    pub(crate) messages: Vec<Value>,
    /// Their lock tokens, in the same order.
    pub(crate) tokens: Vec<String>,
    /// When the receive began, on the broker's clock: a renewal may not end more than 12
    /// hours after it.
    pub(crate) started: Timestamp,
}

struct Entry {
    recorded: Arc<Recorded>,
    /// When the receive answered: the 5 minutes count from here.
    at: Timestamp,
    /// Insertion number, the key of `order`.
    serial: u64,
    bytes: usize,
}

/// The recent receives that carried an attempt id, on FIFO queues.
#[derive(Default)]
pub(crate) struct Attempts {
    entries: HashMap<AttemptKey, Entry>,
    /// Insertion order, oldest first.
    order: BTreeMap<u64, AttemptKey>,
    /// The entry each (queue, lock token) was answered in.
    by_token: HashMap<(String, String), AttemptKey>,
    next_serial: u64,
    bytes: usize,
}

impl Attempts {
    /// The answer of an earlier receive under `key` that may be replayed at `now`: less
    /// than 5 minutes old and none of its messages deleted or changed through this
    /// endpoint since.
    pub(crate) fn lookup(&mut self, key: &AttemptKey, now: Timestamp) -> Option<Arc<Recorded>> {
        let entry = self.entries.get(key)?;
        if !live(entry.at, now) {
            self.remove(key);
            return None;
        }
        Some(entry.recorded.clone())
    }

    /// Records what a receive under `key` answered at `now`, replacing any earlier answer
    /// under the same key, then drops what is expired or over the bounds.
    pub(crate) fn record(&mut self, key: AttemptKey, recorded: Recorded, now: Timestamp) {
        self.remove(&key);
        self.expire(now);
        let bytes = recorded.messages.iter().map(value_bytes).sum::<usize>()
            + recorded.tokens.iter().map(String::len).sum::<usize>();
        if bytes > MAX_BYTES {
            return;
        }
        for t in &recorded.tokens {
            self.by_token
                .insert((key.queue.clone(), t.clone()), key.clone());
        }
        let serial = self.next_serial;
        self.next_serial += 1;
        self.order.insert(serial, key.clone());
        self.bytes += bytes;
        self.entries.insert(
            key,
            Entry {
                recorded: Arc::new(recorded),
                at: now,
                serial,
                bytes,
            },
        );
        while self.entries.len() > MAX_ENTRIES || self.bytes > MAX_BYTES {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.remove(&oldest);
        }
    }

    /// A message of `queue` held by `lock_token` was deleted or had its visibility changed:
    /// the receive that answered it can no longer be replayed.
    pub(crate) fn modified(&mut self, queue: &str, lock_token: &str) {
        let found = self
            .by_token
            .get(&(queue.to_owned(), lock_token.to_owned()))
            .cloned();
        if let Some(key) = found {
            self.remove(&key);
        }
    }

    /// Forgets the entry under `key`.
    pub(crate) fn remove(&mut self, key: &AttemptKey) {
        let Some(entry) = self.entries.remove(key) else {
            return;
        };
        self.order.remove(&entry.serial);
        self.bytes -= entry.bytes;
        for t in &entry.recorded.tokens {
            let k = (key.queue.clone(), t.clone());
            if self.by_token.get(&k) == Some(key) {
                self.by_token.remove(&k);
            }
        }
    }

    /// Drops the entries whose 5 minutes are over, oldest first (entries are recorded in
    /// the clock's order; one recorded out of order goes when it is looked up).
    fn expire(&mut self, now: Timestamp) {
        while let Some((_, key)) = self.order.first_key_value() {
            let key = key.clone();
            match self.entries.get(&key) {
                Some(e) if live(e.at, now) => break,
                _ => {
                    self.order.pop_first();
                    self.remove(&key);
                }
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Whether a receive answered at `at` may still be retried at `now`.
fn live(at: Timestamp, now: Timestamp) -> bool {
    now.as_millis().saturating_sub(at.as_millis()) < ATTEMPT_WINDOW_MS
}

/// The bytes a kept answer holds: its strings and keys.
fn value_bytes(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(value_bytes).sum(),
        Value::Object(m) => m.iter().map(|(k, v)| k.len() + value_bytes(v)).sum(),
        _ => 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tokens: &[&str], body: &str) -> Recorded {
        Recorded {
            messages: vec![Value::String(body.to_owned())],
            tokens: tokens.iter().map(|t| (*t).to_owned()).collect(),
            started: Timestamp(0),
        }
    }

    #[test]
    fn an_entry_lives_five_minutes() {
        let mut a = Attempts::default();
        let k = AttemptKey::new("me", "q.fifo", "x");
        a.record(k.clone(), rec(&["t1"], "b"), Timestamp(1_000));
        assert!(
            a.lookup(&k, Timestamp(1_000 + ATTEMPT_WINDOW_MS - 1))
                .is_some()
        );
        assert!(a.lookup(&k, Timestamp(1_000 + ATTEMPT_WINDOW_MS)).is_none());
        assert_eq!(a.len(), 0);
        assert!(a.by_token.is_empty());
    }

    #[test]
    fn a_modified_message_ends_its_entry_only() {
        let mut a = Attempts::default();
        let k1 = AttemptKey::new("me", "q.fifo", "x");
        let k2 = AttemptKey::new("me", "q.fifo", "y");
        a.record(k1.clone(), rec(&["t1", "t2"], "b"), Timestamp(0));
        a.record(k2.clone(), rec(&["t3"], "b"), Timestamp(0));
        a.modified("other.fifo", "t2");
        assert!(
            a.lookup(&k1, Timestamp(1)).is_some(),
            "another queue's token"
        );
        a.modified("q.fifo", "t2");
        assert!(a.lookup(&k1, Timestamp(1)).is_none());
        assert!(a.lookup(&k2, Timestamp(1)).is_some());
        assert_eq!(a.by_token.len(), 1);
    }

    #[test]
    fn the_oldest_go_first_past_the_count_and_byte_bounds() {
        let mut a = Attempts::default();
        for i in 0..=MAX_ENTRIES {
            a.record(
                AttemptKey::new("me", "q.fifo", &i.to_string()),
                rec(&[&format!("t{i}")], "b"),
                Timestamp(0),
            );
        }
        assert_eq!(a.len(), MAX_ENTRIES);
        assert!(
            a.lookup(&AttemptKey::new("me", "q.fifo", "0"), Timestamp(0))
                .is_none()
        );
        assert!(
            a.lookup(&AttemptKey::new("me", "q.fifo", "1"), Timestamp(0))
                .is_some()
        );
        let big = "x".repeat(MAX_BYTES / 2);
        a.record(
            AttemptKey::new("me", "q.fifo", "big1"),
            rec(&["b1"], &big),
            Timestamp(0),
        );
        a.record(
            AttemptKey::new("me", "q.fifo", "big2"),
            rec(&["b2"], &big),
            Timestamp(0),
        );
        assert!(a.bytes <= MAX_BYTES);
        assert!(
            a.lookup(&AttemptKey::new("me", "q.fifo", "big1"), Timestamp(0))
                .is_none()
        );
        assert!(
            a.lookup(&AttemptKey::new("me", "q.fifo", "big2"), Timestamp(0))
                .is_some()
        );
    }

    #[test]
    fn keys_are_per_caller() {
        let mut a = Attempts::default();
        a.record(
            AttemptKey::new("me", "q.fifo", "x"),
            rec(&["t"], "b"),
            Timestamp(0),
        );
        assert!(
            a.lookup(&AttemptKey::new("you", "q.fifo", "x"), Timestamp(0))
                .is_none()
        );
    }
}
