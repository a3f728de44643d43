//! Token and audit rows, and the numbering and chaining of audit entries.
//!
//! A backend serialises appends its own way (SQLite: its one writer; PostgreSQL: a lock
//! on the chain's row), reads the newest entry's number and hash, and inserts what
//! [`chain`] numbers and hashes after it.

use redrive_core::Timestamp;
use redrive_core::access::Grant;
use redrive_core::audit::entry_hash;

use super::columns::{Columns, to_json};
use crate::{
    AuditEntry, AuditFields, MAX_AUDIT_PAGE, NewToken, SqsCredentials, StoreError, StoreResult,
    TokenRecord,
};

/// Reads [`columns!(token)`](crate::columns).
pub fn token(c: &impl Columns) -> StoreResult<TokenRecord> {
    let sqs = match (c.text_opt(8)?, c.text_opt(9)?) {
        (Some(access_key_id), Some(secret_access_key)) => Some(SqsCredentials {
            access_key_id,
            secret_access_key,
        }),
        _ => None,
    };
    Ok(TokenRecord {
        token: NewToken {
            id: c.text(0)?,
            name: c.text(1)?,
            secret_hash: c.text(2)?,
            grants: c.json::<Vec<Grant>>(3, "tokens.grants")?,
            created_by: c.text(4)?,
            expires_at: c.time_opt(6)?,
            sqs,
        },
        created_at: c.time(5)?,
        revoked_at: c.time_opt(7)?,
    })
}

/// A token's grants as stored: a JSON array of their names.
pub fn grants_json(token: &NewToken) -> StoreResult<String> {
    let grants: Vec<String> = token.grants.iter().map(ToString::to_string).collect();
    to_json(&grants)
}

/// A token just stored at `now`.
pub fn new_token(token: &NewToken, now: Timestamp) -> TokenRecord {
    TokenRecord {
        token: token.clone(),
        created_at: now,
        revoked_at: None,
    }
}

/// `TokenExists`: the insert met a uniqueness rule.
pub fn token_exists(token: &NewToken) -> StoreError {
    StoreError::TokenExists {
        name: token.name.clone(),
    }
}

/// `TokenNotFound`.
pub fn token_not_found(id: &str) -> StoreError {
    StoreError::TokenNotFound { id: id.to_owned() }
}

/// Reads [`columns!(audit)`](crate::columns).
pub fn audit_entry(c: &impl Columns) -> StoreResult<AuditEntry> {
    Ok(AuditEntry {
        seq: c.int(0)?,
        prev_hash: c.text(9)?,
        hash: c.text(10)?,
        fields: AuditFields {
            at: c.time(1)?,
            actor_id: c.text(2)?,
            actor_name: c.text(3)?,
            action: c.text(4)?,
            entity: c.text_opt(5)?,
            targets: c.json(6, "audit_log.targets")?,
            outcome: c.text(7)?,
            client: c.text_opt(8)?,
        },
    })
}

/// `entries` numbered and chained after the newest entry `(seq, hash)` (`(0,
/// GENESIS_HASH)` for an empty log), in order.
pub fn chain(mut seq: i64, mut prev: String, entries: &[AuditFields]) -> Vec<AuditEntry> {
    let mut out = Vec::with_capacity(entries.len());
    for fields in entries {
        seq += 1;
        let hash = entry_hash(seq, &prev, fields);
        out.push(AuditEntry {
            seq,
            prev_hash: std::mem::replace(&mut prev, hash.clone()),
            hash,
            fields: fields.clone(),
        });
    }
    out
}

/// The entry recording a retention pass: `fields` with the last removed entry's number
/// and hash added to its targets, so that the chain can still be checked from there.
pub fn pruned(fields: &AuditFields, through_seq: i64, through_hash: &str) -> AuditFields {
    let mut record = fields.clone();
    record.targets.push(format!("through_seq={through_seq}"));
    record.targets.push(format!("through_hash={through_hash}"));
    record
}

/// The page size an audit query asks for, capped at [`MAX_AUDIT_PAGE`]; 0 means the cap.
pub fn page_limit(limit: u32) -> i64 {
    i64::from(if limit == 0 {
        MAX_AUDIT_PAGE
    } else {
        limit.min(MAX_AUDIT_PAGE)
    })
}

#[cfg(test)]
mod tests {
    use redrive_core::audit::GENESIS_HASH;

    use super::*;

    fn fields(action: &str) -> AuditFields {
        AuditFields {
            at: Timestamp(1),
            actor_id: "tok_1".to_owned(),
            actor_name: "admin".to_owned(),
            action: action.to_owned(),
            entity: None,
            targets: Vec::new(),
            outcome: "ok".to_owned(),
            client: None,
        }
    }

    #[test]
    fn entries_are_numbered_and_chained_after_the_newest() {
        let out = chain(4, "h4".to_owned(), &[fields("a"), fields("b")]);
        assert_eq!((out[0].seq, out[1].seq), (5, 6));
        assert_eq!(out[0].prev_hash, "h4");
        assert_eq!(out[1].prev_hash, out[0].hash);
        assert_eq!(out[0].hash, entry_hash(5, "h4", &fields("a")));
        let first = chain(0, GENESIS_HASH.to_owned(), &[fields("a")]);
        assert_eq!(first[0].prev_hash, GENESIS_HASH);
        let p = pruned(&fields("prune"), 3, "h3");
        assert_eq!(p.targets, ["through_seq=3", "through_hash=h3"]);
        assert_eq!(
            (page_limit(0), page_limit(5), page_limit(5_000)),
            (1_000, 5, 1_000)
        );
    }
}
