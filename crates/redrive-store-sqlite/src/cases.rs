//! Recovery cases: the opening run by every write that inserts or moves a dead-letter
//! record ([`open`]), case updates and payload retention (writer), intents and effect
//! authorities (writer), and the case reads (readers). When a record is a case, and what a
//! case row holds, is `redrive_store::skeleton::cases`'s; the statements are here.
//!
//! The shared statements name their parameters `$1`, `$2`, …; SQLite numbers named
//! parameters by their first appearance in the text, which is not their number in
//! [`OPEN_CASE`], so those are bound by name.

use redrive_core::Timestamp;
use redrive_core::case::TimelineEntry;
use redrive_store::skeleton::cases::{
    self as skeleton, CASE_COLUMNS, ENTRY_COLUMNS, GROUP_COLUMNS, INSERT_GROUP, INTENT_COLUMNS,
    LATEST_DEAD_LETTER, OPEN_CASE, OPEN_TIMELINE, UPDATE_GROUP, add_count, default_review_deadline,
    entry_columns, mut_columns, update_sql,
};
use redrive_store::skeleton::columns::{bad_value, to_int, to_json};
use redrive_store::{
    CaseCounts, CaseGroupRecord, CaseQuery, CaseRecord, CaseUpdate, EffectAuthority, IntentRecord,
    IntentStatus, MAX_CASE_GROUP_PAGE, MAX_CASE_PAGE, MAX_INTENT_WORDS, MAX_TIMELINE_ENTRIES,
    StoreError, StoreResult,
};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, named_params, params, params_from_iter};

use crate::error::Db;
use crate::rows::{Cols, query_all, query_opt};
use crate::writer::Tx;

/// The page size of a listing whose limit is 0.
const DEFAULT_PAGE: u32 = 100;

/// After the columns of a `SELECT`: the cases due for a check at `?1`, earliest first, at
/// most `?2` (through the partial index `cases_due`).
pub(crate) const DUE: &str = "FROM cases WHERE next_check_at IS NOT NULL \
     AND next_check_at <= ?1 ORDER BY next_check_at, id LIMIT ?2";

/// After the columns of a `SELECT`: the cases whose payload retention ran out at `?1` and
/// whose payload is not deleted yet, at most `?2` (through the partial index
/// `cases_payload_due`).
pub(crate) const PAYLOAD_DUE: &str = "FROM cases WHERE payload_until IS NOT NULL \
     AND payload_until <= ?1 AND payload_deleted_at IS NULL \
     ORDER BY payload_until, id LIMIT ?2";

// ---- the opening ------------------------------------------------------------------------

/// Opens the case of record `record_id` at `now` if the record is one and has none (the
/// statements check the rule). Run in the transaction of every write that inserts a
/// dead-letter record or changes its area, after that write.
pub(crate) fn open(conn: &Connection, record_id: &str, now: Timestamp) -> StoreResult<()> {
    conn.prepare_cached(OPEN_CASE)
        .db()?
        .execute(named_params! {
            "$1": record_id,
            "$2": now.0,
            "$3": default_review_deadline(now),
        })
        .db()?;
    conn.prepare_cached(OPEN_TIMELINE)
        .db()?
        .execute(named_params! { "$1": record_id, "$2": now.0 })
        .db()?;
    Ok(())
}

