//! No side door around a recovery case (issue 30, item 1): every operation that delivers
//! a dead letter again by hand — resubmit, move to live, restore, import into live, an
//! SQS message move task — goes through the case's gates (owner's claim, effect
//! reconciliation, terminal state) or is refused with the reason, and what it does is on
//! the case's timeline. Every scenario runs on both backends, on the manual clock, with a
//! real HTTP effect authority; the case worker is driven one look at a time.

use redrive_broker::{Actor, MoveSpec};
use redrive_core::register::Idempotency;
use redrive_testkit::{Backend, TestServer, assert_problem, default_settings};
use reqwest::Method;
use serde_json::{Value, json};

use redrive_testkit::recovery::{
    HOUR, Letter, case, case_id, dead_letter, register, states, until_moved, work,
};

use crate::cases::{Authority, server};

fn last(c: &Value) -> Value {
    c["timeline"].as_array().unwrap().last().unwrap().clone()
}

fn count(c: &Value, state: &str) -> usize {
    states(c).iter().filter(|s| *s == state).count()
}

/// Asserts a 409 `redelivery_refused` with `reason` for case `id`; answers the problem.
fn refused(r: &(reqwest::StatusCode, Value), reason: &str, id: &str) -> Value {
    assert_problem(r, 409, "redelivery_refused");
    assert_eq!(r.1["reason"], reason, "{}", r.1);
    assert_eq!(r.1["case_id"], id, "{}", r.1);
    r.1.clone()
}

