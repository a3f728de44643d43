//! The access rules of the recovery half with authentication on, on every backend: every
//! refusal a handler decides is audited, a case's isolated test sends only to a declared
//! sandbox the caller may send to, a transformation is bounded by its queue's message
//! size before its body is read, acts that lead to deliveries need the delivery's role,
//! and a producer's word on an intent holds only for the entities it may produce to.

use redrive_broker::AccessSettings;
use redrive_testkit::recovery::{Letter, Workup, dead_letter_case, work};
use redrive_testkit::{Backend, TestServer, assert_problem, default_settings};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn server(backend: Backend) -> TestServer {
    TestServer::builder()
        .backend(backend)
        .auth(AccessSettings {
            enabled: true,
            ..AccessSettings::default()
        })
        .settings(redrive_server::Settings {
            replay_worker: false,
            case_worker: false,
            ..default_settings()
        })
        .start()
        .await
}

async fn admin(s: &TestServer, method: Method, path: &str, body: Value) -> Value {
    let (st, v) = s.admin(method.clone(), path, Some(body)).await;
    assert!(st.is_success(), "{method} {path}: {st} {v}");
    v
}

async fn queue(s: &TestServer, name: &str, policy: Value) {
    admin(
        s,
        Method::POST,
        "/v1/queues",
        json!({"name": name, "policy": policy}),
    )
    .await;
}

/// A message dead-lettered by the admin as `Boom`.
fn boom(message: Value) -> Letter {
    Letter::message(message)
        .reason("Boom")
        .description("parse error")
        .as_admin()
}

async fn as_token(
    s: &TestServer,
    secret: &str,
    method: Method,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    s.call_as(Some(secret), method, path, Some(body)).await
}

/// The `denied:<op>` audit entries of the token named `who`.
async fn denials(s: &TestServer, who: &str, op: &str) -> Vec<Value> {
    s.audit(&format!("action=denied%3A{op}&limit=1000"))
        .await
        .into_iter()
        .filter(|e| e["actor_name"] == who)
        .collect()
}

async fn active(s: &TestServer, queue: &str) -> u64 {
    let v = admin(s, Method::GET, &format!("/v1/queues/{queue}"), Value::Null).await;
    v["counts"]["active"].as_u64().unwrap()
}

/// Every refusal a case or intent handler decides (the case's queue is known only once
/// the case is read) is a `denied` audit entry with the actor and the queue, as the route
/// table's are.
#[tokio::test]
async fn refusals_decided_by_the_case_handlers_are_audited() {
    for backend in Backend::all("audited case refusals") {
        let s = server(backend).await;
        queue(&s, "ordersX", json!({})).await;
        queue(&s, "other", json!({})).await;
        let theirs = dead_letter_case(&s, "other", boom(json!({"body": "b"}))).await;
        let (_, op) = s.token("op-x", &["operator:ordersX"]).await;
        let refused = [
            (Method::GET, format!("/v1/cases/{theirs}"), Value::Null),
            (Method::GET, "/v1/cases?queue=other".to_owned(), Value::Null),
            (Method::GET, "/v1/cases/counts".to_owned(), Value::Null),
            (
                Method::GET,
                "/v1/cases/counts?queue=other".to_owned(),
                Value::Null,
            ),
        ];
        for (method, path, body) in refused {
            let r = s.call_as(Some(&op), method.clone(), &path, None).await;
            assert_problem(&r, 403, "forbidden");
            let _ = body;
        }
        let work = [
            ("claim", json!({})),
            ("notes", json!({"text": "t"})),
            ("release", json!({})),
        ];
        for (action, body) in work {
            let r = as_token(
                &s,
                &op,
                Method::POST,
                &format!("/v1/cases/{theirs}/{action}"),
                body,
            )
            .await;
            assert_problem(&r, 403, "forbidden");
        }
        let reads = denials(&s, "op-x", "ReadCases").await;
        assert_eq!(reads.len(), 4, "{reads:?}");
        assert!(reads.iter().all(|e| e["outcome"] == "denied"));
        assert_eq!(
            reads.iter().filter(|e| e["entity"] == "other").count(),
            3,
            "{reads:?}"
        );
        // Counts over every queue name every entity, which only an unscoped grant covers.
        assert!(reads.iter().any(|e| e["entity"] == "*"), "{reads:?}");
        let works = denials(&s, "op-x", "WorkCases").await;
        assert_eq!(works.len(), 3, "{works:?}");
        assert!(works.iter().all(|e| e["entity"] == "other"));
        // The case is as it was: nobody claimed it.
        let c = admin(&s, Method::GET, &format!("/v1/cases/{theirs}"), Value::Null).await;
        assert!(c["lease"].is_null(), "{c}");
        s.stop().await;
    }
}

