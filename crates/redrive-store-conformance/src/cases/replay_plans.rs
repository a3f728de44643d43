//! Bounded replay plans: a plan and its items stored at once, read, listed and paged; an
//! update conditional on the version read that writes everything or nothing; the item
//! lease (one admitted item per case, whatever the plan); concurrent updates.

use std::sync::Arc;

use redrive_store::{
    PlanItemQuery, PlanItemRecord, PlanItemState, PlanMut, PlanQuery, PlanStatus, ReplayPlanRecord,
    ReplayPlanUpdate, Store,
};
use serde_json::json;

use super::prelude::*;

fn plan(id: &str, queue: &str, status: PlanStatus, items: u64) -> ReplayPlanRecord {
    ReplayPlanRecord {
        id: id.to_owned(),
        kind: redrive_store::PlanKind::Cases,
        queue: queue.to_owned(),
        destination: format!("{queue}-replay"),
        owner_id: "tok_0000000000000001".to_owned(),
        owner_name: "replayer".to_owned(),
        spec: json!({
            "selection": {"reason": "Timeout", "types": ["order.created", "order.paid"]},
            "budget": {"items_per_window": 10, "bytes_per_window": 1_048_576, "ratio": 0.25},
            "correction": null,
            "note": "ünïcödé \"quoted\"",
        }),
        items,
        created_at: secs(1),
        version: 1,
        m: PlanMut {
            status,
            owner_until: secs(600),
            stop_reason: None,
            next_at: Some(secs(2)),
            state: json!({"window": 0, "counters": {"admitted": 0}}),
            updated_at: secs(1),
        },
    }
}

fn item(seq: u32, case: &str) -> PlanItemRecord {
    PlanItemRecord {
        seq,
        case_id: case.to_owned(),
        bytes: 100 + u64::from(seq),
        state: if seq % 5 == 4 {
            PlanItemState::Held
        } else {
            PlanItemState::Waiting
        },
        window: None,
        message_id: None,
        detail: (seq % 5 == 4).then(|| "destination_failing".to_owned()),
        updated_at: secs(1),
    }
}

fn items(n: u32, prefix: &str) -> Vec<PlanItemRecord> {
    (0..n).map(|i| item(i, &format!("{prefix}{i}"))).collect()
}

fn admitted(mut i: PlanItemRecord, window: u32, at: Timestamp) -> PlanItemRecord {
    i.state = PlanItemState::Admitted;
    i.window = Some(window);
    i.message_id = Some(format!("{}|1", i.case_id));
    i.detail = None;
    i.updated_at = at;
    i
}

fn moved(mut i: PlanItemRecord, state: PlanItemState, at: Timestamp) -> PlanItemRecord {
    i.state = state;
    i.detail = Some(state.as_str().to_owned());
    i.updated_at = at;
    i
}

fn step(p: &ReplayPlanRecord, at: Timestamp, items: Vec<PlanItemRecord>) -> ReplayPlanUpdate {
    ReplayPlanUpdate {
        id: p.id.clone(),
        version: p.version,
        set: PlanMut {
            status: PlanStatus::Running,
            owner_until: at.plus_millis(600_000),
            stop_reason: None,
            next_at: Some(at.plus_millis(1_000)),
            state: json!({"window": 1, "at": at.0, "counters": {"admitted": items.len()}}),
            updated_at: at,
        },
        items,
    }
}

async fn all_items(s: &dyn Store, plan_id: &str) -> Vec<PlanItemRecord> {
    s.replay_plan_items(plan_id, &PlanItemQuery::default())
        .await
        .unwrap()
}

async fn ids(s: &dyn Store, q: PlanQuery) -> Vec<String> {
    s.list_replay_plans(&q)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect()
}

