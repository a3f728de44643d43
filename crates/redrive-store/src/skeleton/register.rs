//! Idempotency register rows: decoding, and whether a put changes anything.
//!
//! A key is stored in its text form (`redrive_core::register::RegisterKey`'s `Display`),
//! which both backends order bytewise, so a page's cursor is the last key's text.

use redrive_core::Timestamp;
use redrive_core::register::{RegisterEntry, RegisterKey};

use super::columns::{Columns, bad_value};
use crate::{MAX_REGISTER_PAGE, RegisterRecord, StoreResult};

/// Reads [`columns!(register)`](crate::columns).
pub fn record(c: &impl Columns) -> StoreResult<RegisterRecord> {
    let key: RegisterKey = c
        .text(0)?
        .parse()
        .map_err(|e| bad_value("register.key", e))?;
    let answer = c
        .text(1)?
        .parse()
        .map_err(|e| bad_value("register.answer", e))?;
    let entry = RegisterEntry::new(key, answer, c.text_opt(2)?)
        .map_err(|e| bad_value("register.ordering_attribute", e))?;
    Ok(RegisterRecord {
        entry,
        updated_at: c.time(3)?,
    })
}

/// What a put of `entry` at `now` writes over `previous`: the record to store, or `None`
/// when the stored entry is equal already (nothing is written, its time stays).
pub fn put(
    previous: Option<&RegisterRecord>,
    entry: &RegisterEntry,
    now: Timestamp,
) -> Option<RegisterRecord> {
    if previous.is_some_and(|p| p.entry == *entry) {
        return None;
    }
    Some(RegisterRecord {
        entry: entry.clone(),
        updated_at: now,
    })
}

/// The page size a register listing asks for, capped at [`MAX_REGISTER_PAGE`]; 0 means the
/// cap.
pub fn page_limit(limit: u32) -> i64 {
    i64::from(if limit == 0 {
        MAX_REGISTER_PAGE
    } else {
        limit.min(MAX_REGISTER_PAGE)
    })
}

#[cfg(test)]
mod tests {
    use redrive_core::register::Idempotency;

    use super::*;

    #[test]
    fn an_equal_put_writes_nothing() {
        let e = RegisterEntry::new("a.b".parse().expect("key"), Idempotency::Idempotent, None)
            .expect("entry");
        let stored = put(None, &e, Timestamp(1)).expect("a new entry is written");
        assert_eq!(stored.updated_at, Timestamp(1));
        assert_eq!(put(Some(&stored), &e, Timestamp(2)), None);
        let other = RegisterEntry {
            answer: Idempotency::NotIdempotent,
            ..e
        };
        assert_eq!(
            put(Some(&stored), &other, Timestamp(3)).map(|r| r.updated_at),
            Some(Timestamp(3))
        );
        assert_eq!(
            (page_limit(0), page_limit(7), page_limit(5_000)),
            (1_000, 7, 1_000)
        );
    }
}
