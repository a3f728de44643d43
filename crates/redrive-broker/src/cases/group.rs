//! Case groups: the cases of one queue that a person works as one — claimed, diagnosed,
//! corrected, tested and closed by one reviewed decision, recorded on each case's
//! timeline with the group's id.
//!
//! A group's members are fixed when it is created: the open cases its selection matched
//! then (queue, reason, type, dead-letter time range, failure signature, intent prefix),
//! at most [`MAX_GROUP_CASES`]. A decision is the reviewed decision for exactly those
//! cases; a dead letter that matches the selection later is not in it (create another
//! group). Every decision is carried out on each member by the same operation a person
//! uses on one case (its gates, its audit entry, the advance after it), so a group
//! weakens none of a case's guarantees: a member another owner holds is refused alone and
//! the others go on; each isolated test is still of that member's exact payload. The
//! answer names each member's outcome. The group keeps its decisions (who, when, what,
//! how many applied and refused); closing it ends it.

use std::collections::BTreeMap;

use redrive_core::access::Operation;
use redrive_core::case;
use redrive_core::id::GroupId;
use redrive_core::{EntityName, Timestamp};
use redrive_store::{CaseGroupRecord, CaseQuery, CaseRecord, StoreError};
use serde::{Deserialize, Serialize};

use super::data::{CorrectionKind, TestOutcome};
use super::person::{TestInput, check_text};
use super::refusal::conflict;
use super::view::{CaseView, check_filter};
use crate::{Actor, BrokerError, BrokerResult, Cases};

/// The most cases a group holds.
pub const MAX_GROUP_CASES: usize = 1_000;
/// The most open cases a group's creation looks through to find its members.
pub const MAX_GROUP_SCAN: usize = 20_000;
/// The most decisions a group keeps (a group is closed long before).
pub const MAX_GROUP_DECISIONS: usize = 256;

/// Which cases a group holds: the open cases of `queue` that match every filter given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSelection {
    /// The queue whose cases it holds.
    pub queue: String,
    /// With this reason code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Of this message type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_type: Option<String>,
    /// Dead-lettered at or after, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<i64>,
    /// Dead-lettered before, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<i64>,
    /// Whose failure signature ([`redrive_core::case::signature`]) is this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Whose intent id starts with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_prefix: Option<String>,
}

impl GroupSelection {
    fn matches(&self, c: &CaseRecord) -> bool {
        self.signature
            .as_ref()
            .is_none_or(|s| *s == case::signature::signature(c.description.as_deref()))
            && self
                .intent_prefix
                .as_ref()
                .is_none_or(|p| c.intent_id.starts_with(p.as_str()))
    }
}

/// One decision taken on a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupDecision {
    /// `claim`, `release`, `diagnose`, `correct`, `test`, `close`.
    pub action: String,
    /// Who took it.
    pub actor: String,
    /// When, ms.
    pub at_ms: i64,
    /// What was decided (the hypothesis, the correction's identity, the outcome…).
    pub fields: BTreeMap<String, String>,
    /// Members it was carried out on.
    pub applied: u32,
    /// Members that refused it (each with its reason in the decision's answer).
    pub refused: u32,
}

/// A group's document, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct GroupDoc {
    selection: GroupSelection,
    case_ids: Vec<String>,
    created_by: String,
    #[serde(default)]
    decisions: Vec<GroupDecision>,
    #[serde(default)]
    closed_at_ms: Option<i64>,
}

/// A case group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseGroup {
    /// `grp_…`.
    pub id: String,
    /// The queue whose cases it holds.
    pub queue: EntityName,
    /// How its members were selected.
    pub selection: GroupSelection,
    /// Its members, by id.
    pub case_ids: Vec<String>,
    /// Who created it.
    pub created_by: String,
    /// When.
    pub created_at: Timestamp,
    /// Its decisions, oldest first.
    pub decisions: Vec<GroupDecision>,
    /// When it was closed (no decision is taken on it after).
    pub closed_at: Option<Timestamp>,
    /// Its stored version.
    pub version: u64,
}

