//! Parameter and row types of the [`Store`](crate::Store) trait.

use redrive_core::judgement::{Judgement, QuarantineCause};
use redrive_core::{
    Area, DeadLetterReason, EntityName, EvidenceQuality, MessageState, Properties, QueuePolicy,
    RecordFormat, RouteKind, Timestamp,
};

/// What a backend can and cannot do. The conformance suite skips, with a logged reason,
/// the cases a backend declares it cannot support.
#[derive(Debug, Clone, Copy, Default)]
pub struct Capabilities {
    /// Whether a reopened store sees the previous instance's data (false for a purely
    /// in-memory backend).
    pub durable: bool,
    /// Whether several processes may share the store (PostgreSQL).
    pub multi_node: bool,
}

/// A queue and its policy.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRecord {
    /// Name.
    pub name: EntityName,
    /// Policy in force.
    pub policy: QueuePolicy,
    /// Version of the policy; 1 at creation, +1 on every update.
    pub policy_version: u64,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its policy last changed.
    pub updated_at: Timestamp,
}

/// Live counts of one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Available and visible now.
    pub active: u64,
    /// Available but visible only later (scheduled enqueue or redelivery backoff).
    pub scheduled: u64,
    /// Locked by a receiver.
    pub locked: u64,
    /// Deferred.
    pub deferred: u64,
    /// Records in the live area of the queue's dead-letter store.
    pub dead_lettered: u64,
    /// Enqueue time of the oldest message on the queue (any state), if any.
    pub oldest_enqueued_at: Option<Timestamp>,
}

impl QueueCounts {
    /// Messages on the queue, dead letters excluded.
    pub fn messages(&self) -> u64 {
        self.active + self.scheduled + self.locked + self.deferred
    }
}

/// A message to enqueue; the broker has filled in defaults (id, expiry).
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    /// Client-chosen or generated id; the key of duplicate detection.
    pub message_id: String,
    /// Body bytes.
    pub body: Vec<u8>,
    /// MIME type of the body.
    pub content_type: Option<String>,
    /// Application properties.
    pub properties: Properties,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// Session (ordered group) id.
    pub session_id: Option<String>,
    /// Message type (CloudEvents `type` for events); keys the replay idempotency register.
    pub message_type: Option<String>,
    /// Stable id of the semantic operation; defaults to the message id where read.
    pub intent: Option<String>,
    /// After this time completing the message no longer helps.
    pub valid_until: Option<Timestamp>,
    /// Scheduled enqueue time: not visible before.
    pub scheduled_at: Option<Timestamp>,
    /// Absolute expiry (from the message TTL or the queue's default).
    pub expires_at: Option<Timestamp>,
}

/// The answer to one enqueued message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// The message id.
    pub message_id: String,
    /// Its sequence number (the original one for a duplicate).
    pub sequence: i64,
    /// True when the id was seen inside the detection window and nothing was stored.
    pub duplicate: bool,
}

/// A message as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    /// Queue it is on.
    pub queue: EntityName,
    /// Per-queue sequence number, assigned at enqueue.
    pub sequence: i64,
    /// Message id.
    pub message_id: String,
    /// Body bytes.
    pub body: Vec<u8>,
    /// MIME type.
    pub content_type: Option<String>,
    /// Application properties.
    pub properties: Properties,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// Session id.
    pub session_id: Option<String>,
    /// Message type.
    pub message_type: Option<String>,
    /// Intent.
    pub intent: Option<String>,
    /// Valid-until time.
    pub valid_until: Option<Timestamp>,
    /// When it was stored.
    pub enqueued_at: Timestamp,
    /// Scheduled enqueue time, if it was scheduled.
    pub scheduled_at: Option<Timestamp>,
    /// State.
    pub state: MessageState,
    /// When an Available message is visible.
    pub visible_at: Timestamp,
    /// Expiry.
    pub expires_at: Option<Timestamp>,
    /// Deliveries so far.
    pub delivery_count: u32,
    /// Lock expiry while Locked.
    pub locked_until: Option<Timestamp>,
    /// First delivery.
    pub first_delivered_at: Option<Timestamp>,
    /// Latest delivery.
    pub last_delivered_at: Option<Timestamp>,
    /// The evidence of the last failed push attempt, as the abandon that followed it
    /// wrote it (see [`SettleAction::Abandon`]): a small JSON object the push dispatcher
    /// reads back when the event expires without another attempt. `None` when no abandon
    /// carried any.
    pub last_attempt: Option<String>,
}

