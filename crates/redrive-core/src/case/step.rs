//! A case's step: what the broker writes, and what it must do, for the decision [`decide`]
//! made, as a pure function of what it read (find → decide → write).
//!
//! The broker reads the case and what is known of it, asks [`decide`] for the decision,
//! then asks [`step`] what follows from it: the timeline entries to append, the fields to
//! set (state, closed at, next check, payload retention, the recorded next decision, what
//! the case was escalated for, an effect answer, a stopped replay, the record archived)
//! and the effects it carries out besides the write ([`Effect`]: count a closing or an
//! escalation, post the escalation, log). Where the step needs an answer only I/O can give
//! — the effect authority's — [`step`] says so ([`Outcome::AskAuthority`]); the broker
//! asks and calls [`step`] again with the answer. The route check is the other such
//! answer: the broker verifies the route before it decides, and says so in
//! [`StepFacts::route_checked_now`].
//!
//! [`decide`]: super::decide

use std::collections::BTreeMap;

use super::{
    CaseError, CaseState, Closure, Decision, EffectAnswer, Lease, Missing, Repair, RouteRule,
    TimelineEntry, may_append, owner_at,
};
use crate::clock::Timestamp;

/// How often an effect authority that could not be reached is asked again, ms.
pub const UNREACHABLE_RETRY_MS: i64 = 5 * 60 * 1000;

/// How often a route found misconfigured is checked again, ms.
pub const ROUTE_RECHECK_MS: i64 = 60_000;

/// How often an in-flight replay whose authority still answers `absent` is observed
/// again, ms.
pub const OBSERVE_POLL_MS: i64 = 60_000;

/// The actor of the broker's own entries.
pub const BROKER: &str = "broker";

/// An effect authority's answer as the case records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectSeen {
    /// Its answer.
    pub answer: EffectAnswer,
    /// The evidence it gave.
    pub evidence: String,
    /// The authority asked (its URL).
    pub authority: String,
    /// When it answered.
    pub at: Timestamp,
}

/// The case as the texts of a step name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subject<'a> {
    /// The case's queue.
    pub queue: &'a str,
    /// Its intent.
    pub intent_id: &'a str,
    /// Its message type.
    pub message_type: Option<&'a str>,
    /// Its review deadline as recorded.
    pub review_deadline: Timestamp,
}

/// What a step reads: the case as the broker's steps so far leave it, what was recorded
/// before them, and what is known of it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFacts<'a> {
    /// Now.
    pub now: Timestamp,
    /// The case, for texts.
    pub subject: Subject<'a>,
    /// The state the step starts from.
    pub state: CaseState,
    /// The state as recorded.
    pub recorded_state: CaseState,
    /// The review deadline the step starts from.
    pub review_deadline: Timestamp,
    /// The next check the step starts from.
    pub next_check_at: Option<Timestamp>,
    /// The next check as recorded.
    pub recorded_next_check_at: Option<Timestamp>,
    /// The next decision as recorded (in words).
    pub recorded_next: Option<&'a str>,
    /// What the case was last escalated for, if it still stands.
    pub escalated_for: Option<&'a str>,
    /// The case's claim.
    pub lease: Option<&'a Lease>,
    /// When the value window ends, if it does.
    pub value_window_end: Option<Timestamp>,
    /// Whether a replay of the case still waits in its queue.
    pub replay_queued: bool,
    /// Whether the route was found misconfigured (its dead-letter queue still missing).
    pub route_misconfigured: bool,
    /// Whether the broker checked the route in this step, before deciding.
    pub route_checked_now: bool,
    /// The rule the route was verified under.
    pub route_rule: Option<RouteRule>,
    /// The effect authority's last answer.
    pub effect: Option<&'a EffectSeen>,
    /// Whether an effect authority is registered for the case's type.
    pub has_authority: bool,
    /// The intent that supersedes the case's, when one does.
    pub superseded_by: Option<&'a str>,
    /// Entries appended by the broker in this step before deciding (a route check's).
    pub pending: bool,
    /// How long a closed case keeps its payload, ms.
    pub retention_ms: u64,
    /// Everything a person must supply now ([`missing_now`](super::missing_now)).
    pub missing_now: &'a [Missing],
}

/// What the broker carries out beside the write. (Asking the effect authority is the
/// broker's to count: it is a find, not a decision.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Count and log a closing in this state.
    Closed(CaseState),
    /// Count, log and post an escalation for what is missing, with its text.
    Escalated {
        /// What is missing.
        missing: Missing,
        /// The escalation, in words.
        text: String,
    },
}

/// What a step writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepWrite {
    /// The entries to append, in order (each passes [`may_append`] after the one before,
    /// from the state the step starts from).
    pub append: Vec<TimelineEntry>,
    /// The state after them.
    pub state: CaseState,
    /// When the case closed, if it closed in this step.
    pub closed_at: Option<Timestamp>,
    /// The next check to set (`None`: as the step started).
    pub next_check_at: Option<Option<Timestamp>>,
    /// Until when the payload is kept, when the case closes.
    pub payload_until: Option<Timestamp>,
    /// The next decision to record, in words.
    pub next: String,
    /// What the case is escalated for now (`None`: unchanged; `Some(None)`: nothing).
    pub escalated_for: Option<Option<Missing>>,
    /// The effect authority's answer to record.
    pub effect: Option<EffectSeen>,
    /// Whether the case's last replay is marked stopped.
    pub stop_last_replay: bool,
    /// Whether the dead-letter record is archived (state repair).
    pub archive_record: bool,
    /// Whether the case then waits (`false`: step again).
    pub finished: bool,
    /// What the broker carries out besides.
    pub effects: Vec<Effect>,
}

/// A step's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to write.
    Nothing,
    /// Ask the effect authority, then step again with its answer.
    AskAuthority,
    /// Only the recorded next decision changed: that is written, nothing else of the step.
    NextOnly(String),
    /// Write this.
    Write(StepWrite),
}

