//! Issue 30, items 2, 8 and 9 (seed 001): budgets that never burst, a session's held items
//! admitted in order, and automatic replay under the node's replay budget with a record
//! of every republish. Every scenario on every backend, on the manual clock, with the
//! workers driven one pass at a time (`plans_once`, `cases_once`, `replay_once`).

use redrive_broker::NodeReplayBudget;
use redrive_core::register::{Idempotency, RegisterEntry, RegisterKey};
use redrive_testkit::recovery::{self, Letter, plan};
use redrive_testkit::{Backend, TestServer};
use serde_json::{Value, json};

use crate::replay_plans::{
    KIB, Ledger, Probe, act, admissions, budget, consume, create, drain_session, eligible, fixture,
    items, server,
};

/// Every interval between two admissions holds at most 1 + rate × its length.
fn assert_within(name: &str, at: &[i64], rate: f64) {
    for i in 0..at.len() {
        for j in i..at.len() {
            let t = (at[j] - at[i]) as f64 / 1000.0;
            let n = (j - i + 1) as f64;
            assert!(
                n <= 1.0 + rate * t + 1e-9,
                "{name}: {n} admissions within {t} s at {rate}/s: {at:?}"
            );
        }
    }
}

/// The seed's worked example at 4 items/s: looked at every 10 ms, the plan admits at 0,
/// 250, 500 and 750 ms — four admissions take 0.75 s, never less — and a look that comes
/// two seconds late (at 2,760 ms) admits one item, not the slots it missed; the next
/// follows 250 ms after it.
#[tokio::test]
async fn the_worked_example_at_four_items_a_second_admits_on_its_slots() {
    for backend in Backend::all("four items a second") {
        let name = backend.name();
        let s = server(backend).await;
        let ledger = fixture(&s).await;
        let probe = Probe::start().await;
        let cases = eligible(&s, "orders", "orders", 8, 100, None).await;
        let p = create(
            &s,
            json!({"selection": {"queue": "orders"}, "budget": budget(&probe, 4.0, 10, 10)}),
        )
        .await;
        let id = p["id"].as_str().unwrap().to_owned();
        act(&s, &id, "start").await;
        let start = s.broker.clock().now().as_millis();
        let mut late = false;
        for _ in 0..1_000 {
            s.broker.plans_once().await.unwrap();
            consume(&s, "orders", &ledger, false).await;
            let now = s.broker.clock().now().as_millis() - start;
            if !late && now == 760 {
                late = true;
                s.advance(2_000);
            } else {
                s.advance(10);
            }
            if plan(&s, &id).await["status"] != "running" {
                break;
            }
        }
        let p = plan(&s, &id).await;
        assert_eq!(p["status"], "completed", "{name}: {p}");
        let at: Vec<i64> = admissions(&s, &cases)
            .await
            .into_iter()
            .map(|(t, _, _)| t - start)
            .collect();
        assert_eq!(at, [0, 250, 500, 750, 2_760, 3_010, 3_260, 3_510], "{name}");
        assert_within(name, &at, 4.0);
        s.stop().await;
    }
}

/// The node-wide budget holds the same bound over every plan together: two plans of 100
/// items/s each under a node budget of 4 items/s admit, between them, no two items less
/// than 250 ms apart.
#[tokio::test]
async fn the_node_budget_paces_every_plan_together() {
    for backend in Backend::all("node budget over plans") {
        let name = backend.name();
        let s = server(backend).await;
        s.broker.set_node_replay_budget(NodeReplayBudget {
            items_per_s: 4.0,
            bytes_per_s: 64 * KIB,
        });
        let ledger = fixture(&s).await;
        let probe = Probe::start().await;
        let cases = eligible(&s, "orders", "orders", 6, 100, None).await;
        let mut ids = Vec::new();
        for part in [&cases[..3], &cases[3..]] {
            let p = create(
                &s,
                json!({"selection": {"queue": "orders", "case_ids": part}, "budget": budget(&probe, 100.0, 10, 10)}),
            )
            .await;
            let id = p["id"].as_str().unwrap().to_owned();
            act(&s, &id, "start").await;
            ids.push(id);
        }
        for _ in 0..1_000 {
            s.broker.plans_once().await.unwrap();
            consume(&s, "orders", &ledger, false).await;
            s.advance(10);
            let mut open = false;
            for id in &ids {
                open |= plan(&s, id).await["status"] == "running";
            }
            if !open {
                break;
            }
        }
        for id in &ids {
            assert_eq!(plan(&s, id).await["status"], "completed", "{name}");
        }
        let at: Vec<i64> = admissions(&s, &cases)
            .await
            .into_iter()
            .map(|(t, _, _)| t)
            .collect();
        assert_eq!(at.len(), 6, "{name}");
        for pair in at.windows(2) {
            assert!(pair[1] - pair[0] >= 250, "{name}: {at:?}");
        }
        assert_within(name, &at, 4.0);
        s.stop().await;
    }
}

