//! Recovery cases: their opening (the shared rule of `redrive_store::skeleton::cases`,
//! run in the transaction of every write that inserts a dead-letter record or moves one
//! between areas), and the operations that read and change them, intents and effect
//! authorities.
//!
//! An update of a case locks its row (`SELECT ... FOR UPDATE`) and compares the version
//! the caller read: of two updates from the same version, the second waits for the first
//! and is then told `CaseChanged`, having written nothing. Payload retention takes its
//! cases with `FOR UPDATE SKIP LOCKED`, so a case being updated is left to the next round.

use std::sync::LazyLock;

use redrive_core::Timestamp;
use redrive_core::case::TimelineEntry;
use redrive_store::skeleton::Columns;
use redrive_store::skeleton::cases::{
    CASE_COLUMNS, ENTRY_COLUMNS, GROUP_COLUMNS, INSERT_GROUP, LATEST_DEAD_LETTER, OPEN_CASE,
    OPEN_TIMELINE, UPDATE_GROUP, add_count, decode as decode_case, decode_entry, decode_group,
    default_review_deadline, entry_columns, mut_columns, update_sql,
};
use redrive_store::skeleton::columns::{bad_value, to_int, to_json};
use redrive_store::{
    CaseCounts, CaseGroupRecord, CaseQuery, CaseRecord, CaseUpdate, EffectAuthority, IntentRecord,
    IntentStatus, MAX_CASE_GROUP_PAGE, MAX_CASE_PAGE, MAX_TIMELINE_ENTRIES, StoreError,
    StoreResult,
};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::pool::{Db, Owned};
use crate::rows::{Cols, count_u64, decode, get};

// ---- opening ----------------------------------------------------------------------------

/// [`OPEN_CASE`] over an array of record ids (`$1::text[]`): the same rule, one statement
/// for every record a write inserted.
static OPEN_CASES: LazyLock<String> =
    LazyLock::new(|| over_ids(OPEN_CASE, "WHERE id = $1 ", "WHERE id = ANY($1::text[]) "));

/// [`OPEN_TIMELINE`] over an array of record ids.
static OPEN_TIMELINES: LazyLock<String> = LazyLock::new(|| {
    over_ids(
        OPEN_TIMELINE,
        "WHERE c.record_id = $1 ",
        "WHERE c.record_id = ANY($1::text[]) ",
    )
});

/// `sql` with its one condition on the record id `$1` (`one`) replaced by `many`.
fn over_ids(sql: &str, one: &str, many: &str) -> String {
    assert_eq!(
        sql.matches(one).count(),
        1,
        "the opening statement names the record once as {one:?}"
    );
    sql.replacen(one, many, 1)
}

/// Opens the cases of the records `ids` at `now`, where the rule says they are cases and
/// they have none, with the default review deadline. Run in the transaction that wrote or
/// moved the records, after the write; the statements go out with the operation's next
/// statement (or its `COMMIT`).
pub(crate) async fn open(db: &Db<'_>, ids: Vec<String>, now: Timestamp) -> StoreResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    db.defer(
        &OPEN_CASES,
        vec![
            Box::new(ids.clone()),
            Box::new(now.0),
            Box::new(default_review_deadline(now)),
        ],
    )
    .await?;
    db.defer(&OPEN_TIMELINES, vec![Box::new(ids), Box::new(now.0)])
        .await
}

/// Opens the case of the record `id` (see [`open`]).
pub(crate) async fn open_one(db: &Db<'_>, id: &str, now: Timestamp) -> StoreResult<()> {
    open(db, vec![id.to_owned()], now).await
}

// ---- reads ------------------------------------------------------------------------------

static SELECT_CASE: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {CASE_COLUMNS} FROM cases WHERE id = $1"));

static SELECT_TIMELINE: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT {ENTRY_COLUMNS} FROM case_timeline WHERE case_id = $1 ORDER BY seq")
});

static SELECT_DUE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {CASE_COLUMNS} FROM cases WHERE next_check_at <= $1 \
         ORDER BY next_check_at, id LIMIT $2"
    )
});

fn case_row(r: &Row) -> StoreResult<CaseRecord> {
    decode_case(&Cols(r))
}

fn not_found(id: &str) -> StoreError {
    StoreError::CaseNotFound { id: id.to_owned() }
}

