//! Bounded replay plans in the store (`crate::replay_plan`), written once for every
//! backend: the rows and their columns, the checks of a new plan and of an update, the
//! item lease, and the statements and filters both backends run.
//!
//! # Creating a plan ([`check_new`], [`INSERT_PLAN`])
//!
//! A plan is stored with all its items in one transaction. The items count from `seq` 0
//! in admission order without gaps, each `waiting` or `held` (nothing is admitted before
//! the plan runs), and the plan's `items` is their number; `spec` and `state` are JSON
//! objects. A create that breaks one of these is a caller's bug and writes nothing
//! ([`RowError::Invariant`], [`RowError::BadValue`]). The plan row is inserted with
//! `ON CONFLICT (id) DO NOTHING`: nothing inserted is `ReplayPlanExists`. An `sqs_move`
//! plan (no items) is inserted under the one-active-move-per-source rule instead
//! ([`insert_statement`], [`move_tasks`](super::move_tasks)).
//!
//! # Updating a plan ([`check_update`], [`lease_conflict`], [`write_order`])
//!
//! One transaction: the plan's row is read (locked where the backend locks), its version
//! compared with the one the caller read (`ReplayPlanChanged` with the stored version,
//! nothing written), the item lease checked, the items written by `seq`, and the plan's
//! mutable part written with the version plus one ([`UPDATE_PLAN`]); the answer is
//! [`written`]. An update naming an item twice is refused before anything is read; an
//! item `seq` the plan does not hold is refused with [`RowError::NoPlanItem`] (through
//! [`items_written`]) and the transaction rolled back.
//!
//! The item lease is the unique index `replay_plan_items_admitted` over the case ids of
//! admitted items. Before writing, a backend reads the admitted items of the cases the
//! update admits and asks [`lease_conflict`]: an admitted item of the same case that the
//! update does not rewrite, of this plan or another, refuses the whole update with
//! `ReplayItemTaken` naming the plan that holds it; so do two items of the update
//! admitting one case. The index stays the last word where transactions run side by side
//! (PostgreSQL maps its violation, see that backend). Items are written in
//! [`write_order`]: those that leave or never reach `admitted` first, so that a lease
//! handed from one item to another within an update never meets itself in the index.
//! An update that ends an `sqs_move` plan also prunes the finished move plans of its
//! queue ([`ends_move`]).

use std::collections::{BTreeMap, BTreeSet};

use super::columns::{Columns, RowError, bad_value, millis, to_int, to_json};
use crate::{
    MAX_PLAN_ITEM_PAGE, MAX_PLAN_PAGE, PlanItemQuery, PlanItemRecord, PlanItemState, PlanKind,
    PlanMut, PlanOrder, PlanQuery, ReplayPlanRecord, ReplayPlanUpdate, StoreError, StoreResult,
};

/// Reads [`columns!(replay_plan)`](crate::columns). The runner's columns of an
/// `sqs_move` plan are read into its state (see [`move_tasks`](super::move_tasks)).
pub fn decode(c: &impl Columns) -> StoreResult<ReplayPlanRecord> {
    let mut plan = ReplayPlanRecord {
        id: c.text(0)?,
        queue: c.text(1)?,
        destination: c.text(2)?,
        owner_id: c.text(3)?,
        owner_name: c.text(4)?,
        spec: c.json(5, "replay_plans.spec")?,
        items: c.unsigned(6, "replay_plans.items")?,
        created_at: c.time(7)?,
        version: c.unsigned(8, "replay_plans.version")?,
        m: PlanMut {
            status: c.parse(9, "replay_plans.status")?,
            owner_until: c.time(10)?,
            stop_reason: c.text_opt(11)?,
            next_at: c.time_opt(12)?,
            state: c.json(13, "replay_plans.state")?,
            updated_at: c.time(14)?,
        },
        kind: c.parse(15, "replay_plans.kind")?,
    };
    if plan.kind == PlanKind::SqsMove {
        super::move_tasks::read_runner(&mut plan.m.state, c.text_opt(16)?, c.time_opt(17)?)?;
    }
    Ok(plan)
}

