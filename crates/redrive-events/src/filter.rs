//! Subscription filters, with Event Grid's semantics: event types, subject begins-with /
//! ends-with, and advanced filters on attributes and `data` fields, all ANDed.
//!
//! Rules, for every operator:
//! - Keys name a context attribute (`type`, `source`, `subject`, …), an extension, or a
//!   field of JSON data as `data.a.b`.
//! - String comparisons ignore case.
//! - A value of the wrong type (a number filter on a string field) never matches, and
//!   never errors — for the negated operators too.
//! - An absent (or null) key matches only the negated operators (`…NotIn`,
//!   `…NotBeginsWith`, …, `NumberNotInRange`) and `IsNullOrUndefined`.
//! - On an array value a positive operator matches when any element does, a negated one
//!   when no element matches its positive form (every element must have the right type).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cloudevent::{CloudEvent, Data};

/// Most advanced filters per subscription.
pub const MAX_ADVANCED: usize = 25;
/// Most values per advanced filter.
pub const MAX_VALUES: usize = 25;

/// A subscription's filter. Every part that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Filter {
    /// Event types accepted (any, when empty). Compared ignoring case.
    pub included_event_types: Vec<String>,
    /// The subject must begin with this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject_begins_with: Option<String>,
    /// The subject must end with this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject_ends_with: Option<String>,
    /// Whether the subject filters compare case (default: they ignore it).
    pub subject_case_sensitive: bool,
    /// Advanced filters.
    pub advanced: Vec<AdvancedFilter>,
}

/// One advanced filter: an operator, a key, and its value(s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "operator", deny_unknown_fields)]
#[allow(missing_docs)] // each variant is the Event Grid operator of the same name
pub enum AdvancedFilter {
    StringIn { key: String, values: Vec<String> },
    StringNotIn { key: String, values: Vec<String> },
    StringBeginsWith { key: String, values: Vec<String> },
    StringNotBeginsWith { key: String, values: Vec<String> },
    StringEndsWith { key: String, values: Vec<String> },
    StringNotEndsWith { key: String, values: Vec<String> },
    StringContains { key: String, values: Vec<String> },
    StringNotContains { key: String, values: Vec<String> },
    NumberIn { key: String, values: Vec<f64> },
    NumberNotIn { key: String, values: Vec<f64> },
    NumberLessThan { key: String, value: f64 },
    NumberGreaterThan { key: String, value: f64 },
    NumberLessThanOrEquals { key: String, value: f64 },
    NumberGreaterThanOrEquals { key: String, value: f64 },
    NumberInRange { key: String, values: Vec<[f64; 2]> },
    NumberNotInRange { key: String, values: Vec<[f64; 2]> },
    BoolEquals { key: String, value: bool },
    IsNullOrUndefined { key: String },
    IsNotNull { key: String },
}

/// A filter that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid filter: {0}")]
pub struct FilterError(pub String);

impl Filter {
    /// Checks the limits and the shape of every advanced filter.
    pub fn validate(&self) -> Result<(), FilterError> {
        if self.advanced.len() > MAX_ADVANCED {
            return Err(FilterError(format!(
                "at most {MAX_ADVANCED} advanced filters"
            )));
        }
        for f in &self.advanced {
            f.validate()?;
        }
        Ok(())
    }

    /// Whether `event` passes.
    pub fn matches(&self, event: &CloudEvent) -> bool {
        if !self.included_event_types.is_empty()
            && !self
                .included_event_types
                .iter()
                .any(|t| t.eq_ignore_ascii_case(&event.event_type))
        {
            return false;
        }
        if self.subject_begins_with.is_some() || self.subject_ends_with.is_some() {
            let Some(subject) = &event.subject else {
                return false;
            };
            let fold = |s: &str| {
                if self.subject_case_sensitive {
                    s.to_owned()
                } else {
                    s.to_lowercase()
                }
            };
            let subject = fold(subject);
            if let Some(b) = &self.subject_begins_with
                && !subject.starts_with(&fold(b))
            {
                return false;
            }
            if let Some(e) = &self.subject_ends_with
                && !subject.ends_with(&fold(e))
            {
                return false;
            }
        }
        self.advanced.iter().all(|f| f.matches(event))
    }
}

