//! Failures by signature: the aggregate both stores keep on every dead-letter write, and
//! the narrower filters of a dead-letter listing.

use super::prelude::*;
use redrive_core::EntityName;
use redrive_store::RecordFilter;
use redrive_store::failure::{FailureQuery, FailureShape, FailureSignature, HOUR_MS};

const HOUR: i64 = HOUR_MS;

/// Sends one message with `ty` and `source`, receives it and dead-letters it with
/// `reason` and `description`; returns the record id.
async fn fail(
    t: &TestStore,
    q: &EntityName,
    id: &str,
    (reason, description): (&str, &str),
    (ty, source): (Option<&str>, Option<&str>),
    now: Timestamp,
) -> String {
    let mut properties = Properties::new();
    if let Some(s) = source {
        properties.insert("source".into(), PropertyValue::String(s.into()));
    }
    t.send(
        q,
        vec![NewMessage {
            message_type: ty.map(str::to_owned),
            properties,
            ..msg(id, b"{}")
        }],
        now,
    )
    .await;
    let d = t.take(q, 1, 30_000, now).await;
    assert_eq!(d.len(), 1, "the message just sent is received");
    t.settle1(
        q,
        &d[0].lock_token,
        SettleAction::DeadLetter {
            reason: reason.to_owned(),
            description: Some(description.to_owned()),
            by_broker: false,
            classifier: redrive_core::Classifier::default(),
        },
        now,
    )
    .await
    .expect("dead-letter")
    .dead_letter_id
    .expect("a record id")
}

fn failures_query(area: Area, now: Timestamp) -> FailureQuery {
    FailureQuery {
        area,
        queues: None,
        from: None,
        to: None,
        after: None,
        limit: 100,
        now,
    }
}

async fn failures(t: &TestStore, q: FailureQuery) -> Vec<FailureSignature> {
    t.s().list_failures(&q).await.expect("list failures")
}

async fn ids(t: &TestStore, q: &EntityName, area: Area, filter: RecordFilter) -> Vec<String> {
    t.s()
        .list_dead_letters(&DeadLetterQuery {
            queue: q.clone(),
            area,
            reason: None,
            from: None,
            to: None,
            after: None,
            limit: 100,
            filter,
        })
        .await
        .expect("list dead letters")
        .into_iter()
        .map(|r| r.id)
        .collect()
}