/// Reads [`columns!(replay_plan_item)`](crate::columns).
pub fn decode_item(c: &impl Columns) -> StoreResult<PlanItemRecord> {
    let window = c
        .int_opt(4)?
        .map(|w| u32::try_from(w).map_err(|e| bad_value("replay_plan_items.admit_window", e)))
        .transpose()?;
    Ok(PlanItemRecord {
        seq: c.count(0, "replay_plan_items.seq")?,
        case_id: c.text(1)?,
        bytes: c.unsigned(2, "replay_plan_items.bytes")?,
        state: c.parse(3, "replay_plan_items.state")?,
        window,
        message_id: c.text_opt(5)?,
        detail: c.text_opt(6)?,
        updated_at: c.time(7)?,
    })
}

/// Inserts a `cases` plan: [`PlanColumns`] as `$1…$18`, in the order of
/// [`columns!(replay_plan)`](crate::columns). Inserts nothing when the id is taken.
/// An `sqs_move` plan is inserted by [`INSERT_MOVE`](super::move_tasks::INSERT_MOVE)
/// (see [`insert_statement`]).
pub const INSERT_PLAN: &str = concat!(
    "INSERT INTO replay_plans (",
    crate::columns!(replay_plan),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
     $18) ON CONFLICT (id) DO NOTHING"
);

/// The statement that inserts `plan` (bound the same way, [`PlanColumns`] as
/// `$1…$18`), and the refusal when it inserts nothing: [`INSERT_PLAN`] and
/// `ReplayPlanExists` for a `cases` plan; for an `sqs_move` plan
/// [`INSERT_MOVE`](super::move_tasks::INSERT_MOVE) and `MoveTaskRunning` (its source has
/// an active move plan).
pub fn insert_statement(plan: &ReplayPlanRecord) -> (&'static str, StoreError) {
    match plan.kind {
        PlanKind::Cases => (
            INSERT_PLAN,
            StoreError::ReplayPlanExists {
                id: plan.id.clone(),
            },
        ),
        PlanKind::SqsMove => (
            super::move_tasks::INSERT_MOVE,
            StoreError::MoveTaskRunning {
                queue: plan.queue.clone(),
            },
        ),
    }
}

/// Writes a plan's mutable part and bumps its version: [`MutColumns`] as `$1…$8`, the
/// id as `$9`, the version read as `$10`.
pub const UPDATE_PLAN: &str = "UPDATE replay_plans SET status = $1, owner_until = $2, \
     stop_reason = $3, next_at = $4, state = $5, updated_at = $6, runner = $7, \
     runner_until = $8, version = version + 1 WHERE id = $9 AND version = $10";

/// A plan's mutable part as bound (in the order of [`UPDATE_PLAN`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MutColumns {
    /// `status`.
    pub status: &'static str,
    /// `owner_until`.
    pub owner_until: i64,
    /// `stop_reason`.
    pub stop_reason: Option<String>,
    /// `next_at`.
    pub next_at: Option<i64>,
    /// `state` (JSON text).
    pub state: String,
    /// `updated_at`.
    pub updated_at: i64,
    /// `runner`: the state's `runner` (an `sqs_move` plan's; `NULL` for others).
    pub runner: Option<String>,
    /// `runner_until`: the state's `runner_until`.
    pub runner_until: Option<i64>,
}

/// The mutable part as bound; `state` must be a JSON object.
pub fn mut_columns(m: &PlanMut) -> StoreResult<MutColumns> {
    if !m.state.is_object() {
        return Err(bad_value("replay_plans.state", "not a JSON object"));
    }
    Ok(MutColumns {
        status: m.status.as_str(),
        owner_until: m.owner_until.0,
        stop_reason: m.stop_reason.clone(),
        next_at: millis(m.next_at),
        state: to_json(&m.state)?,
        updated_at: m.updated_at.0,
        runner: m
            .state
            .get("runner")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        runner_until: m
            .state
            .get("runner_until")
            .and_then(serde_json::Value::as_i64),
    })
}

