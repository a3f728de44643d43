//! Identifiers: the generated ones (message ids, lock tokens, dead-letter record ids), the
//! replay-count suffix carried on replayed message ids, and the typed ids a request names
//! ([`CaseId`], [`GroupId`], [`PlanId`], [`LockToken`], [`DeadLetterId`]).
//!
//! Generated ids are random, not secret: lock tokens are capabilities to settle one
//! delivery, unguessable in practice (128 random bits) but not meant as credentials.
//!
//! A typed id is parsed once where a request names it (`"…".parse::<CaseId>()`), so that
//! an operation taking one never sees a string of another kind or of any length: a prefix
//! of its kind, then at most [`MAX_ID_TAIL`] bytes, none of them NUL (which PostgreSQL
//! cannot store in text). It is written and read as the plain string, so a typed field changes
//! nothing in the JSON.
//!
//! A lock token or a dead-letter record id that a request gives is carried to the broker
//! as a [`Named`] id, typed or refused: a string that cannot be one names no lock and no
//! record, and is answered as one that nobody holds or no record has, after every check
//! the request gets first, without reaching a store.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::clock::Timestamp;

/// Most bytes a typed id carries after its prefix. Generated ids carry 28 (a time, a
/// counter and random digits, in hex).
pub const MAX_ID_TAIL: usize = 64;

/// Which typed id a string was refused as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdKind {
    /// A recovery case ([`CaseId`], `case_…`).
    Case,
    /// A case group ([`GroupId`], `grp_…`).
    Group,
    /// A replay plan ([`PlanId`], `plan_…`, or `mv_…` for an SQS move task's).
    Plan,
    /// A lock on a delivery, a session or a dead-letter delivery ([`LockToken`], `lk_…`).
    Lock,
    /// A dead-letter record ([`DeadLetterId`], `dl_…`).
    DeadLetter,
}

impl IdKind {
    /// What the id names, in words (`case`, `case group`).
    pub fn noun(self) -> &'static str {
        match self {
            IdKind::Case => "case",
            IdKind::Group => "case group",
            IdKind::Plan => "replay plan",
            IdKind::Lock => "lock",
            IdKind::DeadLetter => "dead-letter record",
        }
    }

    /// The prefixes an id of the kind starts with (one of them).
    pub fn prefixes(self) -> &'static [&'static str] {
        match self {
            IdKind::Case => &["case_"],
            IdKind::Group => &["grp_"],
            IdKind::Plan => &["plan_", "mv_"],
            IdKind::Lock => &["lk_"],
            IdKind::DeadLetter => &["dl_"],
        }
    }
}

/// The prefixes of `kind` as a message shows them: `grp_…`, `plan_… or mv_…`.
struct Prefixes(IdKind);

impl fmt::Display for Prefixes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.prefixes().iter().enumerate() {
            if i > 0 {
                f.write_str(" or ")?;
            }
            write!(f, "{p}…")?;
        }
        Ok(())
    }
}

/// Why a string is not a typed id: the message names the kind and its prefixes
/// (`"x" is not a case group id (grp_…)`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{id:?} is not a {} id ({})", kind.noun(), Prefixes(*kind))]
pub struct IdError {
    /// The kind it was parsed as.
    pub kind: IdKind,
    /// The string as given.
    pub id: String,
}

/// Whether `s` is an id of `kind`: a prefix of the kind, at most [`MAX_ID_TAIL`] bytes
/// after it, no NUL.
fn check_id(kind: IdKind, s: &str) -> Result<(), IdError> {
    let fits = kind.prefixes().iter().any(|p| {
        s.strip_prefix(p)
            .is_some_and(|tail| tail.len() <= MAX_ID_TAIL && !tail.contains('\0'))
    });
    if fits {
        Ok(())
    } else {
        Err(IdError {
            kind,
            id: s.to_owned(),
        })
    }
}

/// A typed id: a validated string with its prefix (see the module docs).
macro_rules! typed_id {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id as an owned string.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                check_id($kind, s)?;
                Ok($name(s.to_owned()))
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                check_id($kind, &s)?;
                Ok($name(s))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $name::try_from(String::deserialize(d)?).map_err(serde::de::Error::custom)
            }
        }
    };
}

typed_id!(
    /// A recovery case's id: `case_` and the id of the dead-letter record it was opened
    /// for without its `dl_` (`redrive_store::case_id_of`).
    CaseId,
    IdKind::Case
);