/// [`open`] for a record just inserted, from the record as written rather than from its
/// row: one row from values, which SQLite writes without a statement journal (the
/// `INSERT … SELECT` of [`OPEN_CASE`] may write many rows, so each one keeps a journal of
/// every page it touches, a page per index of `cases`). The same rule
/// ([`skeleton::opens_case`]) and the same columns as [`OPEN_CASE`]; a case that exists
/// already is kept, and gets its first timeline entry from [`OPEN_TIMELINE`] if it has
/// none, as [`open`] would.
pub(crate) fn open_inserted(
    conn: &Connection,
    d: &redrive_store::DeadLetterRecord,
    policy_version: i64,
    now: Timestamp,
) -> StoreResult<()> {
    if !skeleton::opens_case(d) {
        return Ok(());
    }
    let id = redrive_store::case_id_of(&d.id);
    let intent = d
        .intent
        .as_deref()
        .filter(|i| !i.is_empty())
        .unwrap_or(&d.message_id);
    let count = d.count_quality.as_str();
    let quality =
        if d.route_target.as_str() != "written" && matches!(count, "exact" | "approximate") {
            "incomplete"
        } else {
            count
        };
    let body_size = i64::try_from(d.body.len()).map_err(|e| bad_value("body_size", e))?;
    let opened = conn
        .prepare_cached(OPEN_CASE_VALUES)
        .db()?
        .execute(params![
            id,
            d.id,
            d.queue.as_str(),
            d.message_id,
            intent,
            d.message_type,
            d.session_id,
            d.reason,
            d.description,
            i64::from(d.delivery_count),
            policy_version,
            d.body_sha256,
            body_size,
            d.valid_until.map(|t| t.0),
            d.dead_lettered_at.0,
            now.0,
            d.route_kind.as_str(),
            quality,
            default_review_deadline(now),
            d.route_rule.map(|r| r.as_str()),
            d.consumer,
            d.rule_version,
        ])
        .db()?;
    if opened == 0 {
        conn.prepare_cached(OPEN_TIMELINE)
            .db()?
            .execute(named_params! { "$1": d.id, "$2": now.0 })
            .db()?;
        return Ok(());
    }
    conn.prepare_cached(
        "INSERT INTO case_timeline (case_id, seq, at, actor, state, evidence, fields) \
         VALUES (?1, 1, ?2, 'broker', 'route_observed', ?3, '{}') ON CONFLICT DO NOTHING",
    )
    .db()?
    .execute(params![
        id,
        now.0,
        format!("dead-lettered ({}): {}", d.route_kind.as_str(), d.reason)
    ])
    .db()?;
    Ok(())
}

/// [`OPEN_CASE`]'s insert from values (`open_inserted`).
const OPEN_CASE_VALUES: &str = "INSERT INTO cases (id, record_id, queue, message_id, intent_id, \
     message_type, session_id, reason, description, delivery_count, policy_version, \
     body_sha256, body_size, valid_until, dead_lettered_at, opened_at, version, state, route, \
     evidence_quality, review_deadline, next_check_at, data, route_rule, consumer, \
     rule_version) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, 1, \
     'route_observed', ?17, ?18, ?19, ?16, '{}', ?20, ?21, ?22) ON CONFLICT DO NOTHING";

// ---- reads ------------------------------------------------------------------------------

fn case(r: &Row<'_>) -> StoreResult<CaseRecord> {
    skeleton::decode(&Cols(r))
}

fn load(conn: &Connection, id: &str) -> StoreResult<Option<CaseRecord>> {
    let mut stmt = conn
        .prepare_cached(&format!("SELECT {CASE_COLUMNS} FROM cases WHERE id = ?1"))
        .db()?;
    query_opt(&mut stmt, [id], case)
}

fn not_found(id: &str) -> StoreError {
    StoreError::CaseNotFound { id: id.to_owned() }
}

/// The cases with these ids that exist, each with its record and intent (one read).
pub(crate) fn reads(
    conn: &Connection,
    ids: &[String],
) -> StoreResult<Vec<redrive_store::CaseRead>> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids.iter().take(MAX_CASE_PAGE as usize) {
        let Some(case) = load(conn, id)? else {
            continue;
        };
        let (record, record_undecodable) =
            match crate::dead_letters::load_record(conn, &case.queue, &case.record_id) {
                Ok(r) => (r, None),
                Err(StoreError::DeadLetterUndecodable { reason, .. }) => (None, Some(reason)),
                Err(e) => return Err(e),
            };
        let intent =
            skeleton::intent_for(intent_words(conn, &case.intent_id)?, case.queue.as_str());
        out.push(redrive_store::CaseRead {
            case,
            record,
            record_undecodable,
            intent,
        });
    }
    Ok(out)
}

pub(crate) fn get(conn: &Connection, id: &str) -> StoreResult<CaseRecord> {
    load(conn, id)?.ok_or_else(|| not_found(id))
}

fn entries(conn: &Connection, id: &str) -> StoreResult<Vec<TimelineEntry>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {ENTRY_COLUMNS} FROM case_timeline WHERE case_id = ?1 ORDER BY seq"
        ))
        .db()?;
    query_all(&mut stmt, [id], |r| skeleton::decode_entry(&Cols(r)))
}

pub(crate) fn timeline(conn: &Connection, id: &str) -> StoreResult<Vec<TimelineEntry>> {
    let exists = conn
        .prepare_cached("SELECT 1 FROM cases WHERE id = ?1")
        .db()?
        .exists([id])
        .db()?;
    if !exists {
        return Err(not_found(id));
    }
    entries(conn, id)
}

