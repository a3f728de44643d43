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

/// Checks a whole log, oldest first: every hash matches its entry, every entry links to
/// the one before, and the first links to the genesis hash or to the last entry a
/// retention record says it removed.
pub fn verify(entries: &[ChainedEntry]) -> Result<ChainSummary, ChainError> {
    let Some(first) = entries.first() else {
        return Ok(ChainSummary::default());
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
    Ok(ChainSummary {
        entries: entries.len() as u64,
        first_seq: first.seq,
        last_seq: entries.last().map_or(0, |e| e.seq),
    })
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
        let s = verify(&c).expect("intact");
        assert_eq!((s.entries, s.first_seq, s.last_seq), (5, 1, 5));
        assert_eq!(verify(&[]), Ok(ChainSummary::default()));
    }

    #[test]
    fn an_edited_entry_is_detected() {
        let mut c = chain(5);
        c[2].fields.outcome = "denied".into();
        assert_eq!(verify(&c), Err(ChainError::Altered { seq: 3 }));
        let mut c = chain(5);
        c[1].fields.targets.push("extra".into());
        assert_eq!(verify(&c), Err(ChainError::Altered { seq: 2 }));
    }

    #[test]
    fn a_removed_entry_is_detected() {
        let mut c = chain(5);
        c.remove(2);
        assert_eq!(
            verify(&c),
            Err(ChainError::Unlinked {
                seq: 4,
                prev_seq: 2
            })
        );
        let mut c = chain(5);
        c.remove(0);
        assert_eq!(verify(&c), Err(ChainError::UnrecordedStart { seq: 2 }));
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
        assert!(verify(&c).is_ok());
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