impl AdvancedFilter {
    /// The key the filter reads.
    pub fn key(&self) -> &str {
        use AdvancedFilter as F;
        match self {
            F::StringIn { key, .. }
            | F::StringNotIn { key, .. }
            | F::StringBeginsWith { key, .. }
            | F::StringNotBeginsWith { key, .. }
            | F::StringEndsWith { key, .. }
            | F::StringNotEndsWith { key, .. }
            | F::StringContains { key, .. }
            | F::StringNotContains { key, .. }
            | F::NumberIn { key, .. }
            | F::NumberNotIn { key, .. }
            | F::NumberLessThan { key, .. }
            | F::NumberGreaterThan { key, .. }
            | F::NumberLessThanOrEquals { key, .. }
            | F::NumberGreaterThanOrEquals { key, .. }
            | F::NumberInRange { key, .. }
            | F::NumberNotInRange { key, .. }
            | F::BoolEquals { key, .. }
            | F::IsNullOrUndefined { key }
            | F::IsNotNull { key } => key,
        }
    }

    fn validate(&self) -> Result<(), FilterError> {
        use AdvancedFilter as F;
        let key = self.key();
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(FilterError(format!("key {key:?} is not a valid key")));
        }
        let count = match self {
            F::StringIn { values, .. }
            | F::StringNotIn { values, .. }
            | F::StringBeginsWith { values, .. }
            | F::StringNotBeginsWith { values, .. }
            | F::StringEndsWith { values, .. }
            | F::StringNotEndsWith { values, .. }
            | F::StringContains { values, .. }
            | F::StringNotContains { values, .. } => values.len(),
            F::NumberIn { values, .. } | F::NumberNotIn { values, .. } => {
                if values.iter().any(|v| !v.is_finite()) {
                    return Err(FilterError(format!("{key}: numbers must be finite")));
                }
                values.len()
            }
            F::NumberInRange { values, .. } | F::NumberNotInRange { values, .. } => {
                if values
                    .iter()
                    .any(|[lo, hi]| !lo.is_finite() || !hi.is_finite() || lo > hi)
                {
                    return Err(FilterError(format!(
                        "{key}: ranges are [low, high] with low <= high"
                    )));
                }
                values.len()
            }
            F::NumberLessThan { value, .. }
            | F::NumberGreaterThan { value, .. }
            | F::NumberLessThanOrEquals { value, .. }
            | F::NumberGreaterThanOrEquals { value, .. } => {
                if !value.is_finite() {
                    return Err(FilterError(format!("{key}: numbers must be finite")));
                }
                1
            }
            F::BoolEquals { .. } | F::IsNullOrUndefined { .. } | F::IsNotNull { .. } => 1,
        };
        if count == 0 || count > MAX_VALUES {
            return Err(FilterError(format!("{key}: give 1 to {MAX_VALUES} values")));
        }
        Ok(())
    }

    /// Whether `event` passes this filter.
    pub fn matches(&self, event: &CloudEvent) -> bool {
        use AdvancedFilter as F;
        let found = lookup(event, self.key());
        let v = found.as_ref();
        let strs = |values: &[String], negated: bool, test: fn(&str, &str) -> bool| {
            eval(v, negated, |x| {
                let s = x.as_str()?.to_lowercase();
                Some(values.iter().any(|w| test(&s, &w.to_lowercase())))
            })
        };
        let num = |negated: bool, test: &dyn Fn(f64) -> bool| {
            eval(v, negated, |x| {
                x.as_f64().filter(|_| x.is_number()).map(test)
            })
        };
        match self {
            F::StringIn { values, .. } => strs(values, false, |s, w| s == w),
            F::StringNotIn { values, .. } => strs(values, true, |s, w| s == w),
            F::StringBeginsWith { values, .. } => strs(values, false, |s, w| s.starts_with(w)),
            F::StringNotBeginsWith { values, .. } => strs(values, true, |s, w| s.starts_with(w)),
            F::StringEndsWith { values, .. } => strs(values, false, |s, w| s.ends_with(w)),
            F::StringNotEndsWith { values, .. } => strs(values, true, |s, w| s.ends_with(w)),
            F::StringContains { values, .. } => strs(values, false, |s, w| s.contains(w)),
            F::StringNotContains { values, .. } => strs(values, true, |s, w| s.contains(w)),
            F::NumberIn { values, .. } => num(false, &|n| values.contains(&n)),
            F::NumberNotIn { values, .. } => num(true, &|n| values.contains(&n)),
            F::NumberLessThan { value, .. } => num(false, &|n| n < *value),
            F::NumberGreaterThan { value, .. } => num(false, &|n| n > *value),
            F::NumberLessThanOrEquals { value, .. } => num(false, &|n| n <= *value),
            F::NumberGreaterThanOrEquals { value, .. } => num(false, &|n| n >= *value),
            F::NumberInRange { values, .. } => num(false, &|n| {
                values.iter().any(|[lo, hi]| *lo <= n && n <= *hi)
            }),
            F::NumberNotInRange { values, .. } => num(true, &|n| {
                values.iter().any(|[lo, hi]| *lo <= n && n <= *hi)
            }),
            F::BoolEquals { value, .. } => eval(v, false, |x| x.as_bool().map(|b| b == *value)),
            F::IsNullOrUndefined { .. } => v.is_none_or(Value::is_null),
            F::IsNotNull { .. } => v.is_some_and(|x| !x.is_null()),
        }
    }
}