impl CaseGroup {
    fn of(r: CaseGroupRecord) -> BrokerResult<CaseGroup> {
        let doc: GroupDoc = serde_json::from_value(r.doc)
            .map_err(|e| BrokerError::Store(StoreError::bad_value("case_groups.doc", e)))?;
        Ok(CaseGroup {
            id: r.id,
            queue: r.queue,
            selection: doc.selection,
            case_ids: doc.case_ids,
            created_by: doc.created_by,
            created_at: r.created_at,
            decisions: doc.decisions,
            closed_at: doc.closed_at_ms.map(Timestamp),
            version: r.version,
        })
    }

    fn record(&self) -> BrokerResult<CaseGroupRecord> {
        let doc = GroupDoc {
            selection: self.selection.clone(),
            case_ids: self.case_ids.clone(),
            created_by: self.created_by.clone(),
            decisions: self.decisions.clone(),
            closed_at_ms: self.closed_at.map(|t| t.as_millis()),
        };
        Ok(CaseGroupRecord {
            id: self.id.clone(),
            queue: self.queue.clone(),
            created_at: self.created_at,
            version: self.version,
            doc: serde_json::to_value(doc)
                .map_err(|e| BrokerError::Store(StoreError::bad_value("case_groups.doc", e)))?,
        })
    }
}

/// What one member did with a group's decision.
#[derive(Debug)]
pub struct MemberOutcome {
    /// The case.
    pub case_id: String,
    /// The case as the decision left it, or why it refused the decision (nothing changed
    /// on it then).
    pub result: BrokerResult<CaseView>,
}

/// A group as it stands: the group, its members as they are now, and — after a decision —
/// each member's outcome.
#[derive(Debug)]
pub struct GroupView {
    /// The group.
    pub group: CaseGroup,
    /// Its members that still exist, by id.
    pub members: Vec<CaseRecord>,
    /// Each member's outcome of the decision just taken (empty for a read).
    pub outcomes: Vec<MemberOutcome>,
}

/// A decision on a group, as asked for.
#[derive(Debug, Clone)]
pub enum GroupAction {
    /// Claim every member for the actor (or renew its claim), for `lease_ms`.
    Claim {
        /// The lease, ms (the configured default when absent).
        lease_ms: Option<u64>,
    },
    /// Release the actor's claim on every member.
    Release,
    /// One diagnosis for every member.
    Diagnose {
        /// The hypothesis.
        hypothesis: String,
        /// What would disconfirm it.
        disconfirming: String,
    },
    /// One correction for every member.
    Correct {
        /// Its kind.
        kind: CorrectionKind,
        /// Its identity (a commit, a config version).
        identity: String,
        /// The failure shape it claims to address.
        addresses: String,
    },
    /// An isolated test of each member's exact payload at one sandbox destination.
    Test {
        /// The sandbox queue.
        destination: String,
        /// Whether the broker sends each payload there now.
        send: bool,
        /// The outcome observed for every member not in `failed`.
        outcome: TestOutcome,
        /// Members whose payload failed the test.
        failed: Vec<String>,
        /// The evidence.
        evidence: String,
    },
    /// Close every member `rejected` or `indeterminate`, and the group.
    Close {
        /// The terminal state.
        terminal: case::Terminal,
        /// The evidence.
        evidence: String,
    },
}

