//! The audit log's chain: every entry carries the SHA-256 of the entry before it, so that
//! an edited, removed or reordered entry is detected by [`verify`].
//!
//! Stores compute [`entry_hash`] inside the transaction that appends an entry (after
//! reading the newest hash), so the chain is the same whatever the backend. The hash is
//! taken over a length-prefixed encoding of every field, so no two different entries
//! encode alike.
//!
//! Retention removes the oldest entries: the store then appends an entry with action
//! [`PRUNED_ACTION`] whose targets are `through_seq=<n>` and `through_hash=<hash>`, the
//! last removed entry. [`verify`] accepts a chain whose first entry links to such a
//! recorded hash, and nothing else: a removal that left no record breaks the chain.
//!
//! The chain's head ([`ChainHead`]: the newest entry's number and hash) is stored apart
//! from the entries and written in the same transaction as every append, and every append
//! chains to the head rather than to the newest row it finds. So removing the newest
//! entries is detected too: the head names an entry that is no longer there
//! ([`ChainError::Truncated`]), and an entry written after the removal links to a hash no
//! entry has ([`ChainError::Unlinked`]).
//!
//! What [`verify`] proves: every entry from the first kept one to the head is present,
//! unedited and in order, and the log before it was removed only by recorded retention
//! passes. What it cannot prove: someone able to write the database can rewrite the whole
//! chain and its head consistently (the hashes are not keyed). Only a copy of the head
//! kept outside the database — the `redrive_audit_head_seq` and `redrive_audit_head_info`
//! metrics, or the head in the server's log — witnesses that: a head seen outside that is
//! no longer in the chain, or a head whose number went down, shows the rewrite.

use sha2::{Digest, Sha256};

use crate::Timestamp;

/// The `prev_hash` of the first entry ever written.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The action of the entry that records a retention pass.
pub const PRUNED_ACTION: &str = "audit.pruned";

/// What an audit entry says, before the store numbers and chains it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditFields {
    /// When it happened.
    pub at: Timestamp,
    /// Token id of the actor (`anonymous` when authentication is off, `system` for the
    /// broker's own acts).
    pub actor_id: String,
    /// The token's name at the time.
    pub actor_name: String,
    /// What was done (`dead_letter.resubmit`, `token.create`, …).
    pub action: String,
    /// The queue or topic it was done to, if any.
    pub entity: Option<String>,
    /// Ids it was done to (message ids, record ids, token ids).
    pub targets: Vec<String>,
    /// `ok`, `denied`, or `error:<code>`.
    pub outcome: String,
    /// The client's address, if the act came over the network.
    pub client: Option<String>,
}

/// The hash of entry `seq` with `fields`, chained to `prev_hash`: lowercase hex SHA-256.
pub fn entry_hash(seq: i64, prev_hash: &str, fields: &AuditFields) -> String {
    let mut h = Sha256::new();
    let mut put = |b: &[u8]| {
        h.update((b.len() as u64).to_be_bytes());
        h.update(b);
    };
    put(b"redrive-audit-v1");
    put(&seq.to_be_bytes());
    put(prev_hash.as_bytes());
    put(&fields.at.as_millis().to_be_bytes());
    put(fields.actor_id.as_bytes());
    put(fields.actor_name.as_bytes());
    put(fields.action.as_bytes());
    match &fields.entity {
        Some(e) => {
            put(b"1");
            put(e.as_bytes());
        }
        None => put(b"0"),
    }
    put(&(fields.targets.len() as u64).to_be_bytes());
    for t in &fields.targets {
        put(t.as_bytes());
    }
    put(fields.outcome.as_bytes());
    match &fields.client {
        Some(c) => {
            put(b"1");
            put(c.as_bytes());
        }
        None => put(b"0"),
    }
    let digest = h.finalize();
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// A stored entry as [`verify`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainedEntry {
    /// Its number: increasing, no gaps except where retention removed entries.
    pub seq: i64,
    /// The hash of the entry before it (or [`GENESIS_HASH`]).
    pub prev_hash: String,
    /// Its own hash.
    pub hash: String,
    /// What it says.
    pub fields: AuditFields,
}

/// The newest entry's number and hash as the store records them beside the log (`(0,
/// GENESIS_HASH)` before the first entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainHead {
    /// The newest entry's number.
    pub seq: i64,
    /// The newest entry's hash.
    pub hash: String,
}

impl ChainHead {
    /// The head of a log that never had an entry.
    pub fn genesis() -> ChainHead {
        ChainHead {
            seq: 0,
            hash: GENESIS_HASH.to_owned(),
        }
    }
}