/// A new plan as bound by [`INSERT_PLAN`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlanColumns {
    /// `id`.
    pub id: String,
    /// `queue`.
    pub queue: String,
    /// `destination`.
    pub destination: String,
    /// `owner_id`.
    pub owner_id: String,
    /// `owner_name`.
    pub owner_name: String,
    /// `spec` (JSON text).
    pub spec: String,
    /// `items`.
    pub items: i64,
    /// `created_at`.
    pub created_at: i64,
    /// `version`.
    pub version: i64,
    /// The mutable part.
    pub m: MutColumns,
    /// `kind`.
    pub kind: &'static str,
}

/// A new plan as bound; `spec` and `state` must be JSON objects.
pub fn plan_columns(p: &ReplayPlanRecord) -> StoreResult<PlanColumns> {
    if !p.spec.is_object() {
        return Err(bad_value("replay_plans.spec", "not a JSON object"));
    }
    Ok(PlanColumns {
        id: p.id.clone(),
        queue: p.queue.clone(),
        destination: p.destination.clone(),
        owner_id: p.owner_id.clone(),
        owner_name: p.owner_name.clone(),
        spec: to_json(&p.spec)?,
        items: to_int(p.items, "replay_plans.items")?,
        created_at: p.created_at.0,
        version: to_int(p.version, "replay_plans.version")?,
        m: mut_columns(&p.m)?,
        kind: p.kind.as_str(),
    })
}

/// An item as bound, in the order of [`columns!(replay_plan_item)`](crate::columns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemColumns {
    /// `seq`.
    pub seq: i64,
    /// `case_id`.
    pub case_id: String,
    /// `bytes`.
    pub bytes: i64,
    /// `state`.
    pub state: &'static str,
    /// `admit_window`.
    pub window: Option<i64>,
    /// `message_id`.
    pub message_id: Option<String>,
    /// `detail`.
    pub detail: Option<String>,
    /// `updated_at`.
    pub updated_at: i64,
}

/// An item as bound.
pub fn item_columns(i: &PlanItemRecord) -> StoreResult<ItemColumns> {
    Ok(ItemColumns {
        seq: i64::from(i.seq),
        case_id: i.case_id.clone(),
        bytes: to_int(i.bytes, "replay_plan_items.bytes")?,
        state: i.state.as_str(),
        window: i.window.map(i64::from),
        message_id: i.message_id.clone(),
        detail: i.detail.clone(),
        updated_at: i.updated_at.0,
    })
}

/// The checks of a new plan (see the module docs): its items count from 0 without gaps,
/// are each `waiting` or `held`, and number `plan.items`.
pub fn check_new(plan: &ReplayPlanRecord, items: &[PlanItemRecord]) -> StoreResult<()> {
    if u64::try_from(items.len()).ok() != Some(plan.items) {
        return Err(RowError::Invariant("a new plan's item count is not its items'").into());
    }
    for (i, item) in items.iter().enumerate() {
        if usize::try_from(item.seq).ok() != Some(i) {
            return Err(RowError::Invariant("a new plan's items count from seq 0 in order").into());
        }
        if !matches!(item.state, PlanItemState::Waiting | PlanItemState::Held) {
            return Err(RowError::Invariant("a new plan's items are waiting or held").into());
        }
    }
    Ok(())
}

/// The checks of an update before anything is read: each item once.
pub fn check_update(u: &ReplayPlanUpdate) -> StoreResult<()> {
    let mut seen = BTreeSet::new();
    if u.items.iter().all(|i| seen.insert(i.seq)) {
        Ok(())
    } else {
        Err(RowError::Invariant("an update of a plan names an item twice").into())
    }
}

