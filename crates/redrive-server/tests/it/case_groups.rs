//! Case groups over the API, on every backend, on the manual clock: a group is the open
//! cases of one queue that match its selection when it is made; one decision is carried
//! out on each member by the case's own operation (a member that refuses is named and
//! the others go on), every timeline entry it writes names the group, the isolated test
//! stays per exact payload (sent as a batch to the sandbox, each member's outcome its
//! own), a closed group takes no decision, and a plan takes a group's members.

use redrive_broker::Actor;
use redrive_core::register::Idempotency;
use redrive_testkit::{Backend, TestServer, assert_problem};
use serde_json::{Value, json};

use redrive_testkit::recovery::{Letter, case, dead_letter_case, register, work};

use crate::cases::server;

/// Creates a group, asserting 201.
async fn create(s: &TestServer, body: Value) -> Value {
    let (st, v) = s.post("/v1/case-groups", body).await;
    assert_eq!(st, 201, "{v}");
    v
}

/// Takes a decision on a group, asserting 200.
async fn decide(s: &TestServer, id: &str, action: &str, body: Value) -> Value {
    let (st, v) = s
        .post(&format!("/v1/case-groups/{id}/{action}"), body)
        .await;
    assert_eq!(st, 200, "{action}: {v}");
    v
}

/// The outcome of `case` in a decision's answer.
fn outcome<'a>(g: &'a Value, case: &str) -> &'a Value {
    g["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["case_id"] == case)
        .unwrap_or_else(|| panic!("an outcome for {case} in {g}"))
}

