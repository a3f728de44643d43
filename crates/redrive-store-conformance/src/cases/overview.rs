//! The overview's counts: every queue's counts in one read agree with each queue's own,
//! dead letters by area, flagged candidates, open cases by queue.

use redrive_core::case::CaseState;
use redrive_store::skeleton::cases::case_id;
use redrive_store::{CaseTally, CaseUpdate, EntityCounts};

use super::prelude::*;

/// Writes `f` applied to the mutable part of record `record_id`'s case.
async fn change_case(t: &TestStore, record_id: &str, f: impl FnOnce(&mut redrive_store::CaseMut)) {
    let c = t.s().get_case(&case_id(record_id)).await.unwrap();
    let mut set = c.m.clone();
    f(&mut set);
    t.s()
        .update_case(&CaseUpdate {
            id: c.id.clone(),
            version: c.version,
            set,
            append: Vec::new(),
            payload: None,
            archive_record: false,
            audit: Vec::new(),
        })
        .await
        .unwrap();
}

fn of<'a>(all: &'a [EntityCounts], q: &str) -> &'a EntityCounts {
    all.iter()
        .find(|e| e.queue.as_str() == q)
        .unwrap_or_else(|| panic!("{q} is in the overview"))
}

pub async fn overview_counts_agree_with_each_queue_s_counts_and_tally_open_cases(t: &TestStore) {
    let empty = t.s().overview_counts(T0, 3).await.unwrap();
    assert!(empty.queues.is_empty() && empty.cases.is_empty());

    let orders = t.queue("orders", QueuePolicy::default()).await;
    let idle = t.queue("idle", QueuePolicy::default()).await;
    let r1 = t.dead_letter_one(&orders, "x1", "Bad", T0).await;
    let r2 = t.dead_letter_one(&orders, "x2", "Bad", T0).await;
    let r3 = t.dead_letter_one(&orders, "x3", "Worse", T0).await;
    // orders: two active, one scheduled, one locked, one deferred, three dead letters of
    // which one is quarantined, and a lock that runs out before the look.
    t.send(
        &orders,
        vec![
            msg("a", b"a"),
            msg("b", b"b"),
            msg("c", b"c"),
            msg("d", b"d"),
            msg("e", b"e"),
        ],
        T0,
    )
    .await;
    t.send(
        &orders,
        vec![NewMessage {
            scheduled_at: Some(secs(600)),
            ..msg("later", b"l")
        }],
        T0,
    )
    .await;
    let long = t.take(&orders, 2, 300_000, secs(1)).await;
    t.settle1(&orders, &long[1].lock_token, SettleAction::Defer, secs(1))
        .await
        .unwrap();
    let short = t.take(&orders, 1, 1_000, secs(1)).await;
    assert_eq!(short.len(), 1);
    t.s()
        .move_dead_letter(&orders, &r3, Area::Quarantine, secs(3))
        .await
        .unwrap();
    // Cases: r1 escalated, r2 closed, r3 (quarantined) open.
    change_case(t, &r1, |m| m.state = CaseState::Escalated).await;
    change_case(t, &r2, |m| m.closed_at = Some(secs(4))).await;

    let now = secs(10);
    let all = t.s().overview_counts(now, 3).await.unwrap();
    let names: Vec<&str> = all.queues.iter().map(|e| e.queue.as_str()).collect();
    assert_eq!(names, ["idle", "orders"], "every queue, by name");
    for q in [&orders, &idle] {
        assert_eq!(
            of(&all.queues, q.as_str()).counts,
            t.counts(q, now).await,
            "{q}: as queue_counts answers"
        );
    }
    let o = of(&all.queues, "orders");
    assert_eq!(
        (
            o.counts.active,
            o.counts.scheduled,
            o.counts.locked,
            o.counts.deferred
        ),
        (3, 1, 1, 1),
        "the expired lock counts where a browse shows it"
    );
    assert_eq!(o.counts.dead_lettered, 2);
    assert_eq!(o.quarantined, 1);
    assert_eq!(o.flagged, 0);
    assert_eq!(o.counts.oldest_enqueued_at, Some(T0));
    assert_eq!(of(&all.queues, "idle").counts, QueueCounts::default());
    assert_eq!(
        all.cases,
        vec![(
            orders.clone(),
            CaseTally {
                open: 2,
                overdue: 0,
                escalated: 1
            }
        )]
    );
    // Past every review deadline, every open case is overdue.
    let later = t.s().overview_counts(secs(100_000_000), 3).await.unwrap();
    assert_eq!(later.cases[0].1.overdue, 2);
}

pub async fn overview_counts_flag_candidates_that_failed_often_enough(t: &TestStore) {
    let q = t
        .queue(
            "replayed",
            policy(|p| {
                p.auto_replay.enabled = true;
                p.auto_replay.judge_delay_ms = 1_000;
            }),
        )
        .await;
    let r1 = t.dead_letter_one(&q, "m1", "Bad", T0).await;
    t.dead_letter_one(&q, "m2", "Bad", T0).await;
    for i in 0..3 {
        let failures = t
            .s()
            .fail_replay(&q, &r1, "judge failed", secs(10 + i))
            .await
            .unwrap();
        assert_eq!(failures, Some(u32::try_from(i + 1).unwrap()));
    }
    let all = t.s().overview_counts(secs(5), 3).await.unwrap();
    let e = of(&all.queues, "replayed");
    assert_eq!(e.counts.dead_lettered, 2);
    assert_eq!(e.flagged, 1, "three failures reach the threshold of three");
    let all = t.s().overview_counts(secs(5), 4).await.unwrap();
    assert_eq!(of(&all.queues, "replayed").flagged, 0);
    // Candidates open no case.
    assert!(all.cases.is_empty());
}