/// An effect authority's answer to one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Its answer.
    pub answer: EffectAnswer,
    /// Its evidence.
    pub evidence: String,
    /// The authority (its URL).
    pub authority: String,
}

impl Decision {
    /// The decision in words: its name and what it names (`escalate:effect_authority`).
    pub fn words(&self) -> String {
        match self {
            Decision::Closed(t) => format!("closed:{t}"),
            Decision::Close(c) => format!("close:{}", c.terminal()),
            Decision::Repair(r) => format!("repair:{r}"),
            Decision::Escalate { missing } => format!("escalate:{missing}"),
            Decision::Hold { gate, .. } => format!("hold:{gate}"),
            Decision::VerifyRoute => "verify_route".into(),
            Decision::Reconcile => "reconcile".into(),
            Decision::NeedsDiagnosis => "needs_diagnosis".into(),
            Decision::NeedsCorrection => "needs_correction".into(),
            Decision::NeedsIsolatedTest => "needs_isolated_test".into(),
            Decision::NewIntent => "new_intent".into(),
            Decision::AssignOwner => "assign_owner".into(),
            Decision::ReplayEligible => "replay_eligible".into(),
            Decision::ObserveReplay => "observe_replay".into(),
            Decision::StopReplay { trigger } => format!("stop_replay:{trigger}"),
            Decision::Review { owner } => format!("review:{owner}"),
        }
    }
}

/// The state a case waits in under a decision, if it waits: escalated, or retained.
pub fn waiting_state(decision: &Decision) -> Option<CaseState> {
    match decision {
        Decision::Escalate { .. } => Some(CaseState::Escalated),
        Decision::Hold { .. }
        | Decision::NeedsDiagnosis
        | Decision::NeedsCorrection
        | Decision::NeedsIsolatedTest
        | Decision::NewIntent
        | Decision::AssignOwner
        | Decision::Review { .. }
        | Decision::Repair(Repair::RouteConfiguration) => Some(CaseState::Retained),
        _ => None,
    }
}

/// A timeline entry of `actor` at `now`.
pub fn entry(
    now: Timestamp,
    actor: &str,
    state: CaseState,
    evidence: impl Into<String>,
) -> TimelineEntry {
    TimelineEntry {
        at: now,
        actor: actor.to_owned(),
        state,
        evidence: evidence.into(),
        fields: BTreeMap::new(),
    }
}

/// `e` with these fields added.
pub fn with(mut e: TimelineEntry, fields: &[(&str, String)]) -> TimelineEntry {
    for (k, v) in fields {
        e.fields.insert((*k).to_owned(), v.clone());
    }
    e
}

/// The entry and the record of an effect authority's answer, by `actor` at `now`.
pub fn answered(answer: &Answer, now: Timestamp, actor: &str) -> (TimelineEntry, EffectSeen) {
    let state = match answer.answer {
        EffectAnswer::Present => CaseState::EffectPresent,
        EffectAnswer::Absent => CaseState::EffectAbsent,
        EffectAnswer::Indeterminate | EffectAnswer::Unreachable => CaseState::EffectIndeterminate,
    };
    let e = with(
        entry(
            now,
            actor,
            state,
            format!(
                "effect authority answered {}: {}",
                answer.answer, answer.evidence
            ),
        ),
        &[
            ("authority", answer.authority.clone()),
            ("answer", answer.answer.to_string()),
        ],
    );
    let seen = EffectSeen {
        answer: answer.answer,
        evidence: answer.evidence.clone(),
        authority: answer.authority.clone(),
        at: now,
    };
    (e, seen)
}

/// `message type "x"`, or `a message of <queue> without a type` (for texts).
pub fn type_words(queue: &str, message_type: Option<&str>) -> String {
    match message_type {
        Some(t) if !t.is_empty() => format!("message type {t:?}"),
        _ => format!("a message of {queue} without a type"),
    }
}

/// When the case is looked at next ([`next_check`](super::next_check)), and within
/// [`ROUTE_RECHECK_MS`] while its route is still to repair.
pub fn check_at(f: &StepFacts<'_>) -> Option<Timestamp> {
    let next = super::next_check(
        f.review_deadline,
        f.value_window_end,
        f.lease.map(|l| l.until),
        f.replay_queued,
        f.now,
    );
    if f.route_misconfigured {
        return Some(within(next, f.now.plus_millis(ROUTE_RECHECK_MS)));
    }
    next
}

/// `poll`, or `next` when that comes first.
fn within(next: Option<Timestamp>, poll: Timestamp) -> Timestamp {
    next.map_or(poll, |n| n.min(poll))
}

/// A poll `ms` from now, never after the end of a value window still to come.
fn poll_in(f: &StepFacts<'_>, ms: i64) -> Timestamp {
    let window = f.value_window_end.filter(|t| *t > f.now);
    within(window, f.now.plus_millis(ms))
}