/// Where a chain is broken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// The entry's stored hash is not the hash of what it says: it was edited.
    #[error("entry {seq}: its hash does not match its contents (edited)")]
    Altered {
        /// The entry.
        seq: i64,
    },
    /// The entry does not link to the one before it: one was removed or reordered.
    #[error("entry {seq}: it does not link to entry {prev_seq} before it (removed or reordered)")]
    Unlinked {
        /// The entry.
        seq: i64,
        /// The entry before it in the log.
        prev_seq: i64,
    },
    /// The first entry links to a hash no retention record names.
    #[error("entry {seq}: the first entry links to a hash that no retention record names")]
    UnrecordedStart {
        /// The first entry.
        seq: i64,
    },
    /// The head records an entry the log no longer holds: its newest entries were removed.
    #[error(
        "the head records entry {head_seq} but the log ends at entry {last_seq}: entries {} to {head_seq} are missing (removed from the end)",
        .last_seq + 1
    )]
    Truncated {
        /// The entry the head records.
        head_seq: i64,
        /// The newest entry the log holds (0: none).
        last_seq: i64,
    },
    /// The entry the head records is there but its hash is not the head's.
    #[error("entry {seq}: its hash is not the one the chain's head records (replaced)")]
    HeadMismatch {
        /// The entry.
        seq: i64,
    },
    /// The store holds no head for the chain (it was removed).
    #[error("the chain's head is missing")]
    HeadMissing,
}

impl ChainError {
    /// The entry where the chain is broken: the first missing one for a truncation, 0 when
    /// the head itself is missing.
    pub fn seq(&self) -> i64 {
        match self {
            ChainError::Altered { seq }
            | ChainError::Unlinked { seq, .. }
            | ChainError::UnrecordedStart { seq }
            | ChainError::HeadMismatch { seq } => *seq,
            ChainError::Truncated { last_seq, .. } => last_seq + 1,
            ChainError::HeadMissing => 0,
        }
    }
}

/// What [`verify`] found in a chain that holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChainSummary {
    /// Entries checked.
    pub entries: u64,
    /// The first entry's number (0 for an empty log).
    pub first_seq: i64,
    /// The last entry's number (0 for an empty log).
    pub last_seq: i64,
}

/// Checks a whole log, oldest first, against its head read before the entries: every
/// hash matches its entry, every entry links to the one before, the first links to the
/// genesis hash or to the last entry a retention record says it removed, and the entry
/// the head records is there with the head's hash (entries after it were appended since
/// the head was read). `None`: the store has no head.
pub fn verify(
    entries: &[ChainedEntry],
    head: Option<&ChainHead>,
) -> Result<ChainSummary, ChainError> {
    let head = head.ok_or(ChainError::HeadMissing)?;
    let Some(first) = entries.first() else {
        return check_head(entries, head).map(|()| ChainSummary::default());
    };
    for e in entries {
        if entry_hash(e.seq, &e.prev_hash, &e.fields) != e.hash {
            return Err(ChainError::Altered { seq: e.seq });
        }
    }
    if first.prev_hash != GENESIS_HASH {
        let recorded = entries.iter().any(|e| {
            e.fields.action == PRUNED_ACTION
                && e.fields
                    .targets
                    .iter()
                    .any(|t| t.strip_prefix("through_hash=") == Some(first.prev_hash.as_str()))
                && e.fields
                    .targets
                    .iter()
                    .any(|t| t.strip_prefix("through_seq=") == Some(&(first.seq - 1).to_string()))
        });
        if !recorded {
            return Err(ChainError::UnrecordedStart { seq: first.seq });
        }
    }
    for w in entries.windows(2) {
        if w[1].prev_hash != w[0].hash || w[1].seq <= w[0].seq {
            return Err(ChainError::Unlinked {
                seq: w[1].seq,
                prev_seq: w[0].seq,
            });
        }
    }
    check_head(entries, head)?;
    Ok(ChainSummary {
        entries: entries.len() as u64,
        first_seq: first.seq,
        last_seq: entries.last().map_or(0, |e| e.seq),
    })
}

