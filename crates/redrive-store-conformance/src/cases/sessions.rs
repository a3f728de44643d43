//! Sessions: ordered groups that one receiver holds at a time.

use super::prelude::*;

fn sref(l: &redrive_store::SessionLock) -> SessionRef {
    SessionRef {
        session_id: l.session_id.clone(),
        lock_token: l.lock_token.clone(),
    }
}

async fn session_queue(t: &TestStore) -> redrive_core::EntityName {
    t.queue("orders", policy(|p| p.requires_session = true))
        .await
}

pub async fn session_messages_come_in_order_and_one_receiver_holds_session(t: &TestStore) {
    let q = session_queue(t).await;
    t.send(
        &q,
        vec![
            session_msg("a1", "s1"),
            session_msg("b1", "s2"),
            session_msg("a2", "s1"),
            session_msg("a3", "s1"),
        ],
        T0,
    )
    .await;
    let l1 = t
        .s()
        .accept_session(&q, Some("s1"), 60_000, T0)
        .await
        .unwrap()
        .expect("named session");
    assert_eq!(l1.session_id, "s1");
    assert_eq!(l1.locked_until, secs(60));
    assert_err!(
        t.s().accept_session(&q, Some("s1"), 60_000, T0).await,
        StoreError::SessionLocked { .. }
    );
    let out = t
        .s()
        .receive(params(&q, 10, 30_000, T0, Some(sref(&l1))))
        .await
        .unwrap();
    let ids: Vec<&str> = out
        .deliveries
        .iter()
        .map(|d| d.message.message_id.as_str())
        .collect();
    assert_eq!(ids, ["a1", "a2", "a3"], "only s1, in sequence order");
    assert!(
        t.s()
            .receive(params(&q, 10, 30_000, T0, Some(sref(&l1))))
            .await
            .unwrap()
            .deliveries
            .is_empty()
    );

    let l2 = t
        .s()
        .accept_session(&q, None, 60_000, T0)
        .await
        .unwrap()
        .expect("s2 is free");
    assert_eq!(l2.session_id, "s2");
    assert_ne!(l2.lock_token, l1.lock_token);
    let out = t
        .s()
        .receive(params(&q, 10, 30_000, T0, Some(sref(&l2))))
        .await
        .unwrap();
    assert_eq!(out.deliveries.len(), 1);
    assert_eq!(out.deliveries[0].message.message_id, "b1");
    assert_eq!(
        t.s().accept_session(&q, None, 60_000, T0).await.unwrap(),
        None,
        "every session with messages is held"
    );
}

pub async fn next_session_message_not_delivered_while_earlier_locked(t: &TestStore) {
    let q = session_queue(t).await;
    t.send(
        &q,
        vec![session_msg("m1", "s1"), session_msg("m2", "s1")],
        T0,
    )
    .await;
    let l = t
        .s()
        .accept_session(&q, Some("s1"), 300_000, T0)
        .await
        .unwrap()
        .unwrap();
    let recv =
        |max: u32, now: Timestamp| t.s().receive(params(&q, max, 10_000, now, Some(sref(&l))));
    let d = recv(1, T0).await.unwrap().deliveries;
    assert_eq!(d[0].message.message_id, "m1");
    assert!(
        recv(1, secs(1)).await.unwrap().deliveries.is_empty(),
        "m1 is locked"
    );
    // Abandoned: m1 comes again, before m2.
    t.settle1(
        &q,
        &d[0].lock_token,
        SettleAction::Abandon {
            delay_ms: None,
            last_attempt: None,
        },
        secs(2),
    )
    .await
    .unwrap();
    let d = recv(1, secs(2)).await.unwrap().deliveries;
    assert_eq!(d[0].message.message_id, "m1");
    assert_eq!(d[0].message.delivery_count, 2);
    // Its lock runs out: m1 again, still before m2.
    let out = recv(5, secs(12)).await.unwrap();
    assert_eq!(out.effects.lock_expired.len(), 1);
    let ids: Vec<&str> = out
        .deliveries
        .iter()
        .map(|d| d.message.message_id.as_str())
        .collect();
    assert_eq!(ids, ["m1", "m2"]);
    // Completed in order, the session is empty.
    for d in &out.deliveries {
        t.settle1(&q, &d.lock_token, SettleAction::Complete, secs(13))
            .await
            .unwrap();
    }
    assert!(recv(5, secs(14)).await.unwrap().deliveries.is_empty());
}