/// An isolated test that sends writes to its destination: it needs `producer` there (a
/// refusal audited, nothing sent), and the destination must be a queue declared a test
/// sandbox (any other is 400, nothing sent).
#[tokio::test]
async fn a_case_test_sends_only_to_a_declared_sandbox_the_caller_may_send_to() {
    for backend in Backend::all("case tests send to sandboxes") {
        let s = server(backend).await;
        queue(&s, "ordersX", json!({})).await;
        queue(&s, "victimQ", json!({})).await;
        queue(&s, "sandboxQ", json!({"test_sandbox": true})).await;
        let case = dead_letter_case(&s, "ordersX", boom(json!({"body": "{\"order\":1}"}))).await;
        let test = |destination: &str| {
            json!({"destination": destination, "send": true, "fixture": "{\"evil\":true}",
                   "outcome": "pass", "evidence": "e"})
        };
        let path = format!("/v1/cases/{case}/tests");

        let (_, only_op) = s.token("op-only", &["operator:ordersX"]).await;
        Workup::new("sandbox")
            .token(Some(&only_op))
            .to_correction(&s, &case)
            .await;
        let r = as_token(&s, &only_op, Method::POST, &path, test("victimQ")).await;
        assert_problem(&r, 403, "forbidden");
        assert_eq!(r.1["entity"], "victimQ", "{}", r.1);
        // Not even a declared sandbox without the right to send there.
        let r = as_token(&s, &only_op, Method::POST, &path, test("sandboxQ")).await;
        assert_problem(&r, 403, "forbidden");
        let denied = denials(&s, "op-only", "Send").await;
        assert_eq!(denied.len(), 2, "{denied:?}");
        assert!(denied.iter().any(|e| e["entity"] == "victimQ"));
        assert_eq!(active(&s, "victimQ").await, 0);
        assert_eq!(active(&s, "sandboxQ").await, 0);
        let (st, v) = as_token(
            &s,
            &only_op,
            Method::POST,
            &format!("/v1/cases/{case}/release"),
            json!({}),
        )
        .await;
        assert_eq!(st, 200, "{v}");

        let (_, tester) = s
            .token(
                "tester",
                &[
                    "operator:ordersX",
                    "producer:victimQ",
                    "producer:sandboxQ",
                    "producer:noSuchQ",
                ],
            )
            .await;
        let (st, v) = as_token(
            &s,
            &tester,
            Method::POST,
            &format!("/v1/cases/{case}/claim"),
            json!({}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        // A live queue is never a test destination, whoever may send to it.
        let r = as_token(&s, &tester, Method::POST, &path, test("victimQ")).await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(r.1["field"], "destination");
        let r = as_token(&s, &tester, Method::POST, &path, test("noSuchQ")).await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(active(&s, "victimQ").await, 0);
        let (st, v) = as_token(&s, &tester, Method::POST, &path, test("sandboxQ")).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(active(&s, "sandboxQ").await, 1);
        let tests = v["record"]["tests"].as_array().unwrap();
        assert_eq!(tests.len(), 1, "{v}");
        assert_eq!(tests[0]["destination"], "sandboxQ");
        s.stop().await;
    }
}

/// A transformation is at most its queue's `max_message_size`: a larger payload is 413
/// with the limit, and a request larger than such a payload can be is refused before it
/// is read (even when it is not JSON at all); nothing is recorded.
#[tokio::test]
async fn a_transformation_is_bounded_by_its_queues_message_size() {
    for backend in Backend::all("bounded transformations") {
        let s = server(backend).await;
        queue(&s, "ordersX", json!({"max_message_size": 1024})).await;
        let case = dead_letter_case(&s, "ordersX", boom(json!({"body": "{\"order\":1}"}))).await;
        let (_, op) = s.token("op-x", &["operator:ordersX"]).await;
        let claim = format!("/v1/cases/{case}/claim");
        let (st, v) = as_token(&s, &op, Method::POST, &claim, json!({})).await;
        assert_eq!(st, 200, "{v}");
        let path = format!("/v1/cases/{case}/transformations");
        let t = |body: String| {
            json!({"body": body, "transformation_version": "t1", "changed_fields": ["order"],
                   "authority": "a", "equivalent": true, "addresses": "shape"})
        };
        let r = as_token(&s, &op, Method::POST, &path, t("x".repeat(1025))).await;
        assert_problem(&r, 413, "message_too_large");
        assert_eq!(r.1["limit"], 1024, "{}", r.1);
        // Far past what a 1 KiB payload's request can be: refused unread.
        let huge = vec![b'x'; 4 * 1024 * 1024];
        let resp = s
            .http
            .post(format!("{}{path}", s.url))
            .bearer_auth(&op)
            .header("content-type", "application/json")
            .body(huge)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 413);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["code"], "message_too_large", "{v}");
        let c = admin(&s, Method::GET, &format!("/v1/cases/{case}"), Value::Null).await;
        let kept = &c["record"]["transformations"];
        assert!(kept.is_null() || kept == &json!([]), "{c}");
        let (st, v) = as_token(&s, &op, Method::POST, &path, t("y".repeat(1024))).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["record"]["transformations"].as_array().unwrap().len(), 1);
        s.stop().await;
    }
}