/// The cases with these ids that exist, each with its record and intent (one read).
pub(crate) async fn reads(
    db: &Db<'_>,
    ids: &[String],
) -> StoreResult<Vec<redrive_store::CaseRead>> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids.iter().take(MAX_CASE_PAGE as usize) {
        let case = match get_one(db, id).await {
            Ok(c) => c,
            Err(StoreError::CaseNotFound { .. }) => continue,
            Err(e) => return Err(e),
        };
        let (record, record_undecodable) =
            match crate::dead_letters::load_record(db, &case.queue, &case.record_id, false).await {
                Ok(r) => (r, None),
                Err(StoreError::DeadLetterUndecodable { reason, .. }) => (None, Some(reason)),
                Err(e) => return Err(e),
            };
        let intent = redrive_store::skeleton::cases::intent_for(
            intent_words(db, &case.intent_id).await?,
            case.queue.as_str(),
        );
        out.push(redrive_store::CaseRead {
            case,
            record,
            record_undecodable,
            intent,
        });
    }
    Ok(out)
}

pub(crate) async fn get_one(db: &Db<'_>, id: &str) -> StoreResult<CaseRecord> {
    match db.query_opt(&SELECT_CASE, &[&id]).await? {
        Some(r) => case_row(&r),
        None => Err(not_found(id)),
    }
}

/// One statement; an empty timeline (which an opened case never has) is told apart from a
/// missing case by a second look.
pub(crate) async fn timeline(db: &Db<'_>, id: &str) -> StoreResult<Vec<TimelineEntry>> {
    let rows = db.query(&SELECT_TIMELINE, &[&id]).await?;
    if rows.is_empty() {
        get_one(db, id).await?;
    }
    decode(&rows, |r| decode_entry(&Cols(r)))
}

/// The `WHERE` of a search and its parameters, numbered from `$1`.
#[derive(Default)]
struct Filter {
    conditions: Vec<String>,
    params: Owned,
}

impl Filter {
    /// Binds `v` as the next parameter and returns its placeholder.
    fn bind(&mut self, v: impl ToSql + Sync + Send + 'static) -> String {
        self.params.push(Box::new(v));
        format!("${}", self.params.len())
    }

    /// Adds `<column> = $n` when `v` is given.
    fn equal(&mut self, column: &str, v: Option<&String>) {
        if let Some(v) = v {
            let p = self.bind(v.clone());
            self.conditions.push(format!("{column} = {p}"));
        }
    }

    /// The filters of `q` (its cursor only with `cursor`).
    fn of(q: &CaseQuery, cursor: bool) -> Filter {
        let mut f = Filter::default();
        if let Some(queue) = &q.queue {
            let p = f.bind(queue.as_str().to_owned());
            f.conditions.push(format!("queue = {p}"));
        }
        f.equal("reason", q.reason.as_ref());
        f.equal("message_type", q.message_type.as_ref());
        f.equal("source", q.source.as_ref());
        f.equal("subject", q.subject.as_ref());
        if !q.states.is_empty() {
            let states: Vec<String> = q.states.iter().map(|s| s.as_str().to_owned()).collect();
            let p = f.bind(states);
            f.conditions.push(format!("state = ANY({p}::text[])"));
        }
        if q.open {
            f.conditions.push("closed_at IS NULL".to_owned());
        }
        f.equal("owner", q.owner.as_ref());
        if let Some(t) = q.overdue_at {
            let p = f.bind(t.0);
            f.conditions
                .push(format!("closed_at IS NULL AND review_deadline <= {p}"));
        }
        if let Some(t) = q.since {
            let p = f.bind(t.0);
            f.conditions.push(format!("dead_lettered_at >= {p}"));
        }
        if let Some(t) = q.until {
            let p = f.bind(t.0);
            f.conditions.push(format!("dead_lettered_at < {p}"));
        }
        if let Some(e) = q.evidence_quality {
            let p = f.bind(e.as_str().to_owned());
            f.conditions.push(format!("evidence_quality = {p}"));
        }
        if let Some(text) = &q.text {
            let p = f.bind(text.clone());
            f.conditions.push(format!("strpos(description, {p}) > 0"));
        }
        f.equal("intent_id", q.intent_id.as_ref());
        if cursor && let Some(after) = &q.after {
            let p = f.bind(after.clone());
            f.conditions.push(format!("id > {p}"));
        }
        f
    }

