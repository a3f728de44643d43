//! Replay plans that select by failure signature (`selection.signature`, an id of
//! `GET /v1/failures`): the preview and the plan hold only the open cases whose record has
//! that shape, the queue may be left out (the signature's), and a signature of another
//! queue, a malformed one, one nobody counted, or one beside a group or case ids is
//! refused naming the field. On every backend.

use redrive_testkit::{Backend, TestServer, assert_problem};
use serde_json::{Value, json};

use crate::replay_plans::{Probe, budget, fixture, server};

/// Sends `n` messages of `order.placed` to `orders` (ids `<tag>-<k>`) and dead-letters
/// each with `reason` and `description`; then the case worker opens their cases.
async fn dead_letter(s: &TestServer, tag: &str, n: usize, reason: &str, description: &str) {
    for k in 0..n {
        let msg = json!({"message_id": format!("{tag}-{k}"), "body": format!("{tag} {k}"),
                         "type": "order.placed", "intent": format!("{tag}-i-{k}")});
        let (st, v) = s.post("/v1/queues/orders/messages", msg).await;
        assert_eq!(st, 201, "{v}");
    }
    let mut left = n;
    while left > 0 {
        let got = s.receive("orders", 10).await;
        assert!(!got.is_empty(), "{left} messages left to dead-letter");
        for m in got {
            let (st, v) = s
                .settle(
                    "orders",
                    m["lock_token"].as_str().unwrap(),
                    "dead_letter",
                    json!({"reason": reason, "description": description}),
                )
                .await;
            assert_eq!(st, 200, "{v}");
            left -= 1;
        }
        s.advance(1);
    }
    for _ in 0..3 {
        s.broker.cases_once().await.unwrap();
    }
}

/// The signature id of `orders`' failures with `reason`.
async fn signature_of(s: &TestServer, reason: &str) -> String {
    let (st, page) = s.get("/v1/failures?queue=orders").await;
    assert_eq!(st, 200, "{page}");
    let found: Vec<&Value> = page["signatures"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["reason"] == reason)
        .collect();
    assert_eq!(found.len(), 1, "{page}");
    found[0]["id"].as_str().unwrap().to_owned()
}