/// One JSON-Lines import body of one record with `body`.
fn import_body(body: &str) -> Value {
    let line = json!({"message_id": "m-1", "body": body, "reason": "Boom", "delivery_count": 1,
                      "delivery_count_quality": "exact",
                      "enqueued_time": "2027-01-15T06:00:00Z",
                      "dead_lettered_at": "2027-01-15T07:00:00Z"});
    json!({"format": "json", "content": line.to_string()})
}

/// An operator alone cannot put bytes on a queue by the recovery half: declaring the
/// queue's messages idempotent and turning on automatic replay need `replayer` there, a
/// type's entry an unscoped `replayer`, an import `producer` on the queue; each refusal
/// is audited and changes nothing. With those roles the same steps deliver the imported
/// body, and what only stops deliveries needs nothing more.
#[tokio::test]
async fn acts_that_lead_to_deliveries_need_the_roles_of_those_deliveries() {
    for backend in Backend::all("roles of acts that deliver") {
        let s = server(backend).await;
        queue(&s, "Q", json!({})).await;
        admin(&s, Method::POST, "/v1/topics", json!({"name": "T"})).await;
        let (_, op) = s.token("op", &["operator"]).await;
        let r = s
            .call_as(
                Some(&op),
                Method::PUT,
                "/v1/register/Q:*",
                Some(json!({"answer": "idempotent"})),
            )
            .await;
        assert_problem(&r, 403, "forbidden");
        let r = as_token(
            &s,
            &op,
            Method::PATCH,
            "/v1/queues/Q",
            json!({"auto_replay": {"enabled": true}}),
        )
        .await;
        assert_problem(&r, 403, "forbidden");
        let r = as_token(
            &s,
            &op,
            Method::POST,
            "/v1/queues",
            json!({"name": "Q2", "policy": {"auto_replay": {"enabled": true}}}),
        )
        .await;
        assert_problem(&r, 403, "forbidden");
        let r = as_token(
            &s,
            &op,
            Method::POST,
            "/v1/topics/T/subscriptions",
            json!({"name": "s", "type": "pull", "auto_replay": {"enabled": true}}),
        )
        .await;
        assert_problem(&r, 403, "forbidden");
        let r = as_token(
            &s,
            &op,
            Method::POST,
            "/v1/queues/Q/dead-letters/import",
            import_body("smuggled"),
        )
        .await;
        assert_problem(&r, 403, "forbidden");
        let replays = denials(&s, "op", "Replay").await;
        assert_eq!(replays.len(), 4, "{replays:?}");
        assert!(replays.iter().any(|e| e["entity"] == "T.s"), "{replays:?}");
        assert_eq!(denials(&s, "op", "ImportDeadLetters").await.len(), 1);
        // Nothing changed.
        let reg = admin(&s, Method::GET, "/v1/register", Value::Null).await;
        assert_eq!(reg["entries"], json!([]), "{reg}");
        let q = admin(&s, Method::GET, "/v1/queues/Q", Value::Null).await;
        assert_eq!(q["policy"]["auto_replay"]["enabled"], false, "{q}");
        assert_eq!(q["counts"]["dead_lettered"], 0, "{q}");
        let (st, _) = s.admin(Method::GET, "/v1/queues/Q2", None).await;
        assert_eq!(st, 404);
        // What stops deliveries needs only the operator's role.
        let (st, v) = as_token(
            &s,
            &op,
            Method::PUT,
            "/v1/register/Q:*",
            json!({"answer": "not_idempotent"}),
        )
        .await;
        assert_eq!(st, 200, "{v}");

        // A type's entry applies to every entity: a scoped replayer cannot make it.
        let (_, scoped) = s
            .token("scoped", &["operator", "replayer:Q", "producer:Q"])
            .await;
        let r = as_token(
            &s,
            &scoped,
            Method::PUT,
            "/v1/register/order.placed",
            json!({"answer": "idempotent"}),
        )
        .await;
        assert_problem(&r, 403, "forbidden");
        assert!(
            denials(&s, "scoped", "Replay")
                .await
                .iter()
                .any(|e| e["entity"] == "*")
        );
        // With the roles the deliveries need, the same steps deliver the imported body.
        for (method, path, body) in [
            (
                Method::PUT,
                "/v1/register/Q:*",
                json!({"answer": "idempotent"}),
            ),
            (
                Method::PATCH,
                "/v1/queues/Q",
                json!({"auto_replay": {"enabled": true}}),
            ),
            (
                Method::POST,
                "/v1/queues/Q/dead-letters/import",
                import_body("legitimate"),
            ),
        ] {
            let (st, v) = as_token(&s, &scoped, method.clone(), path, body).await;
            assert!(st.is_success(), "{method} {path}: {st} {v}");
        }
        s.broker.replay_once().await.unwrap();
        let got = admin(
            &s,
            Method::POST,
            "/v1/queues/Q/receive",
            json!({"max_messages": 10}),
        )
        .await;
        let bodies: Vec<&str> = got["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["body"].as_str().unwrap())
            .collect();
        assert_eq!(bodies, ["legitimate"], "{got}");
        // Turning automatic replay off is the operator's alone.
        let (st, v) = as_token(
            &s,
            &op,
            Method::PATCH,
            "/v1/queues/Q",
            json!({"auto_replay": {"enabled": false}}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        s.stop().await;
    }
}

async fn state(s: &TestServer, case: &str) -> String {
    let c = admin(s, Method::GET, &format!("/v1/cases/{case}"), Value::Null).await;
    c["state"].as_str().unwrap().to_owned()
}

/// A producer's cancel or supersede is for the entities it may produce to, whenever it is
/// spoken: said in advance by a producer of `orders`, it does not close a later case of
/// the intent on `ordersX`; naming a queue the token may not produce to is 403 (audited);
/// each word is kept with its entity, actor and time, and closes only its entity's cases.
#[tokio::test]
async fn a_producers_word_on_an_intent_holds_only_for_the_entities_it_may_produce_to() {
    for backend in Backend::all("intent words bound to entities") {
        let s = server(backend).await;
        queue(&s, "orders", json!({})).await;
        queue(&s, "ordersX", json!({})).await;
        let (_, p) = s.token("orders-service", &["producer:orders"]).await;
        let cancel = "/v1/intents/pay-9999/cancel";
        let (st, v) = as_token(&s, &p, Method::POST, cancel, json!({"reason": "early"})).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["status"], "cancelled");
        assert_eq!(
            v["entity"], "orders",
            "inferred from the token's one producer scope"
        );
        assert!(v["closed"].is_null(), "nothing to close yet: {v}");

        // The intent then dead-letters on another queue: the word says nothing of it.
        let x = dead_letter_case(
            &s,
            "ordersX",
            boom(json!({"message_id": "pay-9999", "body": "b", "intent": "pay-9999"})),
        )
        .await;
        work(&s).await;
        assert_ne!(state(&s, &x).await, "cancelled");
        for (path, body) in [
            (cancel, json!({"queue": "ordersX"})),
            (
                "/v1/intents/pay-9999/supersede",
                json!({"by": "pay-10000", "queue": "ordersX"}),
            ),
        ] {
            let r = as_token(&s, &p, Method::POST, path, body).await;
            assert_problem(&r, 403, "forbidden");
            assert_eq!(r.1["entity"], "ordersX");
        }
        let denied = denials(&s, "orders-service", "UpdateIntent").await;
        assert_eq!(denied.len(), 2, "{denied:?}");
        assert!(denied.iter().all(|e| e["entity"] == "ordersX"));
        work(&s).await;
        assert_ne!(state(&s, &x).await, "cancelled");

        // On its own queue the word holds, whenever the case comes.
        let o = dead_letter_case(
            &s,
            "orders",
            boom(json!({"message_id": "pay-9999-b", "body": "b", "intent": "pay-9999"})),
        )
        .await;
        work(&s).await;
        assert_eq!(state(&s, &o).await, "cancelled");
        assert_ne!(state(&s, &x).await, "cancelled");

        // The producer of ordersX speaks for ordersX: only that case closes.
        let (_, px) = s.token("ordersx-service", &["producer:ordersX"]).await;
        let (st, v) = as_token(
            &s,
            &px,
            Method::POST,
            "/v1/intents/pay-9999/supersede",
            json!({"by": "pay-10000"}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["entity"], "ordersX");
        assert_eq!(v["closed"], json!([x.clone()]));
        assert_eq!(state(&s, &x).await, "superseded");
        let i = admin(&s, Method::GET, "/v1/intents/pay-9999", Value::Null).await;
        let words: Vec<(&str, &str, &str)> = i["words"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    w["entity"].as_str().unwrap(),
                    w["status"].as_str().unwrap(),
                    w["actor"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            words,
            [
                ("orders", "cancelled", "orders-service"),
                ("ordersX", "superseded", "ordersx-service")
            ],
            "{i}"
        );
        // Each word is audited with the entity it was accepted for.
        let said: Vec<(String, String)> = s
            .audit("entity=orders")
            .await
            .into_iter()
            .chain(s.audit("entity=ordersX").await)
            .filter(|e| e["action"].as_str().unwrap().starts_with("intent."))
            .map(|e| {
                (
                    e["actor_name"].as_str().unwrap().to_owned(),
                    e["entity"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            said,
            [
                ("orders-service".to_owned(), "orders".to_owned()),
                ("ordersx-service".to_owned(), "ordersX".to_owned())
            ]
        );
        // An earlier word for entities that include these stands for them.
        let (_, all) = s.token("everywhere", &["producer"]).await;
        let (st, v) = as_token(
            &s,
            &all,
            Method::POST,
            "/v1/intents/pay-2/cancel",
            json!({}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["entity"], "*");
        let r = as_token(
            &s,
            &p,
            Method::POST,
            "/v1/intents/pay-2/supersede",
            json!({"by": "pay-3"}),
        )
        .await;
        assert_problem(&r, 409, "case_conflict");
        assert_eq!(r.1["reason"], "intent_decided");
        // The refused word is audited as refused, not as accepted.
        let refused: Vec<_> = s
            .audit("action=intent.supersede&limit=100")
            .await
            .into_iter()
            .filter(|e| e["actor_name"] == "orders-service")
            .collect();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0]["outcome"], "error:intent_decided", "{refused:?}");
        let (st, v) = as_token(&s, &p, Method::POST, "/v1/intents/pay-2/cancel", json!({})).await;
        assert_eq!(st, 200, "the same word again is harmless: {v}");
        assert_eq!(v["entity"], "*", "the word that stands: {v}");
        // A token producing to several scopes names the queue.
        let (_, both) = s.token("both", &["producer:a", "producer:b*"]).await;
        let r = as_token(
            &s,
            &both,
            Method::POST,
            "/v1/intents/pay-1/cancel",
            json!({}),
        )
        .await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(r.1["field"], "queue");
        let (st, v) = as_token(
            &s,
            &both,
            Method::POST,
            "/v1/intents/pay-1/cancel",
            json!({"queue": "b-eu"}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["entity"], "b-eu");
        s.stop().await;
    }
}

/// A queue's dead letters become messages on its dead-letter queue: naming one (at create
/// or by a change) needs the producer role there, and is audited when refused; removing it
/// or leaving it as it is needs nothing more.
#[tokio::test]
async fn naming_a_dead_letter_queue_needs_the_producer_role_there() {
    for backend in Backend::all("a dead-letter queue needs producer") {
        let s = server(backend).await;
        queue(&s, "A", json!({})).await;
        queue(&s, "victim", json!({})).await;
        queue(&s, "mine", json!({})).await;
        let (_, op) = s.token("op", &["operator:A", "operator:A2"]).await;
        let r = as_token(
            &s,
            &op,
            Method::PATCH,
            "/v1/queues/A",
            json!({"dead_letter_queue": "victim"}),
        )
        .await;
        assert_problem(&r, 403, "forbidden");
        let r = as_token(
            &s,
            &op,
            Method::POST,
            "/v1/queues",
            json!({"name": "A2", "policy": {"dead_letter_queue": "victim"}}),
        )
        .await;
        assert_problem(&r, 403, "forbidden");
        let denied = denials(&s, "op", "Send").await;
        assert_eq!(denied.len(), 2, "{denied:?}");
        assert!(denied.iter().all(|e| e["entity"] == "victim"), "{denied:?}");
        let a = admin(&s, Method::GET, "/v1/queues/A", Value::Null).await;
        assert_eq!(a["policy"]["dead_letter_queue"], Value::Null, "{a}");
        let (st, _) = s.admin(Method::GET, "/v1/queues/A2", None).await;
        assert_eq!(st, 404);

        // With producer on the target it is allowed; a later change of something else
        // keeps it without asking again, and removing it needs nothing.
        let (_, both) = s.token("both", &["operator:A", "producer:mine"]).await;
        let (st, v) = as_token(
            &s,
            &both,
            Method::PATCH,
            "/v1/queues/A",
            json!({"dead_letter_queue": "mine"}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        let (st, v) = as_token(
            &s,
            &op,
            Method::PATCH,
            "/v1/queues/A",
            json!({"max_delivery_count": 3}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["policy"]["dead_letter_queue"], "mine", "{v}");
        let (st, v) = as_token(
            &s,
            &op,
            Method::PATCH,
            "/v1/queues/A",
            json!({"dead_letter_queue": null}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["policy"]["dead_letter_queue"], Value::Null, "{v}");
        s.stop().await;
    }
}