/// The `WHERE` clause of a query's filters (its cursor and limit aside) and its values,
/// bound as `?1…`. Only the filters given are in the statement, so each combination gets
/// a plan that uses the index of its most selective column.
fn filters(q: &CaseQuery) -> (String, Vec<Value>) {
    let mut clauses: Vec<String> = Vec::new();
    let mut values: Vec<Value> = Vec::new();
    let mut add = |clause: &str, v: Value| {
        values.push(v);
        clauses.push(clause.replace('?', &format!("?{}", values.len())));
    };
    let text = |s: &str| Value::Text(s.to_owned());
    if let Some(queue) = &q.queue {
        add("queue = ?", text(queue.as_str()));
    }
    if let Some(reason) = &q.reason {
        add("reason = ?", text(reason));
    }
    if let Some(t) = &q.message_type {
        add("message_type = ?", text(t));
    }
    if let Some(s) = &q.source {
        add("source = ?", text(s));
    }
    if let Some(s) = &q.subject {
        add("subject = ?", text(s));
    }
    if let Some(owner) = &q.owner {
        add("owner = ?", text(owner));
    }
    if let Some(t) = q.overdue_at {
        add(
            "closed_at IS NULL AND review_deadline <= ?",
            Value::Integer(t.0),
        );
    }
    if let Some(t) = q.since {
        add("dead_lettered_at >= ?", Value::Integer(t.0));
    }
    if let Some(t) = q.until {
        add("dead_lettered_at < ?", Value::Integer(t.0));
    }
    if let Some(e) = q.evidence_quality {
        add("evidence_quality = ?", text(e.as_str()));
    }
    if let Some(s) = &q.text {
        add("instr(description, ?) > 0", text(s));
    }
    if let Some(i) = &q.intent_id {
        add("intent_id = ?", text(i));
    }
    if !q.states.is_empty() {
        let mut marks = Vec::with_capacity(q.states.len());
        for s in &q.states {
            values.push(text(s.as_str()));
            marks.push(format!("?{}", values.len()));
        }
        clauses.push(format!("state IN ({})", marks.join(", ")));
    }
    if q.open {
        clauses.push("closed_at IS NULL".to_owned());
    }
    let sql = if clauses.is_empty() {
        "1".to_owned()
    } else {
        clauses.join(" AND ")
    };
    (sql, values)
}

/// The page size of a listing: 0 means [`DEFAULT_PAGE`], at most [`MAX_CASE_PAGE`].
fn page(limit: u32) -> i64 {
    i64::from(if limit == 0 { DEFAULT_PAGE } else { limit }.min(MAX_CASE_PAGE))
}

pub(crate) fn list(conn: &Connection, q: &CaseQuery) -> StoreResult<Vec<CaseRecord>> {
    let (mut sql, mut values) = filters(q);
    if let Some(after) = &q.after {
        values.push(Value::Text(after.clone()));
        sql.push_str(&format!(" AND id > ?{}", values.len()));
    }
    values.push(Value::Integer(page(q.limit)));
    let sql = format!(
        "SELECT {CASE_COLUMNS} FROM cases WHERE {sql} ORDER BY id LIMIT ?{}",
        values.len()
    );
    let mut stmt = conn.prepare_cached(&sql).db()?;
    query_all(&mut stmt, params_from_iter(values), case)
}

/// The latest dead-letter time of the cases of `queue` with `reason` ([`LATEST_DEAD_LETTER`],
/// bound by name: see the module docs).
pub(crate) fn latest_dead_letter(
    conn: &Connection,
    queue: &str,
    reason: &str,
) -> StoreResult<Option<Timestamp>> {
    let mut stmt = conn.prepare_cached(LATEST_DEAD_LETTER).db()?;
    query_opt(
        &mut stmt,
        named_params! { "$1": queue, "$2": reason },
        |r| Ok(Timestamp(r.get::<_, i64>(0).db()?)),
    )
}

