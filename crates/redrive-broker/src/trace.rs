//! What the operation spans may say. Every public operation of the broker runs in a DEBUG
//! span named after it (`#[tracing::instrument(level = "debug", skip_all, fields(…))]`)
//! with the queue or topic, and the message id or lock token where the operation has one,
//! so that a request's log lines name what it touched. Arguments are skipped by default:
//! bodies, properties and token secrets are never recorded.

use crate::messages::Outgoing;

/// Characters of a lock token a log may show.
const TOKEN_PREFIX_CHARS: usize = 12;

/// The first characters of a lock token (`lk_` and 9 of its 32 hex digits): enough to
/// tell deliveries apart in a log, far too few to settle one. A lock token is a
/// capability — whoever holds it may settle the delivery — so a log never holds it whole.
pub(crate) fn token_prefix(token: &str) -> &str {
    match token.char_indices().nth(TOKEN_PREFIX_CHARS) {
        Some((end, _)) => token.get(..end).unwrap_or_default(),
        // A string this short is not a token the broker made; it is shown as given.
        None => token,
    }
}

/// The client's message id of a send of one message (a generated id is logged with the
/// `message sent` event instead).
pub(crate) fn single_message_id(messages: &[Outgoing]) -> Option<&str> {
    match messages {
        [m] => m.message_id.as_deref(),
        _ => None,
    }
}

/// The token prefix of a settlement of one delivery.
pub(crate) fn single_token<T>(
    items: &[(redrive_core::id::Named<redrive_core::LockToken>, T)],
) -> Option<&str> {
    match items {
        [(token, _)] => Some(token_prefix(redrive_core::id::given(token))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_token_is_shown_by_its_prefix_only() {
        let token = redrive_core::id::new_lock_token();
        let shown = token_prefix(&token);
        assert_eq!(shown.len(), TOKEN_PREFIX_CHARS);
        assert!(token.starts_with(shown));
        assert!(shown.len() * 2 < token.len(), "{shown} of {token}");
        assert_eq!(token_prefix("lk_1"), "lk_1");
        assert_eq!(token_prefix("ééééééééééééééé").chars().count(), 12);
    }
}
