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

/// Splits a message id into the original id and its replay count.
///
/// The grammar: `<original>|<count>`, where `<original>` is not empty and `<count>` is
/// decimal digits without a leading zero (`1` to `4294967295`; the replay never writes a
/// count of 0). Anything else is an id the replay has never touched, whole, with count 0:
/// no separator (`order-1`), a suffix that is not such a count (`a|b`, `plain|01`, `a|0`,
/// `a|+1`, `a|`, `a|4294967296`), or nothing before the separator (`|3`).
pub fn split_replay_count(id: &str) -> (&str, u32) {
    match id.rsplit_once(REPLAY_SEPARATOR) {
        Some((base, n)) if !base.is_empty() && is_count(n) => match n.parse::<u32>() {
            Ok(n) => (base, n),
            Err(_) => (id, 0),
        },
        _ => (id, 0),
    }
}

/// Whether `s` is a replay count as written: digits, the first not `0`.
fn is_count(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && b[0] != b'0' && b.iter().all(u8::is_ascii_digit)
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
    fn a_count_is_digits_without_a_leading_zero_after_a_nonempty_original() {
        for (id, want) in [
            ("a|1", ("a", 1)),
            ("a|b|12", ("a|b", 12)),
            ("a||2", ("a|", 2)),
            ("a|4294967295", ("a", u32::MAX)),
            ("plain|01", ("plain|01", 0)),
            ("a|0", ("a|0", 0)),
            ("a|00", ("a|00", 0)),
            ("a|+1", ("a|+1", 0)),
            ("a|-1", ("a|-1", 0)),
            ("a| 1", ("a| 1", 0)),
            ("a|", ("a|", 0)),
            ("a|4294967296", ("a|4294967296", 0)),
            ("a|１", ("a|１", 0)),
            ("|3", ("|3", 0)),
            ("|", ("|", 0)),
            ("", ("", 0)),
        ] {
            assert_eq!(split_replay_count(id), want, "{id:?}");
        }
        // What is not a count stays part of the original id on the next replay.
        assert_eq!(with_replay_count("plain|01", 1), "plain|01|1");
        assert_eq!(with_replay_count("|3", 1), "|3|1");
        assert_eq!(split_replay_count(&with_replay_count("|3", 1)), ("|3", 1));
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