pub(crate) fn counts(conn: &Connection, q: &CaseQuery) -> StoreResult<CaseCounts> {
    let (sql, values) = filters(q);
    let mut out = CaseCounts::default();
    let (total, oldest): (i64, Option<i64>) = conn
        .prepare_cached(&format!(
            "SELECT count(*), min(opened_at) FROM cases WHERE {sql}"
        ))
        .db()?
        .query_row(params_from_iter(values.iter()), |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .db()?;
    out.total = u64::try_from(total).map_err(|e| bad_value("count", e))?;
    out.oldest_opened_at = oldest.map(Timestamp);
    for (which, column) in [
        ("reason", "reason"),
        ("type", "message_type"),
        ("state", "state"),
    ] {
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {column}, count(*) FROM cases WHERE {sql} GROUP BY {column}"
            ))
            .db()?;
        let groups = query_all(&mut stmt, params_from_iter(values.iter()), |r| {
            let n: i64 = r.get(1).db()?;
            Ok((
                r.get::<_, Option<String>>(0).db()?,
                u64::try_from(n).map_err(|e| bad_value("count", e))?,
            ))
        })?;
        for (group, n) in groups {
            add_count(&mut out, which, group, n);
        }
    }
    Ok(out)
}

pub(crate) fn payload(conn: &Connection, id: &str, digest: &str) -> StoreResult<Option<Vec<u8>>> {
    conn.prepare_cached("SELECT body FROM case_payloads WHERE case_id = ?1 AND digest = ?2")
        .db()?
        .query_row(params![id, digest], |r| r.get(0))
        .optional()
        .db()
}

pub(crate) fn due(conn: &Connection, now: Timestamp, limit: u32) -> StoreResult<Vec<CaseRecord>> {
    let mut stmt = conn
        .prepare_cached(&format!("SELECT {CASE_COLUMNS} {DUE}"))
        .db()?;
    query_all(&mut stmt, params![now.0, i64::from(limit)], case)
}

fn intent(r: &Row<'_>) -> StoreResult<IntentRecord> {
    let status: String = r.get(2).db()?;
    Ok(IntentRecord {
        intent_id: r.get(0).db()?,
        entity: r.get(1).db()?,
        status: IntentStatus::parse(&status).ok_or_else(|| bad_value("intents.status", status))?,
        superseded_by: r.get(3).db()?,
        reason: r.get(4).db()?,
        actor: r.get(5).db()?,
        at: Timestamp(r.get(6).db()?),
    })
}

pub(crate) fn intent_words(conn: &Connection, intent_id: &str) -> StoreResult<Vec<IntentRecord>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE intent_id = ?1 \
             ORDER BY at, entity LIMIT {MAX_INTENT_WORDS}"
        ))
        .db()?;
    query_all(&mut stmt, [intent_id], intent)
}

fn intent_word(
    conn: &Connection,
    intent_id: &str,
    entity: &str,
) -> StoreResult<Option<IntentRecord>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE intent_id = ?1 AND entity = ?2"
        ))
        .db()?;
    query_opt(&mut stmt, params![intent_id, entity], intent)
}

pub(crate) fn list_authorities(conn: &Connection) -> StoreResult<Vec<EffectAuthority>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT message_type, url, timeout_ms, updated_at FROM effect_authorities \
             ORDER BY message_type",
        )
        .db()?;
    query_all(&mut stmt, [], |r| {
        let timeout: i64 = r.get(2).db()?;
        Ok(EffectAuthority {
            message_type: r.get(0).db()?,
            url: r.get(1).db()?,
            timeout_ms: u64::try_from(timeout)
                .map_err(|e| bad_value("effect_authorities.timeout_ms", e))?,
            updated_at: Timestamp(r.get(3).db()?),
        })
    })
}

// ---- writes -----------------------------------------------------------------------------

/// Writes one update of a case if it is still at the version the caller read, with its
/// audit entries.
pub(crate) fn update(tx: &mut Tx<'_>, u: &CaseUpdate) -> StoreResult<CaseRecord> {
    let written = update_rows(tx, u)?;
    if !u.audit.is_empty() {
        crate::access::append_audit(tx, &u.audit)?;
    }
    Ok(written)
}

/// Writes several updates in this transaction: one whose case changed or is gone (or whose
/// timeline is full) writes nothing and is answered so; any other error fails them all.
/// The audit entries of those written are appended together.
pub(crate) fn update_many(
    tx: &mut Tx<'_>,
    updates: &[CaseUpdate],
) -> StoreResult<Vec<StoreResult<CaseRecord>>> {
    let mut out = Vec::with_capacity(updates.len());
    let mut audit = Vec::new();
    for u in updates {
        match update_rows(tx, u) {
            Ok(c) => {
                audit.extend(u.audit.iter().cloned());
                out.push(Ok(c));
            }
            Err(e) if redrive_store::skeleton::cases::refused_update(&e) => out.push(Err(e)),
            Err(e) => return Err(e),
        }
    }
    if !audit.is_empty() {
        crate::access::append_audit(tx, &audit)?;
    }
    Ok(out)
}

