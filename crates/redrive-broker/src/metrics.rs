//! Counters behind `/metrics`, kept per queue (and per reason for dead letters). Gauges
//! (live counts) are read from the store at scrape time, so nothing here grows with the
//! number of messages.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use redrive_store::{Effects, QueueCounts};

/// A counter name and its help text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Counter {
    Sent,
    Duplicates,
    Received,
    Completed,
    Abandoned,
    Deferred,
    DeadLettered,
    Expired,
    LockExpired,
    Resubmitted,
    ReplayRepublished,
    ReplayQuarantined,
    ReplayArchived,
    ReplayFailures,
    ReplayFlagged,
    DeadLettersExpired,
    DeadLetterFallbacks,
    CasesEscalated,
    CasesClosed,
    EffectLookups,
    PlanItems,
    PlanBytes,
    PlansEnded,
}

impl Counter {
    fn name(self) -> &'static str {
        match self {
            Counter::Sent => "redrive_messages_sent_total",
            Counter::Duplicates => "redrive_messages_duplicate_total",
            Counter::Received => "redrive_messages_received_total",
            Counter::Completed => "redrive_messages_completed_total",
            Counter::Abandoned => "redrive_messages_abandoned_total",
            Counter::Deferred => "redrive_messages_deferred_total",
            Counter::DeadLettered => "redrive_messages_dead_lettered_total",
            Counter::Expired => "redrive_messages_expired_total",
            Counter::LockExpired => "redrive_locks_expired_total",
            Counter::Resubmitted => "redrive_dead_letters_resubmitted_total",
            Counter::ReplayRepublished => "redrive_replay_republished_total",
            Counter::ReplayQuarantined => "redrive_replay_quarantined_total",
            Counter::ReplayArchived => "redrive_replay_archived_total",
            Counter::ReplayFailures => "redrive_replay_failures_total",
            Counter::ReplayFlagged => "redrive_replay_flagged_total",
            Counter::DeadLettersExpired => "redrive_dead_letters_expired_total",
            Counter::DeadLetterFallbacks => "redrive_dead_letter_fallbacks_total",
            Counter::CasesEscalated => "redrive_cases_escalated_total",
            Counter::CasesClosed => "redrive_cases_closed_total",
            Counter::EffectLookups => "redrive_effect_lookups_total",
            Counter::PlanItems => "redrive_replay_plan_items_total",
            Counter::PlanBytes => "redrive_replay_plan_bytes_total",
            Counter::PlansEnded => "redrive_replay_plans_ended_total",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Counter::Sent => "Messages stored by send.",
            Counter::Duplicates => "Sends accepted but not stored: duplicate id inside the window.",
            Counter::Received => "Deliveries (peek-lock receives) of messages.",
            Counter::Completed => "Messages completed.",
            Counter::Abandoned => "Deliveries abandoned by receivers.",
            Counter::Deferred => "Messages deferred.",
            Counter::DeadLettered => "Messages dead-lettered, by reason.",
            Counter::Expired => "Messages removed on expiry without dead-lettering.",
            Counter::LockExpired => "Locks that ran out unsettled (counted as abandons).",
            Counter::Resubmitted => "Dead letters resubmitted to their queue.",
            Counter::ReplayRepublished => {
                "Dead-lettered events republished to their origin by automatic replay."
            }
            Counter::ReplayQuarantined => {
                "Dead-lettered events quarantined by automatic replay, by cause."
            }
            Counter::ReplayArchived => {
                "Dead-letter records archived after their events were republished."
            }
            Counter::ReplayFailures => "Replay judgements that failed and will be retried.",
            Counter::ReplayFlagged => {
                "Dead-letter records flagged for failing replay judgement repeatedly."
            }
            Counter::DeadLettersExpired => "Dead-letter records deleted by the retention rule.",
            Counter::DeadLetterFallbacks => {
                "Broker-routed dead letters kept in the queue's own store because its dead-letter queue was missing or unfit, by target."
            }
            Counter::CasesEscalated => "Recovery cases escalated, by what is missing.",
            Counter::CasesClosed => "Recovery cases closed, by terminal state.",
            Counter::EffectLookups => "Effect authority lookups, by answer.",
            Counter::PlanItems => {
                "Items of bounded replay plans, by outcome (admitted, completed, stopped, closed, held)."
            }
            Counter::PlanBytes => "Payload bytes admitted by bounded replay plans.",
            Counter::PlansEnded => {
                "Bounded replay plans ended, by reason (completed, cancelled, or the stop reason)."
            }
        }
    }

    /// The name of the third label (`reason` for dead letters, `cause` for quarantines).
    fn label(self) -> &'static str {
        match self {
            Counter::ReplayQuarantined => "cause",
            Counter::DeadLetterFallbacks => "target",
            Counter::CasesEscalated => "missing",
            Counter::CasesClosed => "state",
            Counter::EffectLookups => "answer",
            Counter::PlanItems | Counter::PlanBytes => "outcome",
            _ => "reason",
        }
    }

    const ALL: [Counter; 23] = [
        Counter::Sent,
        Counter::Duplicates,
        Counter::Received,
        Counter::Completed,
        Counter::Abandoned,
        Counter::Deferred,
        Counter::DeadLettered,
        Counter::Expired,
        Counter::LockExpired,
        Counter::Resubmitted,
        Counter::ReplayRepublished,
        Counter::ReplayQuarantined,
        Counter::ReplayArchived,
        Counter::ReplayFailures,
        Counter::ReplayFlagged,
        Counter::DeadLettersExpired,
        Counter::DeadLetterFallbacks,
        Counter::CasesEscalated,
        Counter::CasesClosed,
        Counter::EffectLookups,
        Counter::PlanItems,
        Counter::PlanBytes,
        Counter::PlansEnded,
    ];
}

