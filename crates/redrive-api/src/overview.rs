//! The console's first look: who the caller is (`GET /v1/whoami`), every entity it may
//! see with its counts and what needs a person (`GET /v1/overview`), and a queue's recent
//! activity in ten-second points (`GET /v1/queues/{name}/series`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `GET /v1/whoami`: the caller as the server authenticated it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whoami {
    /// Whether the server requires tokens (`--auth`). Without it anyone who can reach it
    /// can do anything.
    pub auth: bool,
    /// The token's name, or `anonymous` on a server without authentication.
    pub actor: String,
    /// The token's id (`tok_…`), or `anonymous`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    /// The token's grants, as `/v1/tokens` lists them (`role`, `role:entity`,
    /// `role:prefix*`); empty without authentication (anyone may do anything).
    pub grants: Vec<String>,
    /// The distinct roles of the grants, in the order of the roles' table (`producer`,
    /// `consumer`, `operator`, `replayer`, `payload-reader`, `admin`).
    #[serde(default)]
    pub roles_summary: Vec<String>,
}

/// A queue's message counts and its dead-letter store's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverviewCounts {
    /// Available and visible now.
    pub active: u64,
    /// Visible only later (scheduled, or backing off before a redelivery).
    pub scheduled: u64,
    /// Locked by a receiver.
    pub locked: u64,
    /// Deferred.
    pub deferred: u64,
    /// Records in the live area of the dead-letter store.
    pub dead_lettered: u64,
    /// Records in the quarantine area of the dead-letter store.
    pub quarantined: u64,
}

/// A queue's automatic replay as the overview shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverviewReplay {
    /// `on` (the policy replays dead letters) or `off` (it does not, but records are
    /// quarantined or flagged).
    pub state: String,
    /// Most rounds an event goes through automatic replay (when on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replay_attempts: Option<u32>,
    /// Live candidates that failed at least the node's flag threshold of judgements.
    pub flagged: u64,
    /// Records in quarantine.
    pub quarantined: u64,
}

/// One queue (or a subscription's queue) of the overview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverviewQueue {
    /// The queue's name (a subscription's is `<topic>.<subscription>`).
    pub name: String,
    /// `queue` or `subscription`.
    pub kind: String,
    /// The topic of a subscription's queue.
    pub topic: Option<String>,
    /// The subscription of a subscription's queue.
    pub subscription: Option<String>,
    /// The counts.
    pub counts: OverviewCounts,
    /// Age of the oldest message on the queue (any state), if any.
    pub oldest_message_age_ms: Option<u64>,
    /// Automatic replay: `null` when it is off and nothing is quarantined or flagged.
    pub replay: Option<OverviewReplay>,
}

/// A push subscription's delivery health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverviewPush {
    /// The endpoint.
    pub endpoint: String,
    /// `healthy` (its last attempt was delivered, or none was made), `failing` (its last
    /// attempt failed), `paused` (the subscription is paused).
    pub health: String,
    /// Events waiting for a retry after a failed attempt.
    pub in_backoff: u64,
    /// Attempts that failed on this node since it started.
    #[serde(default)]
    pub failed_attempts: u64,
    /// Events delivered on this node since it started.
    #[serde(default)]
    pub delivered: u64,
}

/// One subscription of a topic in the overview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverviewSubscription {
    /// The subscription's name.
    pub name: String,
    /// Its backing queue (listed in `queues` with kind `subscription`).
    pub queue: String,
    /// Push delivery, for a push subscription.
    pub push: Option<OverviewPush>,
}

/// One topic of the overview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverviewTopic {
    /// The topic's name.
    pub name: String,
    /// Its subscriptions the caller may see, by name.
    pub subscriptions: Vec<OverviewSubscription>,
}

/// Open recovery cases of the queues the caller may read cases of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverviewCases {
    /// Open (not closed).
    pub open: u64,
    /// Open and past their review deadline.
    pub overdue: u64,
    /// Open and escalated.
    pub escalated: u64,
}

/// Something that needs a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Highlight {
    /// `dead_letters`, `quarantine`, `flagged_replay`, `case_overdue`, `case_escalated`
    /// or `push_unhealthy`.
    pub kind: String,
    /// The queue (or `<topic>/<subscription>` for a push subscription) it is about.
    pub entity: Option<String>,
    /// How many.
    pub count: u64,
    /// In words: `3 dead letters`.
    pub detail: String,
}

/// `GET /v1/overview`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overview {
    /// When the server looked (RFC 3339).
    pub generated_at: String,
    /// Every queue and subscription queue the caller may see, by name.
    pub queues: Vec<OverviewQueue>,
    /// Every topic the caller may see, by name.
    pub topics: Vec<OverviewTopic>,
    /// Open cases of the queues the caller may read cases of.
    pub cases: OverviewCases,
    /// Flagged replay records of the queues the caller sees.
    pub flagged_replays: u64,
    /// What needs a person: dead letters, quarantine, flagged replays, overdue or
    /// escalated cases, failing push subscriptions, the largest first within a kind.
    pub highlights: Vec<Highlight>,
    /// No queue and no topic the caller may see: a fresh install (or a token without
    /// grants on any entity).
    pub empty: bool,
}

/// One ten-second point of a queue's activity on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesPoint {
    /// The start of the point's interval (RFC 3339).
    pub at: String,
    /// Messages sent (published events too, on a subscription's queue).
    pub sent: u64,
    /// Messages handed out by receives.
    pub received: u64,
    /// Settled complete.
    pub completed: u64,
    /// Settled abandon.
    pub abandoned: u64,
    /// Dead-lettered, for any reason.
    pub dead_lettered: u64,
    /// Dead-lettered, by reason code.
    pub dead_lettered_by_reason: BTreeMap<String, u64>,
    /// Push deliveries accepted by the endpoint.
    pub push_delivered: u64,
    /// Push attempts that failed.
    pub push_failed: u64,
}

/// `GET /v1/queues/{name}/series`: this node's in-memory series of the queue, oldest point
/// first, one point per interval from the oldest it keeps to the current one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Series {
    /// The queue.
    pub queue: String,
    /// Length of each point's interval (10,000 ms).
    pub interval_ms: u64,
    /// The points, oldest first.
    pub points: Vec<SeriesPoint>,
}