/// Every message `queue` hands out now (received and completed), by id.
async fn drain(s: &TestServer, queue: &str) -> Vec<String> {
    let got = s.receive(queue, 10).await;
    for m in &got {
        let (st, v) = s
            .settle(
                queue,
                m["lock_token"].as_str().unwrap(),
                "complete",
                json!({}),
            )
            .await;
        assert_eq!(st, 200, "{v}");
    }
    got.iter()
        .map(|m| m["message_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn resubmit(s: &TestServer, queue: &str, record: &str) -> (reqwest::StatusCode, Value) {
    s.post(
        &format!("/v1/queues/{queue}/dead-letters/{record}/resubmit"),
        json!({}),
    )
    .await
}

async fn move_to(
    s: &TestServer,
    queue: &str,
    record: &str,
    area: &str,
) -> (reqwest::StatusCode, Value) {
    s.post(
        &format!("/v1/queues/{queue}/dead-letters/{record}/move"),
        json!({"area": area}),
    )
    .await
}

/// The first scenario: A holds the case and its replay is in flight; B's
/// resubmit is refused (first for A's claim, then for the replay in flight), so the
/// message is delivered once, as the replay, and the case knows one replay.
#[tokio::test]
async fn a_resubmit_by_another_token_waits_for_the_claim_and_the_replay_in_flight() {
    for backend in Backend::all("the side door of a replay in flight") {
        let name = backend.name();
        let s = TestServer::builder()
            .backend(backend)
            .settings(redrive_server::Settings {
                replay_worker: false,
                case_worker: false,
                ..default_settings()
            })
            .auth(redrive_broker::AccessSettings {
                enabled: true,
                ..redrive_broker::AccessSettings::default()
            })
            .start()
            .await;
        for q in [
            json!({"name": "orders"}),
            json!({"name": "sandbox", "policy": {"test_sandbox": true}}),
        ] {
            let (st, v) = s.admin(Method::POST, "/v1/queues", Some(q)).await;
            assert_eq!(st, 201, "{name}: {v}");
        }
        register(&s, "order.placed", Idempotency::NotIdempotent).await;
        let authority = Authority::start("absent", "ledger: no entry for i-1").await;
        let (st, v) = s
            .admin(
                Method::PUT,
                "/v1/effect-authorities/order.placed",
                Some(json!({"url": authority.url(), "timeout_ms": 2000})),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        let (_, alice) = s
            .token(
                "alice",
                &[
                    "operator:*",
                    "replayer:orders",
                    "producer:sandbox",
                    "payload-reader:orders",
                ],
            )
            .await;
        let (_, bob) = s
            .token("bob", &["operator:orders", "replayer:orders"])
            .await;
        let (st, v) = s
            .admin(
                Method::POST,
                "/v1/queues/orders/messages",
                Some(json!({"message_id": "m", "body": "{}", "type": "order.placed", "intent": "i-1"})),
            )
            .await;
        assert_eq!(st, 201, "{name}: {v}");
        let (_, got) = s
            .admin(
                Method::POST,
                "/v1/queues/orders/receive",
                Some(json!({"max_messages": 1})),
            )
            .await;
        let (st, v) = s
            .admin(
                Method::POST,
                "/v1/queues/orders/settle",
                Some(json!({"lock_token": got["messages"][0]["lock_token"], "action": "dead_letter", "reason": "Boom"})),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        let record = v["dead_letter_id"].as_str().unwrap().to_owned();
        let id = case_id(&record);
        work(&s).await;
        let as_alice = |action: &'static str, body: Value| {
            let s = &s;
            let alice = alice.clone();
            let id = id.clone();
            async move {
                let (st, v) = s
                    .call_as(
                        Some(&alice),
                        Method::POST,
                        &format!("/v1/cases/{id}/{action}"),
                        Some(body),
                    )
                    .await;
                assert_eq!(st, 200, "{action}: {v}");
                v
            }
        };
        as_alice("claim", json!({"lease_ms": 4 * HOUR})).await;
        let resubmit_path = format!("/v1/queues/orders/dead-letters/{record}/resubmit");
        let resubmit_as_bob =
            || s.call_as(Some(&bob), Method::POST, &resubmit_path, Some(json!({})));
        // While A holds the case, B does not deliver its dead letter.
        let p = refused(&resubmit_as_bob().await, "case_claimed", &id);
        assert_eq!(p["owner"], "alice", "{name}: {p}");
        assert_eq!(p["operation"], "resubmit", "{name}: {p}");
        as_alice(
            "diagnosis",
            json!({"hypothesis": "h", "disconfirming_evidence": "d"}),
        )
        .await;
        as_alice(
            "corrections",
            json!({"kind": "code", "identity": "c1", "addresses": "shape"}),
        )
        .await;
        as_alice(
            "tests",
            json!({"destination": "sandbox", "outcome": "pass", "evidence": "ok"}),
        )
        .await;
        let c = as_alice("replay", json!({})).await;
        assert_eq!(c["state"], "replay_admitted", "{name}: {c}");
        // The replay is in flight: B is refused, naming it.
        let p = refused(&resubmit_as_bob().await, "replay_in_flight", &id);
        assert_eq!(p["message_id"], "m|1", "{name}: {p}");
        // Delivered once: the replay.
        let (_, got) = s
            .admin(
                Method::POST,
                "/v1/queues/orders/receive",
                Some(json!({"max_messages": 10})),
            )
            .await;
        let ids: Vec<&str> = got["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["message_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["m|1"], "{name}: {got}");
        let (_, c) = s.admin(Method::GET, &format!("/v1/cases/{id}"), None).await;
        assert_eq!(count(&c, "replay_admitted"), 1, "{name}: {c}");
        assert_eq!(
            c["record"]["replays"].as_array().unwrap().len(),
            1,
            "{name}: {c}"
        );
        assert_eq!(
            c["state"], "replay_admitted",
            "{name}: the refusals changed nothing: {c}"
        );
        // The record is still there, live; each refusal is audited as one.
        let (_, r) = s
            .admin(
                Method::GET,
                &format!("/v1/queues/orders/dead-letters/{record}"),
                None,
            )
            .await;
        assert_eq!(r["area"], "live", "{name}: {r}");
        let audit = s.audit("action=dead_letter.resubmit").await;
        let outcomes: Vec<(&str, &str)> = audit
            .iter()
            .map(|e| {
                (
                    e["actor_name"].as_str().unwrap(),
                    e["outcome"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            outcomes,
            [
                ("bob", "error:redelivery_refused:case_claimed"),
                ("bob", "error:redelivery_refused:replay_in_flight")
            ],
            "{name}: {audit:?}"
        );
    }
}

/// A completed case (its authority answered present; the type not idempotent): a
/// resubmit asks the authority first — present: the case completes, the record is
/// archived, the resubmit refused; then a move back to live is refused for the closed
/// case. Nothing is delivered again.
#[tokio::test]
async fn a_completed_case_refuses_a_resubmit_and_a_move_back_to_live() {
    for backend in Backend::all("the side doors of a completed case") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        register(&s, "order.placed", Idempotency::NotIdempotent).await;
        let authority = Authority::start("present", "ledger entry 77 for o-2").await;
        authority.register(&s, "order.placed").await;
        let record = dead_letter(
            &s,
            "orders",
            Letter::order("o-2")
                .with(json!({"type": "order.placed"}))
                .reason("AckLost"),
        )
        .await;
        let id = case_id(&record);
        // Before the case worker looked: the resubmit asks the authority now.
        let p = refused(
            &resubmit(&s, "orders", &record).await,
            "effect_present",
            &id,
        );
        assert_eq!(p["state"], "completed", "{name}: {p}");
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "completed", "{name}: {c}");
        assert!(
            states(&c).contains(&"effect_present".to_owned()),
            "{name}: {c}"
        );
        assert_eq!(
            last(&c)["fields"]["binding"],
            "ledger entry 77 for o-2",
            "{name}: {c}"
        );
        assert_eq!(last(&c)["fields"]["operation"], "resubmit", "{name}: {c}");
        assert_eq!(count(&c, "replay_admitted"), 0, "{name}");
        let (_, r) = s
            .get(&format!("/v1/queues/orders/dead-letters/{record}"))
            .await;
        assert_eq!(r["area"], "archived", "{name}: {r}");
        // The closed case refuses the move back to live, naming its state.
        let p = refused(
            &move_to(&s, "orders", &record, "live").await,
            "case_closed",
            &id,
        );
        assert_eq!(p["state"], "completed", "{name}: {p}");
        assert_eq!(p["operation"], "move_to_live", "{name}: {p}");
        let (_, r) = s
            .get(&format!("/v1/queues/orders/dead-letters/{record}"))
            .await;
        assert_eq!(r["area"], "archived", "{name}: nothing moved: {r}");
        // A record whose case the worker completed first: refused the same way.
        let other = dead_letter(
            &s,
            "orders",
            Letter::order("o-2b")
                .with(json!({"type": "order.placed"}))
                .reason("AckLost"),
        )
        .await;
        work(&s).await;
        assert_eq!(
            case(&s, &case_id(&other)).await["state"],
            "completed",
            "{name}"
        );
        refused(
            &move_to(&s, "orders", &other, "live").await,
            "case_closed",
            &case_id(&other),
        );
        assert!(
            drain(&s, "orders").await.is_empty(),
            "{name}: nothing delivered"
        );
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "completed", "{name}: {c}");
        let moves = s.audit("action=dead_letter.move").await;
        assert_eq!(moves.len(), 2, "{name}: {moves:?}");
        assert!(
            moves
                .iter()
                .all(|e| e["outcome"] == "error:redelivery_refused:case_closed"),
            "{name}: {moves:?}"
        );
    }
}

/// An unclaimed case with no effect authority: a resubmit is a person's decision. It is
/// delivered once, and the case closes indeterminate with the person's action as its
/// evidence (nothing can bind the effect).
#[tokio::test]
async fn an_allowed_resubmit_without_an_authority_closes_the_case_indeterminate() {
    for backend in Backend::all("an allowed resubmit") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        register(&s, "order.noted", Idempotency::Idempotent).await;
        let record = dead_letter(
            &s,
            "orders",
            Letter::order("o-3")
                .with(json!({"type": "order.noted"}))
                .reason("Boom"),
        )
        .await;
        let id = case_id(&record);
        work(&s).await;
        let (st, v) = resubmit(&s, "orders", &record).await;
        assert_eq!(st, 201, "{name}: {v}");
        assert_eq!(v["message_id"], "o-3", "{name}");
        assert_eq!(drain(&s, "orders").await, ["o-3"], "{name}");
        assert!(
            drain(&s, "orders").await.is_empty(),
            "{name}: delivered once"
        );
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "indeterminate", "{name}: {c}");
        assert_eq!(c["next"], "closed:indeterminate", "{name}: {c}");
        let e = last(&c);
        assert_eq!(e["actor"], "anonymous", "{name}: {e}");
        assert_eq!(
            e["evidence"],
            "delivered again by hand by anonymous (resubmit) as o-3; no effect authority can bind its effect",
            "{name}"
        );
        assert_eq!(e["fields"]["operation"], "resubmit", "{name}: {e}");
        assert_eq!(e["fields"]["message_id"], "o-3", "{name}: {e}");
        assert_eq!(e["fields"]["destination"], "orders", "{name}: {e}");
        let by_hand = s.audit("action=case.by_hand").await;
        assert_eq!(by_hand.len(), 1, "{name}: {by_hand:?}");
        assert_eq!(
            by_hand[0]["targets"],
            json!([
                id,
                "operation=resubmit",
                "state=indeterminate",
                "message_id=o-3",
                "destination=orders"
            ]),
            "{name}"
        );
        // A type registered not idempotent, without an authority, is not delivered again.
        register(&s, "order.placed", Idempotency::NotIdempotent).await;
        let unsafe_record = dead_letter(
            &s,
            "orders",
            Letter::order("o-3b")
                .with(json!({"type": "order.placed"}))
                .reason("Boom"),
        )
        .await;
        work(&s).await;
        refused(
            &resubmit(&s, "orders", &unsafe_record).await,
            "repeat_safety",
            &case_id(&unsafe_record),
        );
        assert!(drain(&s, "orders").await.is_empty(), "{name}");
    }
}

/// With an authority answering absent, a resubmit is followed by the case as a replay
/// is: `replay_admitted` by hand, observed by the authority without a claim to lose, and
/// completed once the authority answers present.
#[tokio::test]
async fn an_allowed_resubmit_with_an_authority_is_followed_to_completion() {
    for backend in Backend::all("a followed resubmit") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        register(&s, "order.placed", Idempotency::NotIdempotent).await;
        let authority = Authority::start("absent", "no ledger entry for o-4").await;
        authority.register(&s, "order.placed").await;
        let record = dead_letter(
            &s,
            "orders",
            Letter::order("o-4")
                .with(json!({"type": "order.placed"}))
                .reason("Boom"),
        )
        .await;
        let id = case_id(&record);
        work(&s).await;
        let asked = authority.questions().len();
        let (st, v) = resubmit(&s, "orders", &record).await;
        assert_eq!(st, 201, "{name}: {v}");
        assert_eq!(authority.questions().len(), asked + 1, "{name}: asked now");
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "replay_admitted", "{name}: {c}");
        let e = last(&c);
        assert_eq!(e["actor"], "anonymous", "{name}: {e}");
        assert_eq!(e["fields"]["operation"], "resubmit", "{name}: {e}");
        assert_eq!(e["fields"]["by_hand"], "anonymous", "{name}: {e}");
        assert_eq!(e["fields"]["message_id"], "o-4", "{name}: {e}");
        assert_eq!(
            c["record"]["replays"][0]["status"], "in_flight",
            "{name}: {c}"
        );
        assert_eq!(
            c["record"]["by_hand"]["operation"], "resubmit",
            "{name}: {c}"
        );
        assert_eq!(drain(&s, "orders").await, ["o-4"], "{name}");
        // Observed with no claim: the authority still says absent, nothing stops it.
        s.advance(61_000);
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "replay_admitted", "{name}: {c}");
        assert_eq!(count(&c, "replay_stopped"), 0, "{name}: {c}");
        authority.answer("present", "ledger entry 9 bound to o-4");
        s.advance(61_000);
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "completed", "{name}: {c}");
        assert_eq!(
            last(&c)["fields"]["binding"],
            "ledger entry 9 bound to o-4",
            "{name}"
        );
        assert!(
            drain(&s, "orders").await.is_empty(),
            "{name}: delivered once"
        );
    }
}