/// A counter without labels.
#[derive(Default)]
pub(crate) struct Plain(AtomicU64);

impl Plain {
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Counters keyed by (counter, queue, reason), and the unlabelled ones.
#[derive(Default)]
pub(crate) struct Metrics {
    counters: Mutex<BTreeMap<(Counter, String, String), u64>>,
    /// Audit entries written.
    pub(crate) audit_entries: Plain,
    /// Audit entries that could not be written.
    pub(crate) audit_failures: Plain,
    /// Requests refused for want of a valid token.
    pub(crate) unauthenticated: Plain,
    /// Requests refused by the permission table.
    pub(crate) forbidden: Plain,
    /// Requests refused by a token's rate limit.
    pub(crate) rate_limited: Plain,
}

impl Metrics {
    pub(crate) fn add(&self, counter: Counter, queue: &str, n: u64) {
        if n == 0 {
            return;
        }
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        *c.entry((counter, queue.to_owned(), String::new()))
            .or_insert(0) += n;
    }

    pub(crate) fn add_labelled(&self, counter: Counter, queue: &str, label: &str, n: u64) {
        if n == 0 {
            return;
        }
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        *c.entry((counter, queue.to_owned(), label.to_owned()))
            .or_insert(0) += n;
    }

    pub(crate) fn effects(&self, effects: &Effects) {
        if effects.dead_lettered.is_empty()
            && effects.expired.is_empty()
            && effects.lock_expired.is_empty()
        {
            return;
        }
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        for d in &effects.dead_lettered {
            let key = (
                Counter::DeadLettered,
                d.message.queue.to_string(),
                d.reason.as_str().to_owned(),
            );
            *c.entry(key).or_insert(0) += 1;
            if let Some(target) = &d.fell_back_from {
                *c.entry((
                    Counter::DeadLetterFallbacks,
                    d.message.queue.to_string(),
                    target.to_string(),
                ))
                .or_insert(0) += 1;
            }
        }
        for e in &effects.expired {
            *c.entry((Counter::Expired, e.queue.to_string(), String::new()))
                .or_insert(0) += 1;
        }
        for e in &effects.lock_expired {
            *c.entry((Counter::LockExpired, e.queue.to_string(), String::new()))
                .or_insert(0) += 1;
        }
    }

    pub(crate) fn forget_queue(&self, queue: &str) {
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        c.retain(|(_, q, _), _| q != queue);
    }

