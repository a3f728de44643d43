//! The overview: every queue, topic and subscription the caller may see with its counts,
//! automatic replay, push health and open cases, and what needs a person (highlights),
//! in one operation over one grouped store read
//! ([`Store::overview_counts`](redrive_store::Store::overview_counts)) plus the lists of
//! queues, topics and subscriptions: a fixed number of statements whatever the number of
//! entities or dead letters. Also the series of a queue and the whoami of a caller.

use std::collections::HashMap;

use redrive_core::Timestamp;
use redrive_core::access::{Operation, Role};
use redrive_events::SubscriptionKind;
use redrive_store::{CaseTally, QueueCounts};

use crate::metrics::Counter;
use crate::series::{SeriesEvent, SeriesPointView};
use crate::{Actor, Broker, BrokerResult};

/// Highlights kept per kind, the largest counts first: the overview of thousands of
/// failing queues stays bounded; the queue list still has every count.
pub const MAX_HIGHLIGHTS_PER_KIND: usize = 20;

/// One queue (or a subscription's queue) as the overview shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueOverview {
    /// The queue.
    pub name: String,
    /// The topic and subscription it backs, if it is a subscription's queue.
    pub subscription: Option<(String, String)>,
    /// Its counts at the time of the look.
    pub counts: QueueCounts,
    /// Records in its dead-letter store's quarantine.
    pub quarantined: u64,
    /// Live candidates flagged for failing replay judgement repeatedly.
    pub flagged: u64,
    /// Age of the oldest message, ms.
    pub oldest_age_ms: Option<u64>,
    /// Whether its policy replays dead letters, and how many rounds at most.
    pub auto_replay: Option<u32>,
}

/// One subscription of a topic as the overview shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionOverview {
    /// The subscription.
    pub name: String,
    /// Its queue.
    pub queue: String,
    /// Push: endpoint, health (`healthy`, `failing`, `paused`), events in backoff, this
    /// node's deliveries and failed attempts.
    pub push: Option<PushHealth>,
}

/// A push subscription's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushHealth {
    /// The endpoint URL.
    pub endpoint: String,
    /// `healthy`, `failing` (events wait for a retry after a failed attempt) or `paused`.
    pub health: &'static str,
    /// Events waiting for a retry.
    pub in_backoff: u64,
    /// Events delivered by this node since it started.
    pub delivered: u64,
    /// Failed attempts of this node since it started.
    pub failed_attempts: u64,
}

/// One topic as the overview shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicOverview {
    /// The topic.
    pub name: String,
    /// Its subscriptions, by name.
    pub subscriptions: Vec<SubscriptionOverview>,
}

/// Something that needs a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HighlightView {
    /// Its kind (see `redrive_api::overview::Highlight`).
    pub kind: &'static str,
    /// The entity.
    pub entity: Option<String>,
    /// How many.
    pub count: u64,
    /// In words.
    pub detail: String,
}

/// What [`Broker::overview`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverviewView {
    /// When it looked.
    pub generated_at: Timestamp,
    /// The queues the caller may see, by name.
    pub queues: Vec<QueueOverview>,
    /// The topics the caller may see, by name.
    pub topics: Vec<TopicOverview>,
    /// Open cases of the queues whose cases the caller may read.
    pub cases: CaseTally,
    /// Flagged replay records of the queues the caller sees.
    pub flagged_replays: u64,
    /// What needs a person, by kind, the largest first within a kind.
    pub highlights: Vec<HighlightView>,
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

impl Broker {
    /// Counts one settlement (or send) of `counter` on `queue` in its series: sends,
    /// completes and abandons (other counters are not series events).
    pub(crate) fn record_series(&self, queue: &str, counter: Counter) {
        let what = match counter {
            Counter::Sent => SeriesEvent::Sent,
            Counter::Completed => SeriesEvent::Completed,
            Counter::Abandoned => SeriesEvent::Abandoned,
            _ => return,
        };
        self.inner.series.record(queue, what, 1, self.now());
    }