    /// ` WHERE ...`, or nothing.
    fn clause(&self) -> String {
        if self.conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.conditions.join(" AND "))
        }
    }
}

/// A page's size: at most [`MAX_CASE_PAGE`], 100 when none is given.
fn page_limit(limit: u32) -> i64 {
    match limit {
        0 => 100,
        n => i64::from(n.min(MAX_CASE_PAGE)),
    }
}

pub(crate) async fn list(db: &Db<'_>, q: &CaseQuery) -> StoreResult<Vec<CaseRecord>> {
    let mut f = Filter::of(q, true);
    let where_ = f.clause();
    let limit = f.bind(page_limit(q.limit));
    let sql = format!("SELECT {CASE_COLUMNS} FROM cases{where_} ORDER BY id LIMIT {limit}");
    let rows = db.query_built(&sql, &f.params).await?;
    decode(&rows, case_row)
}

/// The latest dead-letter time of the cases of `queue` with `reason`
/// ([`LATEST_DEAD_LETTER`]).
pub(crate) async fn latest_dead_letter(
    db: &Db<'_>,
    queue: &str,
    reason: &str,
) -> StoreResult<Option<Timestamp>> {
    let row = db.query_opt(LATEST_DEAD_LETTER, &[&queue, &reason]).await?;
    row.map(|r| Cols(&r).time(0)).transpose()
}

/// One statement (one snapshot): the groups by reason, by type and by state, and the
/// whole (its total and oldest opening), told apart by `GROUPING`.
pub(crate) async fn counts(db: &Db<'_>, q: &CaseQuery) -> StoreResult<CaseCounts> {
    let f = Filter::of(q, false);
    let sql = format!(
        "SELECT reason, message_type, state, count(*), min(opened_at), \
         GROUPING(reason, message_type, state) FROM cases{} \
         GROUP BY GROUPING SETS ((reason), (message_type), (state), ())",
        f.clause()
    );
    let rows = db.query_built(&sql, &f.params).await?;
    let mut out = CaseCounts::default();
    for r in &rows {
        let n = count_u64(r, 3)?;
        let grouping: i32 = get(r, 5)?;
        match grouping {
            // Grouped by reason only (the other two columns aggregated away).
            0b011 => add_count(&mut out, "reason", get(r, 0)?, n),
            0b101 => add_count(&mut out, "type", get(r, 1)?, n),
            0b110 => add_count(&mut out, "state", get(r, 2)?, n),
            _ => {
                out.total = n;
                out.oldest_opened_at = Cols(r).time_opt(4)?;
            }
        }
    }
    Ok(out)
}

pub(crate) async fn due(db: &Db<'_>, now: Timestamp, limit: u32) -> StoreResult<Vec<CaseRecord>> {
    let rows = db.query(&SELECT_DUE, &[&now.0, &i64::from(limit)]).await?;
    decode(&rows, case_row)
}

pub(crate) async fn payload(db: &Db<'_>, id: &str, digest: &str) -> StoreResult<Option<Vec<u8>>> {
    let row = db
        .query_opt(
            "SELECT body FROM case_payloads WHERE case_id = $1 AND digest = $2",
            &[&id, &digest],
        )
        .await?;
    row.map(|r| get(&r, 0)).transpose()
}

// ---- writes -----------------------------------------------------------------------------

/// The shared update statement, returning the case as written.
static UPDATE_CASE: LazyLock<String> =
    LazyLock::new(|| format!("{} RETURNING {CASE_COLUMNS}", update_sql()));

/// Writes one update of a case if it is still at the version the caller read, with its
/// audit entries.
pub(crate) async fn update(db: &Db<'_>, u: &CaseUpdate) -> StoreResult<CaseRecord> {
    let written = update_rows(db, u).await?;
    if !u.audit.is_empty() {
        crate::access::append_audit(db, &u.audit).await?;
    }
    Ok(written)
}

