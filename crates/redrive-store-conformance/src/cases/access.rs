//! Tokens (create, list, find by secret hash or SQS key, revoke, uniqueness, grants and
//! expiry) and the audit log (numbering, the hash chain and its head, every filter, the
//! cursor, the page cap, retention with its record).

use redrive_core::access::{Grant, Role};
use redrive_core::audit::{
    self, ChainHead, ChainSummary, ChainedEntry, GENESIS_HASH, PRUNED_ACTION,
};
use redrive_store::{
    AuditEntry, AuditFields, AuditQuery, MAX_AUDIT_PAGE, NewToken, SqsCredentials, TokenRecord,
};

use super::prelude::*;

fn token(id: &str, name: &str) -> NewToken {
    NewToken {
        id: id.to_owned(),
        name: name.to_owned(),
        secret_hash: format!("{:0>64}", id.trim_start_matches("tok_")),
        grants: vec![Grant::all(Role::Producer)],
        created_by: "bootstrap".to_owned(),
        expires_at: None,
        sqs: None,
    }
}

fn grants(g: &[&str]) -> Vec<Grant> {
    g.iter().map(|s| s.parse().unwrap()).collect()
}

fn names(tokens: &[TokenRecord]) -> Vec<(&str, &str)> {
    tokens
        .iter()
        .map(|t| (t.token.id.as_str(), t.token.name.as_str()))
        .collect()
}

fn entry(at_ms: i64, actor: &str, action: &str, entity: Option<&str>) -> AuditFields {
    AuditFields {
        at: at(at_ms),
        actor_id: actor.to_owned(),
        actor_name: format!("{actor}-name"),
        action: action.to_owned(),
        entity: entity.map(str::to_owned),
        targets: vec![format!("m{at_ms}"), "second target".to_owned()],
        outcome: "ok".to_owned(),
        client: Some("127.0.0.1".to_owned()),
    }
}

fn chained(entries: &[AuditEntry]) -> Vec<ChainedEntry> {
    entries.iter().cloned().map(Into::into).collect()
}