/// A session of three items on a session queue, the plan holding the whole session.
async fn session_fixture(s: &TestServer) -> (Ledger, Probe, Vec<String>) {
    s.queue("orders", json!({"requires_session": true})).await;
    s.queue("sandbox", json!({})).await;
    let entry = RegisterEntry::new(
        "order.placed".parse::<RegisterKey>().unwrap(),
        Idempotency::NotIdempotent,
        None,
    )
    .unwrap();
    s.broker
        .set_register_entry(&redrive_broker::Actor::system("test"), entry)
        .await
        .unwrap();
    let ledger = Ledger::start().await;
    ledger.register(s, "order.placed").await;
    let probe = Probe::start().await;
    let cases = eligible(s, "orders", "orders", 3, 100, Some("cart-1")).await;
    (ledger, probe, cases)
}

/// Drives a plan over a session: the plans look, the session's consumer takes what is
/// there (`action`), the cases advance; answers the message ids taken.
async fn session_tick(s: &TestServer, ledger: &Ledger, action: &str) -> Vec<String> {
    s.broker.plans_once().await.unwrap();
    let extra = if action == "complete" {
        json!({})
    } else {
        json!({"reason": "ParseError", "description": "parse error at $.order"})
    };
    let seen = drain_session(s, "orders", "cart-1", action, extra, Some(ledger)).await;
    s.broker.cases_once().await.unwrap();
    s.advance(250);
    seen
}