/// The step that follows from `decision` on the case `f` describes, given the effect
/// authority's `answer` when the broker asked for one. See the module docs; each arm
/// below is one decision.
pub fn step(
    f: &StepFacts<'_>,
    decision: &Decision,
    answer: Option<&Answer>,
) -> Result<Outcome, CaseError> {
    let mut w = Write::new(f, decision.words());
    // A route still to repair after the check just made is the decision, recorded as such.
    if f.route_checked_now && *decision == Decision::Repair(Repair::RouteConfiguration) {
        return Ok(w.done(true));
    }
    match decision {
        Decision::Closed(_) | Decision::VerifyRoute => Ok(Outcome::Nothing),
        Decision::Close(closure) => {
            let e = closing_entry(f, closure);
            w.close(e)?;
            Ok(w.done(true))
        }
        Decision::Repair(Repair::ArchiveRecord) => {
            // State repair: the effect exists, the record goes, the case completes.
            let binding = f.effect.map(|e| e.evidence.clone()).unwrap_or_default();
            w.archive_record = true;
            w.close(with(
                entry(
                    f.now,
                    BROKER,
                    CaseState::Completed,
                    "the effect exists: the dead-letter record was archived (state repair) rather than delivered again",
                ),
                &[("binding", binding), ("repair", "archive_record".into())],
            ))?;
            Ok(w.done(true))
        }
        Decision::Reconcile => match answer {
            None => Ok(Outcome::AskAuthority),
            Some(a) => {
                w.answered(a)?;
                Ok(w.done(false))
            }
        },
        Decision::ObserveReplay => observe(f, w, answer),
        Decision::StopReplay { trigger } => {
            w.stop_last_replay = true;
            let e = with(
                entry(
                    f.now,
                    BROKER,
                    CaseState::ReplayStopped,
                    format!("replay stopped: {trigger}"),
                ),
                &[("trigger", trigger.to_string())],
            );
            if may_append(Some(w.state), e.state).is_err() {
                w.push(entry(
                    f.now,
                    BROKER,
                    CaseState::FailureClassified,
                    format!("replay outcome: {trigger}"),
                ))?;
            }
            w.push(e)?;
            Ok(w.done(false))
        }
        Decision::ReplayEligible => {
            if w.state != CaseState::ReplayEligible {
                // Refused only after a replay was admitted, which this decision excludes.
                let _ = w.push(entry(
                    f.now,
                    BROKER,
                    CaseState::ReplayEligible,
                    "every gate passes: one bounded replay may be admitted by the owner",
                ));
            }
            // The value window's end is a check too: an eligible case expires at once.
            let next_check = check_at(f);
            w.next_check_at = Some(next_check);
            if w.append.is_empty()
                && !f.pending
                && f.recorded_next == Some(w.next.as_str())
                && next_check == f.recorded_next_check_at
            {
                return Ok(Outcome::Nothing);
            }
            Ok(w.done(true))
        }
        Decision::Escalate { missing } => escalate(f, w, *missing, answer),
        other => wait(f, w, other),
    }
}

/// The entry that closes a case under `closure`.
fn closing_entry(f: &StepFacts<'_>, closure: &Closure) -> TimelineEntry {
    let now = f.now;
    match closure {
        Closure::Completed { binding } => with(
            entry(
                now,
                BROKER,
                CaseState::Completed,
                "the effect exists: completed without a replay",
            ),
            &[("binding", binding.clone())],
        ),
        Closure::Cancelled => entry(
            now,
            BROKER,
            CaseState::Cancelled,
            "the producer cancelled the intent: closed without execution",
        ),
        Closure::Superseded => {
            let by = f.superseded_by.unwrap_or_default().to_owned();
            with(
                entry(
                    now,
                    BROKER,
                    CaseState::Superseded,
                    format!("superseded by intent {by}: closed without execution"),
                ),
                &[("superseded_by", by)],
            )
        }
        Closure::Expired { deadline } => with(
            entry(
                now,
                BROKER,
                CaseState::Expired,
                format!(
                    "the value window ended at {}: expired, not a consumer failure",
                    deadline.to_rfc3339()
                ),
            ),
            &[
                ("deadline", deadline.to_rfc3339()),
                (
                    "rule",
                    f.route_rule.map(|r| r.to_string()).unwrap_or_default(),
                ),
            ],
        ),
        Closure::Rejected => entry(
            now,
            BROKER,
            CaseState::Rejected,
            "the payload violates the current schema and no approved transformation makes it valid",
        ),
    }
}

/// An in-flight replay: with an authority, observed by asking it again; without one, the
/// claim's end (a lost lease stops the replay) and the review deadline are the next checks.
fn observe(f: &StepFacts<'_>, mut w: Write, answer: Option<&Answer>) -> Result<Outcome, CaseError> {
    if !f.has_authority {
        w.next_check_at = Some(check_at(f));
        return Ok(w.done(true));
    }
    let Some(a) = answer else {
        return Ok(Outcome::AskAuthority);
    };
    let before = f.effect.map(|e| e.answer);
    if a.answer == EffectAnswer::Absent && before == Some(EffectAnswer::Absent) {
        // Nothing new: look again later; a check already scheduled stands (nothing is
        // written but a changed next decision).
        if f.recorded_next_check_at.is_some_and(|t| t > f.now) {
            return Ok(next_only(f, w.inner.next));
        }
        let (_, seen) = answered(a, f.now, BROKER);
        w.effect = Some(seen);
        w.state = f.recorded_state;
        w.next_check_at = Some(Some(poll_in(f, OBSERVE_POLL_MS)));
        return Ok(w.done(true));
    }
    w.answered(a)?;
    Ok(w.done(false))
}