/// The rows of one update (no audit), if the case is still at the version read.
fn update_rows(tx: &mut Tx<'_>, u: &CaseUpdate) -> StoreResult<CaseRecord> {
    let conn = tx.conn;
    let found: Option<(i64, String)> = conn
        .prepare_cached("SELECT version, record_id FROM cases WHERE id = ?1")
        .db()?
        .query_row([&u.id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .db()?;
    let Some((version, record_id)) = found else {
        return Err(not_found(&u.id));
    };
    let version = u64::try_from(version).map_err(|e| bad_value("cases.version", e))?;
    if version != u.version {
        return Err(StoreError::CaseChanged {
            id: u.id.clone(),
            version,
        });
    }
    let (entries, last_seq): (i64, Option<i64>) = conn
        .prepare_cached("SELECT count(*), max(seq) FROM case_timeline WHERE case_id = ?1")
        .db()?
        .query_row([&u.id], |r| Ok((r.get(0)?, r.get(1)?)))
        .db()?;
    let held = usize::try_from(entries).map_err(|e| bad_value("case_timeline", e))?;
    if held + u.append.len() > MAX_TIMELINE_ENTRIES {
        return Err(StoreError::TimelineFull {
            id: u.id.clone(),
            max: MAX_TIMELINE_ENTRIES,
        });
    }
    let m = mut_columns(&u.set)?;
    let read = to_int(u.version, "cases.version")?;
    let n = conn
        .prepare_cached(&update_sql())
        .db()?
        .execute(params![
            m.state,
            m.route,
            m.evidence_quality,
            m.owner,
            m.lease_until,
            m.review_deadline,
            m.next_check_at,
            m.closed_at,
            m.payload_until,
            m.payload_deleted_at,
            m.source,
            m.subject,
            m.data,
            u.id,
            read,
        ])
        .db()?;
    if n == 0 {
        return Err(redrive_store::skeleton::columns::invariant(
            "a case read in this transaction is gone",
        ));
    }
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO case_timeline (case_id, seq, at, actor, state, evidence, fields) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .db()?;
    for e in entry_columns(last_seq.unwrap_or(0), &u.append)? {
        insert
            .execute(params![
                u.id, e.seq, e.at, e.actor, e.state, e.evidence, e.fields
            ])
            .db()?;
    }
    if let Some(p) = &u.payload {
        conn.prepare_cached(
            "INSERT INTO case_payloads (case_id, digest, body) VALUES (?1, ?2, ?3) \
             ON CONFLICT DO NOTHING",
        )
        .db()?
        .execute(params![u.id, p.digest, p.body])
        .db()?;
    }
    if u.archive_record {
        conn.prepare_cached(
            "UPDATE dead_letters SET area = 'archived', replay_due_at = NULL, \
             lock_token = NULL, locked_until = NULL WHERE id = ?1 AND area = 'live'",
        )
        .db()?
        .execute([&record_id])
        .db()?;
    }
    get(conn, &u.id)
}

/// Payload retention: deletes the record and the kept bytes of up to `limit` cases whose
/// `payload_until` has passed, and marks their payload deleted.
pub(crate) fn drop_payloads(
    tx: &mut Tx<'_>,
    now: Timestamp,
    limit: u32,
) -> StoreResult<Vec<String>> {
    let conn = tx.conn;
    let due: Vec<(String, String)> = {
        let mut stmt = conn
            .prepare_cached(&format!("SELECT id, record_id {PAYLOAD_DUE}"))
            .db()?;
        query_all(&mut stmt, params![now.0, i64::from(limit)], |r| {
            Ok((r.get(0).db()?, r.get(1).db()?))
        })?
    };
    let mut record = conn
        .prepare_cached("DELETE FROM dead_letters WHERE id = ?1")
        .db()?;
    let mut bytes = conn
        .prepare_cached("DELETE FROM case_payloads WHERE case_id = ?1")
        .db()?;
    let mut mark = conn
        .prepare_cached(
            "UPDATE cases SET payload_deleted_at = ?2, version = version + 1 WHERE id = ?1",
        )
        .db()?;
    for (id, record_id) in &due {
        record.execute([record_id]).db()?;
        bytes.execute([id]).db()?;
        mark.execute(params![id, now.0]).db()?;
    }
    Ok(due.into_iter().map(|(id, _)| id).collect())
}

/// Stores what a producer said about an intent for its entity unless something was said
/// for that entity already; returns what is stored for it.
pub(crate) fn put_intent(tx: &mut Tx<'_>, i: &IntentRecord) -> StoreResult<IntentRecord> {
    tx.conn
        .prepare_cached(
            "INSERT INTO intents (intent_id, entity, status, superseded_by, reason, actor, at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (intent_id, entity) DO NOTHING",
        )
        .db()?
        .execute(params![
            i.intent_id,
            i.entity,
            i.status.as_str(),
            i.superseded_by,
            i.reason,
            i.actor,
            i.at.0
        ])
        .db()?;
    intent_word(tx.conn, &i.intent_id, &i.entity)?
        .ok_or_else(|| redrive_store::skeleton::columns::invariant("an intent just stored"))
}

// ---- case groups ------------------------------------------------------------------------

pub(crate) fn get_group(conn: &Connection, id: &str) -> StoreResult<CaseGroupRecord> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {GROUP_COLUMNS} FROM case_groups WHERE id = ?1"
        ))
        .db()?;
    query_opt(&mut stmt, [id], |r| skeleton::decode_group(&Cols(r)))?
        .ok_or_else(|| StoreError::CaseGroupNotFound { id: id.to_owned() })
}