fn held_of(its: &[Value]) -> Vec<(String, String)> {
    its.iter()
        .filter(|i| i["state"] == "held")
        .map(|i| {
            (
                i["case_id"].as_str().unwrap().to_owned(),
                i["detail"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Item 8: a session's three items are replayed in order, each once its predecessor
/// completed, and the plan completes with all three completed — none left held.
#[tokio::test]
async fn a_sessions_three_items_are_each_admitted_once_the_one_before_completed() {
    for backend in Backend::all("session in order") {
        let name = backend.name();
        let s = server(backend).await;
        let (ledger, probe, cases) = session_fixture(&s).await;
        let p = create(
            &s,
            json!({"selection": {"queue": "orders"}, "budget": budget(&probe, 10.0, 3, 10)}),
        )
        .await;
        let id = p["id"].as_str().unwrap().to_owned();
        act(&s, &id, "start").await;
        let mut order = Vec::new();
        for _ in 0..100 {
            order.extend(session_tick(&s, &ledger, "complete").await);
            let p = plan(&s, &id).await;
            assert!(
                p["status"] != "completed" || p["progress"]["held"] == 0,
                "{name}: completed with items held: {p}"
            );
            if p["status"] != "running" {
                break;
            }
        }
        assert_eq!(order, ["orders-0|1", "orders-1|1", "orders-2|1"], "{name}");
        let p = plan(&s, &id).await;
        assert_eq!(p["status"], "completed", "{name}: {p}");
        assert_eq!(p["progress"]["completed"], 3, "{name}: {p}");
        assert_eq!(p["progress"]["held"], 0, "{name}: {p}");
        for c in &cases {
            let (_, v) = s.get(&format!("/v1/cases/{c}")).await;
            assert_eq!(v["state"], "completed", "{name}: {v}");
        }
        s.stop().await;
    }
}

/// Item 8: when the first item's replay fails, its successors are held — the plan stays
/// running and says which items it holds and why, never `completed` — and once the first
/// case reaches a terminal state (its owner closes it), the successors are admitted in
/// order and the plan completes.
#[tokio::test]
async fn held_successors_wait_for_their_predecessors_terminal_state() {
    for backend in Backend::all("session held") {
        let name = backend.name();
        let s = server(backend).await;
        let (ledger, probe, cases) = session_fixture(&s).await;
        let p = create(
            &s,
            json!({"selection": {"queue": "orders"}, "budget": budget(&probe, 10.0, 3, 10)}),
        )
        .await;
        let id = p["id"].as_str().unwrap().to_owned();
        act(&s, &id, "start").await;
        // The first replay is dead-lettered again: its replay stops.
        let mut failed = Vec::new();
        for _ in 0..40 {
            failed.extend(session_tick(&s, &ledger, "dead_letter").await);
            let its = items(&s, &id).await;
            if its[0]["state"] == "stopped" && held_of(&its).len() == 2 {
                break;
            }
        }
        assert_eq!(failed, ["orders-0|1"], "{name}");
        for _ in 0..5 {
            session_tick(&s, &ledger, "complete").await;
        }
        let p = plan(&s, &id).await;
        assert_eq!(
            p["status"], "running",
            "{name}: never completed with held items: {p}"
        );
        assert_eq!(p["progress"]["held"], 2, "{name}: {p}");
        let (st, v) = s
            .get(&format!("/v1/replay/plans/{id}/items?state=held"))
            .await;
        assert_eq!(st, 200, "{v}");
        let held = held_of(v["items"].as_array().unwrap());
        assert_eq!(
            held.iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>(),
            [cases[1].as_str(), cases[2].as_str()],
            "{name}"
        );
        for (_, why) in &held {
            assert!(why.starts_with("ordering_blocked"), "{name}: {why}");
            assert!(
                why.contains(cases[0].as_str()) || why.contains(cases[1].as_str()),
                "{name}: {why}"
            );
        }
        // Five quiet minutes: the origin is off the failing path again. Then the first
        // case's owner closes it: the successors go, in order.
        s.advance(6 * 60_000);
        let (st, v) = s
            .post(
                &format!("/v1/cases/{}/close", cases[0]),
                json!({"state": "rejected", "evidence": "the order was refused by the shop"}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        let mut order = Vec::new();
        for _ in 0..100 {
            order.extend(session_tick(&s, &ledger, "complete").await);
            if plan(&s, &id).await["status"] != "running" {
                break;
            }
        }
        assert_eq!(
            order,
            ["orders-1|1", "orders-2|1"],
            "{name}: {:?}",
            items(&s, &id).await
        );
        let p = plan(&s, &id).await;
        assert_eq!(p["status"], "completed", "{name}: {p}");
        assert_eq!(p["progress"]["held"], 0, "{name}: {p}");
        assert_eq!(p["progress"]["completed"], 2, "{name}: {p}");
        let released = s.audit("action=replay.plan_release").await;
        assert_eq!(released.len(), 2, "{name}: {released:?}");
        s.stop().await;
    }
}

/// Item 2: automatic replay stays automatic but draws from the node-wide replay budget.
/// Twenty dead letters of an idempotent type under a node budget of 4 items/s: no pass
/// republishes more than the budget allows — a pass held back claims nothing and says
/// when the next slot comes (250 ms after the last, on the manual clock) — and every
/// interval holds at most 1 + 4 × its length.
#[tokio::test]
async fn automatic_replay_draws_from_the_node_budget() {
    for backend in Backend::all("auto replay under the node budget") {
        let name = backend.name();
        let s = crate::replay::server(backend).await;
        s.broker.set_node_replay_budget(NodeReplayBudget {
            items_per_s: 4.0,
            bytes_per_s: 64 * KIB,
        });
        recovery::replaying_queue(&s, "events", json!({})).await;
        recovery::register(&s, "events:*", Idempotency::Idempotent).await;
        let mut records = Vec::new();
        for k in 0..20 {
            records.push(recovery::dead_letter(&s, "events", Letter::new(&format!("e-{k}"))).await);
        }
        let start = s.broker.clock().now().as_millis();
        let mut at = Vec::new();
        for _ in 0..2_000 {
            let p = s.broker.replay_once().await.unwrap();
            let now = s.broker.clock().now().as_millis();
            if p.republished > 0 {
                assert_eq!(p.republished, 1, "{name}: one record a slot: {p:?}");
                at.push(now - start);
            }
            if let Some(t) = p.next_at {
                assert_eq!(p.judged, 0, "{name}: a pass held back claims nothing");
                let last = *at.last().unwrap() + start;
                assert_eq!(t.as_millis(), last + 250, "{name}: the pacer's time");
            }
            if at.len() == 20 {
                break;
            }
            s.advance(10);
        }
        assert_eq!(at.len(), 20, "{name}: every dead letter republished");
        assert_eq!(at[..4], [0, 250, 500, 750], "{name}: {at:?}");
        assert_within(name, &at, 4.0);
        let got = s.receive("events", 10).await;
        assert!(!got.is_empty(), "{name}");
        // Each republished record keeps the binding original → `<id>|<n>` → outcome,
        // with the rule, the policy version and the budget: for the queue (its archived
        // records) and for each message (its record).
        let (st, page) = s
            .get("/v1/queues/events/dead-letters?area=archived&limit=100")
            .await;
        assert_eq!(st, 200, "{name}: {page}");
        let archived = page["dead_letters"].as_array().unwrap();
        assert_eq!(archived.len(), 20, "{name}: {page}");
        let (st, r) = s
            .get(&format!("/v1/queues/events/dead-letters/{}", records[7]))
            .await;
        assert_eq!(st, 200, "{name}: {r}");
        let j = &r["judgement"];
        assert_eq!(j["events"][0]["id"], "e-7", "{name}: {r}");
        assert_eq!(j["events"][0]["republished_as"], "e-7|1", "{name}: {r}");
        assert_eq!(j["replay"]["rule"], "automatic_replay", "{name}: {r}");
        assert_eq!(j["replay"]["outcome"], "republished", "{name}: {r}");
        assert_eq!(j["replay"]["destination"], "events", "{name}: {r}");
        assert!(
            j["replay"]["policy_version"].as_u64().unwrap() >= 1,
            "{name}: {r}"
        );
        assert!(
            j["replay"]["budget"]
                .as_str()
                .unwrap()
                .contains("4 items/s"),
            "{name}: {r}"
        );
        let when =
            redrive_core::Timestamp::parse_rfc3339(j["replay"]["republished_at"].as_str().unwrap())
                .unwrap()
                .as_millis();
        assert_eq!(when - start, at[7], "{name}: {r}");
        s.stop().await;
    }
}

/// Item 2: a dead letter with a case (dead-lettered before its entity replayed, then
/// made a candidate by the drain once replay is enabled) that automatic replay
/// republishes: the case's timeline records the republish — rule, the entity's policy
/// version, the new message id, the budget — and the case reaches a terminal state from
/// the outcome (`indeterminate`: automatic replay observes no effect, so nothing can bind
/// the republish to a completed effect). A record delivered again by hand is the
/// person's decision instead (contract_doors).
#[tokio::test]
async fn an_automatic_replay_is_on_its_cases_timeline_and_closes_it() {
    for backend in Backend::all("auto replay on the case") {
        let name = backend.name();
        let s = crate::replay::server(backend).await;
        s.queue("events", json!({"lock_duration_ms": 30_000})).await;
        recovery::register(&s, "events:*", Idempotency::Idempotent).await;
        let record = recovery::dead_letter(&s, "events", Letter::new("e-1")).await;
        s.broker.cases_once().await.unwrap();
        let case = format!("case_{}", record.strip_prefix("dl_").unwrap());
        let (st, c) = s.get(&format!("/v1/cases/{case}")).await;
        assert_eq!(st, 200, "{name}: {c}");
        assert!(c["closed_at"].is_null(), "{name}: open: {c}");
        s.advance(30_001);
        s.patch(
            "/v1/queues/events",
            json!({"auto_replay": {"enabled": true}}),
        )
        .await;
        assert_eq!(
            s.broker.drain_replay_candidates().await.unwrap(),
            1,
            "{name}"
        );
        recovery::replay_passes(&s).await;
        s.broker.cases_once().await.unwrap();
        let (_, c) = s.get(&format!("/v1/cases/{case}")).await;
        assert_eq!(c["state"], "indeterminate", "{name}: {c}");
        let last = c["timeline"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["state"], "indeterminate", "{name}: {last}");
        assert_eq!(last["fields"]["rule"], "automatic_replay", "{name}: {last}");
        assert_eq!(last["fields"]["message_id"], "e-1|1", "{name}: {last}");
        assert_eq!(last["fields"]["outcome"], "republished", "{name}: {last}");
        assert_eq!(last["fields"]["policy_version"], "2", "{name}: {last}");
        assert!(
            last["fields"]["budget"]
                .as_str()
                .unwrap()
                .contains("1000 items/s"),
            "{name}: {last}"
        );
        let got = s.receive("events", 1).await;
        assert_eq!(got[0]["message_id"], "e-1|1", "{name}");
        let closes = s.audit("action=case.close").await;
        assert_eq!(closes.len(), 1, "{name}: {closes:?}");
        s.stop().await;
    }
}