pub async fn deferred_session_message_is_skipped(t: &TestStore) {
    let q = session_queue(t).await;
    t.send(
        &q,
        vec![session_msg("m1", "s1"), session_msg("m2", "s1")],
        T0,
    )
    .await;
    let l = t
        .s()
        .accept_session(&q, Some("s1"), 300_000, T0)
        .await
        .unwrap()
        .unwrap();
    let d = t
        .s()
        .receive(params(&q, 1, 30_000, T0, Some(sref(&l))))
        .await
        .unwrap()
        .deliveries;
    t.settle1(&q, &d[0].lock_token, SettleAction::Defer, T0)
        .await
        .unwrap();
    let d = t
        .s()
        .receive(params(&q, 5, 30_000, T0, Some(sref(&l))))
        .await
        .unwrap()
        .deliveries;
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].message.message_id, "m2");
}

pub async fn accept_unnamed_session_picks_oldest_free_session(t: &TestStore) {
    let q = session_queue(t).await;
    t.send(
        &q,
        vec![
            NewMessage {
                scheduled_at: Some(secs(60)),
                ..session_msg("a", "s-late")
            },
            session_msg("b", "s-b"),
            session_msg("c", "s-c"),
            session_msg("b2", "s-b"),
        ],
        T0,
    )
    .await;
    let pick = |now: Timestamp| t.s().accept_session(&q, None, 30_000, now);
    assert_eq!(pick(T0).await.unwrap().unwrap().session_id, "s-b");
    assert_eq!(pick(T0).await.unwrap().unwrap().session_id, "s-c");
    assert_eq!(
        pick(T0).await.unwrap(),
        None,
        "s-late has nothing visible yet"
    );
    assert_eq!(pick(secs(60)).await.unwrap().unwrap().session_id, "s-late");
    // Expired session locks are free again (s-b's and s-c's ran out at 30 s; s-late's
    // runs until 90 s): oldest first.
    assert_eq!(pick(secs(89)).await.unwrap().unwrap().session_id, "s-b");
}

pub async fn session_lock_expires_and_can_be_taken_over(t: &TestStore) {
    let q = session_queue(t).await;
    t.send(&q, vec![session_msg("m1", "s1")], T0).await;
    let l1 = t
        .s()
        .accept_session(&q, Some("s1"), 10_000, T0)
        .await
        .unwrap()
        .unwrap();
    assert_err!(
        t.s().accept_session(&q, Some("s1"), 10_000, secs(5)).await,
        StoreError::SessionLocked { .. }
    );
    let l2 = t
        .s()
        .accept_session(&q, Some("s1"), 10_000, secs(10))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(l1.lock_token, l2.lock_token);
    assert_err!(
        t.s()
            .receive(params(&q, 1, 30_000, secs(10), Some(sref(&l1))))
            .await,
        StoreError::SessionLockLost
    );
    assert_err!(
        t.s()
            .renew_session(&q, "s1", &l1.lock_token, 10_000, secs(10))
            .await,
        StoreError::SessionLockLost
    );
    let d = t
        .s()
        .receive(params(&q, 1, 30_000, secs(10), Some(sref(&l2))))
        .await
        .unwrap()
        .deliveries;
    assert_eq!(d.len(), 1);
}