    /// The last hour of `queue`'s ten-second points on this node, oldest first
    /// (`QueueNotFound` when there is no such queue).
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue))]
    pub async fn queue_series(&self, queue: &str) -> BrokerResult<Vec<SeriesPointView>> {
        // The queue must exist (a subscription's queue too); its counts are not read.
        self.queue_record(queue).await?;
        Ok(self.inner.series.points(queue, self.now()))
    }

    /// Prometheus text of the series' bounds (`render_metrics` appends it).
    pub(crate) fn render_series_metrics(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "# HELP redrive_series_entities_dropped_total Queues whose in-memory series was dropped to keep within the cap (the least recently touched first).\n\
             # TYPE redrive_series_entities_dropped_total counter\n\
             redrive_series_entities_dropped_total {}",
            self.inner
                .series
                .dropped
                .load(std::sync::atomic::Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP redrive_series_entities Queues with an in-memory series on this node.\n\
             # TYPE redrive_series_entities gauge\n\
             redrive_series_entities {}",
            self.inner.series.len()
        );
    }

    /// Forgets a deleted queue's series.
    pub(crate) fn forget_series(&self, queue: &str) {
        self.inner.series.forget(queue);
    }

    /// The distinct roles of `actor`'s grants, in the order of [`Role::ALL`].
    pub fn roles_summary(actor: &Actor) -> Vec<&'static str> {
        Role::ALL
            .into_iter()
            .filter(|r| actor.grants.iter().any(|g| g.role == *r))
            .map(Role::as_str)
            .collect()
    }

    /// Every queue, topic and subscription `actor` may see (`read-metadata` on it, as
    /// `GET /v1/queues` lists; a subscription's queue also with `read-metadata` on its
    /// topic), with counts, automatic replay and push health; open cases of the queues
    /// whose cases it may read; highlights of what needs a person.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn overview(&self, actor: &Actor) -> BrokerResult<OverviewView> {
        let now = self.now();
        let flag = self.replay_settings().flag_after_failures;
        let store = &self.inner.store;
        let counts = store.overview_counts(now, flag).await?;
        let records = store.list_queues().await?;
        let topics = store.list_topics().await?;
        let subs = store.list_all_subscriptions().await?;
        let policies: HashMap<&str, &redrive_core::QueuePolicy> = records
            .iter()
            .map(|r| (r.name.as_str(), &r.policy))
            .collect();
        let backing: HashMap<&str, (&str, &str)> = subs
            .iter()
            .map(|s| (s.queue.as_str(), (s.topic.as_str(), s.name.as_str())))
            .collect();
        let sees = |op: Operation, e: &str| actor.permits(op, Some(e));
        let mut queues = Vec::new();
        let mut by_queue: HashMap<String, usize> = HashMap::new();
        for e in counts.queues {
            let name = e.queue.as_str();
            let sub = backing.get(name).copied();
            let visible = sees(Operation::ReadMetadata, name)
                || sub.is_some_and(|(t, _)| sees(Operation::ReadMetadata, t));
            if !visible {
                continue;
            }
            let auto_replay = policies
                .get(name)
                .filter(|p| p.auto_replay.enabled)
                .map(|p| p.auto_replay.max_replay_attempts);
            let oldest_age_ms = e
                .counts
                .oldest_enqueued_at
                .map(|t| u64::try_from(now.since(t).as_millis()).unwrap_or(u64::MAX));
            by_queue.insert(name.to_owned(), queues.len());
            queues.push(QueueOverview {
                name: name.to_owned(),
                subscription: sub.map(|(t, s)| (t.to_owned(), s.to_owned())),
                counts: e.counts,
                quarantined: e.quarantined,
                flagged: e.flagged,
                oldest_age_ms,
                auto_replay,
            });
        }
        let mut topic_views = Vec::new();
        for t in &topics {
            if !sees(Operation::ReadMetadata, t.name.as_str()) {
                continue;
            }
            let subscriptions = subs
                .iter()
                .filter(|s| s.topic == t.name)
                .map(|s| {
                    let push = match &s.spec.kind {
                        SubscriptionKind::Pull => None,
                        SubscriptionKind::Push { endpoint, .. } => {
                            let in_backoff = by_queue
                                .get(s.queue.as_str())
                                .map_or(0, |&i| queues[i].counts.scheduled);
                            let c = self
                                .inner
                                .topics
                                .push
                                .get(s.topic.as_str(), s.name.as_str());
                            let health = if s.spec.paused {
                                "paused"
                            } else if in_backoff > 0 {
                                "failing"
                            } else {
                                "healthy"
                            };
                            Some(PushHealth {
                                endpoint: endpoint.clone(),
                                health,
                                in_backoff,
                                delivered: c.delivered,
                                failed_attempts: c.failed_attempts.values().sum(),
                            })
                        }
                    };
                    SubscriptionOverview {
                        name: s.name.to_string(),
                        queue: s.queue.to_string(),
                        push,
                    }
                })
                .collect();
            topic_views.push(TopicOverview {
                name: t.name.to_string(),
                subscriptions,
            });
        }
        let mut cases = CaseTally::default();
        let mut case_rows = Vec::new();
        for (q, c) in &counts.cases {
            if sees(Operation::ReadCases, q.as_str()) {
                cases.open += c.open;
                cases.overdue += c.overdue;
                cases.escalated += c.escalated;
                case_rows.push((q.as_str(), *c));
            }
        }
        let flagged_replays = queues.iter().map(|q| q.flagged).sum();
        let mut highlights = Vec::new();
        let mut push_kind = |kind: &'static str, mut rows: Vec<(String, u64, String)>| {
            rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            for (entity, count, detail) in rows.into_iter().take(MAX_HIGHLIGHTS_PER_KIND) {
                highlights.push(HighlightView {
                    kind,
                    entity: Some(entity),
                    count,
                    detail,
                });
            }
        };
        let of_queues = |f: &dyn Fn(&QueueOverview) -> u64, one: &str, many: &str| {
            queues
                .iter()
                .filter(|q| f(q) > 0)
                .map(|q| (q.name.clone(), f(q), plural(f(q), one, many)))
                .collect::<Vec<_>>()
        };
        push_kind(
            "dead_letters",
            of_queues(&|q| q.counts.dead_lettered, "dead letter", "dead letters"),
        );
        push_kind(
            "quarantine",
            of_queues(
                &|q| q.quarantined,
                "record in quarantine",
                "records in quarantine",
            ),
        );
        push_kind(
            "flagged_replay",
            of_queues(
                &|q| q.flagged,
                "flagged replay record",
                "flagged replay records",
            ),
        );
        let of_cases = |f: &dyn Fn(&CaseTally) -> u64, one: &str, many: &str| {
            case_rows
                .iter()
                .filter(|(_, c)| f(c) > 0)
                .map(|(q, c)| ((*q).to_owned(), f(c), plural(f(c), one, many)))
                .collect::<Vec<_>>()
        };
        push_kind(
            "case_overdue",
            of_cases(&|c| c.overdue, "overdue case", "overdue cases"),
        );
        push_kind(
            "case_escalated",
            of_cases(&|c| c.escalated, "escalated case", "escalated cases"),
        );
        let unhealthy = topic_views
            .iter()
            .flat_map(|t| {
                t.subscriptions.iter().filter_map(move |s| {
                    let p = s.push.as_ref()?;
                    (p.health == "failing").then(|| {
                        (
                            format!("{}/{}", t.name, s.name),
                            p.in_backoff,
                            format!(
                                "{} to {}",
                                plural(p.in_backoff, "event in backoff", "events in backoff"),
                                p.endpoint
                            ),
                        )
                    })
                })
            })
            .collect();
        push_kind("push_unhealthy", unhealthy);
        Ok(OverviewView {
            generated_at: now,
            queues,
            topics: topic_views,
            cases,
            flagged_replays,
            highlights,
        })
    }
}