fn member_ids(g: &Value) -> Vec<String> {
    let mut ids: Vec<String> = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// Queues `orders`, `payments` and the sandbox `orders-sandbox`; five dead letters of
/// `orders`: three that failed the same way (`ParseError`, `no amount in order <id>`,
/// intents `shop-…`), one other `ParseError` (intent `batch-4`), one of another reason.
/// Answers the five case ids in that order.
async fn five(s: &TestServer) -> Vec<String> {
    s.queue("orders", json!({})).await;
    s.queue("payments", json!({})).await;
    s.queue("orders-sandbox", json!({"test_sandbox": true}))
        .await;
    register(s, "orders:*", Idempotency::NotIdempotent).await;
    let mut ids = Vec::new();
    for (k, order, reason, description, intent) in [
        (
            1,
            "ord_7Hx91KzQ",
            "ParseError",
            "no amount in order",
            "shop-1",
        ),
        (
            2,
            "ord_3Jd82LpA",
            "ParseError",
            "no amount in order",
            "shop-2",
        ),
        (
            3,
            "ord_9Qw55TnB",
            "ParseError",
            "no amount in order",
            "shop-3",
        ),
        (
            4,
            "ord_1Aa11AaA",
            "ParseError",
            "timeout after 3000 ms for",
            "batch-4",
        ),
        (5, "ord_2Bb22BbB", "Other", "no amount in order", "shop-5"),
    ] {
        let letter = Letter::new(&format!("o-{k}"))
            .with(json!({"intent": intent}))
            .reason(reason)
            .description(&format!("{description} {order}"));
        ids.push(dead_letter_case(s, "orders", letter).await);
        s.advance(1_000);
    }
    work(s).await;
    ids
}

/// A group holds the open cases its selection matched when it was made: by reason and
/// failure signature, by intent prefix, by time range; one that matches nothing, or
/// names a queue that does not exist, is refused and nothing is made. A listing shows
/// the groups by id, per queue.
#[tokio::test]
async fn a_group_holds_the_open_cases_its_selection_matches() {
    for backend in Backend::all("case group selection") {
        let name = backend.name();
        let s = server(backend).await;
        let ids = five(&s).await;
        let c = case(&s, &ids[0]).await;
        assert_eq!(
            c["signature"], "no amount in order <id>",
            "{name}: the signature masks the order id: {c}"
        );
        let g = create(
            &s,
            json!({"queue": "orders", "reason": "ParseError",
                   "signature": "no amount in order <id>"}),
        )
        .await;
        assert_eq!(member_ids(&g), ids[..3].to_vec(), "{name}: {g}");
        assert_eq!(g["size"], 3, "{name}");
        assert!(g["id"].as_str().unwrap().starts_with("grp_"), "{name}");
        assert_eq!(g["selection"]["signature"], "no amount in order <id>");
        let by_intent = create(&s, json!({"queue": "orders", "intent_prefix": "batch-"})).await;
        assert_eq!(member_ids(&by_intent), vec![ids[3].clone()], "{name}");
        // The first two dead letters only: dead-lettered a second apart from T0.
        let (_, first) = s.get(&format!("/v1/cases/{}", ids[0])).await;
        let (_, third) = s.get(&format!("/v1/cases/{}", ids[2])).await;
        let by_time = create(
            &s,
            json!({"queue": "orders", "from": first["dead_lettered_at"],
                   "to": third["dead_lettered_at"]}),
        )
        .await;
        assert_eq!(member_ids(&by_time), ids[..2].to_vec(), "{name}");

        let r = s
            .post(
                "/v1/case-groups",
                json!({"queue": "orders", "reason": "Nope"}),
            )
            .await;
        assert_problem(&r, 409, "case_conflict");
        assert_eq!(r.1["reason"], "group_empty", "{name}: {}", r.1);
        let r = s.post("/v1/case-groups", json!({"queue": "nope"})).await;
        assert_problem(&r, 404, "queue_not_found");
        let r = s
            .post(
                "/v1/case-groups",
                json!({"queue": "orders", "colour": "red"}),
            )
            .await;
        assert_eq!(r.0, 400, "{name}: {}", r.1);
        let r = s
            .post(
                "/v1/case-groups",
                json!({"queue": "orders", "from": "2030-01-01T00:00:00Z",
                       "to": "2020-01-01T00:00:00Z"}),
            )
            .await;
        assert_problem(&r, 400, "invalid_request");

        let (st, list) = s.get("/v1/case-groups?queue=orders").await;
        assert_eq!(st, 200, "{list}");
        assert_eq!(
            list["groups"].as_array().unwrap().len(),
            3,
            "{name}: {list}"
        );
        let (_, list) = s.get("/v1/case-groups?queue=payments").await;
        assert_eq!(list["groups"], json!([]), "{name}");
        let (_, page) = s.get("/v1/case-groups?limit=2").await;
        assert_eq!(page["groups"].as_array().unwrap().len(), 2, "{name}");
        let cursor = page["next_cursor"].as_str().unwrap().to_owned();
        let (_, rest) = s.get(&format!("/v1/case-groups?cursor={cursor}")).await;
        assert_eq!(
            rest["groups"].as_array().unwrap().len(),
            1,
            "{name}: {rest}"
        );
        let r = s.get("/v1/case-groups/grp_nope").await;
        assert_problem(&r, 404, "case_group_not_found");
        s.stop().await;
    }
}

/// One decision, many cases: claim, diagnose, correct, test and close go to each
/// member through its own operation. A member another owner holds refuses each
/// decision alone (`case_conflict:case_claimed`) and is left as it was; every timeline
/// entry the decisions wrote names the group; the test sends each member's exact
/// payload to the sandbox and records each member's own outcome; the group keeps its
/// decisions with what applied and what refused; a closed group takes no decision.
#[tokio::test]
async fn one_decision_is_carried_out_on_each_member_and_recorded_with_the_group() {
    for backend in Backend::all("case group decisions") {
        let name = backend.name();
        let s = server(backend).await;
        let ids = five(&s).await;
        let g = create(
            &s,
            json!({"queue": "orders", "reason": "ParseError",
                                   "signature": "no amount in order <id>"}),
        )
        .await;
        let gid = g["id"].as_str().unwrap().to_owned();
        // Bob holds the second case.
        s.broker
            .cases()
            .claim_case(&ids[1].parse().unwrap(), None, &Actor::system("bob"))
            .await
            .unwrap();

        let claimed = decide(&s, &gid, "claim", json!({"lease_ms": 3_600_000})).await;
        assert_eq!(outcome(&claimed, &ids[0])["ok"], true, "{name}: {claimed}");
        assert_eq!(outcome(&claimed, &ids[2])["ok"], true, "{name}");
        let refused = outcome(&claimed, &ids[1]);
        assert_eq!(refused["ok"], false, "{name}");
        assert_eq!(
            refused["code"], "case_conflict:case_claimed",
            "{name}: {refused}"
        );
        let c = case(&s, &ids[0]).await;
        assert_eq!(c["lease"]["owner"], "anonymous", "{name}: {c}");
        assert!(
            c["record"]["notes"][0]["text"]
                .as_str()
                .unwrap()
                .contains(&gid),
            "{name}: the claim names the group: {c}"
        );

        decide(
            &s,
            &gid,
            "diagnosis",
            json!({"hypothesis": "the v2 parser drops amounts",
                   "disconfirming_evidence": "v1 parses the same bytes"}),
        )
        .await;
        let corrected = decide(
            &s,
            &gid,
            "corrections",
            json!({"kind": "code", "identity": "commit abc123",
                   "addresses": "no amount in order <id>"}),
        )
        .await;
        assert_eq!(
            outcome(&corrected, &ids[2])["state"],
            "correction_identified",
            "{name}"
        );
        let tested = decide(
            &s,
            &gid,
            "tests",
            json!({"destination": "orders-sandbox", "send": true, "outcome": "pass",
                   "failed": [ids[2]], "evidence": "sandbox consumer: 1 ok, 1 failed"}),
        )
        .await;
        assert_eq!(
            outcome(&tested, &ids[0])["state"],
            "correction_isolated",
            "{name}"
        );
        assert_eq!(
            outcome(&tested, &ids[2])["state"],
            "failure_classified",
            "{name}"
        );
        assert_eq!(outcome(&tested, &ids[1])["ok"], false, "{name}");
        // Each tested member's exact payload went to the sandbox, and only theirs.
        let mut bodies: Vec<String> = s
            .receive("orders-sandbox", 10)
            .await
            .iter()
            .map(|m| m["body"].as_str().unwrap().to_owned())
            .collect();
        bodies.sort();
        assert_eq!(bodies, ["body of o-1", "body of o-3"], "{name}");

        // Every entry the decisions wrote names the group; Bob's case has none of them.
        let c = case(&s, &ids[0]).await;
        let by_group: Vec<&str> = c["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["fields"]["group"] == gid.as_str())
            .map(|e| e["state"].as_str().unwrap())
            .collect();
        assert_eq!(
            by_group,
            [
                "retained",
                "diagnosis_proposed",
                "correction_identified",
                "correction_isolated"
            ],
            "{name}: the escalated case is retained under its owner by the group's claim: {c}"
        );
        let bob = case(&s, &ids[1]).await;
        assert!(
            bob["timeline"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["fields"].get("group").is_none()),
            "{name}: {bob}"
        );
        let entries = s.audit("action=case.diagnose").await;
        assert_eq!(entries.len(), 3, "{name}: one per member, its refusal too");
        let took = entries.iter().filter(|e| e["outcome"] == "ok").count();
        assert_eq!(took, 2, "{name}: {entries:?}");
        assert!(
            entries.iter().all(|e| e["targets"]
                .as_array()
                .unwrap()
                .contains(&json!(format!("group={gid}")))),
            "{name}: {entries:?}"
        );
        let entries = s.audit("action=case_group.test").await;
        assert_eq!(entries.len(), 1, "{name}");
        assert!(
            entries[0]["targets"]
                .as_array()
                .unwrap()
                .contains(&json!("refused=1")),
            "{name}: {entries:?}"
        );

        let closed = decide(
            &s,
            &gid,
            "close",
            json!({"state": "rejected", "evidence": "schema policy v3: amount is required"}),
        )
        .await;
        assert_eq!(outcome(&closed, &ids[0])["state"], "rejected", "{name}");
        assert_eq!(outcome(&closed, &ids[2])["state"], "rejected", "{name}");
        assert!(closed["closed_at"].is_string(), "{name}: {closed}");
        assert!(
            case(&s, &ids[1]).await["closed_at"].is_null(),
            "{name}: Bob's is open"
        );
        let decisions: Vec<(String, u64, u64)> = closed["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["action"].as_str().unwrap().to_owned(),
                    d["applied"].as_u64().unwrap(),
                    d["refused"].as_u64().unwrap(),
                )
            })
            .collect();
        let expect = |a: &str| (a.to_owned(), 2, 1);
        assert_eq!(
            decisions,
            [
                expect("claim"),
                expect("diagnose"),
                expect("correct"),
                expect("test"),
                expect("close")
            ],
            "{name}"
        );
        assert_eq!(
            closed["decisions"][1]["fields"]["hypothesis"],
            "the v2 parser drops amounts"
        );
        let r = s
            .post(&format!("/v1/case-groups/{gid}/claim"), json!({}))
            .await;
        assert_problem(&r, 409, "case_conflict");
        assert_eq!(r.1["reason"], "group_closed", "{name}: {}", r.1);
        let (_, shown) = s.get(&format!("/v1/case-groups/{gid}")).await;
        assert_eq!(shown["by_state"]["rejected"], 2, "{name}: {shown}");
        assert!(
            shown.get("outcomes").is_none(),
            "{name}: a read has no outcomes"
        );
        s.stop().await;
    }
}