pub(crate) fn list_groups(
    conn: &Connection,
    queue: Option<&str>,
    after: Option<&str>,
    limit: u32,
) -> StoreResult<Vec<CaseGroupRecord>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {GROUP_COLUMNS} FROM case_groups WHERE (?1 IS NULL OR queue = ?1) \
             AND (?2 IS NULL OR id > ?2) ORDER BY id LIMIT ?3"
        ))
        .db()?;
    let limit = i64::from(limit.clamp(1, MAX_CASE_GROUP_PAGE));
    query_all(&mut stmt, params![queue, after, limit], |r| {
        skeleton::decode_group(&Cols(r))
    })
}

pub(crate) fn put_group(
    tx: &mut Tx<'_>,
    g: &CaseGroupRecord,
    expected: Option<u64>,
) -> StoreResult<CaseGroupRecord> {
    let doc = to_json(&g.doc)?;
    let changed = || StoreError::CaseGroupChanged { id: g.id.clone() };
    match expected {
        None => {
            let n = tx
                .conn
                .prepare_cached(&format!("{INSERT_GROUP} ON CONFLICT (id) DO NOTHING"))
                .db()?
                .execute(params![g.id, g.queue.as_str(), g.created_at.0, 1_i64, doc])
                .db()?;
            if n == 0 {
                return Err(changed());
            }
        }
        Some(v) => {
            let n = tx
                .conn
                .prepare_cached(UPDATE_GROUP)
                .db()?
                .execute(named_params! {
                    "$1": g.id,
                    "$2": doc,
                    "$3": to_int(v, "case_groups.version")?,
                    "$4": to_int(v + 1, "case_groups.version")?,
                })
                .db()?;
            if n == 0 {
                get_group(tx.conn, &g.id)?;
                return Err(changed());
            }
        }
    }
    get_group(tx.conn, &g.id)
}

pub(crate) fn put_authority(tx: &mut Tx<'_>, a: &EffectAuthority) -> StoreResult<()> {
    tx.conn
        .prepare_cached(
            "INSERT INTO effect_authorities (message_type, url, timeout_ms, updated_at) \
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT (message_type) DO UPDATE SET \
             url = excluded.url, timeout_ms = excluded.timeout_ms, \
             updated_at = excluded.updated_at",
        )
        .db()?
        .execute(params![
            a.message_type,
            a.url,
            to_int(a.timeout_ms, "effect_authorities.timeout_ms")?,
            a.updated_at.0
        ])
        .db()?;
    Ok(())
}

pub(crate) fn delete_authority(tx: &mut Tx<'_>, message_type: &str) -> StoreResult<bool> {
    let n = tx
        .conn
        .prepare_cached("DELETE FROM effect_authorities WHERE message_type = ?1")
        .db()?
        .execute([message_type])
        .db()?;
    Ok(n > 0)
}