/// `ReplayPlanNotFound`.
pub fn not_found(id: &str) -> StoreError {
    StoreError::ReplayPlanNotFound { id: id.to_owned() }
}

/// Whether an update that wrote `u` over `stored` ends an `sqs_move` plan: then the
/// backend deletes the finished move plans of its queue but the most recent
/// [`MOVE_TASKS_KEPT_PER_SOURCE`](crate::MOVE_TASKS_KEPT_PER_SOURCE), in the same
/// transaction ([`PRUNE_MOVES`](super::move_tasks::PRUNE_MOVES)).
pub fn ends_move(stored: &ReplayPlanRecord, u: &ReplayPlanUpdate) -> bool {
    stored.kind == PlanKind::SqsMove && stored.m.status.is_active() && !u.set.status.is_active()
}

/// The stored version against the one the update read: `ReplayPlanChanged` (with the
/// stored version) when they differ.
pub fn check_version(stored: &ReplayPlanRecord, u: &ReplayPlanUpdate) -> StoreResult<()> {
    if stored.version == u.version {
        Ok(())
    } else {
        Err(StoreError::ReplayPlanChanged {
            id: u.id.clone(),
            version: stored.version,
        })
    }
}

/// The cases the update admits (their items' new state is `admitted`), each once.
pub fn admitted_cases(u: &ReplayPlanUpdate) -> Vec<String> {
    let cases: BTreeSet<&str> = u
        .items
        .iter()
        .filter(|i| i.state == PlanItemState::Admitted)
        .map(|i| i.case_id.as_str())
        .collect();
    cases.into_iter().map(str::to_owned).collect()
}

/// An admitted item as stored: the holder of the lease on its case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its plan.
    pub plan_id: String,
    /// Its `seq`.
    pub seq: u32,
    /// The case.
    pub case_id: String,
}

/// The column list of [`decode_holder`].
pub const HOLDER_COLUMNS: &str = "plan_id, seq, case_id";

/// Reads [`HOLDER_COLUMNS`].
pub fn decode_holder(c: &impl Columns) -> StoreResult<Holder> {
    Ok(Holder {
        plan_id: c.text(0)?,
        seq: c.count(1, "replay_plan_items.seq")?,
        case_id: c.text(2)?,
    })
}

/// Whether the update may take the item leases it asks for, given the stored admitted
/// items of those cases (`holders`): `ReplayItemTaken` naming the holder's plan when an
/// admitted item the update does not rewrite holds one of them, or when two items of the
/// update admit one case (then the holder is this plan). The first conflict in `seq`
/// order of the update's items is reported.
pub fn lease_conflict(u: &ReplayPlanUpdate, holders: &[Holder]) -> StoreResult<()> {
    let rewritten: BTreeSet<u32> = u.items.iter().map(|i| i.seq).collect();
    let held: BTreeMap<&str, &str> = holders
        .iter()
        .filter(|h| !(h.plan_id == u.id && rewritten.contains(&h.seq)))
        .map(|h| (h.case_id.as_str(), h.plan_id.as_str()))
        .collect();
    let mut admitting: Vec<&PlanItemRecord> = u
        .items
        .iter()
        .filter(|i| i.state == PlanItemState::Admitted)
        .collect();
    admitting.sort_by_key(|i| i.seq);
    let mut taken = BTreeSet::new();
    for item in admitting {
        let holder = match held.get(item.case_id.as_str()) {
            Some(plan) => Some((*plan).to_owned()),
            None if !taken.insert(item.case_id.as_str()) => Some(u.id.clone()),
            None => None,
        };
        if let Some(plan_id) = holder {
            return Err(StoreError::ReplayItemTaken {
                case_id: item.case_id.clone(),
                plan_id,
            });
        }
    }
    Ok(())
}