pub async fn receive_with_lost_session_lock_is_session_lock_lost(t: &TestStore) {
    let q = session_queue(t).await;
    t.send(&q, vec![session_msg("m1", "s1")], T0).await;
    let l = t
        .s()
        .accept_session(&q, Some("s1"), 10_000, T0)
        .await
        .unwrap()
        .unwrap();
    let wrong = SessionRef {
        session_id: "s1".into(),
        lock_token: "lk_wrong".into(),
    };
    let unknown = SessionRef {
        session_id: "s9".into(),
        lock_token: l.lock_token.clone(),
    };
    for s in [wrong, unknown] {
        assert_err!(
            t.s().receive(params(&q, 1, 30_000, T0, Some(s))).await,
            StoreError::SessionLockLost
        );
    }
    assert_err!(
        t.s()
            .receive(params(&q, 1, 30_000, secs(10), Some(sref(&l))))
            .await,
        StoreError::SessionLockLost
    );
    assert_eq!(t.counts(&q, secs(10)).await.active, 1, "nothing was locked");
}

pub async fn renew_and_release_session(t: &TestStore) {
    let q = session_queue(t).await;
    t.send(&q, vec![session_msg("m1", "s1")], T0).await;
    let l = t
        .s()
        .accept_session(&q, Some("s1"), 10_000, T0)
        .await
        .unwrap()
        .unwrap();
    let renewed = t
        .s()
        .renew_session(&q, "s1", &l.lock_token, 10_000, secs(8))
        .await
        .unwrap();
    assert_eq!(renewed.locked_until, secs(18));
    assert_eq!(renewed.lock_token, l.lock_token);
    assert_err!(
        t.s().accept_session(&q, Some("s1"), 10_000, secs(15)).await,
        StoreError::SessionLocked { .. }
    );
    let d = t
        .s()
        .receive(params(&q, 1, 30_000, secs(15), Some(sref(&l))))
        .await
        .unwrap()
        .deliveries;
    assert_eq!(d.len(), 1);
    assert_err!(
        t.s().release_session(&q, "s1", "lk_wrong", secs(16)).await,
        StoreError::SessionLockLost
    );
    t.s()
        .release_session(&q, "s1", &l.lock_token, secs(16))
        .await
        .unwrap();
    assert_err!(
        t.s()
            .receive(params(&q, 1, 30_000, secs(16), Some(sref(&l))))
            .await,
        StoreError::SessionLockLost
    );
    let again = t
        .s()
        .accept_session(&q, Some("s1"), 10_000, secs(16))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(again.lock_token, l.lock_token);
}

pub async fn accept_session_on_plain_queue_is_session_not_allowed(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    assert_err!(
        t.s().accept_session(&q, Some("s1"), 10_000, T0).await,
        StoreError::SessionNotAllowed { .. }
    );
    assert_err!(
        t.s().accept_session(&q, None, 10_000, T0).await,
        StoreError::SessionNotAllowed { .. }
    );
}

/// The summary of `id` in `page`.
fn summary<'a>(
    page: &'a [redrive_store::SessionSummary],
    id: &str,
) -> &'a redrive_store::SessionSummary {
    page.iter()
        .find(|s| s.session_id == id)
        .unwrap_or_else(|| panic!("session {id} listed"))
}