    /// Prometheus text exposition of the counters and the given gauges.
    pub(crate) fn render(&self, gauges: &[(String, QueueCounts, Option<u64>)]) -> String {
        let mut out = String::with_capacity(4096);
        let counters = self
            .counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for counter in Counter::ALL {
            let _ = writeln!(out, "# HELP {} {}", counter.name(), counter.help());
            let _ = writeln!(out, "# TYPE {} counter", counter.name());
            for ((c, q, r), v) in &counters {
                if *c != counter {
                    continue;
                }
                if r.is_empty() {
                    let _ = writeln!(out, "{}{{queue=\"{}\"}} {v}", c.name(), escape_label(q));
                } else {
                    let _ = writeln!(
                        out,
                        "{}{{queue=\"{}\",{}=\"{}\"}} {v}",
                        c.name(),
                        escape_label(q),
                        c.label(),
                        escape_label(r)
                    );
                }
            }
        }
        let plain: [(&str, &str, &Plain); 5] = [
            (
                "redrive_audit_entries_total",
                "Audit entries written.",
                &self.audit_entries,
            ),
            (
                "redrive_audit_failures_total",
                "Audited acts whose audit entry could not be written.",
                &self.audit_failures,
            ),
            (
                "redrive_requests_unauthenticated_total",
                "Requests refused for want of a valid token.",
                &self.unauthenticated,
            ),
            (
                "redrive_requests_forbidden_total",
                "Requests refused because the token lacks the role.",
                &self.forbidden,
            ),
            (
                "redrive_requests_rate_limited_total",
                "Requests refused by a token's rate limit.",
                &self.rate_limited,
            ),
        ];
        for (name, help, c) in plain {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", c.get());
        }
        let gauge_defs: [Gauge; 5] = [
            (
                "redrive_queue_active_messages",
                "Messages visible now.",
                |c| c.active,
            ),
            (
                "redrive_queue_scheduled_messages",
                "Messages visible later (scheduled or in backoff).",
                |c| c.scheduled,
            ),
            (
                "redrive_queue_locked_messages",
                "Messages locked by receivers.",
                |c| c.locked,
            ),
            (
                "redrive_queue_deferred_messages",
                "Deferred messages.",
                |c| c.deferred,
            ),
            (
                "redrive_queue_dead_lettered_messages",
                "Live records in the dead-letter store.",
                |c| c.dead_lettered,
            ),
        ];
        for (name, help, f) in gauge_defs {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            for (q, counts, _) in gauges {
                let _ = writeln!(out, "{name}{{queue=\"{}\"}} {}", escape_label(q), f(counts));
            }
        }
        let name = "redrive_queue_oldest_message_age_seconds";
        let _ = writeln!(out, "# HELP {name} Age of the oldest message on the queue.");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (q, _, age_ms) in gauges {
            let secs = age_ms.unwrap_or(0) / 1000;
            let _ = writeln!(out, "{name}{{queue=\"{}\"}} {secs}", escape_label(q));
        }
        out
    }
}

/// The audit chain's head, read from the store at scrape time: its number as a gauge, and
/// its number and hash as the labels of an info gauge (one series, replaced at every
/// append), so that a scraper keeps a copy of the head outside the store. Without a head
/// (its record is gone) the number is -1 and the info gauge is absent.
pub(crate) fn render_audit_head(out: &mut String, head: Option<&redrive_core::audit::ChainHead>) {
    let name = "redrive_audit_head_seq";
    let _ = writeln!(
        out,
        "# HELP {name} The number of the audit log's newest entry, as the chain's head records it (-1: no head)."
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
    let _ = writeln!(out, "{name} {}", head.map_or(-1, |h| h.seq));
    let name = "redrive_audit_head_info";
    let _ = writeln!(
        out,
        "# HELP {name} The audit chain's head: its newest entry's number and hash (always 1)."
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
    if let Some(h) = head {
        let _ = writeln!(
            out,
            "{name}{{seq=\"{}\",hash=\"{}\"}} 1",
            h.seq,
            escape_label(&h.hash)
        );
    }
}

/// The replay gauges of every queue with dead letters, read from the store at scrape
/// time: candidates, failing and flagged records, and quarantined records by cause
/// (`manual`: moved there by an operator).
pub(crate) fn render_replay(out: &mut String, counts: &[redrive_store::ReplayCounts]) {
    let gauges: [ReplayGauge; 5] = [
        (
            "redrive_replay_candidates",
            "Live dead letters waiting for their replay judgement.",
            |c| c.candidates,
        ),
        (
            "redrive_replay_failing",
            "Live dead letters whose last replay judgement failed.",
            |c| c.failing,
        ),
        (
            "redrive_replay_flagged",
            "Live dead letters whose replay judgement failed at least the flag threshold of times.",
            |c| c.flagged,
        ),
        (
            "redrive_replay_undecodable",
            "Dead-letter records this build cannot read, set aside from replay until an operator fixes or removes them.",
            |c| c.undecodable,
        ),
        (
            "redrive_dead_letters_archived",
            "Dead-letter records in the archived area.",
            |c| c.archived,
        ),
    ];
    for (name, help, f) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for c in counts {
            let _ = writeln!(
                out,
                "{name}{{queue=\"{}\"}} {}",
                escape_label(c.queue.as_str()),
                f(c)
            );
        }
    }
    let name = "redrive_dead_letters_quarantined";
    let _ = writeln!(
        out,
        "# HELP {name} Dead-letter records in the quarantine area, by cause (manual: moved there by an operator)."
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
    for c in counts {
        for (cause, n) in &c.quarantined {
            let cause = cause.map_or("manual", |c| c.as_str());
            let _ = writeln!(
                out,
                "{name}{{queue=\"{}\",cause=\"{cause}\"}} {n}",
                escape_label(c.queue.as_str())
            );
        }
    }
}

/// A replay gauge: name, help, and how to read it from the counts.
type ReplayGauge = (
    &'static str,
    &'static str,
    fn(&redrive_store::ReplayCounts) -> u64,
);

/// A gauge: name, help, and how to read it from the counts.
type Gauge = (&'static str, &'static str, fn(&QueueCounts) -> u64);

/// A Prometheus label value with `\`, `"` and newlines escaped.
pub(crate) fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