pub async fn replay_plans_are_stored_with_their_items_read_listed_and_paged(t: &TestStore) {
    let s = t.s();
    let a = plan("plan_a", "orders", PlanStatus::Planned, 5);
    let a_items = items(5, "case_a");
    assert_eq!(s.create_replay_plan(&a, &a_items).await.unwrap(), a);
    // Everything round-trips exactly, the JSON of spec and state included.
    let got = s.get_replay_plan("plan_a").await.unwrap();
    assert_eq!(got, a);
    assert_eq!(got.spec, a.spec);
    assert_eq!(got.m.state, a.m.state);
    assert_eq!(all_items(s, "plan_a").await, a_items);
    // Creating it again is refused and changes nothing.
    let mut again = plan("plan_a", "billing", PlanStatus::Running, 1);
    again.owner_name = "someone else".to_owned();
    assert_err!(
        s.create_replay_plan(&again, &items(1, "x")).await,
        StoreError::ReplayPlanExists { .. }
    );
    assert_eq!(s.get_replay_plan("plan_a").await.unwrap(), a);
    assert_eq!(all_items(s, "plan_a").await, a_items);

    let b = plan("plan_b", "orders", PlanStatus::Running, 0);
    s.create_replay_plan(&b, &[]).await.unwrap();
    assert_eq!(all_items(s, "plan_b").await, Vec::new());
    let c = plan("plan_c", "billing", PlanStatus::Paused, 2);
    s.create_replay_plan(&c, &items(2, "case_c")).await.unwrap();
    let d = plan("plan_d", "orders", PlanStatus::Stopped, 1);
    s.create_replay_plan(&d, &items(1, "case_d")).await.unwrap();

    // By id, filtered by status (any of), queue, and paged.
    assert_eq!(
        ids(s, PlanQuery::default()).await,
        ["plan_a", "plan_b", "plan_c", "plan_d"]
    );
    let active = PlanQuery {
        status: vec![PlanStatus::Running, PlanStatus::Paused],
        ..PlanQuery::default()
    };
    assert_eq!(ids(s, active.clone()).await, ["plan_b", "plan_c"]);
    let orders = PlanQuery {
        queue: Some("orders".to_owned()),
        ..PlanQuery::default()
    };
    assert_eq!(ids(s, orders.clone()).await, ["plan_a", "plan_b", "plan_d"]);
    let first = PlanQuery {
        limit: 2,
        ..orders.clone()
    };
    assert_eq!(ids(s, first).await, ["plan_a", "plan_b"]);
    let next = PlanQuery {
        after: Some("plan_b".to_owned()),
        limit: 2,
        ..orders
    };
    assert_eq!(ids(s, next).await, ["plan_d"]);
    let none = PlanQuery {
        status: vec![PlanStatus::Completed],
        ..PlanQuery::default()
    };
    assert_eq!(ids(s, none).await, Vec::<String>::new());
    let listed = s.list_replay_plans(&active).await.unwrap();
    assert_eq!(listed, vec![b, c]);

    // Unknown plans.
    assert_err!(
        s.get_replay_plan("plan_none").await,
        StoreError::ReplayPlanNotFound { .. }
    );
    assert_err!(
        s.replay_plan_items("plan_none", &PlanItemQuery::default())
            .await,
        StoreError::ReplayPlanNotFound { .. }
    );
    assert_err!(
        s.update_replay_plan(&step(
            &plan("plan_none", "q", PlanStatus::Running, 0),
            secs(3),
            vec![]
        ))
        .await,
        StoreError::ReplayPlanNotFound { .. }
    );
}