typed_id!(
    /// A case group's id: `grp_` and the digits of a time-ordered id.
    GroupId,
    IdKind::Group
);

typed_id!(
    /// A replay plan's id: `plan_` and the digits of a time-ordered id, or, for an SQS
    /// message move task (a plan of kind `sqs_move`), its handle `mv_…`.
    PlanId,
    IdKind::Plan
);

typed_id!(
    /// A lock token: `lk_` and 32 random hex digits ([`LockToken::generate`]), which the
    /// token of a message delivery follows with `.` and its row's key in hex (at most 16
    /// digits). It settles one delivery, or holds a session or a dead-letter delivery.
    LockToken,
    IdKind::Lock
);

typed_id!(
    /// A dead-letter record's id: `dl_` and 28 hex digits of a time, a counter and random
    /// bits ([`DeadLetterId::generate`]).
    DeadLetterId,
    IdKind::DeadLetter
);

/// An id as a request gave it: the typed id, or why its string is none (the string is
/// [`IdError::id`]). The broker takes lock tokens and dead-letter record ids this way, so
/// that a string that cannot be one is answered exactly as one that no lock or record has
/// (lock lost, not found), after every check the request gets first, and never reaches a
/// store.
pub type Named<T> = Result<T, IdError>;

/// The string a request gave for `id`, typed or refused.
pub fn given<T: AsRef<str>>(id: &Named<T>) -> &str {
    match id {
        Ok(id) => id.as_ref(),
        Err(e) => &e.id,
    }
}

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

impl LockToken {
    /// A new lock token: `lk_` and 32 random hex digits.
    pub fn generate() -> LockToken {
        LockToken(format!("lk_{:032x}", fastrand::u128(..)))
    }
}

impl DeadLetterId {
    /// A new dead-letter record id, time-sortable: `dl_`, 12 hex digits of milliseconds,
    /// 8 hex digits of a counter, then 8 random hex digits. Ids made later sort later
    /// (within one millisecond, by the counter), which makes cursors and bounded replay
    /// windows simple.
    pub fn generate(now: Timestamp) -> DeadLetterId {
        // Only an ordering aid among ids made in one millisecond; it holds no broker state.
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let ms = u64::try_from(now.as_millis()).unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        DeadLetterId(format!("dl_{ms:012x}{n:08x}{:08x}", fastrand::u32(..)))
    }
}

/// A new lock token as the stores keep it: [`LockToken::generate`]'s, as a string.
pub fn new_lock_token() -> String {
    LockToken::generate().into_string()
}

