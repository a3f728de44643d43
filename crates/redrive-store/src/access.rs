//! Rows of the access model: API tokens and the audit log.

use redrive_core::Timestamp;
use redrive_core::access::Grant;
use redrive_core::audit::ChainedEntry;
pub use redrive_core::audit::{AuditFields, ChainHead};

/// A token to store. The secret itself is never stored: only its SHA-256 (`secret_hash`,
/// lowercase hex), looked up on every request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    /// `tok_` and 16 hex digits; how the token is named in lists, revocation and the
    /// audit log.
    pub id: String,
    /// A name for people (unique among tokens that are not revoked).
    pub name: String,
    /// SHA-256 of the secret (`rdt_…`), lowercase hex.
    pub secret_hash: String,
    /// What the token may do.
    pub grants: Vec<Grant>,
    /// Token id of the admin who created it (`bootstrap` for the first admin token,
    /// `anonymous` when authentication is off).
    pub created_by: String,
    /// After this time the token is refused; `None`: never expires.
    pub expires_at: Option<Timestamp>,
    /// SQS credentials of the token, when the token is also for the SQS endpoint.
    pub sqs: Option<SqsCredentials>,
}

/// An SQS access key pair bound to a token.
///
/// Unlike a token's secret, the secret access key itself is stored: Signature Version 4
/// is an HMAC over the request keyed by a key derived from the secret for each day, region
/// and service, so checking a signature takes the secret (or a value that signs as well as
/// it does), never a one-way hash of it. It is shown once, in the answer that creates the
/// token, and nowhere after (token lists, the audit log, logs: `Debug` hides it);
/// docs/operations.md says how to protect the store that holds it.
#[derive(Clone, PartialEq, Eq)]
pub struct SqsCredentials {
    /// The access key id clients put in their credential scope.
    pub access_key_id: String,
    /// The secret access key they sign with.
    pub secret_access_key: String,
}

impl std::fmt::Debug for SqsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"***")
            .finish()
    }
}

/// A stored token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    /// Everything it was created with.
    pub token: NewToken,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
}

impl TokenRecord {
    /// Whether the token may be used at `now`: not revoked and not expired.
    pub fn is_active(&self, now: Timestamp) -> bool {
        self.revoked_at.is_none() && self.token.expires_at.is_none_or(|t| now < t)
    }
}

/// A stored audit entry: numbered and chained by the store (see
/// `redrive_core::audit::entry_hash`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// Its number in the log: increasing.
    pub seq: i64,
    /// Hash of the entry before it.
    pub prev_hash: String,
    /// Its own hash.
    pub hash: String,
    /// What it says.
    pub fields: AuditFields,
}

/// The entry as `redrive_core::audit::verify` checks it.
impl From<AuditEntry> for ChainedEntry {
    fn from(e: AuditEntry) -> Self {
        ChainedEntry {
            seq: e.seq,
            prev_hash: e.prev_hash,
            hash: e.hash,
            fields: e.fields,
        }
    }
}

/// A page of the audit log, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only this actor (token id).
    pub actor_id: Option<String>,
    /// Only this entity.
    pub entity: Option<String>,
    /// Only this action.
    pub action: Option<String>,
    /// Only entries at or after this time.
    pub from: Option<Timestamp>,
    /// Only entries before this time.
    pub to: Option<Timestamp>,
    /// Only entries with a larger `seq` (the cursor).
    pub after_seq: Option<i64>,
    /// At most this many (the store caps it at 1,000).
    pub limit: u32,
}

/// Most entries one audit page returns.
pub const MAX_AUDIT_PAGE: u32 = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_the_sqs_secret() {
        let c = SqsCredentials {
            access_key_id: "RDKAAAA".to_owned(),
            secret_access_key: "s3cr3t-access-key".to_owned(),
        };
        let shown = format!("{c:?} {:?}", Some(&c));
        assert!(shown.contains("RDKAAAA"), "{shown}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
    }
}