/// The update's items in the order they are written: those whose new state is not
/// `admitted` first, then the admitted ones, each part by `seq`.
pub fn write_order(u: &ReplayPlanUpdate) -> Vec<&PlanItemRecord> {
    let mut items: Vec<&PlanItemRecord> = u.items.iter().collect();
    items.sort_by_key(|i| (i.state == PlanItemState::Admitted, i.seq));
    items
}

/// After writing `items` of plan `plan_id` by `seq`, `written` of them matched a stored
/// item: fewer is [`RowError::NoPlanItem`] naming the first one missing from `found`
/// (the stored seqs among them, when the backend knows them; else the first item).
pub fn items_written(
    plan_id: &str,
    items: &[&PlanItemRecord],
    written: u64,
    found: Option<&BTreeSet<u32>>,
) -> StoreResult<()> {
    if u64::try_from(items.len()).ok() == Some(written) {
        return Ok(());
    }
    let missing = items
        .iter()
        .find(|i| found.is_none_or(|f| !f.contains(&i.seq)))
        .map_or(0, |i| i.seq);
    Err(RowError::NoPlanItem {
        plan_id: plan_id.to_owned(),
        seq: missing,
    }
    .into())
}

/// The plan as an update writes it: its mutable part and the next version.
pub fn written(stored: ReplayPlanRecord, u: &ReplayPlanUpdate) -> ReplayPlanRecord {
    ReplayPlanRecord {
        version: stored.version + 1,
        m: u.set.clone(),
        ..stored
    }
}

/// The page size of a plan listing: [`MAX_PLAN_PAGE`] for 0 or more.
pub fn plan_page_limit(limit: u32) -> i64 {
    match limit {
        0 => i64::from(MAX_PLAN_PAGE),
        n => i64::from(n.min(MAX_PLAN_PAGE)),
    }
}

/// The page size of an item read: [`MAX_PLAN_ITEM_PAGE`] for 0 or more.
pub fn item_page_limit(limit: u32) -> i64 {
    match limit {
        0 => i64::from(MAX_PLAN_ITEM_PAGE),
        n => i64::from(n.min(MAX_PLAN_ITEM_PAGE)),
    }
}

/// A value bound to a built statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// A text parameter.
    Text(String),
    /// An integer (`bigint`) parameter.
    Int(i64),
}

/// A statement built from a query's filters: its text, whose parameters `$1`, `$2`, …
/// each appear once and in order (so that SQLite, which numbers parameters by their first
/// appearance, binds them by position as PostgreSQL does), and their values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// The statement.
    pub sql: String,
    /// The values of `$1…`, in order.
    pub params: Vec<Bound>,
}

impl Built {
    fn bind(&mut self, v: Bound) -> String {
        self.params.push(v);
        format!("${}", self.params.len())
    }

    /// `<column> IN ($n, …)` over `values`.
    fn any_of(&mut self, column: &str, values: impl Iterator<Item = &'static str>) -> String {
        let placeholders: Vec<String> = values
            .map(|v| self.bind(Bound::Text(v.to_owned())))
            .collect();
        format!("{column} IN ({})", placeholders.join(", "))
    }
}

/// A page of plans by id, filtered by `q`.
pub fn list_sql(q: &PlanQuery) -> Built {
    let mut b = Built {
        sql: String::new(),
        params: Vec::new(),
    };
    let mut conditions = Vec::new();
    if !q.status.is_empty() {
        conditions.push(b.any_of("status", q.status.iter().map(|s| s.as_str())));
    }
    if !q.kinds.is_empty() {
        conditions.push(b.any_of("kind", q.kinds.iter().map(|k| k.as_str())));
    }
    if let Some(queue) = &q.queue {
        let p = b.bind(Bound::Text(queue.clone()));
        conditions.push(format!("queue = {p}"));
    }
    if let Some(after) = &q.after {
        let p = b.bind(Bound::Text(after.clone()));
        conditions.push(format!("id > {p}"));
    }
    let where_ = if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    };
    let limit = b.bind(Bound::Int(plan_page_limit(q.limit)));
    // `seq` is an `sqs_move` plan's creation order (`NULL` for others, whose ties the id
    // breaks).
    let order = match q.order {
        PlanOrder::Id => "id",
        PlanOrder::Newest => "created_at DESC, seq DESC, id DESC",
        PlanOrder::Oldest => "created_at, seq, id",
    };
    b.sql = format!(
        "SELECT {} FROM replay_plans{where_} ORDER BY {order} LIMIT {limit}",
        crate::columns!(replay_plan)
    );
    b
}