/// Writes several updates in this transaction, their cases locked in id order (two
/// batches never wait on each other crosswise): one whose case changed or is gone (or
/// whose timeline is full) writes nothing and is answered so; any other error fails them
/// all. The audit entries of those written are appended together.
pub(crate) async fn update_many(
    db: &Db<'_>,
    updates: &[CaseUpdate],
) -> StoreResult<Vec<StoreResult<CaseRecord>>> {
    let mut order: Vec<usize> = (0..updates.len()).collect();
    order.sort_by(|a, b| updates[*a].id.cmp(&updates[*b].id));
    let mut out: Vec<Option<StoreResult<CaseRecord>>> = updates.iter().map(|_| None).collect();
    let mut audit = Vec::new();
    for i in order {
        let u = &updates[i];
        match update_rows(db, u).await {
            Ok(c) => {
                audit.extend(u.audit.iter().cloned());
                out[i] = Some(Ok(c));
            }
            Err(e) if redrive_store::skeleton::cases::refused_update(&e) => out[i] = Some(Err(e)),
            Err(e) => return Err(e),
        }
    }
    if !audit.is_empty() {
        crate::access::append_audit(db, &audit).await?;
    }
    Ok(out.into_iter().flatten().collect())
}

/// The rows of one update (no audit), if the case is still at the version read.
async fn update_rows(db: &Db<'_>, u: &CaseUpdate) -> StoreResult<CaseRecord> {
    // Locked: a concurrent update of the case waits here, then sees this one's version.
    let row = db
        .query_opt(
            "SELECT version, record_id, \
             (SELECT count(*) FROM case_timeline WHERE case_id = $1), \
             (SELECT coalesce(max(seq), 0) FROM case_timeline WHERE case_id = $1) \
             FROM cases WHERE id = $1 FOR UPDATE",
            &[&u.id],
        )
        .await?
        .ok_or_else(|| not_found(&u.id))?;
    let version = Cols(&row).unsigned(0, "cases.version")?;
    if version != u.version {
        return Err(StoreError::CaseChanged {
            id: u.id.clone(),
            version,
        });
    }
    let record_id: String = get(&row, 1)?;
    let entries = count_u64(&row, 2)?;
    let last_seq: i64 = get(&row, 3)?;
    let appended = u64::try_from(u.append.len()).unwrap_or(u64::MAX);
    let max = u64::try_from(MAX_TIMELINE_ENTRIES).unwrap_or(u64::MAX);
    if entries.saturating_add(appended) > max {
        return Err(StoreError::TimelineFull {
            id: u.id.clone(),
            max: MAX_TIMELINE_ENTRIES,
        });
    }
    let m = mut_columns(&u.set)?;
    let expected = to_int(u.version, "cases.version")?;
    if !u.append.is_empty() {
        let rows = entry_columns(last_seq, &u.append)?;
        let seq: Vec<i64> = rows.iter().map(|e| e.seq).collect();
        let at: Vec<i64> = rows.iter().map(|e| e.at).collect();
        let actor: Vec<String> = rows.iter().map(|e| e.actor.clone()).collect();
        let state: Vec<&'static str> = rows.iter().map(|e| e.state).collect();
        let evidence: Vec<String> = rows.iter().map(|e| e.evidence.clone()).collect();
        let fields: Vec<String> = rows.into_iter().map(|e| e.fields).collect();
        db.defer(
            "INSERT INTO case_timeline (case_id, seq, at, actor, state, evidence, fields) \
             SELECT $1, u.seq, u.at, u.actor, u.state, u.evidence, u.fields \
             FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[], \
               $7::text[]) AS u(seq, at, actor, state, evidence, fields)",
            vec![
                Box::new(u.id.clone()),
                Box::new(seq),
                Box::new(at),
                Box::new(actor),
                Box::new(state),
                Box::new(evidence),
                Box::new(fields),
            ],
        )
        .await?;
    }
    if let Some(p) = &u.payload {
        db.defer(
            "INSERT INTO case_payloads (case_id, digest, body) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING",
            vec![
                Box::new(u.id.clone()),
                Box::new(p.digest.clone()),
                Box::new(p.body.clone()),
            ],
        )
        .await?;
    }
    if u.archive_record {
        db.defer(
            "UPDATE dead_letters SET area = 'archived', replay_due_at = NULL, \
             lock_token = NULL, locked_until = NULL WHERE id = $1 AND area = 'live'",
            vec![Box::new(record_id)],
        )
        .await?;
    }
    let row = db
        .query_one(
            &UPDATE_CASE,
            &[
                &m.state,
                &m.route,
                &m.evidence_quality,
                &m.owner,
                &m.lease_until,
                &m.review_deadline,
                &m.next_check_at,
                &m.closed_at,
                &m.payload_until,
                &m.payload_deleted_at,
                &m.source,
                &m.subject,
                &m.data,
                &u.id,
                &expected,
            ],
        )
        .await?;
    case_row(&row)
}