/// A resubmit by hand that is dead-lettered again stops its case as a failed replay does.
#[tokio::test]
async fn a_resubmit_by_hand_that_fails_again_stops_its_case() {
    for backend in Backend::all("a failed resubmit") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        register(&s, "order.placed", Idempotency::NotIdempotent).await;
        let authority = Authority::start("absent", "no ledger entry").await;
        authority.register(&s, "order.placed").await;
        let record = dead_letter(
            &s,
            "orders",
            Letter::order("o-6")
                .with(json!({"type": "order.placed"}))
                .reason("Boom"),
        )
        .await;
        let id = case_id(&record);
        work(&s).await;
        assert_eq!(resubmit(&s, "orders", &record).await.0, 201, "{name}");
        let again = s.receive("orders", 1).await;
        assert_eq!(again[0]["message_id"], "o-6", "{name}");
        s.settle(
            "orders",
            again[0]["lock_token"].as_str().unwrap(),
            "dead_letter",
            json!({"reason": "Boom"}),
        )
        .await;
        work(&s).await;
        let c = case(&s, &id).await;
        let stop = c["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["state"] == "replay_stopped")
            .unwrap_or_else(|| panic!("{name}: {c}"))
            .clone();
        assert_eq!(stop["fields"]["trigger"], "repeated_failure", "{name}");
        assert_eq!(
            c["record"]["replays"][0]["status"], "stopped",
            "{name}: {c}"
        );
    }
}