/// A locked delivery: the message and the token that settles it.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The message (state Locked, count already incremented).
    pub message: StoredMessage,
    /// Settles this delivery, and only this one.
    pub lock_token: String,
    /// When the lock runs out.
    pub locked_until: Timestamp,
}

/// Which session a receive is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRef {
    /// The session id.
    pub session_id: String,
    /// The session lock token from `accept_session`.
    pub lock_token: String,
}

/// A peek-lock receive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiveParams {
    /// The queue.
    pub queue: EntityName,
    /// At most this many messages.
    pub max: u32,
    /// Lock duration.
    pub lock_ms: u64,
    /// Time of the receive.
    pub now: Timestamp,
    /// For session queues: the session held by the receiver.
    pub session: Option<SessionRef>,
}

/// What a receive delivered, and what it settled on the way.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReceiveOutcome {
    /// Locked deliveries, oldest first.
    pub deliveries: Vec<Delivery>,
    /// Side effects (expiries, dead letters) applied in the same commit.
    pub effects: Effects,
}

/// Side effects of an operation that the broker turns into metrics and logs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Effects {
    /// Messages moved to a dead-letter store or queue.
    pub dead_lettered: Vec<DeadLettered>,
    /// Messages removed because they expired on a queue that does not dead-letter on expiry.
    pub expired: Vec<MessageRef>,
    /// Locks that ran out unsettled (each counts as an abandon).
    pub lock_expired: Vec<MessageRef>,
    /// Queues on which something became receivable (long polls there should look again).
    pub woken: Vec<EntityName>,
}

impl Effects {
    /// Adds `queue` to the woken queues, once.
    pub fn wake(&mut self, queue: &EntityName) {
        if !self.woken.contains(queue) {
            self.woken.push(queue.clone());
        }
    }

    /// Adds `other` to `self`.
    pub fn extend(&mut self, other: Effects) {
        self.dead_lettered.extend(other.dead_lettered);
        self.expired.extend(other.expired);
        self.lock_expired.extend(other.lock_expired);
        self.woken.extend(other.woken);
    }
}

/// A message named in logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRef {
    /// Queue.
    pub queue: EntityName,
    /// Message id.
    pub message_id: String,
    /// Sequence number.
    pub sequence: i64,
    /// Deliveries so far.
    pub delivery_count: u32,
}

/// A message that was dead-lettered.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLettered {
    /// The message.
    pub message: MessageRef,
    /// The record id.
    pub dead_letter_id: String,
    /// Why.
    pub reason: DeadLetterReason,
    /// If forwarded to a dead-letter queue, that queue and the new sequence number.
    pub forwarded_to: Option<(EntityName, i64)>,
    /// Whether the record is a replay candidate (written live on an entity whose policy
    /// enables automatic replay): the broker wakes its replay worker.
    pub candidate: bool,
    /// The dead-letter queue that could not take it, when the record fell back to the
    /// entity's own store (the broker counts and logs it at error level).
    pub fell_back_from: Option<EntityName>,
    /// The case opened for the record, if one was (it is not settled by automatic replay).
    pub case_opened: bool,
}

/// The longest `last_attempt` of a [`SettleAction::Abandon`] a caller hands a store, in bytes:
/// the push dispatcher shortens the attempt's error so that its evidence fits.
pub const MAX_LAST_ATTEMPT_BYTES: usize = 2048;

/// One settlement in a (batch) settle call.
#[derive(Debug, Clone, PartialEq)]
pub struct Settlement {
    /// The lock token of the delivery.
    pub lock_token: String,
    /// What to do.
    pub action: SettleAction,
}