impl GroupAction {
    fn name(&self) -> &'static str {
        match self {
            GroupAction::Claim { .. } => "claim",
            GroupAction::Release => "release",
            GroupAction::Diagnose { .. } => "diagnose",
            GroupAction::Correct { .. } => "correct",
            GroupAction::Test { .. } => "test",
            GroupAction::Close { .. } => "close",
        }
    }

    /// What the group's record keeps of the decision.
    fn fields(&self) -> BTreeMap<String, String> {
        let pairs: Vec<(&str, String)> = match self {
            GroupAction::Claim { lease_ms } => lease_ms
                .map(|ms| vec![("lease_ms", ms.to_string())])
                .unwrap_or_default(),
            GroupAction::Release => Vec::new(),
            GroupAction::Diagnose {
                hypothesis,
                disconfirming,
            } => vec![
                ("hypothesis", hypothesis.clone()),
                ("disconfirming_evidence", disconfirming.clone()),
            ],
            GroupAction::Correct {
                kind,
                identity,
                addresses,
            } => vec![
                ("kind", kind.as_str().to_owned()),
                ("identity", identity.clone()),
                ("addresses", addresses.clone()),
            ],
            GroupAction::Test {
                destination,
                send,
                outcome,
                failed,
                evidence,
            } => vec![
                ("destination", destination.clone()),
                ("send", send.to_string()),
                ("outcome", format!("{outcome:?}").to_lowercase()),
                ("failed", failed.join(",")),
                ("evidence", evidence.clone()),
            ],
            GroupAction::Close { terminal, evidence } => vec![
                ("state", terminal.to_string()),
                ("evidence", evidence.clone()),
            ],
        };
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }

    /// Judges the request's fields before any member is touched.
    fn check(&self, group: &CaseGroup) -> BrokerResult<()> {
        match self {
            GroupAction::Claim { .. } | GroupAction::Release => Ok(()),
            GroupAction::Diagnose {
                hypothesis,
                disconfirming,
            } => {
                check_text("hypothesis", hypothesis, true)?;
                check_text("disconfirming_evidence", disconfirming, true)
            }
            GroupAction::Correct {
                identity,
                addresses,
                ..
            } => {
                check_text("identity", identity, true)?;
                check_text("addresses", addresses, true)
            }
            GroupAction::Test {
                failed, evidence, ..
            } => {
                check_text("evidence", evidence, true)?;
                if let Some(f) = failed.iter().find(|f| !group.case_ids.contains(f)) {
                    return Err(BrokerError::invalid(
                        "failed",
                        format!("case {f} is not in group {}", group.id),
                    ));
                }
                Ok(())
            }
            GroupAction::Close { terminal, evidence } => {
                check_text("evidence", evidence, true)?;
                if !matches!(
                    terminal,
                    case::Terminal::Rejected | case::Terminal::Indeterminate
                ) {
                    return Err(BrokerError::invalid(
                        "state",
                        "a group is closed rejected or indeterminate",
                    ));
                }
                Ok(())
            }
        }
    }
}