/// A restore, an import into live and an SQS message move task are each refused for a
/// completed case (nothing moves, nothing is stored or delivered), and each allowed one
/// is on its case's timeline with the operation.
#[tokio::test]
async fn restore_import_and_move_tasks_go_through_the_case() {
    for backend in Backend::all("restore, import and move tasks") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        s.queue("orders-dlq", json!({})).await;
        s.queue(
            "billing",
            json!({"max_delivery_count": 1, "dead_letter_queue": "orders-dlq"}),
        )
        .await;
        register(&s, "order.noted", Idempotency::Idempotent).await;
        // Automatic replay would republish an idempotent type: a restore delivers it.
        register(&s, "note.kept", Idempotency::Idempotent).await;
        let authority = Authority::start("present", "ledger entry 5").await;
        authority.register(&s, "order.noted").await;
        let done = dead_letter(
            &s,
            "orders",
            Letter::order("o-5")
                .with(json!({"type": "order.noted"}))
                .reason("AckLost"),
        )
        .await;
        let open = dead_letter(
            &s,
            "orders",
            Letter::order("o-7")
                .with(json!({"type": "note.kept"}))
                .reason("Boom"),
        )
        .await;
        work(&s).await;
        let done_case = case_id(&done);
        assert_eq!(case(&s, &done_case).await["state"], "completed", "{name}");

        // Restore: the completed case's record, put in quarantine, stays there.
        assert_eq!(
            move_to(&s, "orders", &done, "quarantine").await.0,
            204,
            "{name}"
        );
        let p = refused(
            &s.post(
                &format!("/v1/queues/orders/dead-letters/{done}/restore"),
                json!({}),
            )
            .await,
            "case_closed",
            &done_case,
        );
        assert_eq!(p["operation"], "restore", "{name}: {p}");
        let (_, r) = s
            .get(&format!("/v1/queues/orders/dead-letters/{done}"))
            .await;
        assert_eq!(r["area"], "quarantine", "{name}: {r}");
        // Allowed: an open case's record, restored, closes its case with the operation.
        assert_eq!(
            move_to(&s, "orders", &open, "quarantine").await.0,
            204,
            "{name}"
        );
        let (st, v) = s
            .post(
                &format!("/v1/queues/orders/dead-letters/{open}/restore"),
                json!({}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        let c = case(&s, &case_id(&open)).await;
        assert_eq!(c["state"], "indeterminate", "{name}: {c}");
        assert_eq!(last(&c)["fields"]["operation"], "restore", "{name}: {c}");
        assert_eq!(
            last(&c)["fields"]["message_id"],
            "o-7|1",
            "{name}: the id replay gives it"
        );

        // Import into live: a copy of the completed case's dead letter is refused whole.
        let before = s.get("/v1/queues/orders/dead-letters").await.1["dead_letters"]
            .as_array()
            .unwrap()
            .len();
        let line = |id: &str| {
            json!({"message_id": id, "body": "x", "reason": "Boom", "delivery_count": 1, "delivery_count_quality": "exact",
                   "enqueued_time": "2027-01-15T06:00:00Z", "dead_lettered_at": "2027-01-15T07:00:00Z"})
            .to_string()
        };
        let p = refused(
            &s.post(
                "/v1/queues/orders/dead-letters/import",
                json!({"format": "json", "content": format!("{}\n{}", line("o-9"), line("o-5"))}),
            )
            .await,
            "case_closed",
            &done_case,
        );
        assert_eq!(p["operation"], "import", "{name}: {p}");
        let after = s.get("/v1/queues/orders/dead-letters").await.1["dead_letters"]
            .as_array()
            .unwrap()
            .len();
        assert_eq!(after, before, "{name}: nothing stored");
        // Allowed: a copy of an open case's dead letter is imported and on its timeline.
        let twin = dead_letter(&s, "orders", Letter::order("o-8").reason("Boom")).await;
        work(&s).await;
        let (st, v) = s
            .post(
                "/v1/queues/orders/dead-letters/import",
                json!({"format": "json", "content": line("o-8")}),
            )
            .await;
        assert_eq!(st, 201, "{name}: {v}");
        let c = case(&s, &case_id(&twin)).await;
        assert_eq!(c["state"], "indeterminate", "{name}: {c}");
        assert_eq!(last(&c)["fields"]["operation"], "import", "{name}: {c}");

        // An SQS move task: the completed case's message stays on the dead-letter queue,
        // the task goes on past it, moves the other, and reports what it skipped.
        for (id, extra) in [("b-1", json!({"type": "order.noted"})), ("b-2", json!({}))] {
            let mut msg = json!({"message_id": id, "body": "x"});
            for (k, v) in extra.as_object().unwrap() {
                msg[k] = v.clone();
            }
            assert_eq!(s.post("/v1/queues/billing/messages", msg).await.0, 201);
            let got = s.receive("billing", 1).await;
            s.settle(
                "billing",
                got[0]["lock_token"].as_str().unwrap(),
                "abandon",
                json!({}),
            )
            .await;
        }
        work(&s).await;
        let (_, cases) = s.get("/v1/cases?queue=billing").await;
        let by_msg = |m: &str| -> Value {
            cases["cases"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["message_id"] == m)
                .unwrap_or_else(|| panic!("{name}: {cases}"))
                .clone()
        };
        let (b1, b2) = (by_msg("b-1"), by_msg("b-2"));
        assert_eq!(b1["state"], "completed", "{name}: {b1}");
        let task = s
            .broker
            .start_move_task(MoveSpec {
                source: "orders-dlq".to_owned(),
                destination: None,
                max_per_second: None,
                owner: Actor::system("mover"),
            })
            .await
            .unwrap();
        let ended = until_moved(&s, &format!("/v1/replay/plans/{}", &task.handle), |v| {
            v["status"] != "running" && v["status"] != "cancelling"
        })
        .await;
        assert_eq!(ended["status"], "completed", "{name}: {ended}");
        assert_eq!(ended["sqs_move"]["moved"], 1, "{name}: {ended}");
        assert_eq!(drain(&s, "billing").await, ["b-2"], "{name}");
        assert_eq!(
            drain(&s, "orders-dlq").await,
            ["b-1"],
            "{name}: the refused one stays"
        );
        let refusals = s.audit("action=move_task.move").await;
        assert_eq!(refusals.len(), 1, "{name}: {refusals:?}");
        assert_eq!(
            refusals[0]["outcome"], "error:redelivery_refused:case_closed",
            "{name}"
        );
        assert_eq!(
            refusals[0]["targets"],
            json!([task.handle, "b-1", b1["id"]]),
            "{name}"
        );
        let end = s.audit("action=move_task.end").await;
        assert_eq!(
            end[0]["targets"],
            json!([task.handle, "moved=1", "skipped=1"]),
            "{name}: {end:?}"
        );
        let c = case(&s, b2["id"].as_str().unwrap()).await;
        assert_eq!(c["state"], "indeterminate", "{name}: {c}");
        let e = last(&c);
        assert_eq!(e["fields"]["operation"], "move_task", "{name}: {e}");
        assert_eq!(e["fields"]["destination"], "billing", "{name}: {e}");
        assert_eq!(e["actor"], "mover", "{name}: {e}");
        assert_eq!(
            case(&s, b1["id"].as_str().unwrap()).await["state"],
            "completed"
        );
    }
}

/// A move back to live with an authority that answers absent: the case follows the
/// record into automatic replay (`replay_admitted` by hand with the id replay gives it).
#[tokio::test]
async fn a_move_back_to_live_is_followed_by_its_case() {
    for backend in Backend::all("a followed move to live") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        register(&s, "order.placed", Idempotency::NotIdempotent).await;
        let authority = Authority::start("absent", "no ledger entry").await;
        authority.register(&s, "order.placed").await;
        let record = dead_letter(
            &s,
            "orders",
            Letter::order("o-10")
                .with(json!({"type": "order.placed"}))
                .reason("Boom"),
        )
        .await;
        let id = case_id(&record);
        work(&s).await;
        assert_eq!(
            move_to(&s, "orders", &record, "archived").await.0,
            204,
            "{name}"
        );
        assert_eq!(
            move_to(&s, "orders", &record, "live").await.0,
            204,
            "{name}"
        );
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "replay_admitted", "{name}: {c}");
        let e = last(&c);
        assert_eq!(e["fields"]["operation"], "move_to_live", "{name}: {e}");
        assert_eq!(e["fields"]["message_id"], "o-10|1", "{name}: {e}");
        // Its replay is in flight: a second door (a resubmit) waits for it.
        refused(
            &resubmit(&s, "orders", &record).await,
            "replay_in_flight",
            &id,
        );
        // The authority answers present: the live record is archived, the case completes.
        authority.answer("present", "ledger entry 10");
        s.advance(61_000);
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "completed", "{name}: {c}");
        let (_, r) = s
            .get(&format!("/v1/queues/orders/dead-letters/{record}"))
            .await;
        assert_eq!(r["area"], "archived", "{name}: {r}");
    }
}