/// An escalation: named once for what is missing; an authority that could not be reached
/// is asked again every [`UNREACHABLE_RETRY_MS`] and the timeline records only a changed
/// answer.
fn escalate(
    f: &StepFacts<'_>,
    mut w: Write,
    missing: Missing,
    answer: Option<&Answer>,
) -> Result<Outcome, CaseError> {
    let what = missing.as_str();
    let unreachable = f
        .effect
        .filter(|e| e.answer == EffectAnswer::Unreachable)
        .map(|e| e.at);
    if f.escalated_for == Some(what) {
        let Some(at) = unreachable.filter(|_| f.has_authority) else {
            return Ok(next_only(f, w.inner.next));
        };
        if f.now.as_millis() - at.as_millis() < UNREACHABLE_RETRY_MS {
            return Ok(next_only(f, w.inner.next));
        }
        let Some(a) = answer else {
            return Ok(Outcome::AskAuthority);
        };
        if a.answer == EffectAnswer::Unreachable {
            let (_, seen) = answered(a, f.now, BROKER);
            w.effect = Some(seen);
            w.next_check_at = Some(Some(poll_in(f, UNREACHABLE_RETRY_MS)));
            return Ok(w.done(true));
        }
        w.answered(a)?;
        w.escalated_for = Some(None);
        return Ok(w.done(false));
    }
    // Everything missing is named, the decision's own first (an overdue case with no
    // owner: the owner and the passed deadline, then the rest).
    let also: Vec<Missing> = f
        .missing_now
        .iter()
        .copied()
        .filter(|m| *m != missing)
        .collect();
    let text = escalation_text(missing, &also, &f.subject, f.effect);
    let mut fields = vec![("missing", what.to_owned())];
    if !also.is_empty() {
        fields.push((
            "also_missing",
            also.iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ));
    }
    if missing == Missing::Owner {
        fields.push(("review_deadline", f.review_deadline.to_rfc3339()));
    }
    w.push(with(
        entry(f.now, BROKER, CaseState::Escalated, text.clone()),
        &fields,
    ))?;
    w.escalated_for = Some(Some(missing));
    let mut next_check = check_at(f);
    if unreachable.is_some() {
        next_check = Some(within(next_check, poll_in(f, UNREACHABLE_RETRY_MS)));
    }
    w.next_check_at = Some(next_check);
    w.effects.push(Effect::Escalated { missing, text });
    Ok(w.done(true))
}

/// A case waiting for a person or a condition: retained when idle, else it keeps the state
/// its owner's last step left.
fn wait(f: &StepFacts<'_>, mut w: Write, decision: &Decision) -> Result<Outcome, CaseError> {
    let Some(state) = waiting_state(decision) else {
        return Ok(Outcome::Nothing);
    };
    let idle = matches!(
        decision,
        Decision::Hold { .. }
            | Decision::Review { .. }
            | Decision::AssignOwner
            | Decision::Repair(_)
            | Decision::NewIntent
    ) || matches!(
        f.recorded_state,
        CaseState::RouteVerified
            | CaseState::FailureClassified
            | CaseState::EffectAbsent
            | CaseState::AttemptsApproximate
    );
    let changed_next = f.recorded_next != Some(w.next.as_str());
    let next_check = check_at(f);
    if idle && f.recorded_state != state {
        let owner = owner_at(f.lease, f.now).unwrap_or("nobody").to_owned();
        w.push(with(
            entry(
                f.now,
                BROKER,
                state,
                format!(
                    "unresolved: {}; owner {owner}; review by {}",
                    w.next,
                    f.review_deadline.to_rfc3339()
                ),
            ),
            &[("next", w.next.clone()), ("owner", owner)],
        ))?;
    } else if !changed_next && f.next_check_at == next_check {
        return Ok(Outcome::Nothing);
    }
    w.escalated_for = Some(None);
    w.next_check_at = Some(next_check);
    Ok(w.done(true))
}

/// Only the next decision, if it changed.
fn next_only(f: &StepFacts<'_>, next: String) -> Outcome {
    if f.recorded_next == Some(next.as_str()) {
        Outcome::Nothing
    } else {
        Outcome::NextOnly(next)
    }
}

/// A step's write as it is built.
struct Write {
    inner: StepWrite,
    now: Timestamp,
    retention_ms: u64,
}

impl std::ops::Deref for Write {
    type Target = StepWrite;
    fn deref(&self) -> &StepWrite {
        &self.inner
    }
}

impl std::ops::DerefMut for Write {
    fn deref_mut(&mut self) -> &mut StepWrite {
        &mut self.inner
    }
}

impl Write {
    fn new(f: &StepFacts<'_>, next: String) -> Write {
        Write::from(f.state, f.now, f.retention_ms, next)
    }

    fn from(state: CaseState, now: Timestamp, retention_ms: u64, next: String) -> Write {
        Write {
            inner: StepWrite {
                append: Vec::new(),
                state,
                closed_at: None,
                next_check_at: None,
                payload_until: None,
                next,
                escalated_for: None,
                effect: None,
                stop_last_replay: false,
                archive_record: false,
                finished: true,
                effects: Vec::new(),
            },
            now,
            retention_ms,
        }
    }

    /// Appends an entry if the timeline allows it after what is appended so far.
    fn push(&mut self, e: TimelineEntry) -> Result<(), CaseError> {
        may_append(Some(self.inner.state), e.state)?;
        self.inner.state = e.state;
        if e.state.terminal().is_some() {
            self.inner.closed_at = Some(e.at);
        }
        self.inner.append.push(e);
        Ok(())
    }

    /// Records the authority's answer and its entry.
    fn answered(&mut self, a: &Answer) -> Result<(), CaseError> {
        let (e, seen) = answered(a, self.now, BROKER);
        self.inner.effect = Some(seen);
        self.push(e)
    }

    /// Closes the case with `e`: its payload is kept for the retention, nothing is checked
    /// again, nothing stays escalated.
    fn close(&mut self, e: TimelineEntry) -> Result<(), CaseError> {
        let state = e.state;
        self.push(e)?;
        let retention = i64::try_from(self.retention_ms).unwrap_or(i64::MAX);
        self.inner.payload_until = Some(self.now.plus_millis(retention));
        self.inner.next_check_at = Some(None);
        self.inner.next = format!("closed:{state}");
        self.inner.escalated_for = Some(None);
        self.inner.effects.push(Effect::Closed(state));
        Ok(())
    }

    fn done(self, finished: bool) -> Outcome {
        let mut w = self.inner;
        w.finished = finished;
        Outcome::Write(w)
    }
}

/// The write that closes a case in `state` with `e` (a person's closing, or the
/// broker's): the entry, the payload kept for `retention_ms` from `e`'s time, no next
/// check, nothing escalated, the closing counted.
pub fn close(
    state: CaseState,
    e: TimelineEntry,
    retention_ms: u64,
) -> Result<StepWrite, CaseError> {
    let mut w = Write::from(state, e.at, retention_ms, String::new());
    w.close(e)?;
    Ok(w.inner)
}