impl Cases {
    /// Creates a case group for `actor` (an operator on the queue): its members are the
    /// open cases of the selection's queue that match every filter, now. Refused when
    /// none match, when more than [`MAX_GROUP_CASES`] do, or when finding them would look
    /// through more than [`MAX_GROUP_SCAN`] open cases (narrow the selection). Audited
    /// (`case_group.create`).
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %selection.queue, group = tracing::field::Empty))]
    pub async fn create_case_group(
        &self,
        selection: GroupSelection,
        actor: &Actor,
    ) -> BrokerResult<GroupView> {
        let queue: EntityName = selection.queue.parse()?;
        self.broker
            .authorize(actor, Operation::WorkCases, Some(queue.as_str()))
            .await?;
        let r = self
            .create_group_inner(queue.clone(), selection, actor)
            .await;
        if let Ok(v) = &r {
            tracing::Span::current().record("group", v.group.id.as_str());
        }
        let targets = match &r {
            Ok(v) => vec![
                v.group.id.clone(),
                format!("cases={}", v.group.case_ids.len()),
            ],
            Err(_) => Vec::new(),
        };
        self.ctx
            .audited(actor, "case_group.create", Some(queue.as_str()), targets, r)
            .await
    }

    async fn create_group_inner(
        &self,
        queue: EntityName,
        selection: GroupSelection,
        actor: &Actor,
    ) -> BrokerResult<GroupView> {
        for (field, v) in [
            ("reason", &selection.reason),
            ("type", &selection.message_type),
            ("signature", &selection.signature),
            ("intent_prefix", &selection.intent_prefix),
        ] {
            check_filter(field, v.as_deref())?;
        }
        if let (Some(f), Some(t)) = (selection.from_ms, selection.to_ms)
            && f >= t
        {
            return Err(BrokerError::invalid("to", "must be after from"));
        }
        self.ctx.store.get_queue(&queue).await?;
        let members = self.group_members(&queue, &selection).await?;
        if members.is_empty() {
            return Err(conflict(
                "group_empty",
                format!("no open case of queue {queue} matches the selection"),
            ));
        }
        let now = self.now();
        let group = CaseGroup {
            id: redrive_core::id::new_dead_letter_id(now).replacen("dl_", "grp_", 1),
            queue,
            selection,
            case_ids: members.iter().map(|c| c.id.clone()).collect(),
            created_by: actor.name.clone(),
            created_at: now,
            decisions: Vec::new(),
            closed_at: None,
            version: 0,
        };
        let written = self
            .ctx
            .store
            .put_case_group(&group.record()?, None)
            .await?;
        Ok(GroupView {
            group: CaseGroup::of(written)?,
            members,
            outcomes: Vec::new(),
        })
    }

    /// The open cases of `queue` the selection matches, by id.
    async fn group_members(
        &self,
        queue: &EntityName,
        s: &GroupSelection,
    ) -> BrokerResult<Vec<CaseRecord>> {
        let mut out = Vec::new();
        let mut scanned = 0;
        let mut after = None;
        loop {
            let page = self
                .ctx
                .store
                .list_cases(&CaseQuery {
                    queue: Some(queue.clone()),
                    reason: s.reason.clone(),
                    message_type: s.message_type.clone(),
                    open: true,
                    since: s.from_ms.map(Timestamp),
                    until: s.to_ms.map(Timestamp),
                    after: after.clone(),
                    limit: redrive_store::MAX_CASE_PAGE,
                    ..CaseQuery::default()
                })
                .await?;
            let full = page.len() == redrive_store::MAX_CASE_PAGE as usize;
            scanned += page.len();
            after = page.last().map(|c| c.id.clone());
            out.extend(page.into_iter().filter(|c| s.matches(c)));
            if out.len() > MAX_GROUP_CASES {
                return Err(BrokerError::invalid(
                    "selection",
                    format!(
                        "more than {MAX_GROUP_CASES} open cases match: narrow the selection (reason, type, time range, signature, intent prefix)"
                    ),
                ));
            }
            if !full {
                return Ok(out);
            }
            if scanned >= MAX_GROUP_SCAN {
                return Err(BrokerError::invalid(
                    "selection",
                    format!(
                        "the selection looks through more than {MAX_GROUP_SCAN} open cases: narrow it by reason, type or time range"
                    ),
                ));
            }
        }
    }

    /// Case group `id` as `actor` (a reader of the queue's cases) may see it, with its
    /// members as they are now.
    #[tracing::instrument(level = "debug", skip_all, fields(group = %id))]
    pub async fn case_group(&self, id: &GroupId, actor: &Actor) -> BrokerResult<GroupView> {
        let id = id.as_str();
        let group = CaseGroup::of(self.ctx.store.get_case_group(id).await?)?;
        self.broker
            .authorize(actor, Operation::ReadCases, Some(group.queue.as_str()))
            .await?;
        self.group_view(group, Vec::new()).await
    }

    /// The groups (of `queue` when given) after `after`, at most `limit`, that `actor` may
    /// read the cases of.
    pub async fn case_groups(
        &self,
        queue: Option<&EntityName>,
        after: Option<&str>,
        limit: u32,
        actor: &Actor,
    ) -> BrokerResult<Vec<CaseGroup>> {
        if let Some(q) = queue {
            self.broker
                .authorize(actor, Operation::ReadCases, Some(q.as_str()))
                .await?;
        }
        // The cursor is checked once the caller may read the queue it names.
        let after = after.map(str::parse::<GroupId>).transpose()?;
        if limit == 0 || limit > redrive_store::MAX_CASE_GROUP_PAGE {
            return Err(BrokerError::invalid(
                "limit",
                format!("between 1 and {}", redrive_store::MAX_CASE_GROUP_PAGE),
            ));
        }
        self.ctx
            .store
            .list_case_groups(queue, after.as_ref().map(GroupId::as_str), limit)
            .await?
            .into_iter()
            .map(CaseGroup::of)
            .filter(|g| {
                g.as_ref().map_or(true, |g| {
                    actor.permits(Operation::ReadCases, Some(g.queue.as_str()))
                })
            })
            .collect()
    }

    async fn group_view(
        &self,
        group: CaseGroup,
        outcomes: Vec<MemberOutcome>,
    ) -> BrokerResult<GroupView> {
        let members = self
            .ctx
            .store
            .case_reads(&group.case_ids)
            .await?
            .into_iter()
            .map(|r| r.case)
            .collect();
        Ok(GroupView {
            group,
            members,
            outcomes,
        })
    }

    /// Takes one decision on case group `id` for `actor` (an operator on its queue; a
    /// test of exact payloads needs `payload-reader` too): carried out on each member by
    /// the case operation a person would use, each with its own gates and audit entry,
    /// each timeline entry naming the group. A member that refuses (claimed by another
    /// owner, closed, not at the state the decision needs) is left as it was and named
    /// in the answer; the others go on. The decision is kept on the group and audited
    /// (`case_group.<action>`). A closed group takes no decision (`group_closed`).
    #[tracing::instrument(level = "debug", skip_all, fields(group = %id, action = action.name(), applied = tracing::field::Empty, refused = tracing::field::Empty))]
    pub async fn decide_case_group(
        &self,
        id: &GroupId,
        action: GroupAction,
        actor: &Actor,
    ) -> BrokerResult<GroupView> {
        let id = id.as_str();
        let group = CaseGroup::of(self.ctx.store.get_case_group(id).await?)?;
        self.broker
            .authorize(actor, Operation::WorkCases, Some(group.queue.as_str()))
            .await?;
        if matches!(action, GroupAction::Test { .. }) {
            self.broker
                .authorize(
                    actor,
                    Operation::ReadCasePayload,
                    Some(group.queue.as_str()),
                )
                .await?;
        }
        let queue = group.queue.clone();
        let r = self.decide_inner(group, action.clone(), actor).await;
        let targets = match &r {
            Ok(v) => {
                let refused = v.outcomes.iter().filter(|o| o.result.is_err()).count();
                let span = tracing::Span::current();
                span.record("applied", v.outcomes.len() - refused);
                span.record("refused", refused);
                vec![
                    id.to_owned(),
                    format!("applied={}", v.outcomes.len() - refused),
                    format!("refused={refused}"),
                ]
            }
            Err(_) => vec![id.to_owned()],
        };
        self.ctx
            .audited(
                actor,
                &format!("case_group.{}", action.name()),
                Some(queue.as_str()),
                targets,
                r,
            )
            .await
    }

    async fn decide_inner(
        &self,
        mut group: CaseGroup,
        action: GroupAction,
        actor: &Actor,
    ) -> BrokerResult<GroupView> {
        if let Some(at) = group.closed_at {
            return Err(conflict(
                "group_closed",
                format!("case group {} was closed at {}", group.id, at.to_rfc3339()),
            ));
        }
        if group.decisions.len() >= MAX_GROUP_DECISIONS {
            return Err(conflict(
                "group_full",
                format!(
                    "case group {} holds the most decisions a group may ({MAX_GROUP_DECISIONS})",
                    group.id
                ),
            ));
        }
        action.check(&group)?;
        if let GroupAction::Test {
            destination, send, ..
        } = &action
        {
            self.group_test_sink(&group, destination, *send, actor)
                .await?;
        }
        let mut outcomes = Vec::with_capacity(group.case_ids.len());
        for case_id in &group.case_ids {
            // A failure of the storage is not a member's refusal: it ends the decision
            // here (the members already done keep it on their timelines; the decision
            // taken again refuses or repeats harmlessly on them).
            let result = match self.decide_member(&group.id, case_id, &action, actor).await {
                Err(e)
                    if matches!(
                        e.storage_class(),
                        Some("unavailable" | "poisoned" | "other")
                    ) =>
                {
                    return Err(e);
                }
                r => r,
            };
            outcomes.push(MemberOutcome {
                case_id: case_id.clone(),
                result,
            });
        }
        let refused = outcomes.iter().filter(|o| o.result.is_err()).count();
        let now = self.now();
        group.decisions.push(GroupDecision {
            action: action.name().to_owned(),
            actor: actor.name.clone(),
            at_ms: now.as_millis(),
            fields: action.fields(),
            applied: u32::try_from(outcomes.len() - refused).unwrap_or(u32::MAX),
            refused: u32::try_from(refused).unwrap_or(u32::MAX),
        });
        if matches!(action, GroupAction::Close { .. }) {
            group.closed_at = Some(now);
        }
        group = self.save_group(group).await?;
        self.group_view(group, outcomes).await
    }

    /// What of a group test's destination is the same for every member, judged once
    /// before any member is touched (each member's own test checks it again, and its
    /// dead-letter queue): never the group's queue; with `send`, a declared test sandbox
    /// the caller may send to.
    async fn group_test_sink(
        &self,
        group: &CaseGroup,
        destination: &str,
        send: bool,
        actor: &Actor,
    ) -> BrokerResult<()> {
        let sink: EntityName = destination
            .parse()
            .map_err(|e| BrokerError::invalid("destination", format!("{e}")))?;
        if sink == group.queue {
            return Err(BrokerError::invalid(
                "destination",
                "an isolated test runs away from the live path: not the group's queue",
            ));
        }
        if send {
            self.may_test_send(actor, &sink).await?;
        }
        Ok(())
    }

    /// Writes a group's new decisions; on a concurrent write, merges them into the group
    /// as it now stands (decisions only add).
    async fn save_group(&self, group: CaseGroup) -> BrokerResult<CaseGroup> {
        let mut g = group;
        for _ in 0..4 {
            match self
                .ctx
                .store
                .put_case_group(&g.record()?, Some(g.version))
                .await
            {
                Ok(r) => return CaseGroup::of(r),
                Err(StoreError::CaseGroupChanged { .. }) => {
                    let now = CaseGroup::of(self.ctx.store.get_case_group(&g.id).await?)?;
                    let mut merged = now.clone();
                    for d in &g.decisions {
                        if !merged.decisions.contains(d) {
                            merged.decisions.push(d.clone());
                        }
                    }
                    merged.closed_at = merged.closed_at.or(g.closed_at);
                    g = merged;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(conflict(
            "group_busy",
            format!("case group {} kept changing; try again", g.id),
        ))
    }

    /// One member's part of a decision.
    async fn decide_member(
        &self,
        group: &str,
        case_id: &str,
        action: &GroupAction,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        let g = Some(group);
        match action {
            GroupAction::Claim { lease_ms } => self.claim_in(case_id, *lease_ms, actor, g).await,
            GroupAction::Release => self.release_in(case_id, actor, g).await,
            GroupAction::Diagnose {
                hypothesis,
                disconfirming,
            } => {
                self.diagnose_in(case_id, hypothesis, disconfirming, actor, g)
                    .await
            }
            GroupAction::Correct {
                kind,
                identity,
                addresses,
            } => {
                self.correct_in(case_id, *kind, identity, addresses, actor, g)
                    .await
            }
            GroupAction::Test {
                destination,
                send,
                outcome,
                failed,
                evidence,
            } => {
                let outcome = if failed.iter().any(|f| f == case_id) {
                    TestOutcome::Fail
                } else {
                    *outcome
                };
                let input = TestInput {
                    correction_version: None,
                    fixture: None,
                    destination: destination.clone(),
                    send: *send,
                    outcome,
                    evidence: evidence.clone(),
                };
                self.test_in(case_id, input, actor, g).await
            }
            GroupAction::Close { terminal, evidence } => {
                let open = match self.ctx.store.get_case(case_id).await {
                    Ok(c) => c.m.state.terminal().is_none(),
                    Err(e) => return Err(e.into()),
                };
                if !open {
                    return Err(conflict(
                        "case_closed",
                        format!("case {case_id} is closed already"),
                    ));
                }
                self.close_in(case_id, *terminal, evidence, actor, g).await
            }
        }
    }
}