/// A new dead-letter record id as the stores keep it: [`DeadLetterId::generate`]'s, as a
/// string.
pub fn new_dead_letter_id(now: Timestamp) -> String {
    DeadLetterId::generate(now).into_string()
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
    fn a_typed_id_is_its_prefix_and_a_bounded_tail_without_nul() {
        let id: CaseId = "case_0190a1b2c3d400000001deadbeef".parse().unwrap();
        assert_eq!(id.as_str(), "case_0190a1b2c3d400000001deadbeef");
        assert_eq!(id.to_string(), id.as_str());
        let longest = format!("grp_{}", "a".repeat(MAX_ID_TAIL));
        assert_eq!(longest.parse::<GroupId>().unwrap().as_str(), longest);
        for bad in [
            "",
            "case",
            "dl_0190a1b2c3d4",
            "grp_1",
            "Case_1",
            " case_1",
            "case_a\0b",
        ] {
            let e = bad.parse::<CaseId>().unwrap_err();
            assert_eq!((e.kind, e.id.as_str()), (IdKind::Case, bad));
        }
        let too_long = format!("grp_{}", "a".repeat(MAX_ID_TAIL + 1));
        assert_eq!(too_long.parse::<GroupId>().unwrap_err().kind, IdKind::Group);
        assert!("case_1".parse::<GroupId>().is_err());
    }

    #[test]
    fn an_id_error_names_the_kind_and_its_prefix() {
        let e = "x".parse::<GroupId>().unwrap_err();
        assert_eq!(e.to_string(), r#""x" is not a case group id (grp_…)"#);
        let e = "x".parse::<CaseId>().unwrap_err();
        assert_eq!(e.to_string(), r#""x" is not a case id (case_…)"#);
        let e = "x".parse::<PlanId>().unwrap_err();
        assert_eq!(
            e.to_string(),
            r#""x" is not a replay plan id (plan_… or mv_…)"#
        );
    }

    #[test]
    fn a_plan_id_is_a_plan_or_a_move_task_handle() {
        for id in ["plan_0190a1b2c3d4", "mv_0123456789abcdef0123456789abcdef"] {
            assert_eq!(id.parse::<PlanId>().unwrap().as_str(), id);
        }
        for bad in ["grp_1", "mv", "plan", "plan_a\0", ""] {
            assert_eq!(bad.parse::<PlanId>().unwrap_err().kind, IdKind::Plan);
        }
        let too_long = format!("mv_{}", "a".repeat(MAX_ID_TAIL + 1));
        assert!(too_long.parse::<PlanId>().is_err());
    }

    #[test]
    fn a_lock_token_is_any_token_the_broker_makes() {
        for _ in 0..100 {
            let t = LockToken::generate();
            assert_eq!(t.as_str().len(), 35);
            assert_eq!(t.as_str().parse::<LockToken>().unwrap(), t);
            let stored = new_lock_token();
            assert_eq!(stored.parse::<LockToken>().unwrap().as_str(), stored);
        }
        assert_ne!(LockToken::generate(), LockToken::generate());
        // A message delivery's token: the row's key in hex after a `.`, up to 16 digits.
        let delivery = format!("{}.{:x}", new_lock_token(), i64::MAX);
        assert_eq!(delivery.parse::<LockToken>().unwrap().as_str(), delivery);
        let longest = format!("lk_{}", "f".repeat(MAX_ID_TAIL));
        assert!(longest.parse::<LockToken>().is_ok());
        let too_long = format!("lk_{}", "f".repeat(MAX_ID_TAIL + 1));
        for bad in [
            "",
            "lk",
            "LK_0123",
            " lk_0123",
            "dl_0190a1b2c3d400000001deadbeef",
            "lk_0123\0.1",
            too_long.as_str(),
        ] {
            let e = bad.parse::<LockToken>().unwrap_err();
            assert_eq!((e.kind, e.id.as_str()), (IdKind::Lock, bad));
        }
        assert_eq!(
            "x".parse::<LockToken>().unwrap_err().to_string(),
            r#""x" is not a lock id (lk_…)"#
        );
    }

    #[test]
    fn a_dead_letter_id_is_any_id_the_broker_makes() {
        let a = DeadLetterId::generate(Timestamp(1_800_000_000_000));
        assert_eq!(a.as_str().len(), 31);
        assert_eq!(a.as_str().parse::<DeadLetterId>().unwrap(), a);
        let b = new_dead_letter_id(Timestamp(1_800_000_000_001));
        assert!(a.as_str() < b.as_str());
        assert_eq!(b.parse::<DeadLetterId>().unwrap().as_str(), b);
        // The latest time a timestamp holds still fits.
        let last = DeadLetterId::generate(Timestamp(i64::MAX));
        assert_eq!(last.as_str().parse::<DeadLetterId>().unwrap(), last);
        let too_long = format!("dl_{}", "a".repeat(MAX_ID_TAIL + 1));
        for bad in [
            "",
            "dl",
            "DL_1",
            "case_0190a1b2c3d400000001deadbeef",
            "lk_0123",
            "dl_a\0b",
            too_long.as_str(),
        ] {
            let e = bad.parse::<DeadLetterId>().unwrap_err();
            assert_eq!((e.kind, e.id.as_str()), (IdKind::DeadLetter, bad));
        }
        assert_eq!(
            "x".parse::<DeadLetterId>().unwrap_err().to_string(),
            r#""x" is not a dead-letter record id (dl_…)"#
        );
    }

    #[test]
    fn a_named_id_gives_back_the_string_it_was_given() {
        let ok: Named<LockToken> = "lk_01.2".parse();
        assert_eq!(given(&ok), "lk_01.2");
        let refused: Named<DeadLetterId> = "dl_a\0b".parse();
        assert!(refused.is_err());
        assert_eq!(given(&refused), "dl_a\0b");
    }

    #[test]
    fn a_typed_id_is_the_plain_string_in_json() {
        let id: GroupId = "grp_0190a1b2c3d4".parse().unwrap();
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, r#""grp_0190a1b2c3d4""#);
        assert_eq!(serde_json::from_str::<GroupId>(&json).unwrap(), id);
        assert!(serde_json::from_str::<GroupId>(r#""case_1""#).is_err());
        assert!(serde_json::from_str::<CaseId>("1").is_err());
    }

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