/// A decision's own fields are judged before any member is touched: a test naming a
/// failed case that is not a member, an unknown outcome, a close to a state only the
/// broker decides, an empty hypothesis — each refused, nothing changed.
#[tokio::test]
async fn a_bad_decision_is_refused_before_any_member_changes() {
    for backend in Backend::all("case group refusals") {
        let name = backend.name();
        let s = server(backend).await;
        let ids = five(&s).await;
        let g = create(&s, json!({"queue": "orders", "reason": "ParseError"})).await;
        let gid = g["id"].as_str().unwrap().to_owned();
        decide(&s, &gid, "claim", json!({})).await;
        let before: Vec<Value> = {
            let mut v = Vec::new();
            for id in &ids[..4] {
                v.push(case(&s, id).await["version"].clone());
            }
            v
        };
        for (action, body, code) in [
            (
                "tests",
                json!({"destination": "orders-sandbox", "outcome": "pass",
                              "failed": [ids[4]], "evidence": "x"}),
                "invalid_request",
            ),
            (
                "tests",
                json!({"destination": "orders-sandbox", "outcome": "maybe",
                              "evidence": "x"}),
                "invalid_request",
            ),
            (
                "close",
                json!({"state": "completed", "evidence": "x"}),
                "invalid_request",
            ),
            // The destination, the same for every member: never the group's queue, and a
            // send only to a declared sandbox.
            (
                "tests",
                json!({"destination": "orders", "outcome": "pass", "evidence": "x"}),
                "invalid_request",
            ),
            (
                "tests",
                json!({"destination": "payments", "send": true, "outcome": "pass",
                       "evidence": "x"}),
                "invalid_request",
            ),
            (
                "diagnosis",
                json!({"hypothesis": " ", "disconfirming_evidence": "x"}),
                "invalid_request",
            ),
        ] {
            let r = s
                .post(&format!("/v1/case-groups/{gid}/{action}"), body)
                .await;
            assert_problem(&r, 400, code);
        }
        for (id, v) in ids[..4].iter().zip(before) {
            assert_eq!(case(&s, id).await["version"], v, "{name}: {id} unchanged");
        }
        s.stop().await;
    }
}