/// A settlement action.
#[derive(Debug, Clone, PartialEq)]
pub enum SettleAction {
    /// Remove the message.
    Complete,
    /// Release the lock; visible again after the delay or the queue's backoff.
    Abandon {
        /// Delay overriding the backoff.
        delay_ms: Option<u64>,
        /// The evidence of the failed attempt that led to the abandon (the push
        /// dispatcher's, a small JSON object it bounds by
        /// [`MAX_LAST_ATTEMPT_BYTES`](crate::MAX_LAST_ATTEMPT_BYTES)), stored on the row
        /// in the same write as the abandon and shown as
        /// [`StoredMessage::last_attempt`] from then on. `None` keeps what the row holds:
        /// an abandon by a consumer says nothing about push attempts. Other settlements
        /// leave it as it is.
        last_attempt: Option<String>,
    },
    /// Set aside; receivable by sequence number only.
    Defer,
    /// Move to the dead-letter target.
    DeadLetter {
        /// Reason code.
        reason: String,
        /// Description.
        description: Option<String>,
        /// The broker decided by its own policy (a push subscription's retry policy gave
        /// the event up): the record says `routed_by: broker`, and a missing dead-letter
        /// queue falls back to the own store as for the broker's other dead letters.
        /// False for an application's settlement.
        by_broker: bool,
        /// The consumer and rule version that classified an application's dead letter
        /// (kept on the record and its case); empty for the broker's.
        classifier: redrive_core::Classifier,
    },
    /// Extend the lock.
    Renew {
        /// New lock duration from now.
        lock_ms: u64,
        /// Latest end of the lock, in milliseconds after the receive that took it: a
        /// renewal that would run past it is refused with
        /// [`StoreError::LockCapExceeded`](crate::StoreError::LockCapExceeded) and changes
        /// nothing (SQS caps a received message's visibility at 12 hours from the
        /// receive). `None`: no cap.
        cap_from_receive_ms: Option<u64>,
    },
}

/// Result of one settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// Sequence number of the message.
    pub sequence: i64,
    /// Its id.
    pub message_id: String,
    /// Deliveries so far.
    pub delivery_count: u32,
    /// New lock expiry (renew).
    pub locked_until: Option<Timestamp>,
    /// Record id (dead-letter, or abandon at max count).
    pub dead_letter_id: Option<String>,
}

/// Results of a settle call, one per item in order, plus side effects.
#[derive(Debug, Default)]
pub struct SettleOutcome {
    /// Per item.
    pub results: Vec<Result<Settled, crate::StoreError>>,
    /// Side effects.
    pub effects: Effects,
}

/// A held session lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLock {
    /// The session.
    pub session_id: String,
    /// The token that proves it is held.
    pub lock_token: String,
    /// When it runs out.
    pub locked_until: Timestamp,
}

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SweepOutcome {
    /// Side effects.
    pub effects: Effects,
    /// True when `limit` was reached and more is due.
    pub more: bool,
}

