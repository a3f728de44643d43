//! Failures by signature: `GET /v1/failures`, dead letters across queues grouped by the
//! shape of their failure.

use serde::{Deserialize, Serialize};

/// One failure signature of one queue and area: what its dead letters have in common,
/// how many there were and when.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FailureSignature {
    /// Stable id (32 hex digits): a hash of the queue, reason, route kind, outcome class,
    /// message type, source and masked description. Pass it as `signature` to
    /// `GET /v1/queues/{name}/dead-letters` for the records.
    pub id: String,
    /// The queue whose dead-letter store holds the records.
    pub queue: String,
    /// The area counted (`live`, `archived`, `quarantine`).
    pub area: String,
    /// The reason code.
    pub reason: String,
    /// How the evidence shows the messages were separated (`broker_routed`,
    /// `application_quarantined`, `route_indeterminate`).
    pub route_kind: Option<String>,
    /// The class of the last outcome: `http_4xx`, `http_5xx`, … (a push attempt's
    /// status), `timeout`, `connection_error`, `tls_error` (a push attempt's error),
    /// `handler_error` (the application dead-lettered it); null when the evidence has
    /// none (a delivery threshold, an expiry, an import).
    pub outcome_class: Option<String>,
    /// The messages' type.
    pub message_type: Option<String>,
    /// The messages' source (their `source` property, or a structured CloudEvent's).
    pub source: Option<String>,
    /// The description with its variable parts (ids, numbers, timestamps) masked as
    /// `<id>` and `<n>` (a push dead letter's: its last delivery error's).
    pub description: String,
    /// Records that entered the area with this signature (written there or moved in).
    pub count: u64,
    /// Records of this signature in the area now.
    pub live: u64,
    /// Earliest dead-lettering time of those records.
    pub first_seen: String,
    /// Latest dead-lettering time of those records.
    pub last_seen: String,
    /// Records that entered per hour of their dead-lettering, the last 24 hours, oldest
    /// first (the last bucket is the current hour).
    pub sparkline: Vec<u64>,
}

/// A page of failure signatures, newest `last_seen` first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FailurePage {
    /// The signatures, newest `last_seen` first, then by id.
    pub signatures: Vec<FailureSignature>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}
