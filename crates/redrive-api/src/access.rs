//! Tokens and the audit log (`/v1/tokens`, `/v1/audit`): admin only.

use serde::{Deserialize, Serialize};

/// The response header with which a server running without authentication answers a
/// request that carried an `Authorization` header (value `off`): the token was not read,
/// so a client can say so rather than take it as working.
pub const AUTHENTICATION_HEADER: &str = "redrive-authentication";

/// `POST /v1/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// A name for people: 1 to 64 letters, digits, `-`, `_` or `.`.
    pub name: String,
    /// Grants: `role`, `role:entity` or `role:prefix*`; roles are producer, consumer,
    /// operator, replayer, payload-reader and admin (admin unscoped only).
    pub grants: Vec<String>,
    /// RFC 3339 time after which the token is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Also make SQS credentials (an access key id and secret access key) for it.
    #[serde(default)]
    pub sqs: bool,
}

/// A token as listed (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    /// `tok_…`.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its grants.
    pub grants: Vec<String>,
    /// Who created it (a token id, `bootstrap` or `anonymous`).
    pub created_by: String,
    /// When.
    pub created_at: String,
    /// When it stops working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// When it was revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
    /// `active`, `revoked` or `expired`.
    pub status: String,
    /// Its SQS access key id, if it has SQS credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqs_access_key_id: Option<String>,
}

/// The answer to `POST /v1/tokens`: the only time the secret is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedToken {
    /// The token as listed.
    #[serde(flatten)]
    pub token: Token,
    /// The secret to send as `Authorization: Bearer …`.
    pub secret: String,
    /// The SQS secret access key, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqs_secret_access_key: Option<String>,
}

/// `GET /v1/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenList {
    /// Every token, oldest first.
    pub tokens: Vec<Token>,
}

/// One audit entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Its number.
    pub seq: i64,
    /// When.
    pub at: String,
    /// Token id of the actor (`anonymous`, `system`).
    pub actor_id: String,
    /// The token's name.
    pub actor_name: String,
    /// What was done.
    pub action: String,
    /// The queue or topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// Ids it was done to.
    pub targets: Vec<String>,
    /// `ok`, `denied`, `error:<kind>`, or a task's end state.
    pub outcome: String,
    /// The client's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// SHA-256 of the entry before.
    pub prev_hash: String,
    /// Its own SHA-256.
    pub hash: String,
}

/// `GET /v1/audit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPage {
    /// Entries, oldest first.
    pub entries: Vec<AuditEntry>,
    /// Pass as `cursor` for the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `POST /v1/audit/verify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditVerification {
    /// Whether the chain holds.
    pub ok: bool,
    /// Entries checked.
    pub entries: u64,
    /// First entry's number.
    pub first_seq: i64,
    /// Last entry's number.
    pub last_seq: i64,
    /// The number of the newest entry as the chain's head records it (absent: the store
    /// has no head). Keep it, with `head_hash`, outside the server: a later head with a
    /// lower number, or a verification that no longer finds this entry, shows that the
    /// log was rewritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_seq: Option<i64>,
    /// The hash of that entry as the head records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_hash: Option<String>,
    /// Where and how it is broken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broken_at: Option<i64>,
    /// What is wrong there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}