/// A dead-letter record with its evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetterRecord {
    /// Stable, time-sortable id (`dl_…`).
    pub id: String,
    /// The queue whose dead-letter store holds it.
    pub queue: EntityName,
    /// The area it is in.
    pub area: Area,
    /// Original message id.
    pub message_id: String,
    /// Original sequence number on the source queue.
    pub sequence: i64,
    /// Session it belonged to (the ordering scope it left).
    pub session_id: Option<String>,
    /// The exact bytes.
    pub body: Vec<u8>,
    /// Lower-case hex SHA-256 of `body`.
    pub body_sha256: String,
    /// MIME type.
    pub content_type: Option<String>,
    /// Application properties.
    pub properties: Properties,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// Message type.
    pub message_type: Option<String>,
    /// Intent.
    pub intent: Option<String>,
    /// Valid-until.
    pub valid_until: Option<Timestamp>,
    /// Reason code.
    pub reason: String,
    /// Description.
    pub description: Option<String>,
    /// Deliveries before it was dead-lettered.
    pub delivery_count: u32,
    /// Whether that count is exact.
    pub count_quality: EvidenceQuality,
    /// First delivery.
    pub first_delivered_at: Option<Timestamp>,
    /// Last delivery.
    pub last_delivered_at: Option<Timestamp>,
    /// Original enqueue time.
    pub enqueued_at: Timestamp,
    /// When it was dead-lettered.
    pub dead_lettered_at: Timestamp,
    /// The version of the routing policy in force at that moment: the queue's, for a
    /// record routed here; the source's, for an import whose source named it; `None` when
    /// nothing says (an import whose source did not), never a version invented for it.
    pub policy_version: Option<u64>,
    /// Broker (policy) or application; `import` for a record read from elsewhere.
    pub route: RouteKind,
    /// If the message went on to a dead-letter queue: that queue and its sequence there.
    pub forwarded_to: Option<(EntityName, i64)>,
    /// Deliveries from the dead-letter store (peek-lock receives of the record).
    pub dlq_delivery_count: u32,
    /// Lock expiry while a dead-letter receiver holds it.
    pub locked_until: Option<Timestamp>,
    /// What `body` holds: one message, or a list of events (an imported Event Grid blob).
    pub format: RecordFormat,
    /// Automatic replay's bookkeeping of this record.
    pub replay: ReplayMark,
    /// The judgement of automatic replay that put it where it is (a quarantined or
    /// archived record), if any.
    pub judgement: Option<Judgement>,
    /// Whether the configured dead-letter destination took it: `fell_back` when the
    /// dead-letter queue was missing or unfit and the record stayed in this store (the
    /// attempt evidence is then at most incomplete), `unknown` for an import that does not
    /// say.
    pub route_target: redrive_core::case::RouteTarget,
    /// The dead-letter queue that could not take it (`fell_back` only).
    pub missing_target: Option<String>,
    /// How the evidence says the delivery was separated: `broker_routed` or
    /// `application_quarantined` for a record routed here; for an import, what its
    /// source said (an export's route, a provider's reason), `route_indeterminate` when it
    /// said nothing of it.
    pub route_kind: redrive_core::case::Route,
    /// The rule it was routed under, recorded at routing (an import: as its source named
    /// it); `None` when nothing names one.
    pub route_rule: Option<redrive_core::case::RouteRule>,
    /// The consumer that applied an application's reason, when it said (bounded by
    /// [`redrive_core::dead_letter::check_classifier`]).
    pub consumer: Option<String>,
    /// The version of the consumer's classification rule, when it said.
    pub rule_version: Option<String>,
}

/// Automatic replay's bookkeeping of a dead-letter record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayMark {
    /// A live record with a due time is a replay candidate: the replay worker judges it
    /// at or after that time. Written in the transaction that makes the record live on
    /// an entity whose policy enables replay; cleared when it leaves the live area.
    pub due_at: Option<Timestamp>,
    /// Judgements of this record that failed (the count resets when it is restored).
    pub failures: u32,
    /// The error of the last failed judgement.
    pub last_error: Option<String>,
}

/// The part of a live record a judgement quarantines apart from the rest: written
/// create-if-absent under an id derived from the record and the cause
/// ([`redrive_core::judgement::quarantine_copy_id`]), with every column of evidence copied
/// from the record and `body` holding only the quarantined events.
#[derive(Debug, Clone, PartialEq)]
pub struct QuarantineCopy {
    /// The record it is copied from.
    pub from: String,
    /// The copy's id.
    pub id: String,
    /// The quarantined events (their ids without replay counts).
    pub body: Vec<u8>,
    /// Lower-case hex SHA-256 of `body`.
    pub body_sha256: String,
    /// The judgement, with its cause.
    pub judgement: Judgement,
}

/// A live record quarantined whole by a judgement.
#[derive(Debug, Clone, PartialEq)]
pub struct Quarantine {
    /// The judgement, with its cause.
    pub judgement: Judgement,
    /// A new body: for a record of events, their ids written back without replay counts;
    /// for a message that is a structured CloudEvent, its `id` so written. `None` keeps
    /// the body (any other message). The record's `message_id` is written back by the
    /// store.
    pub body: Option<Vec<u8>>,
}

/// How the replay of a live record ends once its events were republished.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayFinish {
    /// Moved to the archived area with the judgement (some events were republished).
    Archive(Judgement),
    /// Deleted: every event is in a quarantine copy, which is the complete record now.
    Delete,
}

/// Which live records of a queue the drain at start makes candidates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainRule {
    /// The queue (a subscription's: its internal queue).
    pub queue: EntityName,
    /// Only records dead-lettered before this (older than the entity's delivery window).
    pub older_than: Timestamp,
    /// When they become due.
    pub due_at: Timestamp,
}