/// A plan takes a group's members as its cases; it names a group or case ids, not both;
/// an unknown group is not found; a group of another queue is refused.
#[tokio::test]
async fn a_plan_of_a_group_takes_its_members() {
    for backend in Backend::all("a plan of a group") {
        let name = backend.name();
        let s = server(backend).await;
        let ids = five(&s).await;
        let g = create(&s, json!({"queue": "orders", "intent_prefix": "shop-"})).await;
        let gid = g["id"].as_str().unwrap().to_owned();
        let budget = json!({"items_per_s": 1.0, "bytes_per_s": 65536, "max_concurrent": 2,
            "dependency": {"name": "ledger-db", "probe_url": "http://127.0.0.1:9/health",
                           "max_error_rate": 0.05, "max_latency_ms": 250}});
        s.advance(10 * 60_000);
        let (st, preview) = s
            .post(
                "/v1/replay/plans/preview",
                json!({"selection": {"group": gid}, "budget": budget}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {preview}");
        assert_eq!(preview["items"], 4, "{name}: {preview}");
        let listed: Vec<&str> = preview["item_list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["case_id"].as_str().unwrap())
            .collect();
        let mut expect: Vec<&str> = vec![&ids[0], &ids[1], &ids[2], &ids[4]];
        expect.sort();
        let mut got = listed.clone();
        got.sort();
        assert_eq!(got, expect, "{name}: {preview}");
        let (st, plan) = s
            .post(
                "/v1/replay/plans",
                json!({"selection": {"queue": "orders", "group": gid}, "budget": budget}),
            )
            .await;
        assert_eq!(st, 201, "{name}: {plan}");
        assert_eq!(plan["selection"]["group"], gid.as_str(), "{name}");
        assert_eq!(plan["progress"]["items"], 4, "{name}: {plan}");

        let r = s
            .post(
                "/v1/replay/plans",
                json!({"selection": {"group": gid, "case_ids": [ids[0]]}, "budget": budget}),
            )
            .await;
        assert_problem(&r, 400, "invalid_request");
        let r = s
            .post(
                "/v1/replay/plans",
                json!({"selection": {"queue": "payments", "group": gid}, "budget": budget}),
            )
            .await;
        assert_problem(&r, 400, "invalid_request");
        let r = s
            .post(
                "/v1/replay/plans/preview",
                json!({"selection": {"group": "grp_nope"}, "budget": budget}),
            )
            .await;
        assert_problem(&r, 404, "case_group_not_found");
        s.stop().await;
    }
}

/// A group's queue decides who may act on it: reading it needs a case reader's role on
/// that queue, deciding an operator's, and a test of exact payloads payload-reader too.
#[tokio::test]
async fn a_group_is_acted_on_with_the_roles_of_its_queue() {
    for backend in Backend::all("case group roles") {
        let name = backend.name();
        let s = TestServer::builder()
            .backend(backend)
            .auth(redrive_broker::AccessSettings {
                enabled: true,
                ..redrive_broker::AccessSettings::default()
            })
            .settings(redrive_testkit::recovery::without_workers())
            .start()
            .await;
        for q in ["orders", "payments"] {
            let (st, v) = s
                .call_as(
                    Some(redrive_testkit::ADMIN),
                    reqwest::Method::POST,
                    "/v1/queues",
                    Some(json!({"name": q, "policy": {}})),
                )
                .await;
            assert_eq!(st, 201, "{v}");
        }
        let (st, v) = s
            .call_as(
                Some(redrive_testkit::ADMIN),
                reqwest::Method::POST,
                "/v1/queues",
                Some(json!({"name": "orders-sandbox", "policy": {"test_sandbox": true}})),
            )
            .await;
        assert_eq!(st, 201, "{v}");
        dead_letter_case(&s, "orders", Letter::new("o-1").as_admin()).await;
        dead_letter_case(&s, "orders", Letter::new("o-2").as_admin()).await;
        let (_, operator) = s
            .token("oncall", &["operator:orders", "producer:orders-sandbox"])
            .await;
        let (_, other) = s.token("elsewhere", &["operator:payments"]).await;
        let as_ = |t: &str, path: &str, body: Option<Value>| {
            let method = if body.is_some() {
                reqwest::Method::POST
            } else {
                reqwest::Method::GET
            };
            let t = t.to_owned();
            let path = path.to_owned();
            let s = &s;
            async move { s.call_as(Some(&t), method, &path, body).await }
        };
        let r = as_(&other, "/v1/case-groups", Some(json!({"queue": "orders"}))).await;
        assert_problem(&r, 403, "forbidden");
        let (st, g) = as_(
            &operator,
            "/v1/case-groups",
            Some(json!({"queue": "orders"})),
        )
        .await;
        assert_eq!(st, 201, "{name}: {g}");
        let gid = g["id"].as_str().unwrap().to_owned();
        let r = as_(&other, &format!("/v1/case-groups/{gid}"), None).await;
        assert_problem(&r, 403, "forbidden");
        let r = as_(
            &other,
            &format!("/v1/case-groups/{gid}/claim"),
            Some(json!({})),
        )
        .await;
        assert_problem(&r, 403, "forbidden");
        let (st, _) = as_(
            &operator,
            &format!("/v1/case-groups/{gid}/claim"),
            Some(json!({})),
        )
        .await;
        assert_eq!(st, 200, "{name}");
        let (_, list) = as_(&other, "/v1/case-groups", None).await;
        assert_eq!(
            list["groups"],
            json!([]),
            "{name}: another queue's groups are not listed"
        );
        // A test reads each exact payload: payload-reader on the queue too.
        let r = as_(
            &operator,
            &format!("/v1/case-groups/{gid}/tests"),
            Some(json!({"destination": "orders-sandbox", "outcome": "pass", "evidence": "x"})),
        )
        .await;
        assert_problem(&r, 403, "forbidden");
        s.stop().await;
    }
}

/// An id a path or a cursor names is refused as it was before ids were typed: a case id
/// of any other shape (or length) names no case, answered as an unknown one; a case group
/// id of any other shape is an invalid `group`; and the checks a request's body gets come
/// first, as before.
#[tokio::test]
async fn a_malformed_case_or_group_id_is_refused_as_before() {
    for backend in Backend::all("malformed case and group ids") {
        let name = backend.name();
        let s = server(backend).await;
        let too_long = format!("case_{}", "a".repeat(65));
        for id in [
            "case_nope",
            "nope",
            "grp_1",
            too_long.as_str(),
            "case_a%00b",
        ] {
            let r = s.get(&format!("/v1/cases/{id}")).await;
            assert_problem(&r, 404, "case_not_found");
            let shown = id.replace("%00", "\\0");
            assert_eq!(
                r.1["detail"],
                format!("case \"{shown}\" does not exist"),
                "{name}: {id}"
            );
            let r = s.post(&format!("/v1/cases/{id}/claim"), json!({})).await;
            assert_problem(&r, 404, "case_not_found");
        }
        // The body's own check comes first.
        let r = s
            .post(
                "/v1/cases/nope/corrections",
                json!({"kind": "bogus", "identity": "x", "addresses": "y"}),
            )
            .await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(r.1["field"], "kind", "{name}: {}", r.1);

        let r = s.get("/v1/case-groups/grp_nope").await;
        assert_problem(&r, 404, "case_group_not_found");
        let too_long = format!("grp_{}", "a".repeat(65));
        for (path, id) in [
            ("/v1/case-groups/nope".to_owned(), "nope"),
            ("/v1/case-groups/case_1".to_owned(), "case_1"),
            (format!("/v1/case-groups/{too_long}"), too_long.as_str()),
            ("/v1/case-groups?cursor=nope".to_owned(), "nope"),
        ] {
            let r = s.get(&path).await;
            assert_problem(&r, 400, "invalid_request");
            assert_eq!(r.1["field"], "group", "{name}: {path}");
            assert_eq!(
                r.1["detail"],
                format!("invalid `group`: \"{id}\" is not a case group id (grp_…)"),
                "{name}: {path}"
            );
        }
        let r = s.post("/v1/case-groups/nope/claim", json!({})).await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(r.1["field"], "group", "{name}");
        let r = s
            .post(
                "/v1/case-groups/nope/tests",
                json!({"destination": "orders-sandbox", "outcome": "maybe", "evidence": "x"}),
            )
            .await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(r.1["field"], "outcome", "{name}: {}", r.1);
        s.stop().await;
    }
}