/// The entry the head records is in the log, with the head's hash.
fn check_head(entries: &[ChainedEntry], head: &ChainHead) -> Result<(), ChainError> {
    if head.seq > 0 {
        match entries.iter().find(|e| e.seq >= head.seq) {
            Some(e) if e.seq == head.seq => {
                if e.hash != head.hash {
                    return Err(ChainError::HeadMismatch { seq: e.seq });
                }
            }
            _ => {
                let last_seq = entries
                    .iter()
                    .rev()
                    .find(|e| e.seq < head.seq)
                    .map_or(0, |e| e.seq);
                return Err(ChainError::Truncated {
                    head_seq: head.seq,
                    last_seq,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(action: &str, targets: &[&str]) -> AuditFields {
        AuditFields {
            at: Timestamp(1_000),
            actor_id: "tok_1".into(),
            actor_name: "ops".into(),
            action: action.into(),
            entity: Some("orders".into()),
            targets: targets.iter().map(|s| s.to_string()).collect(),
            outcome: "ok".into(),
            client: Some("127.0.0.1".into()),
        }
    }

    fn head(c: &[ChainedEntry]) -> ChainHead {
        c.last().map_or_else(ChainHead::genesis, |e| ChainHead {
            seq: e.seq,
            hash: e.hash.clone(),
        })
    }

    fn chain(n: i64) -> Vec<ChainedEntry> {
        let mut out: Vec<ChainedEntry> = Vec::new();
        let mut prev = GENESIS_HASH.to_owned();
        for seq in 1..=n {
            let f = fields("message.peek", &[&format!("m{seq}")]);
            let hash = entry_hash(seq, &prev, &f);
            out.push(ChainedEntry {
                seq,
                prev_hash: prev.clone(),
                hash: hash.clone(),
                fields: f,
            });
            prev = hash;
        }
        out
    }

    #[test]
    fn an_intact_chain_verifies() {
        let c = chain(5);
        let s = verify(&c, Some(&head(&c))).expect("intact");
        assert_eq!((s.entries, s.first_seq, s.last_seq), (5, 1, 5));
        assert_eq!(
            verify(&[], Some(&ChainHead::genesis())),
            Ok(ChainSummary::default())
        );
    }

    #[test]
    fn an_edited_entry_is_detected() {
        let mut c = chain(5);
        c[2].fields.outcome = "denied".into();
        assert_eq!(
            verify(&c, Some(&head(&c))),
            Err(ChainError::Altered { seq: 3 })
        );
        let mut c = chain(5);
        c[1].fields.targets.push("extra".into());
        assert_eq!(
            verify(&c, Some(&head(&c))),
            Err(ChainError::Altered { seq: 2 })
        );
    }

    #[test]
    fn a_removed_entry_is_detected() {
        let mut c = chain(5);
        let h = head(&c);
        c.remove(2);
        assert_eq!(
            verify(&c, Some(&h)),
            Err(ChainError::Unlinked {
                seq: 4,
                prev_seq: 2
            })
        );
        let mut c = chain(5);
        c.remove(0);
        assert_eq!(
            verify(&c, Some(&h)),
            Err(ChainError::UnrecordedStart { seq: 2 })
        );
    }

    #[test]
    fn removing_the_newest_entries_is_detected_by_the_head() {
        let whole = chain(10);
        let h = head(&whole);
        let kept = &whole[..5];
        // Without the head the rest is a perfect chain.
        assert!(verify(kept, Some(&head(kept))).is_ok());
        let e = verify(kept, Some(&h)).unwrap_err();
        assert_eq!(
            e,
            ChainError::Truncated {
                head_seq: 10,
                last_seq: 5
            }
        );
        assert_eq!(e.seq(), 6);
        assert!(e.to_string().contains("entries 6 to 10 are missing"), "{e}");
        // Every entry removed.
        assert_eq!(
            verify(&[], Some(&h)),
            Err(ChainError::Truncated {
                head_seq: 10,
                last_seq: 0
            })
        );
        // The head's entry replaced by another with the same number.
        let mut other = chain(10);
        other[9].fields.outcome = "denied".into();
        other[9].hash = entry_hash(10, &other[9].prev_hash, &other[9].fields);
        assert_eq!(
            verify(&other, Some(&h)),
            Err(ChainError::HeadMismatch { seq: 10 })
        );
        assert_eq!(verify(&whole, None), Err(ChainError::HeadMissing));
        // Entries appended after the head was read are fine.
        assert!(verify(&whole, Some(&head(&whole[..7]))).is_ok());
    }

    #[test]
    fn a_recorded_retention_pass_keeps_the_chain_whole() {
        let mut c = chain(5);
        let removed: Vec<_> = c.drain(0..2).collect();
        let last = c.last().expect("entries").clone();
        let f = fields(
            PRUNED_ACTION,
            &[
                "through_seq=2",
                &format!("through_hash={}", removed[1].hash),
            ],
        );
        let hash = entry_hash(6, &last.hash, &f);
        c.push(ChainedEntry {
            seq: 6,
            prev_hash: last.hash,
            hash,
            fields: f,
        });
        assert!(verify(&c, Some(&head(&c))).is_ok());
    }

    #[test]
    fn fields_do_not_run_into_each_other() {
        let mut a = fields("x", &["ab", "c"]);
        let mut b = fields("x", &["a", "bc"]);
        assert_ne!(
            entry_hash(1, GENESIS_HASH, &a),
            entry_hash(1, GENESIS_HASH, &b)
        );
        a.entity = None;
        b = a.clone();
        b.entity = Some(String::new());
        assert_ne!(
            entry_hash(1, GENESIS_HASH, &a),
            entry_hash(1, GENESIS_HASH, &b)
        );
    }
}
