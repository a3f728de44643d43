//! The SQL both backends run for a filtered dead-letter listing and for the failure
//! aggregate, built once with the backend's placeholders: what differs between them is
//! the placeholder (`?N`, `$N`), how a substring is found, and how a list is bound.

use redrive_core::Area;

use super::columns::{Columns, bad_value};
use crate::failure::{FailureQuery, FailureShape, FailureSignature};
use crate::{DeadLetterQuery, StoreResult, columns};

/// A value bound to a built statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bind {
    /// A text value.
    Text(String),
    /// An integer.
    Int(i64),
    /// A list of texts (a backend binds it as it binds lists: a JSON array, an array).
    List(Vec<String>),
}

/// What differs between the backends' SQL.
pub trait Dialect {
    /// The placeholder of the `n`th value (from 1).
    fn placeholder(n: usize) -> String;
    /// A condition true when `column` (lowercased by the database) contains the
    /// placeholder's text.
    fn contains(column: &str, placeholder: &str) -> String;
    /// A condition true when `column` is one of the list bound to the placeholder.
    fn one_of(column: &str, placeholder: &str) -> String;
}

/// A statement and its values, in placeholder order.
#[derive(Debug, Default)]
struct Built {
    where_: String,
    binds: Vec<Bind>,
}

impl Built {
    fn and<D: Dialect>(&mut self, cond: impl FnOnce(&str) -> String, value: Bind) {
        self.binds.push(value);
        let p = D::placeholder(self.binds.len());
        self.where_.push_str(" AND ");
        self.where_.push_str(&cond(&p));
    }
}

/// The listing of a dead-letter store: every filter of `q` pushed into the statement,
/// keyset paging by id. A filter that is absent adds nothing, so the index
/// `(queue, area, id)` or, with a signature, `(queue, area, signature, id)` serves it.
pub fn list_sql<D: Dialect>(q: &DeadLetterQuery) -> (String, Vec<Bind>) {
    let mut b = Built::default();
    b.and::<D>(|p| format!("queue = {p}"), Bind::Text(q.queue.to_string()));
    b.and::<D>(
        |p| format!("area = {p}"),
        Bind::Text(q.area.as_str().to_owned()),
    );
    if let Some(s) = &q.filter.signature {
        b.and::<D>(|p| format!("signature = {p}"), Bind::Text(s.clone()));
    }
    if let Some(r) = &q.reason {
        b.and::<D>(|p| format!("reason = {p}"), Bind::Text(r.clone()));
    }
    if let Some(t) = q.from {
        b.and::<D>(|p| format!("dead_lettered_at >= {p}"), Bind::Int(t.0));
    }
    if let Some(t) = q.to {
        b.and::<D>(|p| format!("dead_lettered_at < {p}"), Bind::Int(t.0));
    }
    if let Some(t) = &q.filter.message_type {
        b.and::<D>(|p| format!("message_type = {p}"), Bind::Text(t.clone()));
    }
    if let Some(s) = &q.filter.source {
        b.and::<D>(|p| format!("source = {p}"), Bind::Text(s.clone()));
    }
    if let Some(x) = q.filter.quality {
        b.and::<D>(
            |p| format!("count_quality = {p}"),
            Bind::Text(x.as_str().to_owned()),
        );
    }
    if let Some(t) = &q.filter.text {
        b.and::<D>(
            |p| D::contains("description", p),
            Bind::Text(t.to_ascii_lowercase()),
        );
    }
    if let Some(a) = &q.after {
        b.and::<D>(|p| format!("id > {p}"), Bind::Text(a.clone()));
    }
    b.binds.push(Bind::Int(i64::from(q.limit)));
    let sql = format!(
        "SELECT {} FROM dead_letters WHERE {} ORDER BY id LIMIT {}",
        columns!(dead_letter),
        &b.where_[" AND ".len()..],
        D::placeholder(b.binds.len())
    );
    (sql, b.binds)
}

/// The columns [`failures_sql`] selects, in order: id, queue, reason, route kind,
/// outcome class, message type, source, description, count, live, first seen, last seen.
pub const FAILURE_COLUMNS: &str = "c.signature, c.queue, s.reason, s.route_kind, \
     s.outcome_class, s.message_type, s.source, s.description, c.count, c.live, \
     c.first_seen, c.last_seen";