/// Applies a positive test (which says `None` for a value of the wrong type) under the
/// rules in the module docs.
fn eval(v: Option<&Value>, negated: bool, test: impl Fn(&Value) -> Option<bool>) -> bool {
    match v {
        None | Some(Value::Null) => negated,
        Some(Value::Array(items)) => {
            let mut any = false;
            for it in items {
                match test(it) {
                    None => return false,
                    Some(true) => any = true,
                    Some(false) => {}
                }
            }
            any != negated
        }
        Some(x) => test(x).is_some_and(|b| b != negated),
    }
}

/// The value at `key`: a context attribute or extension, or `data.a.b` inside JSON data.
fn lookup(event: &CloudEvent, key: &str) -> Option<Value> {
    let lower = key.to_ascii_lowercase();
    match lower.strip_prefix("data.") {
        Some(_) => {
            let Some(Data::Json(data)) = &event.data else {
                return None;
            };
            let mut cur = data;
            for part in key.split('.').skip(1) {
                cur = cur.as_object()?.get(part)?;
            }
            Some(cur.clone())
        }
        None => event.attribute(&lower),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event() -> CloudEvent {
        CloudEvent::from_json(json!({
            "specversion": "1.0", "id": "1", "source": "/shop", "type": "Order.Created",
            "subject": "orders/EU/42", "tenant": "acme", "priority": 3,
            "data": {"amount": 12.5, "currency": "EUR", "vip": true, "note": null,
                     "tags": ["new", "gift"], "qty": [1, 2], "customer": {"country": "DE"}}
        }))
        .unwrap()
    }

    fn f(v: Value) -> AdvancedFilter {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn every_operator_matches_as_specified() {
        let e = event();
        let cases = [
            // strings, ignoring case; attributes, extensions and data fields
            (
                json!({"operator": "StringIn", "key": "type", "values": ["order.created"]}),
                true,
            ),
            (
                json!({"operator": "StringIn", "key": "data.currency", "values": ["usd"]}),
                false,
            ),
            (
                json!({"operator": "StringNotIn", "key": "data.currency", "values": ["usd"]}),
                true,
            ),
            (
                json!({"operator": "StringNotIn", "key": "tenant", "values": ["ACME"]}),
                false,
            ),
            (
                json!({"operator": "StringBeginsWith", "key": "subject", "values": ["orders/eu"]}),
                true,
            ),
            (
                json!({"operator": "StringNotBeginsWith", "key": "subject", "values": ["orders/eu"]}),
                false,
            ),
            (
                json!({"operator": "StringEndsWith", "key": "source", "values": ["shop"]}),
                true,
            ),
            (
                json!({"operator": "StringNotEndsWith", "key": "source", "values": ["x"]}),
                true,
            ),
            (
                json!({"operator": "StringContains", "key": "data.customer.country", "values": ["e"]}),
                true,
            ),
            (
                json!({"operator": "StringNotContains", "key": "data.customer.country", "values": ["e"]}),
                false,
            ),
            // numbers
            (
                json!({"operator": "NumberIn", "key": "data.amount", "values": [12.5, 3]}),
                true,
            ),
            (
                json!({"operator": "NumberNotIn", "key": "data.amount", "values": [1]}),
                true,
            ),
            (
                json!({"operator": "NumberLessThan", "key": "data.amount", "value": 12.5}),
                false,
            ),
            (
                json!({"operator": "NumberLessThanOrEquals", "key": "data.amount", "value": 12.5}),
                true,
            ),
            (
                json!({"operator": "NumberGreaterThan", "key": "priority", "value": 2}),
                true,
            ),
            (
                json!({"operator": "NumberGreaterThanOrEquals", "key": "priority", "value": 4}),
                false,
            ),
            (
                json!({"operator": "NumberInRange", "key": "data.amount", "values": [[0, 1], [10, 20]]}),
                true,
            ),
            (
                json!({"operator": "NumberNotInRange", "key": "data.amount", "values": [[10, 20]]}),
                false,
            ),
            // booleans and null
            (
                json!({"operator": "BoolEquals", "key": "data.vip", "value": true}),
                true,
            ),
            (
                json!({"operator": "BoolEquals", "key": "data.vip", "value": false}),
                false,
            ),
            (
                json!({"operator": "IsNullOrUndefined", "key": "data.note"}),
                true,
            ),
            (
                json!({"operator": "IsNullOrUndefined", "key": "data.missing"}),
                true,
            ),
            (
                json!({"operator": "IsNullOrUndefined", "key": "data.amount"}),
                false,
            ),
            (json!({"operator": "IsNotNull", "key": "data.amount"}), true),
            (json!({"operator": "IsNotNull", "key": "data.note"}), false),
            // arrays: any element for positive operators, none for negated ones
            (
                json!({"operator": "StringIn", "key": "data.tags", "values": ["GIFT"]}),
                true,
            ),
            (
                json!({"operator": "StringNotIn", "key": "data.tags", "values": ["gift"]}),
                false,
            ),
            (
                json!({"operator": "NumberIn", "key": "data.qty", "values": [2]}),
                true,
            ),
            (
                json!({"operator": "NumberNotIn", "key": "data.qty", "values": [7]}),
                true,
            ),
        ];
        for (spec, expected) in cases {
            let filter = f(spec.clone());
            filter
                .validate()
                .map_err(|e| format!("{spec}: {e}"))
                .unwrap();
            assert_eq!(filter.matches(&e), expected, "{spec}");
        }
    }

    #[test]
    fn a_type_mismatch_never_matches_and_never_errors() {
        let e = event();
        for spec in [
            json!({"operator": "NumberIn", "key": "data.currency", "values": [1]}),
            json!({"operator": "NumberNotIn", "key": "data.currency", "values": [1]}),
            json!({"operator": "NumberGreaterThan", "key": "subject", "value": 0}),
            json!({"operator": "NumberNotInRange", "key": "data.vip", "values": [[0, 1]]}),
            json!({"operator": "StringIn", "key": "data.amount", "values": ["12.5"]}),
            json!({"operator": "StringNotContains", "key": "data.amount", "values": ["x"]}),
            json!({"operator": "BoolEquals", "key": "data.currency", "value": true}),
            json!({"operator": "StringIn", "key": "data.customer", "values": ["DE"]}),
        ] {
            assert!(!f(spec.clone()).matches(&e), "{spec}");
        }
    }

    #[test]
    fn an_absent_key_matches_only_negated_operators() {
        let e = event();
        let absent = |op: &str, extra: Value| {
            let mut v = json!({"operator": op, "key": "data.nothing.here"});
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            f(v).matches(&e)
        };
        assert!(!absent("StringIn", json!({"values": ["a"]})));
        assert!(absent("StringNotIn", json!({"values": ["a"]})));
        assert!(absent("StringNotBeginsWith", json!({"values": ["a"]})));
        assert!(!absent("NumberIn", json!({"values": [1]})));
        assert!(absent("NumberNotIn", json!({"values": [1]})));
        assert!(!absent("NumberLessThan", json!({"value": 1})));
        assert!(absent("NumberNotInRange", json!({"values": [[0, 1]]})));
        assert!(!absent("BoolEquals", json!({"value": false})));
    }

    #[test]
    fn event_types_and_subjects_filter_before_advanced_ones() {
        let e = event();
        let mut filter = Filter {
            included_event_types: vec!["order.created".into()],
            subject_begins_with: Some("ORDERS/".into()),
            subject_ends_with: Some("/42".into()),
            ..Filter::default()
        };
        assert!(filter.matches(&e));
        filter.subject_case_sensitive = true;
        assert!(!filter.matches(&e), "case now counts");
        filter.subject_case_sensitive = false;
        filter.included_event_types = vec!["order.deleted".into()];
        assert!(!filter.matches(&e));
        filter.included_event_types.clear();
        filter.advanced.push(f(
            json!({"operator": "NumberLessThan", "key": "data.amount", "value": 10}),
        ));
        assert!(!filter.matches(&e), "filters are ANDed");
        let mut no_subject = e.clone();
        no_subject.subject = None;
        let subject_only = Filter {
            subject_begins_with: Some("o".into()),
            ..Filter::default()
        };
        assert!(!subject_only.matches(&no_subject));
        assert!(Filter::default().matches(&no_subject));
    }

    #[test]
    fn invalid_filters_are_refused() {
        for spec in [
            json!({"operator": "StringIn", "key": "", "values": ["a"]}),
            json!({"operator": "StringIn", "key": "data..x", "values": ["a"]}),
            json!({"operator": "StringIn", "key": "k", "values": []}),
            json!({"operator": "NumberInRange", "key": "k", "values": [[2, 1]]}),
        ] {
            assert!(f(spec.clone()).validate().is_err(), "{spec}");
        }
        let too_many = Filter {
            advanced: vec![f(json!({"operator": "IsNotNull", "key": "k"})); 26],
            ..Filter::default()
        };
        assert!(too_many.validate().is_err());
        assert!(
            serde_json::from_value::<AdvancedFilter>(json!({"operator": "Regex", "key": "k"}))
                .is_err()
        );
    }
}