pub async fn replay_plan_items_filter_by_state_and_page_by_seq(t: &TestStore) {
    let s = t.s();
    let p = plan("plan_a", "orders", PlanStatus::Planned, 12);
    let all = items(12, "case_");
    s.create_replay_plan(&p, &all).await.unwrap();
    // Held: seqs 4 and 9; the rest wait.
    let held = PlanItemQuery {
        states: vec![PlanItemState::Held],
        ..PlanItemQuery::default()
    };
    let got = s.replay_plan_items("plan_a", &held).await.unwrap();
    assert_eq!(got.iter().map(|i| i.seq).collect::<Vec<_>>(), [4, 9]);
    assert_eq!(got[0], all[4]);
    let q = PlanItemQuery {
        states: vec![PlanItemState::Waiting, PlanItemState::Held],
        after_seq: Some(3),
        limit: 3,
    };
    let page = s.replay_plan_items("plan_a", &q).await.unwrap();
    assert_eq!(page.iter().map(|i| i.seq).collect::<Vec<_>>(), [4, 5, 6]);
    let q = PlanItemQuery {
        after_seq: Some(6),
        limit: 0,
        ..q
    };
    let rest = s.replay_plan_items("plan_a", &q).await.unwrap();
    assert_eq!(
        rest.iter().map(|i| i.seq).collect::<Vec<_>>(),
        [7, 8, 9, 10, 11]
    );
    let admitted_q = PlanItemQuery {
        states: vec![PlanItemState::Admitted],
        ..PlanItemQuery::default()
    };
    assert_eq!(
        s.replay_plan_items("plan_a", &admitted_q).await.unwrap(),
        Vec::new()
    );
    // After an update, the states filter sees the new states.
    let u = step(
        &p,
        secs(2),
        vec![
            admitted(all[0].clone(), 1, secs(2)),
            admitted(all[1].clone(), 1, secs(2)),
        ],
    );
    s.update_replay_plan(&u).await.unwrap();
    let got = s.replay_plan_items("plan_a", &admitted_q).await.unwrap();
    assert_eq!(got, u.items);
}

pub async fn update_replay_plan_is_conditional_on_the_version_read_and_writes_all_or_nothing(
    t: &TestStore,
) {
    let s = t.s();
    let p = plan("plan_a", "orders", PlanStatus::Planned, 4);
    let before = items(4, "case_");
    s.create_replay_plan(&p, &before).await.unwrap();

    let u = step(
        &p,
        secs(2),
        vec![
            admitted(before[0].clone(), 1, secs(2)),
            moved(before[2].clone(), PlanItemState::Closed, secs(2)),
        ],
    );
    let w = s.update_replay_plan(&u).await.unwrap();
    assert_eq!(w.version, 2);
    assert_eq!(w.m, u.set);
    assert_eq!((w.id.as_str(), &w.spec, w.items), ("plan_a", &p.spec, 4));
    assert_eq!(s.get_replay_plan("plan_a").await.unwrap(), w);
    let expected = vec![
        u.items[0].clone(),
        before[1].clone(),
        u.items[1].clone(),
        before[3].clone(),
    ];
    assert_eq!(all_items(s, "plan_a").await, expected);

    // A stale version: refused with the current version, nothing written.
    let mut stale = step(
        &p,
        secs(3),
        vec![moved(before[1].clone(), PlanItemState::Closed, secs(3))],
    );
    stale.set.status = PlanStatus::Cancelled;
    match s.update_replay_plan(&stale).await {
        Err(StoreError::ReplayPlanChanged { id, version }) => {
            assert_eq!((id.as_str(), version), ("plan_a", 2));
        }
        other => panic!("expected ReplayPlanChanged, got {other:?}"),
    }
    assert_eq!(s.get_replay_plan("plan_a").await.unwrap(), w);
    assert_eq!(all_items(s, "plan_a").await, expected);

    // An item the plan does not hold: refused, nothing written (not the items before it
    // either).
    let mut missing = step(
        &w,
        secs(4),
        vec![
            moved(before[1].clone(), PlanItemState::Closed, secs(4)),
            item(9, "case_9"),
        ],
    );
    missing.set.status = PlanStatus::Paused;
    assert!(s.update_replay_plan(&missing).await.is_err());
    assert_eq!(s.get_replay_plan("plan_a").await.unwrap(), w);
    assert_eq!(all_items(s, "plan_a").await, expected);

    // An update without items writes the plan only; the version counts on.
    let mut stop = step(&w, secs(5), vec![]);
    stop.set.status = PlanStatus::Stopped;
    stop.set.stop_reason = Some("error_rate".to_owned());
    stop.set.next_at = None;
    let w3 = s.update_replay_plan(&stop).await.unwrap();
    assert_eq!((w3.version, w3.m.status), (3, PlanStatus::Stopped));
    assert_eq!(
        s.get_replay_plan("plan_a")
            .await
            .unwrap()
            .m
            .stop_reason
            .as_deref(),
        Some("error_rate")
    );
    assert_eq!(all_items(s, "plan_a").await, expected);
}