pub(crate) async fn drop_payloads(
    db: &Db<'_>,
    now: Timestamp,
    limit: u32,
) -> StoreResult<Vec<String>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    // SKIP LOCKED: a case another transaction is updating is left to the next round.
    let rows = db
        .query(
            "SELECT id, record_id FROM cases \
             WHERE payload_until <= $1 AND payload_deleted_at IS NULL \
             ORDER BY payload_until, id LIMIT $2 FOR UPDATE SKIP LOCKED",
            &[&now.0, &i64::from(limit)],
        )
        .await?;
    let ids = decode(&rows, |r| get::<String>(r, 0))?;
    if ids.is_empty() {
        return Ok(ids);
    }
    let records = decode(&rows, |r| get::<String>(r, 1))?;
    db.defer(
        "DELETE FROM dead_letters WHERE id = ANY($1::text[])",
        vec![Box::new(records)],
    )
    .await?;
    db.defer(
        "DELETE FROM case_payloads WHERE case_id = ANY($1::text[])",
        vec![Box::new(ids.clone())],
    )
    .await?;
    db.execute(
        "UPDATE cases SET payload_deleted_at = $1, version = version + 1 \
         WHERE id = ANY($2::text[])",
        &[&now.0, &ids],
    )
    .await?;
    Ok(ids)
}

// ---- intents ----------------------------------------------------------------------------

use redrive_store::skeleton::cases::INTENT_COLUMNS;

fn intent_row(r: &Row) -> StoreResult<IntentRecord> {
    let c = Cols(r);
    let status: String = get(r, 2)?;
    Ok(IntentRecord {
        intent_id: get(r, 0)?,
        entity: get(r, 1)?,
        status: IntentStatus::parse(&status)
            .ok_or_else(|| bad_value("intents.status", format!("unknown status {status:?}")))?,
        superseded_by: get(r, 3)?,
        reason: get(r, 4)?,
        actor: get(r, 5)?,
        at: c.time(6)?,
    })
}

/// Create-if-absent, then the stored row: of two producers' words on one intent for one
/// entity, the second waits on the key and then reads the first's.
pub(crate) async fn put_intent(db: &Db<'_>, i: &IntentRecord) -> StoreResult<IntentRecord> {
    db.defer(
        "INSERT INTO intents (intent_id, entity, status, superseded_by, reason, actor, at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (intent_id, entity) DO NOTHING",
        vec![
            Box::new(i.intent_id.clone()),
            Box::new(i.entity.clone()),
            Box::new(i.status.as_str()),
            Box::new(i.superseded_by.clone()),
            Box::new(i.reason.clone()),
            Box::new(i.actor.clone()),
            Box::new(i.at.0),
        ],
    )
    .await?;
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!("SELECT {INTENT_COLUMNS} FROM intents WHERE intent_id = $1 AND entity = $2")
    });
    match db.query_opt(&SQL, &[&i.intent_id, &i.entity]).await? {
        Some(r) => intent_row(&r),
        None => Err(redrive_store::skeleton::columns::invariant(
            "a stored intent is gone",
        )),
    }
}

pub(crate) async fn intent_words(db: &Db<'_>, intent_id: &str) -> StoreResult<Vec<IntentRecord>> {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE intent_id = $1 \
             ORDER BY at, entity LIMIT {}",
            redrive_store::MAX_INTENT_WORDS
        )
    });
    db.query(&SQL, &[&intent_id])
        .await?
        .iter()
        .map(intent_row)
        .collect()
}

// ---- case groups ------------------------------------------------------------------------

static GET_GROUP: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {GROUP_COLUMNS} FROM case_groups WHERE id = $1"));

pub(crate) async fn get_group(db: &Db<'_>, id: &str) -> StoreResult<CaseGroupRecord> {
    match db.query_opt(&GET_GROUP, &[&id]).await? {
        Some(r) => decode_group(&Cols(&r)),
        None => Err(StoreError::CaseGroupNotFound { id: id.to_owned() }),
    }
}