/// A page of the items of plan `plan_id` by `seq`, filtered by `q`.
pub fn items_sql(plan_id: &str, q: &PlanItemQuery) -> Built {
    let mut b = Built {
        sql: String::new(),
        params: Vec::new(),
    };
    let plan = b.bind(Bound::Text(plan_id.to_owned()));
    let mut conditions = vec![format!("plan_id = {plan}")];
    if !q.states.is_empty() {
        conditions.push(b.any_of("state", q.states.iter().map(|s| s.as_str())));
    }
    if let Some(after) = q.after_seq {
        let p = b.bind(Bound::Int(i64::from(after)));
        conditions.push(format!("seq > {p}"));
    }
    let limit = b.bind(Bound::Int(item_page_limit(q.limit)));
    b.sql = format!(
        "SELECT {} FROM replay_plan_items WHERE {} ORDER BY seq LIMIT {limit}",
        crate::columns!(replay_plan_item),
        conditions.join(" AND ")
    );
    b
}

#[cfg(test)]
mod tests {
    use redrive_core::Timestamp;

    use super::*;
    use crate::PlanStatus;

    fn item(seq: u32, case: &str, state: PlanItemState) -> PlanItemRecord {
        PlanItemRecord {
            seq,
            case_id: case.to_owned(),
            bytes: 10,
            state,
            window: None,
            message_id: None,
            detail: None,
            updated_at: Timestamp(1),
        }
    }

    fn plan(items: u64) -> ReplayPlanRecord {
        ReplayPlanRecord {
            id: "plan_a".into(),
            kind: crate::PlanKind::Cases,
            queue: "orders".into(),
            destination: "orders".into(),
            owner_id: "tok_1".into(),
            owner_name: "ops".into(),
            spec: serde_json::json!({}),
            items,
            created_at: Timestamp(1),
            version: 1,
            m: PlanMut {
                status: PlanStatus::Running,
                owner_until: Timestamp(2),
                stop_reason: None,
                next_at: None,
                state: serde_json::json!({}),
                updated_at: Timestamp(1),
            },
        }
    }

    fn update(items: Vec<PlanItemRecord>) -> ReplayPlanUpdate {
        ReplayPlanUpdate {
            id: "plan_a".into(),
            version: 1,
            set: plan(0).m,
            items,
        }
    }

    fn holder(plan: &str, seq: u32, case: &str) -> Holder {
        Holder {
            plan_id: plan.into(),
            seq,
            case_id: case.into(),
        }
    }

    #[test]
    fn a_new_plan_counts_its_waiting_or_held_items_from_zero() {
        use PlanItemState::*;
        let items = [item(0, "c1", Waiting), item(1, "c2", Held)];
        assert!(check_new(&plan(2), &items).is_ok());
        assert!(check_new(&plan(3), &items).is_err());
        assert!(check_new(&plan(2), &[item(0, "c1", Waiting), item(2, "c2", Held)]).is_err());
        assert!(check_new(&plan(1), &[item(0, "c1", Admitted)]).is_err());
        let mut p = plan(0);
        p.spec = serde_json::json!([1]);
        assert!(plan_columns(&p).is_err());
    }