pub async fn an_admitted_case_is_held_by_one_plan_item_at_a_time(t: &TestStore) {
    let s = t.s();
    let a = plan("plan_a", "orders", PlanStatus::Running, 2);
    let a_items = vec![item(0, "c1"), item(1, "c2")];
    s.create_replay_plan(&a, &a_items).await.unwrap();
    let b = plan("plan_b", "orders", PlanStatus::Running, 2);
    let b_items = vec![item(0, "c3"), item(1, "c1")];
    s.create_replay_plan(&b, &b_items).await.unwrap();

    // A admits c1.
    let a2 = s
        .update_replay_plan(&step(
            &a,
            secs(2),
            vec![admitted(a_items[0].clone(), 1, secs(2))],
        ))
        .await
        .unwrap();
    // B admitting c1 (and c3, and changing its state) is refused, naming A; nothing of
    // it is written.
    let mut b_try = step(
        &b,
        secs(3),
        vec![
            admitted(b_items[0].clone(), 1, secs(3)),
            admitted(b_items[1].clone(), 1, secs(3)),
        ],
    );
    b_try.set.status = PlanStatus::Paused;
    match s.update_replay_plan(&b_try).await {
        Err(StoreError::ReplayItemTaken { case_id, plan_id }) => {
            assert_eq!((case_id.as_str(), plan_id.as_str()), ("c1", "plan_a"));
        }
        other => panic!("expected ReplayItemTaken, got {other:?}"),
    }
    assert_eq!(s.get_replay_plan("plan_b").await.unwrap(), b);
    assert_eq!(all_items(s, "plan_b").await, b_items);
    // B's other admissions go through on their own.
    let b2 = s
        .update_replay_plan(&step(
            &b,
            secs(3),
            vec![admitted(b_items[0].clone(), 1, secs(3))],
        ))
        .await
        .unwrap();
    // A rewriting its own admitted item keeps its lease (no conflict with itself).
    let mut kept = admitted(a_items[0].clone(), 1, secs(4));
    kept.message_id = Some("c1|2".to_owned());
    let a3 = s
        .update_replay_plan(&step(&a2, secs(4), vec![kept.clone()]))
        .await
        .unwrap();
    // Once A's item leaves `admitted`, B may admit c1.
    let a4 = s
        .update_replay_plan(&step(
            &a3,
            secs(5),
            vec![moved(kept, PlanItemState::Completed, secs(5))],
        ))
        .await
        .unwrap();
    let b3 = s
        .update_replay_plan(&step(
            &b2,
            secs(6),
            vec![admitted(b_items[1].clone(), 2, secs(6))],
        ))
        .await
        .unwrap();
    assert_eq!(b3.version, 3);
    // Now A cannot admit c1 again while B holds it.
    let mut again = admitted(a_items[0].clone(), 2, secs(7));
    again.message_id = Some("c1|3".to_owned());
    match s.update_replay_plan(&step(&a4, secs(7), vec![again])).await {
        Err(StoreError::ReplayItemTaken { case_id, plan_id }) => {
            assert_eq!((case_id.as_str(), plan_id.as_str()), ("c1", "plan_b"));
        }
        other => panic!("expected ReplayItemTaken, got {other:?}"),
    }
    // In one update, a lease handed from one item of the plan to another of the same
    // case passes: the release is written before the admission.
    let c = plan("plan_c", "orders", PlanStatus::Running, 2);
    let c_items = vec![item(0, "c9"), item(1, "c9")];
    s.create_replay_plan(&c, &c_items).await.unwrap();
    let c2 = s
        .update_replay_plan(&step(
            &c,
            secs(8),
            vec![admitted(c_items[0].clone(), 1, secs(8))],
        ))
        .await
        .unwrap();
    let hand_over = step(
        &c2,
        secs(9),
        vec![
            admitted(c_items[1].clone(), 2, secs(9)),
            moved(
                admitted(c_items[0].clone(), 1, secs(8)),
                PlanItemState::Stopped,
                secs(9),
            ),
        ],
    );
    s.update_replay_plan(&hand_over).await.unwrap();
    let states: Vec<PlanItemState> = all_items(s, "plan_c")
        .await
        .into_iter()
        .map(|i| i.state)
        .collect();
    assert_eq!(states, [PlanItemState::Stopped, PlanItemState::Admitted]);
    // Two items of one update admitting one case: refused, nothing written.
    let d = plan("plan_d", "orders", PlanStatus::Running, 2);
    let d_items = vec![item(0, "c7"), item(1, "c7")];
    s.create_replay_plan(&d, &d_items).await.unwrap();
    assert_err!(
        s.update_replay_plan(&step(
            &d,
            secs(10),
            vec![
                admitted(d_items[0].clone(), 1, secs(10)),
                admitted(d_items[1].clone(), 1, secs(10)),
            ],
        ))
        .await,
        StoreError::ReplayItemTaken { .. }
    );
    assert_eq!(all_items(s, "plan_d").await, d_items);
}