/// A page of the aggregate: newest `last_seen` first, then by id, from the index
/// `(area, last_seen DESC, signature)` (or, for a list of queues, `(queue, area, …)`).
pub fn failures_sql<D: Dialect>(q: &FailureQuery) -> (String, Vec<Bind>) {
    let mut b = Built::default();
    b.and::<D>(
        |p| format!("c.area = {p}"),
        Bind::Text(q.area.as_str().to_owned()),
    );
    if let Some(queues) = &q.queues {
        b.and::<D>(
            |p| D::one_of("c.queue", p),
            Bind::List(queues.iter().map(ToString::to_string).collect()),
        );
    }
    if let Some(t) = q.from {
        b.and::<D>(|p| format!("c.last_seen >= {p}"), Bind::Int(t.0));
    }
    if let Some(t) = q.to {
        b.and::<D>(|p| format!("c.first_seen < {p}"), Bind::Int(t.0));
    }
    if let Some((at, id)) = &q.after {
        b.binds.push(Bind::Int(at.0));
        let l = D::placeholder(b.binds.len());
        b.binds.push(Bind::Text(id.clone()));
        let s = D::placeholder(b.binds.len());
        b.where_.push_str(&format!(
            " AND (c.last_seen < {l} OR (c.last_seen = {l} AND c.signature > {s}))"
        ));
    }
    b.binds.push(Bind::Int(i64::from(q.limit)));
    let sql = format!(
        "SELECT {FAILURE_COLUMNS} FROM failure_signature_counts c \
         JOIN failure_signatures s ON s.id = c.signature WHERE {} \
         ORDER BY c.last_seen DESC, c.signature LIMIT {}",
        &b.where_[" AND ".len()..],
        D::placeholder(b.binds.len())
    );
    (sql, b.binds)
}

/// Reads a row of [`FAILURE_COLUMNS`] counted in `area` (its sparkline is empty: the
/// backend reads the hours next).
pub fn signature_row(c: &impl Columns, area: Area) -> StoreResult<FailureSignature> {
    let count = |i, column| {
        c.int(i)
            .and_then(|v| u64::try_from(v).map_err(|e| bad_value(column, e)))
    };
    Ok(FailureSignature {
        id: c.text(0)?,
        area,
        shape: FailureShape {
            queue: c.name(1, "failure_signatures.queue")?,
            reason: c.text(2)?,
            route_kind: c.text_opt(3)?,
            outcome_class: c.text_opt(4)?,
            message_type: c.text_opt(5)?,
            source: c.text_opt(6)?,
            description: c.text(7)?,
        },
        count: count(8, "failure_signature_counts.count")?,
        live: count(9, "failure_signature_counts.live")?,
        first_seen: c.time(10)?,
        last_seen: c.time(11)?,
        sparkline: Vec::new(),
    })
}

/// The hourly buckets of one signature and area from an hour on: bind the signature,
/// the area and [`crate::failure::sparkline_start`].
pub fn hours_sql<D: Dialect>() -> String {
    format!(
        "SELECT hour, count FROM failure_signature_hours \
         WHERE signature = {} AND area = {} AND hour >= {}",
        D::placeholder(1),
        D::placeholder(2),
        D::placeholder(3)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordFilter;
    use redrive_core::Timestamp;

    struct Q;
    impl Dialect for Q {
        fn placeholder(n: usize) -> String {
            format!("?{n}")
        }
        fn contains(column: &str, p: &str) -> String {
            format!("instr(lower({column}), {p}) > 0")
        }
        fn one_of(column: &str, p: &str) -> String {
            format!("{column} IN (SELECT value FROM json_each({p}))")
        }
    }

    #[test]
    fn only_the_filters_given_reach_the_statement_in_order() {
        let q = DeadLetterQuery {
            queue: "orders".parse().unwrap_or_else(|e| panic!("{e}")),
            area: Area::Live,
            reason: None,
            from: Some(Timestamp(5)),
            to: None,
            after: Some("dl_1".into()),
            limit: 10,
            filter: RecordFilter {
                text: Some("Timeout".into()),
                signature: Some("ab".into()),
                ..RecordFilter::default()
            },
        };
        let (sql, binds) = list_sql::<Q>(&q);
        assert!(sql.contains(
            "WHERE queue = ?1 AND area = ?2 AND signature = ?3 AND dead_lettered_at >= ?4 \
             AND instr(lower(description), ?5) > 0 AND id > ?6 ORDER BY id LIMIT ?7"
        ));
        assert_eq!(binds[4], Bind::Text("timeout".into()));
        assert_eq!(binds.len(), 7);
    }
}