/// The message ids of a preview's items, sorted.
fn messages(preview: &Value) -> Vec<String> {
    let mut ids: Vec<String> = preview["item_list"]
        .as_array()
        .unwrap_or_else(|| panic!("{preview}"))
        .iter()
        .map(|i| i["message_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

async fn scenario(s: &TestServer) {
    fixture(s).await;
    let probe = Probe::start().await;
    let budget = budget(&probe, 10.0, 2, 10);
    dead_letter(s, "parse", 3, "ParseError", "parse error at $.order line 7").await;
    dead_letter(s, "stock", 2, "StockMissing", "no stock for sku 4411").await;
    let parse = signature_of(s, "ParseError").await;
    let stock = signature_of(s, "StockMissing").await;
    assert_ne!(parse, stock);

    // The queue left out: the signature's. Only that shape's cases are items.
    let (st, p) = s
        .post(
            "/v1/replay/plans/preview",
            json!({"selection": {"signature": parse}, "budget": budget}),
        )
        .await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(p["items"], 3, "{p}");
    assert_eq!(messages(&p), ["parse-0", "parse-1", "parse-2"]);
    assert_eq!(p["by_reason"], json!({"ParseError": 3}));

    // Named with its own queue, and narrowed further by reason: the same, or nothing.
    let (st, p) = s
        .post(
            "/v1/replay/plans/preview",
            json!({"selection": {"queue": "orders", "signature": stock}, "budget": budget}),
        )
        .await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(messages(&p), ["stock-0", "stock-1"]);
    let (st, p) = s
        .post(
            "/v1/replay/plans/preview",
            json!({"selection": {"signature": stock, "reasons": ["ParseError"]}, "budget": budget}),
        )
        .await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(p["items"], 0, "{p}");
    // Without a signature the queue's every open case is selected.
    let (_, all) = s
        .post(
            "/v1/replay/plans/preview",
            json!({"selection": {"queue": "orders"}, "budget": budget}),
        )
        .await;
    assert_eq!(all["items"], 5, "{all}");

    // A plan keeps the signature and holds only its items.
    s.advance(6 * 60_000);
    let (st, plan) = s
        .post(
            "/v1/replay/plans",
            json!({"selection": {"signature": stock}, "budget": budget}),
        )
        .await;
    assert_eq!(st, 201, "{plan}");
    assert_eq!(plan["queue"], "orders");
    assert_eq!(plan["selection"]["signature"], stock.as_str());
    assert_eq!(plan["progress"]["items"], 2, "{plan}");
    let id = plan["id"].as_str().unwrap();
    let (st, again) = s.get(&format!("/v1/replay/plans/{id}")).await;
    assert_eq!(st, 200, "{again}");
    assert_eq!(again["selection"]["signature"], stock.as_str());

    // Refused, naming the field, and nothing is created.
    let refused = |selection: Value| {
        let body = json!({"selection": selection, "budget": budget});
        async move {
            let r = s.post("/v1/replay/plans/preview", body.clone()).await;
            assert_problem(&r, 400, "invalid_request");
            let created = s.post("/v1/replay/plans", body).await;
            assert_problem(&created, 400, "invalid_request");
            assert_eq!(r.1["field"], created.1["field"], "{}", created.1);
            r.1["field"].as_str().unwrap_or_default().to_owned()
        }
    };
    assert_eq!(
        refused(json!({"queue": "sandbox", "signature": parse})).await,
        "selection.signature"
    );
    for bad in [
        "not-hex".to_owned(),
        parse.to_uppercase(),
        format!("{parse}0"),
        "0".repeat(300),
    ] {
        assert_eq!(
            refused(json!({"signature": bad})).await,
            "selection.signature",
            "{bad}"
        );
    }
    // Well formed, but no dead letter ever had it.
    assert_eq!(
        refused(json!({"signature": "0".repeat(32)})).await,
        "selection.signature"
    );
    assert_eq!(
        refused(json!({"signature": parse, "case_ids": ["case_x"]})).await,
        "selection.case_ids"
    );
    let (_, list) = s.get("/v1/replay/plans").await;
    assert_eq!(list["plans"].as_array().unwrap().len(), 1, "{list}");
}

#[tokio::test]
async fn a_plan_selects_the_open_cases_of_one_failure_signature() {
    for backend in Backend::all("plans by signature") {
        let s = server(backend).await;
        scenario(&s).await;
        s.stop().await;
    }
}

/// A caller refused on the queue a selection names learns nothing from the refusal:
/// the named queue is checked before its signature or case group is looked up, so a
/// queue that does not exist and one that does are refused alike (403, not 404), and
/// each refusal is an audit entry.
#[tokio::test]
async fn a_named_queue_is_authorized_before_its_signature_or_group_is_looked_up() {
    let s = TestServer::builder()
        .settings(crate::replay_plans::settings())
        .auth(redrive_broker::AccessSettings {
            enabled: true,
            ..redrive_broker::AccessSettings::default()
        })
        .start()
        .await;
    let (st, v) = s
        .admin(
            reqwest::Method::POST,
            "/v1/queues",
            Some(json!({"name": "payroll"})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let probe = Probe::start().await;
    let b = budget(&probe, 1.0, 1, 10);
    let (_, secret) = s.token("narrow", &["operator:*", "replayer:orders"]).await;
    let signature = "0".repeat(32);
    for queue in ["payroll", "ghost"] {
        for selection in [
            json!({"queue": queue, "signature": signature}),
            json!({"queue": queue, "group": "grp_00000000000000000000000000"}),
        ] {
            for path in ["/v1/replay/plans/preview", "/v1/replay/plans"] {
                let (st, v) = s
                    .call_as(
                        Some(&secret),
                        reqwest::Method::POST,
                        path,
                        Some(json!({"selection": selection, "budget": b})),
                    )
                    .await;
                assert_eq!(st, 403, "{path} {selection}: {v}");
                assert_eq!(v["entity"], queue, "{v}");
            }
        }
    }
    let denied: Vec<Value> = s
        .audit("action=denied%3AReplayCase&limit=100")
        .await
        .into_iter()
        .filter(|e| e["actor_name"] == "narrow")
        .collect();
    assert_eq!(denied.len(), 8, "{denied:?}");
    s.stop().await;
}