pub async fn concurrent_updates_of_one_plan_version_succeed_once(t: &TestStore) {
    let p = plan("plan_a", "orders", PlanStatus::Running, 8);
    let all = items(8, "case_");
    t.s().create_replay_plan(&p, &all).await.unwrap();
    let mut tasks = Vec::new();
    for (i, it) in all.iter().enumerate() {
        let store = Arc::clone(&t.store);
        let u = step(&p, secs(2), vec![admitted(it.clone(), 1, secs(2))]);
        tasks.push(tokio::spawn(async move {
            (i, store.update_replay_plan(&u).await)
        }));
    }
    let mut won = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (i, Ok(w)) => {
                assert_eq!(w.version, 2);
                won.push(i);
            }
            (_, Err(StoreError::ReplayPlanChanged { version, .. })) => assert_eq!(version, 2),
            (_, Err(e)) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(won.len(), 1, "exactly one update of version 1 wins");
    let stored = all_items(t.s(), "plan_a").await;
    let admitted_seqs: Vec<usize> = stored
        .iter()
        .filter(|i| i.state == PlanItemState::Admitted)
        .map(|i| usize::try_from(i.seq).unwrap())
        .collect();
    assert_eq!(admitted_seqs, won, "only the winner's item is written");
    assert_eq!(t.s().get_replay_plan("plan_a").await.unwrap().version, 2);
}

pub async fn concurrent_admissions_of_one_case_by_many_plans_succeed_once(t: &TestStore) {
    const PLANS: usize = 6;
    let mut plans = Vec::new();
    for k in 0..PLANS {
        let p = plan(&format!("plan_{k}"), "orders", PlanStatus::Running, 1);
        t.s()
            .create_replay_plan(&p, &[item(0, "shared")])
            .await
            .unwrap();
        plans.push(p);
    }
    let mut tasks = Vec::new();
    for p in &plans {
        let store = Arc::clone(&t.store);
        let u = step(p, secs(2), vec![admitted(item(0, "shared"), 1, secs(2))]);
        tasks.push(tokio::spawn(async move {
            (u.id.clone(), store.update_replay_plan(&u).await)
        }));
    }
    let mut winners = Vec::new();
    let mut named = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (id, Ok(_)) => winners.push(id),
            (_, Err(StoreError::ReplayItemTaken { case_id, plan_id })) => {
                assert_eq!(case_id, "shared");
                named.push(plan_id);
            }
            (_, Err(e)) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one plan admits the case");
    assert!(
        named.iter().all(|p| *p == winners[0]),
        "the refused name the winner"
    );
    for p in &plans {
        let stored = t.s().get_replay_plan(&p.id).await.unwrap();
        let won = p.id == winners[0];
        assert_eq!(stored.version, if won { 2 } else { 1 });
        let state = all_items(t.s(), &p.id).await[0].state;
        assert_eq!(state == PlanItemState::Admitted, won);
    }
}