/// The whole log, oldest first, read page by page with the cursor.
async fn whole_log(t: &TestStore) -> Vec<AuditEntry> {
    let mut out: Vec<AuditEntry> = Vec::new();
    loop {
        let page = t
            .s()
            .list_audit(&AuditQuery {
                after_seq: out.last().map(|e| e.seq),
                limit: 7,
                ..AuditQuery::default()
            })
            .await
            .unwrap();
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

async fn verify_log(t: &TestStore) -> ChainSummary {
    let head = t.s().audit_head().await.unwrap();
    audit::verify(&chained(&whole_log(t).await), head.as_ref()).expect("the stored chain verifies")
}

fn seqs_of(entries: &[AuditEntry]) -> Vec<i64> {
    entries.iter().map(|e| e.seq).collect()
}

pub async fn tokens_are_created_listed_and_found(t: &TestStore) {
    let mut a = token("tok_000000000000000a", "ci");
    a.grants = grants(&["producer:orders", "consumer:ord*", "payload-reader"]);
    a.created_by = "tok_00000000000000ff".to_owned();
    let mut b = token("tok_000000000000000b", "ops");
    b.grants = grants(&["admin"]);
    b.sqs = Some(SqsCredentials {
        access_key_id: "AKIAREDRIVE0000000B".to_owned(),
        secret_access_key: "c2VjcmV0LWFjY2Vzcy1rZXk".to_owned(),
    });
    let rec = t.s().create_token(&a, secs(1)).await.unwrap();
    assert_eq!(rec.token, a);
    assert_eq!((rec.created_at, rec.revoked_at), (secs(1), None));
    t.s().create_token(&b, secs(2)).await.unwrap();

    let all = t.s().list_tokens().await.unwrap();
    assert_eq!(
        names(&all),
        vec![
            ("tok_000000000000000a", "ci"),
            ("tok_000000000000000b", "ops")
        ]
    );
    assert_eq!(all[0], rec);
    assert_eq!(all[1].token, b);
    assert_eq!(all[1].created_at, secs(2));

    let found = t.s().find_token(&a.secret_hash).await.unwrap().unwrap();
    assert_eq!(found, rec);
    assert_eq!(found.token.grants, a.grants);
    assert!(t.s().find_token("f00d").await.unwrap().is_none());
    let by_key = t
        .s()
        .find_token_by_sqs_key("AKIAREDRIVE0000000B")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_key.token, b);
    assert!(
        t.s()
            .find_token_by_sqs_key("AKIAUNKNOWN")
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn revoking_a_token_keeps_its_first_revocation_time(t: &TestStore) {
    let a = token("tok_000000000000000a", "ci");
    t.s().create_token(&a, secs(1)).await.unwrap();
    let revoked = t.s().revoke_token(&a.id, secs(5)).await.unwrap();
    assert_eq!(revoked.revoked_at, Some(secs(5)));
    assert_eq!(revoked.token, a);
    assert!(!revoked.is_active(secs(5)));
    let again = t.s().revoke_token(&a.id, secs(9)).await.unwrap();
    assert_eq!(again.revoked_at, Some(secs(5)));
    // A revoked token is still found (the caller checks whether it is active).
    let found = t.s().find_token(&a.secret_hash).await.unwrap().unwrap();
    assert_eq!(found.revoked_at, Some(secs(5)));
    assert_err!(
        t.s().revoke_token("tok_00000000000000ee", secs(9)).await,
        StoreError::TokenNotFound { .. }
    );
    assert_eq!(t.s().list_tokens().await.unwrap().len(), 1);
}

pub async fn a_token_name_is_unique_among_tokens_not_revoked(t: &TestStore) {
    let a = token("tok_000000000000000a", "ci");
    t.s().create_token(&a, secs(1)).await.unwrap();
    let same_name = token("tok_000000000000000b", "ci");
    assert_err!(
        t.s().create_token(&same_name, secs(2)).await,
        StoreError::TokenExists { .. }
    );
    assert_eq!(t.s().list_tokens().await.unwrap().len(), 1);
    t.s().revoke_token(&a.id, secs(3)).await.unwrap();
    let rec = t.s().create_token(&same_name, secs(4)).await.unwrap();
    assert!(rec.is_active(secs(4)));
    // Two tokens named "ci" now, one revoked; a third active one is refused.
    assert_err!(
        t.s()
            .create_token(&token("tok_000000000000000c", "ci"), secs(5))
            .await,
        StoreError::TokenExists { .. }
    );
    let all = t.s().list_tokens().await.unwrap();
    assert_eq!(
        names(&all),
        vec![
            ("tok_000000000000000a", "ci"),
            ("tok_000000000000000b", "ci")
        ]
    );
}

pub async fn a_token_id_secret_or_sqs_key_is_never_reused(t: &TestStore) {
    let mut a = token("tok_000000000000000a", "ci");
    a.sqs = Some(SqsCredentials {
        access_key_id: "AKIAREDRIVE0000000A".to_owned(),
        secret_access_key: "s".to_owned(),
    });
    t.s().create_token(&a, secs(1)).await.unwrap();
    t.s().revoke_token(&a.id, secs(2)).await.unwrap();
    // Revoked or not, the id, the secret hash and the SQS key stay taken.
    let mut same_secret = token("tok_000000000000000b", "other");
    same_secret.secret_hash = a.secret_hash.clone();
    assert_err!(
        t.s().create_token(&same_secret, secs(3)).await,
        StoreError::TokenExists { .. }
    );
    let same_id = token("tok_000000000000000a", "third");
    assert_err!(
        t.s().create_token(&same_id, secs(3)).await,
        StoreError::TokenExists { .. }
    );
    let mut same_key = token("tok_000000000000000d", "fourth");
    same_key.sqs = Some(SqsCredentials {
        access_key_id: "AKIAREDRIVE0000000A".to_owned(),
        secret_access_key: "other".to_owned(),
    });
    assert_err!(
        t.s().create_token(&same_key, secs(3)).await,
        StoreError::TokenExists { .. }
    );
    assert_eq!(t.s().list_tokens().await.unwrap().len(), 1);
    // Tokens without SQS keys do not collide with each other.
    t.s()
        .create_token(&token("tok_000000000000000e", "e"), secs(4))
        .await
        .unwrap();
    t.s()
        .create_token(&token("tok_000000000000000f", "f"), secs(4))
        .await
        .unwrap();
    assert_eq!(t.s().list_tokens().await.unwrap().len(), 3);
}

pub async fn token_expiry_round_trips(t: &TestStore) {
    let mut a = token("tok_000000000000000a", "short");
    a.expires_at = Some(secs(60));
    let rec = t.s().create_token(&a, secs(1)).await.unwrap();
    assert_eq!(rec.token.expires_at, Some(secs(60)));
    let found = t.s().find_token(&a.secret_hash).await.unwrap().unwrap();
    assert_eq!(found.token.expires_at, Some(secs(60)));
    assert!(found.is_active(secs(59)));
    assert!(!found.is_active(secs(60)));
    let forever = token("tok_000000000000000b", "forever");
    t.s().create_token(&forever, secs(1)).await.unwrap();
    let found = t
        .s()
        .find_token(&forever.secret_hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.token.expires_at, None);
    assert!(found.is_active(secs(1_000_000)));
}

pub async fn audit_entries_are_numbered_and_chained(t: &TestStore) {
    assert!(
        t.s()
            .list_audit(&AuditQuery::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(verify_log(t).await, ChainSummary::default());
    assert!(t.s().append_audit(&[]).await.unwrap().is_empty());

    let one = t
        .s()
        .append_audit(&[entry(1, "tok_a", "queue.create", Some("orders"))])
        .await
        .unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!((one[0].seq, one[0].prev_hash.as_str()), (1, GENESIS_HASH));
    assert_eq!(
        one[0].hash,
        audit::entry_hash(1, GENESIS_HASH, &one[0].fields)
    );
    let mut no_entity = entry(2, "system", "message.expired", None);
    no_entity.client = None;
    no_entity.targets.clear();
    no_entity.outcome = "error:queue_not_found".to_owned();
    let three = t
        .s()
        .append_audit(&[
            no_entity.clone(),
            entry(3, "tok_b", "message.peek", Some("orders")),
            entry(4, "tok_a", "token.create", None),
        ])
        .await
        .unwrap();
    assert_eq!(seqs_of(&three), vec![2, 3, 4]);
    assert_eq!(three[0].prev_hash, one[0].hash);
    assert_eq!(three[1].prev_hash, three[0].hash);
    assert_eq!(three[2].prev_hash, three[1].hash);
    for _ in 0..5 {
        t.s()
            .append_audit(&[entry(5, "tok_c", "message.send", Some("billing"))])
            .await
            .unwrap();
    }

    let log = whole_log(t).await;
    assert_eq!(seqs_of(&log), (1..=9).collect::<Vec<_>>());
    assert_eq!(log[0], one[0]);
    assert_eq!(&log[1..4], &three[..]);
    assert_eq!(log[1].fields, no_entity);
    let s = verify_log(t).await;
    assert_eq!((s.entries, s.first_seq, s.last_seq), (9, 1, 9));
}

pub async fn audit_list_filters_pages_and_caps(t: &TestStore) {
    let batch = vec![
        entry(10, "tok_a", "queue.create", Some("orders")),
        entry(20, "tok_b", "message.peek", Some("orders")),
        entry(30, "tok_a", "message.peek", Some("billing")),
        entry(40, "tok_b", "queue.create", None),
        entry(50, "tok_a", "message.peek", Some("orders")),
    ];
    t.s().append_audit(&batch).await.unwrap();
    let list = |q: AuditQuery| async move { seqs_of(&t.s().list_audit(&q).await.unwrap()) };
    assert_eq!(list(AuditQuery::default()).await, vec![1, 2, 3, 4, 5]);
    let actor = |a: &str| AuditQuery {
        actor_id: Some(a.to_owned()),
        ..AuditQuery::default()
    };
    assert_eq!(list(actor("tok_a")).await, vec![1, 3, 5]);
    assert_eq!(list(actor("tok_z")).await, Vec::<i64>::new());
    let entity = AuditQuery {
        entity: Some("orders".to_owned()),
        ..AuditQuery::default()
    };
    assert_eq!(list(entity.clone()).await, vec![1, 2, 5]);
    let action = AuditQuery {
        action: Some("message.peek".to_owned()),
        ..AuditQuery::default()
    };
    assert_eq!(list(action.clone()).await, vec![2, 3, 5]);
    let window = AuditQuery {
        from: Some(at(20)),
        to: Some(at(50)),
        ..AuditQuery::default()
    };
    assert_eq!(list(window).await, vec![2, 3, 4]);
    // Filters are ANDed.
    let all_three = AuditQuery {
        actor_id: Some("tok_a".to_owned()),
        entity: Some("orders".to_owned()),
        action: Some("message.peek".to_owned()),
        ..AuditQuery::default()
    };
    assert_eq!(list(all_three).await, vec![5]);
    let peeks_from = AuditQuery {
        from: Some(at(30)),
        ..action.clone()
    };
    assert_eq!(list(peeks_from).await, vec![3, 5]);
    // The cursor and the limit.
    let page = AuditQuery {
        limit: 2,
        ..AuditQuery::default()
    };
    assert_eq!(list(page.clone()).await, vec![1, 2]);
    let next = AuditQuery {
        after_seq: Some(2),
        ..page.clone()
    };
    assert_eq!(list(next).await, vec![3, 4]);
    let last = AuditQuery {
        after_seq: Some(4),
        ..page
    };
    assert_eq!(list(last).await, vec![5]);
    let cursor_and_filter = AuditQuery {
        after_seq: Some(2),
        ..entity
    };
    assert_eq!(list(cursor_and_filter).await, vec![5]);

    // The cap: a page never holds more than MAX_AUDIT_PAGE, and 0 asks for the cap.
    let many: Vec<AuditFields> = (0..MAX_AUDIT_PAGE + 5)
        .map(|i| entry(100 + i64::from(i), "tok_m", "message.send", Some("bulk")))
        .collect();
    let appended = t.s().append_audit(&many).await.unwrap();
    assert_eq!(appended.len(), many.len());
    assert_eq!(
        appended.last().unwrap().seq,
        5 + i64::from(MAX_AUDIT_PAGE) + 5
    );
    let cap = usize::try_from(MAX_AUDIT_PAGE).unwrap();
    for limit in [0, MAX_AUDIT_PAGE, MAX_AUDIT_PAGE + 1, u32::MAX] {
        let got = t
            .s()
            .list_audit(&AuditQuery {
                limit,
                ..AuditQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(got.len(), cap, "limit {limit}");
        assert_eq!(got[0].seq, 1);
    }
    let rest = t
        .s()
        .list_audit(&AuditQuery {
            after_seq: Some(i64::from(MAX_AUDIT_PAGE)),
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(rest.len(), 10);
    let s = verify_log(t).await;
    assert_eq!(s.entries, u64::from(MAX_AUDIT_PAGE) + 10);
}

fn pruned_fields(at_ms: i64) -> AuditFields {
    AuditFields {
        at: at(at_ms),
        actor_id: "system".to_owned(),
        actor_name: "system".to_owned(),
        action: PRUNED_ACTION.to_owned(),
        entity: None,
        targets: vec!["retention=30d".to_owned()],
        outcome: "ok".to_owned(),
        client: None,
    }
}

pub async fn audit_retention_removes_old_entries_and_records_the_pass(t: &TestStore) {
    // Nothing to remove in an empty log: nothing appended either.
    assert_eq!(
        t.s()
            .prune_audit(at(100), &pruned_fields(100))
            .await
            .unwrap(),
        0
    );
    assert!(whole_log(t).await.is_empty());

    let first = t
        .s()
        .append_audit(
            &(1..=6)
                .map(|i| entry(i * 10, "tok_a", "message.peek", Some("q")))
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    // Nothing older than T0+5ms: nothing removed, nothing appended.
    assert_eq!(
        t.s().prune_audit(at(5), &pruned_fields(70)).await.unwrap(),
        0
    );
    assert_eq!(whole_log(t).await.len(), 6);

    // Entries at 10, 20, 30 are older than 35.
    let removed = t.s().prune_audit(at(35), &pruned_fields(70)).await.unwrap();
    assert_eq!(removed, 3);
    let log = whole_log(t).await;
    assert_eq!(seqs_of(&log), vec![4, 5, 6, 7]);
    let record = &log[3];
    assert_eq!(record.fields.action, PRUNED_ACTION);
    assert_eq!(record.fields.at, at(70));
    assert_eq!(
        record.fields.targets,
        vec![
            "retention=30d".to_owned(),
            "through_seq=3".to_owned(),
            format!("through_hash={}", first[2].hash),
        ]
    );
    assert_eq!(record.prev_hash, first[5].hash);
    let s = verify_log(t).await;
    assert_eq!((s.entries, s.first_seq, s.last_seq), (4, 4, 7));

    // Appends continue the chain after a pass.
    let more = t
        .s()
        .append_audit(&[entry(80, "tok_b", "message.send", Some("q"))])
        .await
        .unwrap();
    assert_eq!((more[0].seq, &more[0].prev_hash), (8, &record.hash));

    // Everything is older: all but the newest entry go, the earlier record included.
    let removed = t
        .s()
        .prune_audit(at(1_000), &pruned_fields(1_000))
        .await
        .unwrap();
    assert_eq!(removed, 4);
    let log = whole_log(t).await;
    assert_eq!(seqs_of(&log), vec![8, 9]);
    assert_eq!(log[0], more[0]);
    assert!(
        log[1]
            .fields
            .targets
            .contains(&format!("through_hash={}", record.hash))
    );
    assert!(log[1].fields.targets.contains(&"through_seq=7".to_owned()));
    let s = verify_log(t).await;
    assert_eq!((s.entries, s.first_seq, s.last_seq), (2, 8, 9));

    // The newest entry (the record) stays however old everything is; the one before goes.
    assert_eq!(
        t.s()
            .prune_audit(at(5_000), &pruned_fields(5_000))
            .await
            .unwrap(),
        1
    );
    assert_eq!(seqs_of(&whole_log(t).await), vec![9, 10]);
    verify_log(t).await;
}

pub async fn audit_retention_keeps_a_single_newest_entry(t: &TestStore) {
    t.s()
        .append_audit(&[entry(10, "tok_a", "token.create", None)])
        .await
        .unwrap();
    assert_eq!(
        t.s()
            .prune_audit(at(1_000), &pruned_fields(1_000))
            .await
            .unwrap(),
        0
    );
    let log = whole_log(t).await;
    assert_eq!(seqs_of(&log), vec![1]);
    assert_eq!(log[0].fields.action, "token.create");
}

pub async fn audit_retention_removes_only_a_prefix_of_the_log(t: &TestStore) {
    // Times need not follow the numbering (nodes' clocks differ): an old entry after a
    // newer one stays until everything before it may go, so what is left still links.
    let times = [10, 50, 20, 60, 70];
    let appended = t
        .s()
        .append_audit(
            &times
                .iter()
                .map(|&ms| entry(ms, "tok_a", "message.peek", Some("q")))
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    assert_eq!(
        t.s().prune_audit(at(30), &pruned_fields(80)).await.unwrap(),
        1
    );
    let log = whole_log(t).await;
    assert_eq!(seqs_of(&log), vec![2, 3, 4, 5, 6]);
    assert_eq!(log[1].fields.at, at(20));
    assert!(
        log[4]
            .fields
            .targets
            .contains(&format!("through_hash={}", appended[0].hash))
    );
    verify_log(t).await;
    assert_eq!(
        t.s().prune_audit(at(65), &pruned_fields(90)).await.unwrap(),
        3
    );
    assert_eq!(seqs_of(&whole_log(t).await), vec![5, 6, 7]);
    verify_log(t).await;
}

pub async fn audit_head_follows_every_append_and_retention_pass(t: &TestStore) {
    assert_eq!(
        t.s().audit_head().await.unwrap(),
        Some(ChainHead::genesis())
    );
    let head_of = |e: &AuditEntry| ChainHead {
        seq: e.seq,
        hash: e.hash.clone(),
    };
    let first = t
        .s()
        .append_audit(&[
            entry(10, "tok_a", "token.create", None),
            entry(20, "tok_a", "message.peek", Some("q")),
        ])
        .await
        .unwrap();
    assert_eq!(
        t.s().audit_head().await.unwrap(),
        Some(head_of(first.last().unwrap()))
    );
    // Nothing appended, nothing moved.
    assert!(t.s().append_audit(&[]).await.unwrap().is_empty());
    assert_eq!(
        t.s().audit_head().await.unwrap(),
        Some(head_of(first.last().unwrap()))
    );
    let second = t
        .s()
        .append_audit(&[entry(30, "tok_b", "queue.update", Some("q"))])
        .await
        .unwrap();
    assert_eq!(second[0].prev_hash, first[1].hash);
    assert_eq!(t.s().audit_head().await.unwrap(), Some(head_of(&second[0])));
    // A retention pass appends its record: the head is that record.
    assert_eq!(
        t.s()
            .prune_audit(at(25), &pruned_fields(1_000))
            .await
            .unwrap(),
        2
    );
    let log = whole_log(t).await;
    assert_eq!(log.last().unwrap().fields.action, PRUNED_ACTION);
    assert_eq!(
        t.s().audit_head().await.unwrap(),
        Some(head_of(log.last().unwrap()))
    );
    assert_eq!(verify_log(t).await.last_seq, 4);
}