pub async fn failures_group_dead_letters_by_signature_per_area(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let other = t.queue("billing", QueuePolicy::default()).await;
    let a = fail(
        t,
        &q,
        "m1",
        ("Bad", "order ord_7Hx91KzQ has no amount (3 items)"),
        (Some("order.created"), None),
        T0,
    )
    .await;
    let b = fail(
        t,
        &q,
        "m2",
        ("Bad", "order ord_3Jd82LpA has no amount (12 items)"),
        (Some("order.created"), None),
        at(2 * HOUR),
    )
    .await;
    let c = fail(
        t,
        &q,
        "m3",
        ("Worse", "order ord_3Jd82LpA has no amount (12 items)"),
        (Some("order.created"), None),
        at(HOUR),
    )
    .await;
    fail(t, &other, "m4", ("Bad", "no amount"), (None, None), T0).await;
    let now = at(2 * HOUR + 5);

    let all = failures(t, failures_query(Area::Live, now)).await;
    assert_eq!(all.len(), 3, "{all:?}");
    // Newest last_seen first.
    let bad = &all[0];
    assert_eq!(bad.shape.queue, q);
    assert_eq!(bad.shape.reason, "Bad");
    assert_eq!(
        bad.shape.description,
        "order <id> has no amount (<n> items)"
    );
    assert_eq!(bad.shape.message_type.as_deref(), Some("order.created"));
    assert_eq!(bad.shape.outcome_class.as_deref(), Some("handler_error"));
    assert_eq!(
        bad.shape.route_kind.as_deref(),
        Some("application_quarantined")
    );
    assert_eq!((bad.count, bad.live), (2, 2));
    assert_eq!((bad.first_seen, bad.last_seen), (T0, at(2 * HOUR)));
    assert_eq!(bad.id, bad.shape.id());
    assert_eq!(bad.sparkline.len(), 24);
    let hour = |ts: Timestamp| 23 - usize::try_from((now.0 / HOUR) - (ts.0 / HOUR)).unwrap();
    assert_eq!(bad.sparkline[hour(T0)], 1);
    assert_eq!(bad.sparkline[hour(at(2 * HOUR))], 1);
    assert_eq!(bad.sparkline.iter().sum::<u64>(), 2);
    let worse = &all[1];
    assert_eq!((worse.shape.reason.as_str(), worse.count), ("Worse", 1));
    assert_ne!(worse.id, bad.id, "a different reason is another signature");
    assert_eq!(all[2].shape.queue, other);

    // The records of one signature, by id, from the store's index.
    let only = RecordFilter {
        signature: Some(bad.id.clone()),
        ..RecordFilter::default()
    };
    assert_eq!(
        ids(t, &q, Area::Live, only.clone()).await,
        [a.clone(), b.clone()]
    );
    assert!(ids(t, &other, Area::Live, only.clone()).await.is_empty());

    // Only some queues.
    let mut just = failures_query(Area::Live, now);
    just.queues = Some(vec![other.clone()]);
    let got = failures(t, just).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].shape.queue, other);
    let mut none = failures_query(Area::Live, now);
    none.queues = Some(Vec::new());
    assert!(failures(t, none).await.is_empty());

    // Keyset pages: newest last_seen first, then by id.
    let mut page = failures_query(Area::Live, now);
    page.limit = 2;
    let first = failures(t, page.clone()).await;
    assert_eq!(first.len(), 2);
    page.after = Some((first[1].last_seen, first[1].id.clone()));
    let second = failures(t, page).await;
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].id, all[2].id);

    // A window: last seen at or after `from`, first seen before `to`.
    let mut window = failures_query(Area::Live, now);
    window.from = Some(at(HOUR));
    assert_eq!(failures(t, window.clone()).await.len(), 2);
    window.to = Some(at(HOUR));
    assert_eq!(failures(t, window).await.len(), 1);

    // Moving a record out of an area leaves the count and lowers `live`; it counts in
    // the area it entered.
    t.s()
        .move_dead_letter(&q, &a, Area::Quarantine, at(3 * HOUR))
        .await
        .unwrap();
    let live = failures(t, failures_query(Area::Live, now)).await;
    let bad_now = live.iter().find(|s| s.id == bad.id).unwrap();
    assert_eq!((bad_now.count, bad_now.live), (2, 1));
    let quarantined = failures(t, failures_query(Area::Quarantine, now)).await;
    assert_eq!(quarantined.len(), 1);
    assert_eq!(quarantined[0].id, bad.id);
    assert_eq!((quarantined[0].count, quarantined[0].live), (1, 1));
    assert_eq!(ids(t, &q, Area::Quarantine, only).await, [a.as_str()]);

    // A record that is consumed from the dead-letter store leaves it too.
    let got = t
        .s()
        .receive_dead_letters(&q, 10, 30_000, at(3 * HOUR))
        .await
        .unwrap();
    let token = got.iter().find(|d| d.record.id == c).unwrap();
    t.s()
        .settle_dead_letter(&q, &token.lock_token, true, at(3 * HOUR))
        .await
        .unwrap();
    let live = failures(t, failures_query(Area::Live, now)).await;
    let worse_now = live.iter().find(|s| s.id == worse.id).unwrap();
    assert_eq!((worse_now.count, worse_now.live), (1, 0));

    // Deleting a queue deletes its signatures.
    t.s().delete_queue(&q, true).await.unwrap();
    let left = failures(t, failures_query(Area::Live, now)).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].shape.queue, other);
    assert!(
        failures(t, failures_query(Area::Quarantine, now))
            .await
            .is_empty()
    );
}