pub async fn list_sessions_pages_by_id_with_counts_and_live_locks(t: &TestStore) {
    let q = session_queue(t).await;
    let later = redrive_store::NewMessage {
        scheduled_at: Some(secs(300)),
        ..session_msg("c1", "s3")
    };
    t.send(
        &q,
        vec![
            session_msg("a1", "s1"),
            session_msg("b1", "s2"),
            session_msg("a2", "s1"),
            later,
            session_msg("b2", "s2"),
        ],
        T0,
    )
    .await;
    // s1: a1 deferred, a2 waiting, its lock released.
    let l1 = t
        .s()
        .accept_session(&q, Some("s1"), 60_000, T0)
        .await
        .unwrap()
        .unwrap();
    let d = t
        .s()
        .receive(params(&q, 1, 30_000, T0, Some(sref(&l1))))
        .await
        .unwrap()
        .deliveries;
    assert_eq!(d[0].message.message_id, "a1");
    t.settle1(&q, &d[0].lock_token, SettleAction::Defer, T0)
        .await
        .unwrap();
    t.s()
        .release_session(&q, "s1", &l1.lock_token, T0)
        .await
        .unwrap();
    // s2: held for 60 s, b1 in flight for 30 s, b2 waiting.
    let l2 = t
        .s()
        .accept_session(&q, Some("s2"), 60_000, T0)
        .await
        .unwrap()
        .unwrap();
    let d = t
        .s()
        .receive(params(&q, 1, 30_000, T0, Some(sref(&l2))))
        .await
        .unwrap()
        .deliveries;
    assert_eq!(d[0].message.message_id, "b1");
    // s4: held, without messages.
    t.s()
        .accept_session(&q, Some("s4"), 20_000, T0)
        .await
        .unwrap()
        .unwrap();

    let page = t.s().list_sessions(&q, None, 100, secs(1)).await.unwrap();
    let ids: Vec<&str> = page.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, ["s1", "s2", "s3", "s4"]);
    let s1 = summary(&page, "s1");
    assert_eq!(
        (s1.active, s1.scheduled, s1.in_flight, s1.deferred),
        (1, 0, 0, 1)
    );
    assert!(!s1.locked());
    assert_eq!(s1.locked_until, None, "a released lock is not shown");
    let s2 = summary(&page, "s2");
    assert_eq!(
        (s2.active, s2.scheduled, s2.in_flight, s2.deferred),
        (1, 0, 1, 0)
    );
    assert!(s2.locked());
    assert_eq!(s2.locked_until, Some(secs(60)));
    let s3 = summary(&page, "s3");
    assert_eq!(
        (s3.active, s3.scheduled, s3.in_flight, s3.deferred),
        (0, 1, 0, 0)
    );
    let s4 = summary(&page, "s4");
    assert_eq!(
        (s4.active, s4.scheduled, s4.in_flight, s4.deferred),
        (0, 0, 0, 0)
    );
    assert_eq!(s4.locked_until, Some(secs(20)));

    // Pages of two, each after the last id of the one before.
    let first = t.s().list_sessions(&q, None, 2, secs(1)).await.unwrap();
    let ids: Vec<&str> = first.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, ["s1", "s2"]);
    assert_eq!(first[1], *s2, "a page shows what the whole listing shows");
    let second = t
        .s()
        .list_sessions(&q, Some("s2"), 2, secs(1))
        .await
        .unwrap();
    let ids: Vec<&str> = second.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, ["s3", "s4"]);
    assert!(
        t.s()
            .list_sessions(&q, Some("s4"), 2, secs(1))
            .await
            .unwrap()
            .is_empty()
    );
    let between = t
        .s()
        .list_sessions(&q, Some("s1a"), 1, secs(1))
        .await
        .unwrap();
    assert_eq!(between.len(), 1);
    assert_eq!(between[0].session_id, "s2", "after need not be a listed id");

    // At 61 s the locks have run out, whether or not a sweep wrote it: s2's is shown
    // unheld and b1 waiting again; s4, with no messages, is gone.
    let page = t.s().list_sessions(&q, None, 100, secs(61)).await.unwrap();
    let ids: Vec<&str> = page.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, ["s1", "s2", "s3"]);
    let s2 = summary(&page, "s2");
    assert!(!s2.locked());
    assert_eq!(s2.locked_until, None);
    assert_eq!(
        (s2.active, s2.scheduled, s2.in_flight, s2.deferred),
        (2, 0, 0, 0)
    );

    assert_err!(
        t.s().list_sessions(&name("nope"), None, 10, T0).await,
        StoreError::QueueNotFound { .. }
    );
    let plain = t.queue("plain", QueuePolicy::default()).await;
    t.send1(&plain, "p1", T0).await;
    assert!(
        t.s()
            .list_sessions(&plain, None, 10, T0)
            .await
            .unwrap()
            .is_empty(),
        "a queue without sessions lists none"
    );
}
