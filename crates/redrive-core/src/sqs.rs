//! The SQS-only queue attributes that the native policy cannot hold, kept as an optional
//! section of [`QueuePolicy`](crate::QueuePolicy) so that an SQS queue and a native queue
//! are the same object.
//!
//! The native fields carry what they can (maximum message size, retention as the default
//! time to live, the redrive policy as max delivery count plus dead-letter queue); this
//! section keeps the rest in SQS units (seconds), exactly as the SQS API states them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Longest SQS visibility timeout, in seconds (12 hours).
pub const MAX_VISIBILITY_TIMEOUT_S: u32 = 43_200;
/// Longest SQS delivery delay, in seconds (15 minutes).
pub const MAX_DELAY_S: u32 = 900;
/// Longest SQS receive wait, in seconds.
pub const MAX_RECEIVE_WAIT_S: u32 = 20;
/// Shortest SQS retention period, in seconds (1 minute).
pub const MIN_RETENTION_S: u32 = 60;
/// Longest SQS retention period, in seconds (14 days).
pub const MAX_RETENTION_S: u32 = 1_209_600;
/// Most tags on one queue.
pub const MAX_TAGS: usize = 50;

/// SQS attributes of a queue that have no native policy field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SqsAttributes {
    /// `VisibilityTimeout` (0–43200 s, default 30).
    pub visibility_timeout_s: u32,
    /// `DelaySeconds` (0–900 s, default 0).
    pub delay_s: u32,
    /// `ReceiveMessageWaitTimeSeconds` (0–20 s, default 0).
    pub receive_wait_s: u32,
    /// `MessageRetentionPeriod` (60–1209600 s, default 345600 = 4 days). Also the native
    /// `default_ttl_ms`.
    pub retention_s: u32,
    /// `RedriveAllowPolicy`, the raw JSON text as the client gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redrive_allow_policy: Option<String>,
    /// Queue tags.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Attributes SQS accepts and reports but redrive does not act on (`Policy`,
    /// `KmsMasterKeyId`, `KmsDataKeyReusePeriodSeconds`, `SqsManagedSseEnabled`), by their
    /// SQS names, as given.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub other_attributes: BTreeMap<String, String>,
}

impl Default for SqsAttributes {
    fn default() -> Self {
        SqsAttributes {
            visibility_timeout_s: 30,
            delay_s: 0,
            receive_wait_s: 0,
            retention_s: 345_600,
            redrive_allow_policy: None,
            tags: BTreeMap::new(),
            other_attributes: BTreeMap::new(),
        }
    }
}

impl SqsAttributes {
    /// The first field out of its SQS range: `(field, why)`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.visibility_timeout_s > MAX_VISIBILITY_TIMEOUT_S {
            return Err((
                "sqs.visibility_timeout_s",
                format!("must be between 0 and {MAX_VISIBILITY_TIMEOUT_S}"),
            ));
        }
        if self.delay_s > MAX_DELAY_S {
            return Err((
                "sqs.delay_s",
                format!("must be between 0 and {MAX_DELAY_S}"),
            ));
        }
        if self.receive_wait_s > MAX_RECEIVE_WAIT_S {
            return Err((
                "sqs.receive_wait_s",
                format!("must be between 0 and {MAX_RECEIVE_WAIT_S}"),
            ));
        }
        if !(MIN_RETENTION_S..=MAX_RETENTION_S).contains(&self.retention_s) {
            return Err((
                "sqs.retention_s",
                format!("must be between {MIN_RETENTION_S} and {MAX_RETENTION_S}"),
            ));
        }
        if self.tags.len() > MAX_TAGS {
            return Err(("sqs.tags", format!("at most {MAX_TAGS} tags")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_sqs_defaults_and_valid() {
        let a = SqsAttributes::default();
        assert_eq!(a.visibility_timeout_s, 30);
        assert_eq!(a.retention_s, 345_600);
        assert!(a.check().is_ok());
        let bad = SqsAttributes {
            retention_s: 59,
            ..SqsAttributes::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "sqs.retention_s");
        let bad = SqsAttributes {
            visibility_timeout_s: 43_201,
            ..SqsAttributes::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "sqs.visibility_timeout_s");
    }
}