pub async fn failure_sparkline_keeps_the_last_day_of_hours(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    for h in 0..30 {
        fail(
            t,
            &q,
            &format!("m{h}"),
            ("Bad", &format!("failed at step {h}")),
            (None, None),
            at(h * HOUR),
        )
        .await;
    }
    let now = at(29 * HOUR + 1);
    let all = failures(t, failures_query(Area::Live, now)).await;
    assert_eq!(all.len(), 1);
    assert_eq!((all[0].count, all[0].live), (30, 30));
    assert_eq!(all[0].sparkline, vec![1; 24]);
    // A day later nothing is in the window, and the counts stay.
    let later = failures(t, failures_query(Area::Live, at(60 * HOUR))).await;
    assert_eq!(later[0].sparkline, vec![0; 24]);
    assert_eq!(later[0].count, 30);
}

pub async fn dead_letter_list_filters_narrow_in_the_store(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let a = fail(
        t,
        &q,
        "m1",
        ("Bad", "Payment TIMEOUT after 30 s"),
        (Some("order.paid"), Some("/shop")),
        T0,
    )
    .await;
    let b = fail(
        t,
        &q,
        "m2",
        ("Bad", "stock missing"),
        (Some("order.created"), Some("/shop")),
        at(1),
    )
    .await;
    let c = fail(
        t,
        &q,
        "m3",
        ("Bad", "payment timeout after 31 s"),
        (Some("order.paid"), Some("/billing")),
        at(2),
    )
    .await;
    let by = |f: RecordFilter| ids(t, &q, Area::Live, f);
    assert_eq!(
        by(RecordFilter {
            message_type: Some("order.paid".into()),
            ..RecordFilter::default()
        })
        .await,
        [a.clone(), c.clone()]
    );
    assert_eq!(
        by(RecordFilter {
            source: Some("/shop".into()),
            ..RecordFilter::default()
        })
        .await,
        [a.clone(), b.clone()]
    );
    // Text: a substring of the description, ASCII letters without case.
    assert_eq!(
        by(RecordFilter {
            text: Some("Timeout AFTER".into()),
            ..RecordFilter::default()
        })
        .await,
        [a.clone(), c.clone()]
    );
    assert_eq!(
        by(RecordFilter {
            quality: Some(EvidenceQuality::Exact),
            ..RecordFilter::default()
        })
        .await,
        [a.clone(), b.clone(), c.clone()]
    );
    assert!(
        by(RecordFilter {
            quality: Some(EvidenceQuality::Approximate),
            ..RecordFilter::default()
        })
        .await
        .is_empty()
    );
    // Filters combine, and a record's source is kept as its own.
    assert_eq!(
        by(RecordFilter {
            message_type: Some("order.paid".into()),
            source: Some("/billing".into()),
            text: Some("timeout".into()),
            ..RecordFilter::default()
        })
        .await,
        [c.as_str()]
    );
    // Keyset paging stays: a page after a cursor, with a filter.
    let page = t
        .s()
        .list_dead_letters(&DeadLetterQuery {
            queue: q.clone(),
            area: Area::Live,
            reason: None,
            from: None,
            to: None,
            after: Some(a.clone()),
            limit: 1,
            filter: RecordFilter {
                message_type: Some("order.paid".into()),
                ..RecordFilter::default()
            },
        })
        .await
        .unwrap();
    assert_eq!(
        page.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
        [c.as_str()]
    );
    // The stored signature of a record is its shape's.
    let r = t.s().get_dead_letter(&q, &b).await.unwrap();
    let sig = FailureShape::of(&r).id();
    assert_eq!(
        by(RecordFilter {
            signature: Some(sig),
            ..RecordFilter::default()
        })
        .await,
        [b]
    );
}