/// Which records of a queue the retention rule deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionRule {
    /// The queue.
    pub queue: EntityName,
    /// Records (every area) dead-lettered before this.
    pub before: Timestamp,
}

/// The replay counts of one queue's dead-letter store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayCounts {
    /// The queue.
    pub queue: EntityName,
    /// Records in the live area.
    pub live: u64,
    /// Live records that are replay candidates.
    pub candidates: u64,
    /// Live records whose last judgement failed.
    pub failing: u64,
    /// Live records that failed at least the flag threshold of times.
    pub flagged: u64,
    /// Records this build cannot read (see [`UndecodableRecord`]): live ones a replay
    /// claim set aside, and records whose area or cause cannot be read. A set-aside live
    /// record counts in `live` too, but not as a candidate.
    pub undecodable: u64,
    /// Records in the archived area.
    pub archived: u64,
    /// Records in the quarantine area, by the cause of their judgement (`None`: moved
    /// there by an operator).
    pub quarantined: std::collections::BTreeMap<Option<QuarantineCause>, u64>,
}

impl ReplayCounts {
    /// All zero, for `queue`.
    pub fn empty(queue: EntityName) -> ReplayCounts {
        ReplayCounts {
            queue,
            live: 0,
            candidates: 0,
            failing: 0,
            flagged: 0,
            undecodable: 0,
            archived: 0,
            quarantined: std::collections::BTreeMap::new(),
        }
    }
}

/// A dead-letter record whose stored row this build cannot read: a column holds a value
/// outside its domain (an unknown quality, state or area, JSON that does not parse),
/// written by hand or by another build. Such a row never fails the read of the others:
/// a replay claim sets it aside (it is no longer claimed, and counts as `undecodable` in
/// [`ReplayCounts`]), a listing names it here instead of its record, a dead-letter
/// receive passes over it, and an operation on it alone answers
/// [`StoreError::DeadLetterUndecodable`](crate::StoreError::DeadLetterUndecodable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndecodableRecord {
    /// The queue, as stored (it may itself be what cannot be read).
    pub queue: String,
    /// The record id, as stored.
    pub id: String,
    /// What cannot be read: the column and why.
    pub reason: String,
}

/// What a replay claim took: the records to judge, and the records it set aside because
/// they cannot be read (each reported by the one claim that set it aside).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayClaim {
    /// Claimed records, in claim order.
    pub records: Vec<DeadLetterRecord>,
    /// Records set aside by this claim.
    pub undecodable: Vec<UndecodableRecord>,
}

/// A page of one queue's dead-letter store: the records, and the rows of the page that
/// cannot be read, by id (the page's limit counts both).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeadLetterPage {
    /// The records, by id.
    pub records: Vec<DeadLetterRecord>,
    /// The rows of the page this build cannot read, by id.
    pub undecodable: Vec<UndecodableRecord>,
}

impl DeadLetterPage {
    /// Rows the page holds, read or not.
    pub fn len(&self) -> usize {
        self.records.len() + self.undecodable.len()
    }

    /// Whether the page holds no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The greatest id of the page (the cursor of the next one).
    pub fn last_id(&self) -> Option<&str> {
        let a = self.records.last().map(|r| r.id.as_str());
        let b = self.undecodable.last().map(|u| u.id.as_str());
        a.max(b)
    }
}

/// A page request over a dead-letter store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterQuery {
    /// The queue.
    pub queue: EntityName,
    /// The area.
    pub area: Area,
    /// Only this reason code.
    pub reason: Option<String>,
    /// Dead-lettered at or after.
    pub from: Option<Timestamp>,
    /// Dead-lettered before.
    pub to: Option<Timestamp>,
    /// Records after this id (the cursor).
    pub after: Option<String>,
    /// Page size.
    pub limit: u32,
    /// The narrower filters (type, source, evidence quality, text, signature).
    pub filter: RecordFilter,
}

/// The filters of a dead-letter listing beyond reason and time, each pushed into the
/// store's query (with keyset paging kept). Every one is bounded by the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordFilter {
    /// Only this message type.
    pub message_type: Option<String>,
    /// Only this source ([`crate::failure::source_of`], as stored).
    pub source: Option<String>,
    /// Only this delivery-count quality.
    pub quality: Option<redrive_core::EvidenceQuality>,
    /// Only descriptions containing this text, ASCII letters compared without case.
    pub text: Option<String>,
    /// Only records of this failure signature ([`crate::failure::FailureShape::id`]).
    pub signature: Option<String>,
}