/// The escalation in words: what is missing first, then the rest.
pub fn escalation_text(
    missing: Missing,
    also: &[Missing],
    subject: &Subject<'_>,
    effect: Option<&EffectSeen>,
) -> String {
    let text = escalation_reason(missing, subject, effect);
    if also.is_empty() {
        return text;
    }
    let rest: Vec<String> = also
        .iter()
        .map(|m| format!("{m} ({})", escalation_reason(*m, subject, effect)))
        .collect();
    format!("{text}; also missing: {}", rest.join("; "))
}

/// Why the case escalates for `missing`, in words.
fn escalation_reason(missing: Missing, s: &Subject<'_>, effect: Option<&EffectSeen>) -> String {
    let type_words = || type_words(s.queue, s.message_type);
    match missing {
        Missing::EffectAuthority => match effect {
            Some(e) => format!(
                "the effect authority {} could not establish the effect of intent {} ({}): {}; no replay until it does",
                e.authority, s.intent_id, e.answer, e.evidence
            ),
            None => format!(
                "{} is not idempotent and has no effect authority: no replay can be shown safe",
                type_words()
            ),
        },
        Missing::Owner => format!(
            "review deadline {} passed with no owner: archive, delete or extend under a named policy",
            s.review_deadline.to_rfc3339()
        ),
        Missing::RetentionRule => format!(
            "queue {} keeps dead letters forever: bound the payload's retention",
            s.queue
        ),
        Missing::RepeatSafety => format!(
            "{} may not be delivered again: the idempotency register does not say it is \
             idempotent and no effect authority reconciles it; register it, reject it, or send \
             a new intent",
            type_words()
        ),
        Missing::PayloadIdentity => "the exact payload bytes are gone".to_owned(),
        Missing::RouteEvidence => {
            "neither broker routing nor application quarantine can be shown".to_owned()
        }
        Missing::CurrentAuthorization => {
            "the authority that admitted the intent has changed".to_owned()
        }
        Missing::ReplayDestination => {
            format!("queue {} no longer exists: no replay destination", s.queue)
        }
        Missing::ReplayBudget => "no replay budget is named".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::{Gate, StopTrigger, Terminal};
    use proptest::prelude::*;

    const HOUR: i64 = 3_600_000;
    const T0: Timestamp = Timestamp(1_800_000_000_000);

    fn at(h: i64) -> Timestamp {
        T0.plus_millis(h * HOUR)
    }

    /// What a case's facts borrow.
    #[derive(Debug, Clone)]
    struct Owned {
        state: CaseState,
        recorded_next: Option<String>,
        escalated_for: Option<String>,
        lease: Option<Lease>,
        effect: Option<EffectSeen>,
        has_authority: bool,
        window: Option<Timestamp>,
        next_check: Option<Timestamp>,
        replay_queued: bool,
        missing: Vec<Missing>,
    }

    /// A case retained after its route was verified, checked at `at(1)`.
    fn owned(state: CaseState) -> Owned {
        Owned {
            state,
            recorded_next: None,
            escalated_for: None,
            lease: None,
            effect: None,
            has_authority: false,
            window: Some(at(48)),
            next_check: None,
            replay_queued: false,
            missing: Vec::new(),
        }
    }

    fn facts(o: &Owned) -> StepFacts<'_> {
        StepFacts {
            now: at(1),
            subject: Subject {
                queue: "orders",
                intent_id: "i-1",
                message_type: Some("order.placed"),
                review_deadline: at(24),
            },
            state: o.state,
            recorded_state: o.state,
            review_deadline: at(24),
            next_check_at: o.next_check,
            recorded_next_check_at: o.next_check,
            recorded_next: o.recorded_next.as_deref(),
            escalated_for: o.escalated_for.as_deref(),
            lease: o.lease.as_ref(),
            value_window_end: o.window,
            replay_queued: o.replay_queued,
            route_misconfigured: false,
            route_checked_now: false,
            route_rule: Some(RouteRule::DeliveryThreshold),
            effect: o.effect.as_ref(),
            has_authority: o.has_authority,
            superseded_by: Some("i-2"),
            pending: false,
            retention_ms: 7 * 24 * HOUR as u64,
            missing_now: &o.missing,
        }
    }

    fn answer(a: EffectAnswer) -> Answer {
        Answer {
            answer: a,
            evidence: "ledger says so".into(),
            authority: "https://authority.example/effects".into(),
        }
    }

    fn seen(a: EffectAnswer, when: Timestamp) -> Option<EffectSeen> {
        Some(EffectSeen {
            answer: a,
            evidence: "ledger says so".into(),
            authority: "https://authority.example/effects".into(),
            at: when,
        })
    }

    fn write(o: Outcome) -> StepWrite {
        match o {
            Outcome::Write(w) => w,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    fn states(w: &StepWrite) -> Vec<CaseState> {
        w.append.iter().map(|e| e.state).collect()
    }

    #[test]
    fn a_closed_case_and_an_unchecked_route_write_nothing() {
        let o = owned(CaseState::Completed);
        let d = Decision::Closed(Terminal::Completed);
        assert_eq!(step(&facts(&o), &d, None), Ok(Outcome::Nothing));
        let o = owned(CaseState::RouteObserved);
        assert_eq!(
            step(&facts(&o), &Decision::VerifyRoute, None),
            Ok(Outcome::Nothing)
        );
    }

    #[test]
    fn a_closing_keeps_the_payload_for_the_retention_and_checks_nothing_again() {
        let mut o = owned(CaseState::Escalated);
        o.escalated_for = Some("owner".into());
        for (closure, state) in [
            (Closure::Cancelled, CaseState::Cancelled),
            (Closure::Superseded, CaseState::Superseded),
            (Closure::Rejected, CaseState::Rejected),
            (Closure::Expired { deadline: at(1) }, CaseState::Expired),
        ] {
            let w = write(step(&facts(&o), &Decision::Close(closure), None).unwrap());
            assert_eq!(states(&w), vec![state]);
            assert_eq!(w.state, state);
            assert_eq!(w.closed_at, Some(at(1)));
            assert_eq!(w.payload_until, Some(at(1 + 7 * 24)));
            assert_eq!(w.next_check_at, Some(None));
            assert_eq!(w.next, format!("closed:{state}"));
            assert_eq!(w.escalated_for, Some(None));
            assert_eq!(w.effects, vec![Effect::Closed(state)]);
            assert!(w.finished);
        }
        let w = write(step(&facts(&o), &Decision::Close(Closure::Superseded), None).unwrap());
        assert_eq!(w.append[0].fields["superseded_by"], "i-2");
        let w = write(
            step(
                &facts(&o),
                &Decision::Close(Closure::Expired { deadline: at(0) }),
                None,
            )
            .unwrap(),
        );
        assert_eq!(w.append[0].fields["rule"], "delivery_threshold");
    }

    #[test]
    fn a_completion_follows_only_the_effect_present() {
        let o = owned(CaseState::Retained);
        let d = Decision::Close(Closure::Completed {
            binding: "b".into(),
        });
        assert!(step(&facts(&o), &d, None).is_err());
        let o = owned(CaseState::EffectPresent);
        let w = write(step(&facts(&o), &d, None).unwrap());
        assert_eq!(states(&w), vec![CaseState::Completed]);
        assert_eq!(w.append[0].fields["binding"], "b");
    }

    #[test]
    fn a_record_whose_effect_exists_is_archived_and_the_case_completes() {
        let mut o = owned(CaseState::EffectPresent);
        o.effect = seen(EffectAnswer::Present, at(1));
        let d = Decision::Repair(Repair::ArchiveRecord);
        let w = write(step(&facts(&o), &d, None).unwrap());
        assert!(w.archive_record);
        assert_eq!(states(&w), vec![CaseState::Completed]);
        assert_eq!(w.append[0].fields["binding"], "ledger says so");
        assert_eq!(w.append[0].fields["repair"], "archive_record");
        assert_eq!(w.effects, vec![Effect::Closed(CaseState::Completed)]);
    }

    #[test]
    fn a_route_still_to_repair_records_the_decision_after_its_check_and_is_retained_after() {
        let o = owned(CaseState::Retained);
        let d = Decision::Repair(Repair::RouteConfiguration);
        let mut f = facts(&o);
        f.route_checked_now = true;
        let w = write(step(&f, &d, None).unwrap());
        assert!(w.append.is_empty());
        assert_eq!(w.next, "repair:route_configuration");
        assert_eq!(w.next_check_at, None);
        let o = owned(CaseState::RouteVerified);
        let mut f = facts(&o);
        f.route_misconfigured = true;
        let w = write(step(&f, &d, None).unwrap());
        assert_eq!(states(&w), vec![CaseState::Retained]);
        // Checked again within a minute.
        assert_eq!(
            w.next_check_at,
            Some(Some(at(1).plus_millis(ROUTE_RECHECK_MS)))
        );
    }

    #[test]
    fn a_reconcile_asks_the_authority_then_records_its_answer() {
        let mut o = owned(CaseState::RouteVerified);
        o.has_authority = true;
        let f = facts(&o);
        assert_eq!(
            step(&f, &Decision::Reconcile, None),
            Ok(Outcome::AskAuthority)
        );
        let w = write(
            step(
                &f,
                &Decision::Reconcile,
                Some(&answer(EffectAnswer::Unreachable)),
            )
            .unwrap(),
        );
        assert_eq!(states(&w), vec![CaseState::EffectIndeterminate]);
        assert_eq!(w.effect.as_ref().unwrap().answer, EffectAnswer::Unreachable);
        assert_eq!(w.append[0].fields["answer"], "unreachable");
        assert!(!w.finished);
    }

    #[test]
    fn an_in_flight_replay_is_observed() {
        // Without an authority: the claim's end is the next check.
        let mut o = owned(CaseState::ReplayAdmitted);
        o.lease = Some(Lease {
            owner: "ann".into(),
            until: at(2),
        });
        let w = write(step(&facts(&o), &Decision::ObserveReplay, None).unwrap());
        assert!(w.append.is_empty());
        assert_eq!(w.next_check_at, Some(Some(at(2))));
        // With one: asked; the same `absent` writes nothing new.
        o.has_authority = true;
        o.effect = seen(EffectAnswer::Absent, at(0));
        let f = facts(&o);
        assert_eq!(
            step(&f, &Decision::ObserveReplay, None),
            Ok(Outcome::AskAuthority)
        );
        let absent = answer(EffectAnswer::Absent);
        let w = write(step(&f, &Decision::ObserveReplay, Some(&absent)).unwrap());
        assert!(w.append.is_empty());
        assert_eq!(w.effect.as_ref().unwrap().at, at(1));
        assert_eq!(
            w.next_check_at,
            Some(Some(at(1).plus_millis(OBSERVE_POLL_MS)))
        );
        // A check already scheduled stands: only a changed next decision is written.
        o.next_check = Some(at(1).plus_millis(10));
        let f = facts(&o);
        assert_eq!(
            step(&f, &Decision::ObserveReplay, Some(&absent)),
            Ok(Outcome::NextOnly("observe_replay".into()))
        );
        o.recorded_next = Some("observe_replay".into());
        let f = facts(&o);
        assert_eq!(
            step(&f, &Decision::ObserveReplay, Some(&absent)),
            Ok(Outcome::Nothing)
        );
        // A new answer is recorded, and the case is stepped again.
        let w = write(
            step(
                &f,
                &Decision::ObserveReplay,
                Some(&answer(EffectAnswer::Present)),
            )
            .unwrap(),
        );
        assert_eq!(states(&w), vec![CaseState::EffectPresent]);
        assert!(!w.finished);
    }

    #[test]
    fn a_stopped_replay_follows_an_outcome() {
        let d = Decision::StopReplay {
            trigger: StopTrigger::LostLease,
        };
        let o = owned(CaseState::Retained);
        let w = write(step(&facts(&o), &d, None).unwrap());
        assert_eq!(
            states(&w),
            vec![CaseState::FailureClassified, CaseState::ReplayStopped]
        );
        assert!(w.stop_last_replay);
        let o = owned(CaseState::ReplayAdmitted);
        let w = write(step(&facts(&o), &d, None).unwrap());
        assert_eq!(states(&w), vec![CaseState::ReplayStopped]);
        assert!(!w.finished);
        let o = owned(CaseState::FailureClassified);
        let w = write(step(&facts(&o), &d, None).unwrap());
        assert_eq!(states(&w), vec![CaseState::ReplayStopped]);
        assert_eq!(w.append[0].fields["trigger"], "lost_lease");
    }

    #[test]
    fn an_eligible_case_is_recorded_once_and_checked_at_its_window() {
        let mut o = owned(CaseState::EffectAbsent);
        o.window = Some(at(3));
        let w = write(step(&facts(&o), &Decision::ReplayEligible, None).unwrap());
        assert_eq!(states(&w), vec![CaseState::ReplayEligible]);
        assert_eq!(w.next_check_at, Some(Some(at(3))));
        o.state = CaseState::ReplayEligible;
        o.recorded_next = Some("replay_eligible".into());
        o.next_check = Some(at(3));
        assert_eq!(
            step(&facts(&o), &Decision::ReplayEligible, None),
            Ok(Outcome::Nothing)
        );
    }

    #[test]
    fn an_escalation_names_everything_missing_once() {
        let mut o = owned(CaseState::RouteVerified);
        o.missing = vec![Missing::Owner, Missing::RepeatSafety];
        let d = Decision::Escalate {
            missing: Missing::Owner,
        };
        let w = write(step(&facts(&o), &d, None).unwrap());
        assert_eq!(states(&w), vec![CaseState::Escalated]);
        let e = &w.append[0];
        assert_eq!(e.fields["missing"], "owner");
        assert_eq!(e.fields["also_missing"], "repeat_safety");
        assert_eq!(e.fields["review_deadline"], at(24).to_rfc3339());
        assert!(e.evidence.contains("passed with no owner"));
        assert!(e.evidence.contains("message type \"order.placed\""));
        assert_eq!(w.escalated_for, Some(Some(Missing::Owner)));
        assert!(matches!(
            &w.effects[..],
            [Effect::Escalated {
                missing: Missing::Owner,
                ..
            }]
        ));
        // Escalated already for the same thing: nothing new.
        o.state = CaseState::Escalated;
        o.escalated_for = Some("owner".into());
        o.recorded_next = Some("escalate:owner".into());
        assert_eq!(step(&facts(&o), &d, None), Ok(Outcome::Nothing));
    }

    #[test]
    fn an_unreachable_authority_is_asked_again_after_the_retry() {
        let d = Decision::Escalate {
            missing: Missing::EffectAuthority,
        };
        let mut o = owned(CaseState::Escalated);
        o.has_authority = true;
        o.escalated_for = Some("effect_authority".into());
        o.recorded_next = Some("escalate:effect_authority".into());
        o.effect = seen(EffectAnswer::Unreachable, at(1).plus_millis(-1_000));
        assert_eq!(step(&facts(&o), &d, None), Ok(Outcome::Nothing));
        o.effect = seen(EffectAnswer::Unreachable, at(0));
        let f = facts(&o);
        assert_eq!(step(&f, &d, None), Ok(Outcome::AskAuthority));
        let w = write(step(&f, &d, Some(&answer(EffectAnswer::Unreachable))).unwrap());
        assert!(w.append.is_empty());
        assert_eq!(
            w.next_check_at,
            Some(Some(at(1).plus_millis(UNREACHABLE_RETRY_MS)))
        );
        let w = write(step(&f, &d, Some(&answer(EffectAnswer::Absent))).unwrap());
        assert_eq!(states(&w), vec![CaseState::EffectAbsent]);
        assert_eq!(w.escalated_for, Some(None));
        assert!(!w.finished);
    }

    #[test]
    fn a_waiting_case_is_retained_when_idle() {
        let waits = [
            Decision::Hold {
                gate: Gate::Capacity,
                next_review: at(24),
            },
            Decision::NeedsDiagnosis,
            Decision::NeedsCorrection,
            Decision::NeedsIsolatedTest,
            Decision::NewIntent,
            Decision::AssignOwner,
            Decision::Review {
                owner: "ann".into(),
            },
        ];
        for d in &waits {
            let o = owned(CaseState::RouteVerified);
            let w = write(step(&facts(&o), d, None).unwrap());
            assert_eq!(states(&w), vec![CaseState::Retained], "{d:?}");
            assert_eq!(w.append[0].fields["next"], d.words());
            assert_eq!(w.append[0].fields["owner"], "nobody");
            assert_eq!(w.next_check_at, Some(Some(at(24))));
        }
        // A case waiting on its owner's next step keeps the state that step left.
        let o = owned(CaseState::DiagnosisProposed);
        let w = write(step(&facts(&o), &Decision::NeedsCorrection, None).unwrap());
        assert!(w.append.is_empty());
        assert_eq!(w.next, "needs_correction");
    }

    fn open_state() -> impl Strategy<Value = CaseState> {
        prop::sample::select(vec![
            CaseState::RouteVerified,
            CaseState::AttemptsApproximate,
            CaseState::FailureClassified,
            CaseState::EffectAbsent,
            CaseState::EffectPresent,
            CaseState::EffectIndeterminate,
            CaseState::DiagnosisProposed,
            CaseState::CorrectionIdentified,
            CaseState::CorrectionIsolated,
            CaseState::ReplayEligible,
            CaseState::ReplayAdmitted,
            CaseState::ReplayStopped,
            CaseState::Retained,
            CaseState::Escalated,
        ])
    }

    fn missing() -> impl Strategy<Value = Missing> {
        prop::sample::select(vec![
            Missing::Owner,
            Missing::EffectAuthority,
            Missing::RepeatSafety,
            Missing::RetentionRule,
            Missing::ReplayBudget,
        ])
    }

    fn decision() -> impl Strategy<Value = Decision> {
        prop_oneof![
            Just(Decision::Close(Closure::Cancelled)),
            Just(Decision::Close(Closure::Superseded)),
            Just(Decision::Close(Closure::Rejected)),
            Just(Decision::Close(Closure::Expired { deadline: at(1) })),
            Just(Decision::Close(Closure::Completed {
                binding: "b".into()
            })),
            Just(Decision::Repair(Repair::ArchiveRecord)),
            Just(Decision::Repair(Repair::RouteConfiguration)),
            missing().prop_map(|missing| Decision::Escalate { missing }),
            Just(Decision::Hold {
                gate: Gate::Ordering,
                next_review: at(24),
            }),
            Just(Decision::Reconcile),
            Just(Decision::NeedsDiagnosis),
            Just(Decision::NeedsCorrection),
            Just(Decision::NeedsIsolatedTest),
            Just(Decision::NewIntent),
            Just(Decision::AssignOwner),
            Just(Decision::ReplayEligible),
            Just(Decision::ObserveReplay),
            Just(Decision::StopReplay {
                trigger: StopTrigger::RepeatedFailure
            }),
            Just(Decision::Review {
                owner: "ann".into()
            }),
        ]
    }

    fn answer_of() -> impl Strategy<Value = EffectAnswer> {
        prop::sample::select(vec![
            EffectAnswer::Present,
            EffectAnswer::Absent,
            EffectAnswer::Indeterminate,
            EffectAnswer::Unreachable,
        ])
    }

    prop_compose! {
        fn case()(
            state in open_state(),
            recorded_next in prop::option::of(decision().prop_map(|d| d.words())),
            escalated_for in prop::option::of(missing().prop_map(|m| m.to_string())),
            lease_h in prop::option::of(-2i64..30),
            effect in prop::option::of((answer_of(), -1i64..2)),
            has_authority in any::<bool>(),
            window_h in prop::option::of(-2i64..60),
            next_check_h in prop::option::of(-2i64..30),
            replay_queued in any::<bool>(),
            missing in prop::collection::vec(missing(), 0..3),
        ) -> Owned {
            Owned {
                state,
                recorded_next,
                escalated_for,
                lease: lease_h.map(|h| Lease { owner: "ann".into(), until: at(h) }),
                effect: effect.and_then(|(a, h)| seen(a, at(h))),
                has_authority,
                window: window_h.map(at),
                next_check: next_check_h.map(at),
                replay_queued,
                missing,
            }
        }
    }

    /// The step, asking the authority when it says so.
    fn run(f: &StepFacts<'_>, d: &Decision, a: EffectAnswer) -> Result<Outcome, CaseError> {
        match step(f, d, None)? {
            Outcome::AskAuthority => step(f, d, Some(&answer(a))),
            o => Ok(o),
        }
    }

    proptest! {
        /// What a step appends always passes `may_append` in order and never goes back in
        /// time; a closing keeps the payload and clears the next check; the next check is
        /// never after a value window still to come.
        #[test]
        fn a_step_writes_what_the_timeline_allows(
            o in case(),
            d in decision(),
            a in answer_of(),
            misconfigured in any::<bool>(),
        ) {
            let mut f = facts(&o);
            f.route_misconfigured = misconfigured;
            let Ok(Outcome::Write(w)) = run(&f, &d, a) else {
                return Ok(());
            };
            let mut state = f.state;
            for e in &w.append {
                prop_assert!(may_append(Some(state), e.state).is_ok(), "{state} -> {}", e.state);
                prop_assert_eq!(e.at, f.now);
                state = e.state;
            }
            prop_assert_eq!(w.state, if w.append.is_empty() { w.state } else { state });
            if state.terminal().is_some() {
                prop_assert_eq!(w.closed_at, Some(f.now));
                prop_assert!(w.payload_until.is_some_and(|t| t > f.now));
                prop_assert_eq!(w.next_check_at, Some(None));
                prop_assert!(w.effects.contains(&Effect::Closed(state)));
            } else {
                prop_assert!(w.payload_until.is_none());
            }
            if let (Some(Some(t)), Some(end)) = (w.next_check_at, f.value_window_end)
                && end > f.now
            {
                prop_assert!(t <= end, "next check {t:?} after the window's end {end:?}");
            }
        }

        /// Stepping a case again after its finished write, with the decision and the
        /// authority's answer unchanged, appends nothing.
        #[test]
        fn a_decision_that_did_not_change_appends_nothing(
            o in case(),
            d in decision(),
            a in answer_of(),
        ) {
            let f = facts(&o);
            let Ok(Outcome::Write(w)) = run(&f, &d, a) else {
                return Ok(());
            };
            if !w.finished || w.state.terminal().is_some() {
                return Ok(());
            }
            let mut after = o.clone();
            after.state = w.state;
            after.recorded_next = Some(w.next.clone());
            if let Some(e) = &w.escalated_for {
                after.escalated_for = e.map(|m| m.to_string());
            }
            if let Some(e) = &w.effect {
                after.effect = Some(e.clone());
            }
            if let Some(n) = w.next_check_at {
                after.next_check = n;
            }
            // The world did not change either: the authority answers as recorded.
            let same = after.effect.as_ref().map_or(a, |e| e.answer);
            let again = run(&facts(&after), &d, same).unwrap();
            if let Outcome::Write(w2) = &again {
                prop_assert!(w2.append.is_empty(), "{d:?} appended again: {again:?}");
            }
        }
    }
}