    #[test]
    fn the_lease_is_refused_when_another_item_holds_the_case() {
        use PlanItemState::*;
        let u = update(vec![item(0, "c1", Admitted), item(1, "c2", Admitted)]);
        assert!(lease_conflict(&u, &[]).is_ok());
        // Its own item, rewritten by the update, does not hold against it.
        assert!(lease_conflict(&u, &[holder("plan_a", 0, "c1")]).is_ok());
        match lease_conflict(&u, &[holder("plan_b", 4, "c2")]) {
            Err(StoreError::ReplayItemTaken { case_id, plan_id }) => {
                assert_eq!((case_id.as_str(), plan_id.as_str()), ("c2", "plan_b"));
            }
            other => panic!("expected ReplayItemTaken, got {other:?}"),
        }
        // Another item of its own, not rewritten, holds it too.
        assert!(lease_conflict(&u, &[holder("plan_a", 7, "c1")]).is_err());
        // Two items of one update admitting one case.
        let twice = update(vec![item(0, "c1", Admitted), item(1, "c1", Admitted)]);
        assert!(matches!(
            lease_conflict(&twice, &[]),
            Err(StoreError::ReplayItemTaken { plan_id, .. }) if plan_id == "plan_a"
        ));
        assert_eq!(admitted_cases(&twice), vec!["c1".to_owned()]);
    }

    #[test]
    fn leases_are_released_before_they_are_taken_and_missing_items_named() {
        use PlanItemState::*;
        let u = update(vec![
            item(2, "c1", Admitted),
            item(1, "c1", Completed),
            item(0, "c0", Waiting),
        ]);
        let order: Vec<u32> = write_order(&u).iter().map(|i| i.seq).collect();
        assert_eq!(order, vec![0, 1, 2]);
        assert!(check_update(&u).is_ok());
        assert!(check_update(&update(vec![item(1, "a", Held), item(1, "a", Held)])).is_err());
        let items = write_order(&u);
        assert!(items_written("plan_a", &items, 3, None).is_ok());
        let found = BTreeSet::from([0, 2]);
        match items_written("plan_a", &items, 2, Some(&found)) {
            Err(StoreError::Backend { source }) => assert!(matches!(
                source.downcast_ref::<RowError>(),
                Some(RowError::NoPlanItem { seq: 1, .. })
            )),
            other => panic!("expected a backend error, got {other:?}"),
        }
    }

    #[test]
    fn built_statements_number_their_parameters_in_order() {
        let q = PlanQuery {
            status: vec![PlanStatus::Running, PlanStatus::Paused],
            queue: Some("orders".into()),
            after: Some("plan_1".into()),
            limit: 0,
            ..PlanQuery::default()
        };
        let b = list_sql(&q);
        assert!(b.sql.ends_with(
            " FROM replay_plans WHERE status IN ($1, $2) AND queue = $3 AND id > $4 \
             ORDER BY id LIMIT $5"
        ));
        assert_eq!(b.params[4], Bound::Int(i64::from(MAX_PLAN_PAGE)));
        let cases = list_sql(&PlanQuery {
            status: vec![PlanStatus::Running],
            kinds: vec![crate::PlanKind::Cases],
            ..PlanQuery::default()
        });
        assert!(cases.sql.ends_with(
            " FROM replay_plans WHERE status IN ($1) AND kind IN ($2) ORDER BY id LIMIT $3"
        ));
        assert_eq!(cases.params[1], Bound::Text("cases".into()));
        let b = items_sql(
            "plan_a",
            &PlanItemQuery {
                states: vec![PlanItemState::Admitted],
                after_seq: Some(3),
                limit: 20_000,
            },
        );
        assert!(b.sql.ends_with(
            " FROM replay_plan_items WHERE plan_id = $1 AND state IN ($2) AND seq > $3 \
             ORDER BY seq LIMIT $4"
        ));
        assert_eq!(b.params[3], Bound::Int(i64::from(MAX_PLAN_ITEM_PAGE)));
        assert_eq!((plan_page_limit(5), item_page_limit(0)), (5, 10_000));
    }
}