pub(crate) async fn list_groups(
    db: &Db<'_>,
    queue: Option<&str>,
    after: Option<&str>,
    limit: u32,
) -> StoreResult<Vec<CaseGroupRecord>> {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT {GROUP_COLUMNS} FROM case_groups WHERE ($1::text IS NULL OR queue = $1) \
             AND ($2::text IS NULL OR id > $2) ORDER BY id LIMIT $3"
        )
    });
    let limit = i64::from(limit.clamp(1, MAX_CASE_GROUP_PAGE));
    let rows = db.query(&SQL, &[&queue, &after, &limit]).await?;
    decode(&rows, |r| decode_group(&Cols(r)))
}

pub(crate) async fn put_group(
    db: &Db<'_>,
    g: &CaseGroupRecord,
    expected: Option<u64>,
) -> StoreResult<CaseGroupRecord> {
    static INSERT: LazyLock<String> =
        LazyLock::new(|| format!("{INSERT_GROUP} ON CONFLICT (id) DO NOTHING"));
    let doc = to_json(&g.doc)?;
    let changed = || StoreError::CaseGroupChanged { id: g.id.clone() };
    match expected {
        None => {
            let n = db
                .execute(
                    &INSERT,
                    &[&g.id, &g.queue.as_str(), &g.created_at.0, &1_i64, &doc],
                )
                .await?;
            if n == 0 {
                return Err(changed());
            }
        }
        Some(v) => {
            let n = db
                .execute(
                    UPDATE_GROUP,
                    &[
                        &g.id,
                        &doc,
                        &to_int(v, "case_groups.version")?,
                        &to_int(v + 1, "case_groups.version")?,
                    ],
                )
                .await?;
            if n == 0 {
                get_group(db, &g.id).await?;
                return Err(changed());
            }
        }
    }
    get_group(db, &g.id).await
}

// ---- effect authorities -----------------------------------------------------------------

pub(crate) async fn put_authority(db: &Db<'_>, a: &EffectAuthority) -> StoreResult<()> {
    db.execute(
        "INSERT INTO effect_authorities (message_type, url, timeout_ms, updated_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (message_type) DO UPDATE \
         SET url = excluded.url, timeout_ms = excluded.timeout_ms, \
             updated_at = excluded.updated_at",
        &[
            &a.message_type,
            &a.url,
            &to_int(a.timeout_ms, "effect_authorities.timeout_ms")?,
            &a.updated_at.0,
        ],
    )
    .await?;
    Ok(())
}

pub(crate) async fn delete_authority(db: &Db<'_>, message_type: &str) -> StoreResult<bool> {
    let n = db
        .execute(
            "DELETE FROM effect_authorities WHERE message_type = $1",
            &[&message_type],
        )
        .await?;
    Ok(n > 0)
}

pub(crate) async fn list_authorities(db: &Db<'_>) -> StoreResult<Vec<EffectAuthority>> {
    let rows = db
        .query(
            "SELECT message_type, url, timeout_ms, updated_at FROM effect_authorities \
             ORDER BY message_type",
            &[],
        )
        .await?;
    decode(&rows, |r| {
        let c = Cols(r);
        Ok(EffectAuthority {
            message_type: get(r, 0)?,
            url: get(r, 1)?,
            timeout_ms: c.unsigned(2, "effect_authorities.timeout_ms")?,
            updated_at: c.time(3)?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_opening_over_many_records_keeps_the_shared_rule() {
        assert!(OPEN_CASES.contains("FROM dead_letters WHERE id = ANY($1::text[]) AND (area"));
        assert_eq!(
            OPEN_CASES.replace("= ANY($1::text[])", "= $1"),
            OPEN_CASE,
            "only the record condition differs"
        );
        assert!(OPEN_TIMELINES.contains("WHERE c.record_id = ANY($1::text[]) AND NOT EXISTS"));
    }

    #[test]
    fn a_search_binds_every_value() {
        let q = CaseQuery {
            reason: Some("x'; DROP TABLE cases; --".into()),
            text: Some("boom".into()),
            open: true,
            after: Some("case_1".into()),
            ..CaseQuery::default()
        };
        let f = Filter::of(&q, true);
        assert_eq!(
            f.clause(),
            " WHERE reason = $1 AND closed_at IS NULL AND strpos(description, $2) > 0 \
             AND id > $3"
        );
        assert_eq!(f.params.len(), 3);
        assert_eq!(Filter::of(&q, false).params.len(), 2);
        assert_eq!(page_limit(0), 100);
        assert_eq!(page_limit(5_000), i64::from(MAX_CASE_PAGE));
    }
}