/// The longest `text` filter of a dead-letter listing, characters.
pub const MAX_TEXT_FILTER: usize = 200;

/// A locked dead-letter record.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetterDelivery {
    /// The record.
    pub record: DeadLetterRecord,
    /// Settles this delivery.
    pub lock_token: String,
    /// When the lock runs out.
    pub locked_until: Timestamp,
}

// ---- topics and subscriptions ---------------------------------------------------------

// The topic and subscription vocabulary is redrive-events' (one definition shared with
// the wire types); re-exported so the backends name it from here.
pub use redrive_events::subscription::{
    DeadLetterDestination, DeliverySpec, EndpointValidation, MAX_TOPIC_DEDUP_WINDOW_MS, PushMode,
    SubscriptionKind, TopicPolicy,
};

/// A topic.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicRecord {
    /// Name.
    pub name: EntityName,
    /// Policy.
    pub policy: TopicPolicy,
    /// 1 at creation.
    pub version: u64,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// What a subscription is.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionSpec {
    /// Pull or push.
    pub kind: SubscriptionKind,
    /// Which events it takes.
    #[serde(default)]
    pub filter: redrive_events::Filter,
    /// Retries of a push subscription.
    #[serde(default)]
    pub retry_policy: redrive_events::RetryPolicy,
    /// Delivery settings of a push subscription.
    #[serde(default)]
    pub delivery: DeliverySpec,
    /// Dead-letter destination.
    pub dead_letter: DeadLetterDestination,
    /// A paused subscription keeps receiving events; no delivery attempts are made.
    #[serde(default)]
    pub paused: bool,
    /// Automatic replay of the subscription's live dead letters: the subscription's own
    /// policy (versioned with it). The store mirrors it onto the subscription's queue
    /// ([`crate::skeleton::entities::mirror_subscription`]) in the transaction that
    /// creates or changes the subscription, so that the dead-letter path reads one policy.
    /// A spec stored before replay existed reads as off.
    #[serde(default)]
    pub auto_replay: redrive_core::AutoReplay,
    /// Retention of the subscription's dead-letter records, every area, ms (default 30
    /// days; 0 keeps them forever). Mirrored onto its queue like `auto_replay`.
    #[serde(default = "redrive_core::policy::default_dead_letter_retention_ms")]
    pub dead_letter_retention_ms: u64,
}

/// A subscription to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSubscription {
    /// The topic.
    pub topic: EntityName,
    /// The subscription's name (unique per topic).
    pub name: EntityName,
    /// Its internal queue (`<topic>.<subscription>`), created with it.
    pub queue: EntityName,
    /// The internal queue's policy.
    pub queue_policy: QueuePolicy,
    /// The spec.
    pub spec: SubscriptionSpec,
}

/// A subscription as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionRecord {
    /// The topic.
    pub topic: EntityName,
    /// Name.
    pub name: EntityName,
    /// Its internal queue.
    pub queue: EntityName,
    /// The spec.
    pub spec: SubscriptionSpec,
    /// 1 at creation, +1 on every update.
    pub version: u64,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// A change to a subscription; fields left `None` stay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubscriptionUpdate {
    /// Pause or resume.
    pub paused: Option<bool>,
    /// A new filter.
    pub filter: Option<redrive_events::Filter>,
    /// A partial change of the auto-replay policy, validated by the caller.
    pub auto_replay: Option<redrive_core::AutoReplayPatch>,
    /// A new dead-letter retention, validated by the caller.
    pub dead_letter_retention_ms: Option<u64>,
}

/// One event of a publish: its duplicate-detection key and the messages it fans out to.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishEvent {
    /// `source` + `'\n'` + `id`.
    pub dedup_key: String,
    /// One message per matching subscription, on that subscription's queue.
    pub deliveries: Vec<(EntityName, NewMessage)>,
}

/// The answer to one published event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// The key was seen inside the topic's window: accepted, not fanned out again.
    pub duplicate: bool,
}
