//! How values are kept in columns, decided once for every backend.
//!
//! Times are milliseconds since the epoch (`bigint`), states, areas and routes are kept
//! by name, properties, policies, specs, grants and audit targets as JSON text. A backend
//! reads its rows through [`Columns`] — how to get one integer, text, byte or boolean
//! column out of its row type — and the shared decoders turn those into the trait's
//! types; it writes through the encoders here ([`props_to_json`], [`to_json`],
//! [`to_int`]). A value a decoder cannot read is a [`RowError::BadValue`] naming its
//! column, whichever backend read it.

use std::fmt::Display;
use std::str::FromStr;

use redrive_core::{EntityName, Properties, PropertyValue, Timestamp};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{StoreError, StoreResult};

/// Failures of the shared row mapping. They reach callers inside [`StoreError::Backend`];
/// tests may downcast the source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RowError {
    /// A column holds a value this build cannot read.
    #[error("column {column} holds a value that cannot be read: {why}")]
    BadValue {
        /// The column (`table.column`).
        column: &'static str,
        /// Why it cannot be read.
        why: String,
    },
    /// A value does not fit its column (a count or version out of range).
    #[error("value out of range for {0}")]
    OutOfRange(&'static str),
    /// A floating-point property is NaN or infinite, which cannot be stored (JSON has no
    /// such numbers); nothing was stored.
    #[error("property {name:?} is not a finite number")]
    NonFiniteProperty {
        /// The property.
        name: String,
    },
    /// A rule the store relies on was broken (a bug); the operation was rolled back.
    #[error("internal invariant broken: {0}")]
    Invariant(&'static str),
    /// An update of a replay plan names an item the plan does not hold (a caller's bug);
    /// nothing was written.
    #[error("replay plan {plan_id:?} has no item {seq}")]
    NoPlanItem {
        /// The plan.
        plan_id: String,
        /// The item asked for.
        seq: u32,
    },
}

impl From<RowError> for StoreError {
    fn from(e: RowError) -> Self {
        StoreError::backend(e)
    }
}

/// A [`RowError::BadValue`] of `column`.
pub fn bad_value(column: &'static str, why: impl Display) -> StoreError {
    RowError::BadValue {
        column,
        why: why.to_string(),
    }
    .into()
}

/// A [`RowError::Invariant`].
pub fn invariant(what: &'static str) -> StoreError {
    RowError::Invariant(what).into()
}

/// The column lists the shared decoders read, in their order. Both schemas name these
/// columns alike; a backend puts the list in its statements (`concat!("SELECT ",
/// redrive_store::columns!(dead_letter), " FROM dead_letters ...")`) and decodes the
/// row with the matching decoder.
///
/// - `head`: [`Head::decode`](crate::skeleton::Head::decode) (12 columns).
/// - `content`: the rest of [`MessageRow::decode`](crate::skeleton::MessageRow::decode),
///   after the head (10 columns).
/// - `dead_letter`: [`dead_letters::decode`](crate::skeleton::dead_letters::decode).
/// - `queue`: [`QueueRow::decode`](crate::skeleton::entities::QueueRow::decode).
/// - `topic`, `subscription`: [`entities::topic`](crate::skeleton::entities::topic),
///   [`entities::subscription`](crate::skeleton::entities::subscription).
/// - `token`, `audit`: [`access::token`](crate::skeleton::access::token),
///   [`access::audit_entry`](crate::skeleton::access::audit_entry).
/// - `register`: [`register::record`](crate::skeleton::register::record).
/// - `replay_plan`, `replay_plan_item`:
///   [`replay_plans::decode`](crate::skeleton::replay_plans::decode),
///   [`replay_plans::decode_item`](crate::skeleton::replay_plans::decode_item).
#[macro_export]
macro_rules! columns {
    (head) => {
        "sequence, message_id, session_id, state, visible_at, expires_at, delivery_count, \
         lock_token, locked_until, deferred, first_delivered_at, last_delivered_at"
    };
    (content) => {
        "body, content_type, properties, correlation_id, message_type, intent, valid_until, \
         enqueued_at, scheduled_at, last_attempt"
    };
    (dead_letter) => {
        "id, queue, area, message_id, sequence, session_id, body, body_sha256, content_type, \
         properties, correlation_id, message_type, intent, valid_until, reason, description, \
         delivery_count, count_quality, first_delivered_at, last_delivered_at, enqueued_at, \
         dead_lettered_at, policy_version, route, forwarded_queue, forwarded_sequence, \
         dlq_delivery_count, locked_until, format, replay_due_at, replay_failures, \
         last_replay_error, judgement, route_target, missing_target, route_kind, route_rule, \
         consumer, rule_version"
    };
    (queue) => {
        "name, policy, policy_version, created_at, updated_at, id"
    };
    (topic) => {
        "name, policy, version, created_at, updated_at"
    };
    (subscription) => {
        "topic, name, queue, spec, version, created_at, updated_at"
    };
    (token) => {
        "id, name, secret_hash, grants, created_by, created_at, expires_at, revoked_at, \
         sqs_access_key_id, sqs_secret"
    };
    (audit) => {
        "seq, at, actor_id, actor_name, action, entity, targets, outcome, client, prev_hash, \
         hash"
    };
    (register) => {
        "key, answer, ordering_attribute, updated_at"
    };
    (replay_plan) => {
        "id, queue, destination, owner_id, owner_name, spec, items, created_at, version, \
         status, owner_until, stop_reason, next_at, state, updated_at, kind, runner, \
         runner_until"
    };
    (replay_plan_item) => {
        "seq, case_id, bytes, state, admit_window, message_id, detail, updated_at"
    };
}

/// One row of a backend's result, read by column index. The backend implements the six
/// primitive reads for its row type (mapping its own errors); the rest is shared.
pub trait Columns {
    /// An integer (`bigint`) column.
    fn int(&self, i: usize) -> StoreResult<i64>;
    /// A nullable integer column.
    fn int_opt(&self, i: usize) -> StoreResult<Option<i64>>;
    /// A text column.
    fn text(&self, i: usize) -> StoreResult<String>;
    /// A nullable text column.
    fn text_opt(&self, i: usize) -> StoreResult<Option<String>>;
    /// A byte (blob, `bytea`) column.
    fn bytes(&self, i: usize) -> StoreResult<Vec<u8>>;
    /// A boolean column.
    fn flag(&self, i: usize) -> StoreResult<bool>;

    /// A text column parsed into `T` (a state, an area, a name). A backend that can lend
    /// the text without copying it overrides this.
    fn parse<T>(&self, i: usize, column: &'static str) -> StoreResult<T>
    where
        T: FromStr,
        T::Err: Display,
    {
        self.text(i)?.parse().map_err(|e| bad_value(column, e))
    }

    /// A time, in milliseconds since the epoch.
    fn time(&self, i: usize) -> StoreResult<Timestamp> {
        self.int(i).map(Timestamp)
    }

    /// A nullable time.
    fn time_opt(&self, i: usize) -> StoreResult<Option<Timestamp>> {
        Ok(self.int_opt(i)?.map(Timestamp))
    }

    /// A delivery count.
    fn count(&self, i: usize, column: &'static str) -> StoreResult<u32> {
        let v = self.int(i)?;
        u32::try_from(v).map_err(|e| bad_value(column, e))
    }

    /// A version or a `count(*)`: never negative.
    fn unsigned(&self, i: usize, column: &'static str) -> StoreResult<u64> {
        let v = self.int(i)?;
        u64::try_from(v).map_err(|e| bad_value(column, e))
    }

    /// An entity name.
    fn name(&self, i: usize, column: &'static str) -> StoreResult<EntityName> {
        self.parse(i, column)
    }

    /// A JSON text column.
    fn json<T: DeserializeOwned>(&self, i: usize, column: &'static str) -> StoreResult<T> {
        serde_json::from_str(&self.text(i)?).map_err(|e| bad_value(column, e))
    }

    /// Application properties (JSON text; NULL when there are none).
    fn properties(&self, i: usize, column: &'static str) -> StoreResult<Properties> {
        match self.text_opt(i)? {
            None => Ok(Properties::new()),
            Some(s) => serde_json::from_str(&s).map_err(|e| bad_value(column, e)),
        }
    }
}

/// Properties as stored: JSON text, or NULL when there are none. A NaN or infinite float
/// is refused: JSON has no such numbers (serde_json would write `null`, which does not
/// read back as a property, and the message could never be delivered).
pub fn props_to_json(p: &Properties) -> StoreResult<Option<String>> {
    if p.is_empty() {
        return Ok(None);
    }
    if let Some((name, _)) = p
        .iter()
        .find(|(_, v)| matches!(v, PropertyValue::Float(f) if !f.is_finite()))
    {
        return Err(RowError::NonFiniteProperty { name: name.clone() }.into());
    }
    to_json(p).map(Some)
}

/// A value as JSON text (a policy, a spec, grants, audit targets).
pub fn to_json<T: Serialize + ?Sized>(v: &T) -> StoreResult<String> {
    serde_json::to_string(v).map_err(StoreError::backend)
}

/// An unsigned value (a version, a batch size) as a `bigint`.
pub fn to_int(v: impl TryInto<i64>, what: &'static str) -> StoreResult<i64> {
    v.try_into().map_err(|_| RowError::OutOfRange(what).into())
}

/// A nullable time as stored.
pub fn millis(t: Option<Timestamp>) -> Option<i64> {
    t.map(|t| t.0)
}

/// `now + ms`, saturating: a lock's or a copy's expiry.
pub fn after(now: Timestamp, ms: u64) -> Timestamp {
    now.plus_millis(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// A row limit as bound.
pub fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_are_json_or_null_and_never_non_finite() {
        assert_eq!(props_to_json(&Properties::new()).ok(), Some(None));
        let mut p = Properties::new();
        p.insert("a".into(), PropertyValue::Float(2.0));
        assert_eq!(
            props_to_json(&p).ok().flatten().as_deref(),
            Some(r#"{"a":2.0}"#)
        );
        p.insert("b".into(), PropertyValue::Float(f64::INFINITY));
        match props_to_json(&p) {
            Err(StoreError::Backend { source }) => assert!(matches!(
                source.downcast_ref::<RowError>(),
                Some(RowError::NonFiniteProperty { name }) if name == "b"
            )),
            other => panic!("expected a backend error, got {other:?}"),
        }
    }

    #[test]
    fn out_of_range_values_are_refused() {
        assert_eq!(to_int(5_u64, "v").ok(), Some(5));
        assert!(to_int(u64::MAX, "v").is_err());
        assert_eq!(after(Timestamp(1), u64::MAX), Timestamp(i64::MAX));
    }
}
