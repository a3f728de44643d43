//! Helpers of the skeleton's unit tests.

use redrive_core::{EntityName, Properties};

use crate::NewMessage;

/// A valid entity name.
pub(crate) fn name(s: &str) -> EntityName {
    s.parse().unwrap_or_else(|e| panic!("{e}"))
}

/// A plain message with an empty body.
pub(crate) fn message(id: &str) -> NewMessage {
    NewMessage {
        message_id: id.to_owned(),
        body: Vec::new(),
        content_type: None,
        properties: Properties::new(),
        correlation_id: None,
        session_id: None,
        message_type: None,
        intent: None,
        valid_until: None,
        scheduled_at: None,
        expires_at: None,
    }
}
