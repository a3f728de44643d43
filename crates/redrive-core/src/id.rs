//! Generated identifiers: message ids, lock tokens, dead-letter record ids, and the
//! replay-count suffix carried on replayed message ids.
//!
//! Generated ids are random, not secret: lock tokens are capabilities to settle one
//! delivery, unguessable in practice (128 random bits) but not meant as credentials.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::clock::Timestamp;

/// Separates a message id from its replay count: `<original id>|<n>`.
pub const REPLAY_SEPARATOR: char = '|';

/// A new random message id in the UUID v4 text form.
pub fn new_message_id() -> String {
    let v = fastrand::u128(..);
    // Set the version (4) and variant (10xx) bits so the id is a well-formed UUID.
    let v = (v & !(0xf << 76)) | (0x4 << 76);
    let v = (v & !(0x3 << 62)) | (0x2 << 62);
    let h = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A new lock token: `lk_` and 32 hex digits.
pub fn new_lock_token() -> String {
    format!("lk_{:032x}", fastrand::u128(..))
}

/// A new dead-letter record id, time-sortable: `dl_`, 12 hex digits of milliseconds, 8 hex
/// digits of a counter, then 8 random hex digits. Ids made later sort later (within one
/// millisecond, by the counter), which makes cursors and bounded replay windows simple.
pub fn new_dead_letter_id(now: Timestamp) -> String {
    // Only an ordering aid among ids made in one millisecond; it holds no broker state.
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let ms = u64::try_from(now.as_millis()).unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("dl_{ms:012x}{n:08x}{:08x}", fastrand::u32(..))
}

/// Splits a message id into the original id and its replay count. An id without a
/// suffix (or with a suffix that is not a number) has count 0.
pub fn split_replay_count(id: &str) -> (&str, u32) {
    match id.rsplit_once(REPLAY_SEPARATOR) {
        Some((base, n)) => match n.parse::<u32>() {
            Ok(n) => (base, n),
            Err(_) => (id, 0),
        },
        None => (id, 0),
    }
}

/// The id for replay number `n` of `id`: the suffix is rewritten, never appended.
pub fn with_replay_count(id: &str, n: u32) -> String {
    let (base, _) = split_replay_count(id);
    format!("{base}{REPLAY_SEPARATOR}{n}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_suffix_is_rewritten_not_appended() {
        assert_eq!(split_replay_count("order-1"), ("order-1", 0));
        assert_eq!(with_replay_count("order-1", 1), "order-1|1");
        assert_eq!(with_replay_count("order-1|1", 2), "order-1|2");
        assert_eq!(split_replay_count("order-1|7"), ("order-1", 7));
        assert_eq!(split_replay_count("a|b"), ("a|b", 0));
    }

    #[test]
    fn dead_letter_ids_sort_by_time() {
        let a = new_dead_letter_id(Timestamp(1_000));
        let b = new_dead_letter_id(Timestamp(2_000));
        assert!(a < b);
        assert!(a.starts_with("dl_"));
        let same: Vec<String> = (0..100).map(|_| new_dead_letter_id(Timestamp(5))).collect();
        let mut sorted = same.clone();
        sorted.sort();
        assert_eq!(
            same, sorted,
            "ids of one millisecond sort in creation order"
        );
    }

    #[test]
    fn message_ids_are_uuid_shaped_and_distinct() {
        let a = new_message_id();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert_ne!(a, new_message_id());
    }
}
