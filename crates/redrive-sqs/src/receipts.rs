//! Receipt handles: the broker's lock token together with the queue it was issued for, so
//! that a handle presented to another queue, or one this endpoint never issued, is refused
//! as `ReceiptHandleIsInvalid` instead of being taken for a stale handle.
//!
//! A handle is base64 of `rh1`, the queue name's length (one byte) and the name, the lock
//! token, and the first 8 bytes of a SHA-256 over all of that. The checksum catches made-up
//! and damaged handles; it is no secret: the random lock token inside is what proves the
//! receive, as it does on the native API. Nothing is stored for a handle.
//!
//! The token inside a handle of the right shape is parsed as a [`LockToken`]; one that
//! cannot be a lock token (more than 64 bytes after its `lk_`) is handed to the broker as
//! such, which settles it as a lock nobody holds: a stale handle, as before tokens were
//! typed.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use redrive_core::id::{LockToken, Named};
use sha2::{Digest, Sha256};

use crate::error::{ErrorKind, SqsError, SqsResult};

/// Version tag at the start of every handle.
const TAG: &[u8] = b"rh1";
/// Bytes of checksum at the end.
const CHECKSUM: usize = 8;
/// Longest handle accepted (SQS documents 1024 characters).
const MAX_HANDLE_CHARS: usize = 1_024;

fn checksum(bytes: &[u8]) -> [u8; CHECKSUM] {
    let mut h = Sha256::new();
    h.update(b"redrive-sqs receipt handle\0");
    h.update(bytes);
    let d = h.finalize();
    let mut out = [0u8; CHECKSUM];
    out.copy_from_slice(&d[..CHECKSUM]);
    out
}

/// The receipt handle of a delivery of `queue` locked with `lock_token`.
pub(crate) fn encode(queue: &str, lock_token: &str) -> String {
    let name = queue.as_bytes();
    let mut bytes = Vec::with_capacity(TAG.len() + 1 + name.len() + lock_token.len() + CHECKSUM);
    bytes.extend_from_slice(TAG);
    // Queue names are at most 80 bytes (checked before any receive).
    bytes.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(lock_token.as_bytes());
    let sum = checksum(&bytes);
    bytes.extend_from_slice(&sum);
    B64.encode(bytes)
}

fn invalid(handle: &str) -> SqsError {
    let shown: String = handle.chars().take(80).collect();
    SqsError::new(
        ErrorKind::ReceiptHandleIsInvalid,
        format!("The input receipt handle \"{shown}\" is not a valid receipt handle."),
    )
}

/// The lock token inside `handle`, when it is a handle of this endpoint's shape for
/// `queue`: parsed, or the refusal of a string that cannot be a token (a lock nobody
/// holds, to the broker).
pub(crate) fn lock_token(handle: &str, queue: &str) -> SqsResult<Named<LockToken>> {
    if handle.len() > MAX_HANDLE_CHARS {
        return Err(invalid(handle));
    }
    let bytes = B64.decode(handle).map_err(|_| invalid(handle))?;
    let Some((body, sum)) = bytes.split_at_checked(bytes.len().saturating_sub(CHECKSUM)) else {
        return Err(invalid(handle));
    };
    if sum.len() != CHECKSUM || checksum(body) != sum {
        return Err(invalid(handle));
    }
    let rest = body.strip_prefix(TAG).ok_or_else(|| invalid(handle))?;
    let (&len, rest) = rest.split_first().ok_or_else(|| invalid(handle))?;
    let (name, token) = rest
        .split_at_checked(usize::from(len))
        .ok_or_else(|| invalid(handle))?;
    if name != queue.as_bytes() {
        return Err(SqsError::new(
            ErrorKind::ReceiptHandleIsInvalid,
            "The input receipt handle was not issued for this queue.",
        ));
    }
    let token = std::str::from_utf8(token).map_err(|_| invalid(handle))?;
    let well_formed = token.starts_with("lk_")
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !well_formed {
        return Err(invalid(handle));
    }
    Ok(token.parse())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_carry_their_queue_and_token() {
        let h = encode("orders", "lk_0123abcd.1f");
        assert_eq!(
            lock_token(&h, "orders").unwrap().unwrap().as_str(),
            "lk_0123abcd.1f"
        );
        let e = lock_token(&h, "other").unwrap_err();
        assert_eq!(e.kind, ErrorKind::ReceiptHandleIsInvalid);
        // A prefix of a queue name is another queue.
        assert!(lock_token(&encode("orders2", "lk_1"), "orders").is_err());
    }

    #[test]
    fn made_up_and_damaged_handles_are_invalid() {
        let h = encode("orders", "lk_0123abcd");
        let mut damaged = B64.decode(&h).unwrap();
        damaged[6] ^= 1;
        for bad in [
            "garbage".to_owned(),
            "lk_0123abcd".to_owned(),
            String::new(),
            B64.encode(damaged),
            "A".repeat(2_000),
        ] {
            let e = lock_token(&bad, "orders").unwrap_err();
            assert_eq!(e.kind, ErrorKind::ReceiptHandleIsInvalid, "{bad}");
        }
    }

    #[test]
    fn a_handle_may_carry_a_token_no_lock_can_have() {
        // The shape and checksum are right; the token is longer than any lock token.
        let long = format!("lk_{}", "a".repeat(65));
        let token = lock_token(&encode("orders", &long), "orders").unwrap();
        let refused = token.unwrap_err();
        assert_eq!(refused.id, long);
        // Characters outside a token's are still an invalid handle.
        let e = lock_token(&encode("orders", "lk_a b"), "orders").unwrap_err();
        assert_eq!(e.kind, ErrorKind::ReceiptHandleIsInvalid);
    }
}
