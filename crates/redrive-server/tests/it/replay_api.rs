//! The native API of automatic replay over HTTP, on every backend: restore with its
//! preview, import of each format, replay status, the records' replay fields, the roles
//! of the new routes, and dead-letter retention on queues and subscriptions. The server
//! runs without its replay worker; judgements are driven one pass at a time
//! (`Broker::replay_once`) on the manual clock.

use redrive_broker::{AccessSettings, ReplaySettings};
use redrive_testkit::{Backend, TestServer, assert_problem, default_settings};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use redrive_core::Clock as _;
use redrive_core::register::Idempotency;
use redrive_testkit::recovery::{Letter, dead_letter, register, replay_passes, replaying_queue};

use crate::replay::server;

/// One judgement pass; answers how many records it judged.
async fn pass(s: &TestServer) -> u64 {
    replay_passes(s).await.judged
}

/// The record as the API shows it.
async fn shown(s: &TestServer, queue: &str, id: &str) -> Value {
    let (st, v) = s
        .get(&format!("/v1/queues/{queue}/dead-letters/{id}"))
        .await;
    assert_eq!(st, 200, "{v}");
    v
}

async fn restore(
    s: &TestServer,
    queue: &str,
    id: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    s.call(
        Method::POST,
        &format!("/v1/queues/{queue}/dead-letters/{id}/restore"),
        body,
    )
    .await
}

async fn import(s: &TestServer, queue: &str, format: &str, content: &str) -> (StatusCode, Value) {
    s.post(
        &format!("/v1/queues/{queue}/dead-letters/import"),
        json!({"format": format, "content": content}),
    )
    .await
}

/// The ids of a queue's records in `area`.
async fn area_ids(s: &TestServer, queue: &str, area: &str) -> Vec<String> {
    let (st, v) = s
        .get(&format!("/v1/queues/{queue}/dead-letters?area={area}"))
        .await;
    assert_eq!(st, 200, "{v}");
    v["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

/// An Event Grid dead-letter blob of one event.
fn event_grid_blob(id: &str) -> String {
    json!([{
        "specversion": "1.0", "id": id, "source": "/orders", "type": "order.created",
        "data": {"n": 1},
        "deadLetterReason": "MaxDeliveryAttemptsExceeded",
        "deliveryAttempts": 10,
        "lastDeliveryOutcome": "Probation",
        "publishTime": "2027-01-14T10:00:00Z",
        "lastDeliveryAttemptTime": "2027-01-14T11:00:00Z"
    }])
    .to_string()
}

/// SQS `ReceiveMessage` output: one message with the attributes of its evidence, one
/// without.
fn sqs_output() -> String {
    json!({"Messages": [
        {
            "MessageId": "sqs-1", "ReceiptHandle": "AQEB", "Body": "one",
            "Attributes": {"ApproximateReceiveCount": "4", "SentTimestamp": "1700000000000"}
        },
        {"MessageId": "sqs-2", "ReceiptHandle": "AQEB", "Body": "two"}
    ]})
    .to_string()
}

/// redrive's own export: JSON Lines of records.
fn json_lines() -> String {
    json!({
        "id": "dl_elsewhere", "queue": "old", "area": "archived",
        "message_id": "j-1", "body": "from an export", "body_encoding": "utf8",
        "reason": "HandlerFailed", "delivery_count": 3, "delivery_count_quality": "exact",
        "enqueued_time": "2027-01-14T00:00:00Z", "dead_lettered_at": "2027-01-14T00:10:00Z",
        "format": "message"
    })
    .to_string()
        + "\n"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_previews_then_moves_a_quarantined_record_back_and_is_audited() {
    for backend in Backend::all("the restore API test") {
        let name = backend.name();
        let s = server(backend).await;
        replaying_queue(&s, "q", json!({})).await;
        // No register entry: the judgement quarantines the message.
        let id = dead_letter(&s, "q", Letter::new("a")).await;
        let before = shown(&s, "q", &id).await;
        assert_eq!(before["format"], "message", "{name}");
        assert_eq!(before["delivery_count_quality"], "exact", "{name}");
        assert_eq!(before["replay"]["candidate"], true, "{name}: {before}");
        assert!(before["replay"]["due_at"].is_string(), "{name}");
        assert_eq!(before["replay"]["failures"], 0, "{name}");
        assert!(before.get("judgement").is_none(), "{name}: not judged yet");
        assert_eq!(pass(&s).await, 1, "{name}");
        let q = shown(&s, "q", &id).await;
        assert_eq!(q["area"], "quarantine", "{name}");
        assert_eq!(q["replay"]["candidate"], false, "{name}");
        assert_eq!(q["judgement"]["cause"], "TypeNotRegistered", "{name}: {q}");
        assert_eq!(q["judgement"]["engine"], "redrive-replay/1", "{name}");
        assert!(q["judgement"]["judged_at"].is_string(), "{name}");
        assert_eq!(
            q["judgement"]["events"],
            json!([{"id": "a", "attempts": 0, "cause": "TypeNotRegistered"}]),
            "{name}"
        );

        // A dry run answers what the next judgement would do, and changes nothing.
        let (st, v) = restore(&s, "q", &id, Some(json!({"dry_run": true}))).await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(
            v,
            json!({"id": id, "restored": false, "replay_enabled": true, "republish": 0,
                   "requarantine": {"TypeNotRegistered": 1}}),
            "{name}"
        );
        register(&s, "q:*", Idempotency::Idempotent).await;
        let (st, v) = restore(&s, "q", &id, Some(json!({"dry_run": true}))).await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(
            (v["republish"].as_u64(), &v["requarantine"]),
            (Some(1), &json!({}))
        );
        assert_eq!(shown(&s, "q", &id).await["area"], "quarantine", "{name}");
        assert!(
            s.audit("action=dead_letter.restore").await.is_empty(),
            "{name}: a dry run is not audited"
        );

        // The restore: one move back to live, where the record is a candidate again.
        let (st, v) = restore(&s, "q", &id, None).await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(
            v,
            json!({"id": id, "restored": true, "replay_enabled": true, "republish": 1,
                   "requarantine": {}}),
            "{name}"
        );
        let live = shown(&s, "q", &id).await;
        assert_eq!(live["area"], "live", "{name}");
        assert_eq!(live["replay"]["candidate"], true, "{name}");
        let audit = s.audit("action=dead_letter.restore").await;
        assert_eq!(audit.len(), 1, "{name}");
        assert_eq!(audit[0]["entity"], "q", "{name}");
        assert_eq!(audit[0]["outcome"], "ok", "{name}");
        assert_eq!(audit[0]["targets"], json!([id, "republish=1"]), "{name}");

        // The record is live now: a restore is refused and changes nothing.
        let r = restore(&s, "q", &id, Some(json!({}))).await;
        assert_problem(&r, 409, "dead_letter_not_quarantined");
        assert_eq!(r.1["area"], "live", "{name}");
        assert_eq!(shown(&s, "q", &id).await["area"], "live", "{name}");
        assert_eq!(s.audit("action=dead_letter.restore").await.len(), 1);

        // The next judgement republishes it; the archived record shows its judgement.
        assert_eq!(pass(&s).await, 1, "{name}");
        let done = shown(&s, "q", &id).await;
        assert_eq!(done["area"], "archived", "{name}");
        assert_eq!(done["replay"]["candidate"], false, "{name}");
        assert!(done["judgement"].get("cause").is_none(), "{name}: {done}");
        assert_eq!(
            done["judgement"]["events"],
            json!([{"id": "a", "attempts": 0, "republished_as": "a|1"}]),
            "{name}"
        );
        assert_eq!(
            done["judgement"]["replay"]["rule"], "automatic_replay",
            "{name}: {done}"
        );
        let got = s.receive("q", 1).await;
        assert_eq!(got[0]["message_id"], "a|1", "{name}");

        // Not found, and bodies the route does not take.
        assert_problem(
            &restore(&s, "q", "dl_nothing", None).await,
            404,
            "dead_letter_not_found",
        );
        assert_problem(
            &restore(&s, "nope", &id, None).await,
            404,
            "queue_not_found",
        );
        assert_problem(
            &restore(&s, "q", &id, Some(json!({"dry_run": "yes"}))).await,
            400,
            "malformed_body",
        );
        assert_problem(
            &restore(&s, "q", &id, Some(json!({"force": true}))).await,
            400,
            "malformed_body",
        );
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_import_format_stores_live_records_with_their_format_and_quality() {
    for backend in Backend::all("the import API test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("imp", json!({})).await;
        replaying_queue(&s, "rep", json!({})).await;

        let (st, v) = import(&s, "imp", "eventgrid", &event_grid_blob("e-1")).await;
        assert_eq!(st, 201, "{name}: {v}");
        assert_eq!(v["imported"], 1, "{name}");
        let eg = v["ids"][0].as_str().unwrap().to_owned();
        assert!(eg.starts_with("dl_"), "{name}: {eg}");
        let r = shown(&s, "imp", &eg).await;
        assert_eq!(
            (&r["area"], &r["format"], &r["delivery_count_quality"]),
            (&json!("live"), &json!("events"), &json!("approximate")),
            "{name}: {r}"
        );
        assert_eq!(r["message_id"], "e-1", "{name}");
        assert_eq!(r["delivery_count"], 10, "{name}");
        assert_eq!(
            r["replay"],
            json!({"candidate": false, "failures": 0}),
            "{name}: the queue does not replay"
        );

        let (st, v) = import(&s, "imp", "sqs", &sqs_output()).await;
        assert_eq!(st, 201, "{name}: {v}");
        assert_eq!(v["imported"], 2, "{name}");
        let ids: Vec<String> = v["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_str().unwrap().to_owned())
            .collect();
        let first = shown(&s, "imp", &ids[0]).await;
        assert_eq!(
            (
                &first["message_id"],
                &first["format"],
                &first["delivery_count_quality"]
            ),
            (&json!("sqs-1"), &json!("message"), &json!("approximate")),
            "{name}: {first}"
        );
        assert_eq!(first["delivery_count"], 4, "{name}");
        let second = shown(&s, "imp", &ids[1]).await;
        assert_eq!(second["message_id"], "sqs-2", "{name}");
        assert_eq!(
            second["delivery_count_quality"], "incomplete",
            "{name}: no receive count, no sent time"
        );

        let (st, v) = import(&s, "rep", "json", &json_lines()).await;
        assert_eq!(st, 201, "{name}: {v}");
        let j = shown(&s, "rep", v["ids"][0].as_str().unwrap()).await;
        assert_eq!(
            (&j["message_id"], &j["format"], &j["delivery_count_quality"]),
            (&json!("j-1"), &json!("message"), &json!("approximate")),
            "{name}: an exported `exact` is the exporter's claim, approximate here: {j}"
        );
        assert_eq!(j["routed_by"], "import", "{name}: {j}");
        assert_eq!(
            j["area"], "live",
            "{name}: whatever area it was exported from"
        );
        assert_eq!(j["queue"], "rep", "{name}");
        assert_eq!(
            j["replay"]["candidate"], true,
            "{name}: an import into a replaying queue is a candidate"
        );

        assert_eq!(area_ids(&s, "imp", "live").await.len(), 3, "{name}");
        let audit = s.audit("action=dead_letter.import").await;
        assert_eq!(audit.len(), 3, "{name}");
        assert_eq!(audit[1]["entity"], "imp", "{name}");
        assert_eq!(
            audit[1]["targets"],
            json!([
                "format=sqs",
                "records=2",
                format!("first={}", ids[0]),
                format!("last={}", ids[1])
            ]),
            "{name}"
        );
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_import_is_a_400_naming_the_field_and_stores_nothing() {
    for backend in Backend::all("the bad import test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("imp", json!({})).await;

        let r = import(&s, "imp", "csv", "a,b\n").await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(r.1["field"], "format", "{name}");
        assert!(
            r.1["detail"]
                .as_str()
                .unwrap()
                .contains("eventgrid, sqs, json"),
            "{name}: {}",
            r.1
        );
        let r = import(&s, "imp", "eventgrid", "[{").await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(r.1["field"], "content", "{name}");
        let r = import(&s, "imp", "sqs", "{\"Messages\": [{\"Body\": \"no id\"}]}").await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(r.1["field"], "content", "{name}");
        assert!(
            r.1["detail"].as_str().unwrap().contains("MessageId"),
            "{name}: the parse error names the field: {}",
            r.1
        );
        // A good line then a line without its body: the whole import is refused.
        let payloadless = json!({"message_id": "m", "reason": "R", "delivery_count": 1,
                                 "enqueued_time": "2026-01-01T00:00:00Z"});
        let content = format!("{}{payloadless}\n", json_lines());
        let r = import(&s, "imp", "json", &content).await;
        assert_problem(&r, 400, "invalid_request");
        assert!(
            r.1["detail"]
                .as_str()
                .unwrap()
                .contains("record 1 (line 2)"),
            "{name}: {}",
            r.1
        );
        assert_problem(
            &import(&s, "imp", "json", "\n\n").await,
            400,
            "invalid_request",
        );
        // The body's own shape.
        assert_problem(
            &s.post(
                "/v1/queues/imp/dead-letters/import",
                json!({"format": "json"}),
            )
            .await,
            400,
            "malformed_body",
        );
        assert_problem(
            &s.post(
                "/v1/queues/imp/dead-letters/import",
                json!({"format": "json", "content": json_lines(), "area": "archived"}),
            )
            .await,
            400,
            "malformed_body",
        );
        assert_problem(
            &import(&s, "nope", "json", &json_lines()).await,
            404,
            "queue_not_found",
        );
        for area in ["live", "archived", "quarantine"] {
            assert!(
                area_ids(&s, "imp", area).await.is_empty(),
                "{name}: nothing stored in {area}"
            );
        }
        // A refused import stores nothing, and its refusal is audited with its error.
        let refused = s.audit("action=dead_letter.import").await;
        assert_eq!(refused.len(), 4, "{name}: {refused:?}");
        assert!(
            refused.iter().all(|e| {
                e["outcome"]
                    .as_str()
                    .is_some_and(|o| o.starts_with("error"))
                    && e["targets"]
                        .as_array()
                        .is_some_and(|t| t.contains(&json!("records=0")))
            }),
            "{name}: {refused:?}"
        );
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_status_counts_follow_judgements_failures_and_manual_quarantine() {
    for backend in Backend::all("the replay status test") {
        let name = backend.name();
        let s = server(backend).await;
        replaying_queue(&s, "rs", json!({})).await;
        s.queue("quiet", json!({})).await;
        s.queue("other", json!({})).await;
        register(&s, "ok.type", Idempotency::Idempotent).await;
        let ok = dead_letter(
            &s,
            "rs",
            Letter::new("ok-1").with(json!({"type": "ok.type"})),
        )
        .await;
        dead_letter(
            &s,
            "rs",
            Letter::new("odd-1").with(json!({"type": "odd.type"})),
        )
        .await;
        dead_letter(&s, "other", Letter::new("x")).await;

        let (st, v) = s.get("/v1/replay/rs").await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(
            v,
            json!({"queue": "rs", "live": 2, "candidates": 2, "failing": 0, "flagged": 0,
                   "undecodable": 0, "archived": 0, "quarantined": {}}),
            "{name}"
        );
        assert_eq!(pass(&s).await, 2, "{name}");
        let (_, v) = s.get("/v1/replay/rs").await;
        assert_eq!(
            v,
            json!({"queue": "rs", "live": 0, "candidates": 0, "failing": 0, "flagged": 0,
                   "undecodable": 0, "archived": 1, "quarantined": {"TypeNotRegistered": 1}}),
            "{name}"
        );
        assert_eq!(shown(&s, "rs", &ok).await["area"], "archived", "{name}");
        // The republished message is handled.
        let got = s.receive("rs", 1).await;
        assert_eq!(got[0]["message_id"], "ok-1|1", "{name}");
        let (st, v) = s
            .settle(
                "rs",
                got[0]["lock_token"].as_str().unwrap(),
                "complete",
                json!({}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");

        // A record an operator moves to quarantine is counted as manual.
        let manual = dead_letter(
            &s,
            "rs",
            Letter::new("m-1").with(json!({"type": "ok.type"})),
        )
        .await;
        let (st, v) = s
            .post(
                &format!("/v1/queues/rs/dead-letters/{manual}/move"),
                json!({"area": "quarantine"}),
            )
            .await;
        assert_eq!(st, 204, "{name}: {v}");
        let (_, v) = s.get("/v1/replay/rs").await;
        assert_eq!(
            v["quarantined"],
            json!({"TypeNotRegistered": 1, "manual": 1}),
            "{name}"
        );

        // A judgement that fails (the republish is over the origin's message size now)
        // counts as failing, and as flagged from the node's threshold.
        s.broker.set_replay_settings(ReplaySettings {
            flag_after_failures: 1,
            ..ReplaySettings::default()
        });
        let big = dead_letter(
            &s,
            "rs",
            Letter::new("big-1").with(json!({"type": "ok.type"})),
        )
        .await;
        let (st, v) = s
            .patch("/v1/queues/rs", json!({"max_message_size": 8}))
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(pass(&s).await, 1, "{name}");
        let (_, v) = s.get("/v1/replay/rs").await;
        assert_eq!(
            (&v["live"], &v["candidates"], &v["failing"], &v["flagged"]),
            (&json!(1), &json!(1), &json!(1), &json!(1)),
            "{name}: {v}"
        );
        let r = shown(&s, "rs", &big).await;
        assert_eq!(r["replay"]["candidate"], true, "{name}: retried later: {r}");
        assert_eq!(r["replay"]["failures"], 1, "{name}");
        assert!(
            r["replay"]["last_error"]
                .as_str()
                .unwrap()
                .contains("max_message_size"),
            "{name}: {r}"
        );

        // Every queue with dead letters; one without is left out.
        let (st, v) = s.get("/v1/replay").await;
        assert_eq!(st, 200, "{name}: {v}");
        let queues: Vec<&str> = v["entities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["queue"].as_str().unwrap())
            .collect();
        assert_eq!(queues, ["other", "rs"], "{name}");
        assert_eq!(v["entities"][0]["live"], 1, "{name}");
        // One queue without dead letters: zeros; an unknown one: 404.
        let (st, v) = s.get("/v1/replay/quiet").await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(
            v,
            json!({"queue": "quiet", "live": 0, "candidates": 0, "failing": 0, "flagged": 0,
                   "undecodable": 0, "archived": 0, "quarantined": {}}),
            "{name}"
        );
        assert_problem(&s.get("/v1/replay/nope").await, 404, "queue_not_found");
        assert_problem(&s.get("/v1/replay/bad%20name").await, 400, "invalid_name");
        s.stop().await;
    }
}

fn auth_on() -> AccessSettings {
    AccessSettings {
        enabled: true,
        ..AccessSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_import_and_status_need_operator_and_a_listing_shows_its_scope() {
    for backend in Backend::all("the replay API roles test") {
        let name = backend.name();
        let s = TestServer::builder()
            .backend(backend)
            .auth(auth_on())
            .settings(redrive_server::Settings {
                replay_worker: false,
                ..default_settings()
            })
            .start()
            .await;
        for q in ["a1", "b1"] {
            let (st, v) = s
                .admin(Method::POST, "/v1/queues", Some(json!({"name": q})))
                .await;
            assert_eq!(st, 201, "{name}: {v}");
            let (st, v) = s
                .admin(
                    Method::POST,
                    &format!("/v1/queues/{q}/dead-letters/import"),
                    Some(json!({"format": "json", "content": json_lines()})),
                )
                .await;
            assert_eq!(st, 201, "{name}: {v}");
        }
        let import_body = || Some(json!({"format": "json", "content": json_lines()}));
        let calls = |q: &str| {
            vec![
                (
                    Method::POST,
                    format!("/v1/queues/{q}/dead-letters/dl_x/restore"),
                    Some(json!({"dry_run": true})),
                ),
                (
                    Method::POST,
                    format!("/v1/queues/{q}/dead-letters/import"),
                    import_body(),
                ),
                (Method::GET, "/v1/replay".to_owned(), None),
                (Method::GET, format!("/v1/replay/{q}"), None),
            ]
        };
        for role in ["payload-reader", "replayer", "consumer"] {
            let (_, secret) = s.token(&format!("t-{role}"), &[role]).await;
            for (m, path, body) in calls("a1") {
                let r = s.call_as(Some(&secret), m, &path, body).await;
                assert_problem(&r, 403, "forbidden");
            }
        }
        // An import also needs what a send needs.
        let (_, operator) = s.token("t-operator", &["operator:a*", "producer:a*"]).await;
        for (m, path, body) in calls("a1") {
            let (st, v) = s.call_as(Some(&operator), m.clone(), &path, body).await;
            assert!(
                st != StatusCode::FORBIDDEN && st != StatusCode::UNAUTHORIZED,
                "{name}: {m} {path}: {st} {v}"
            );
        }
        for (m, path, body) in calls("b1") {
            if path == "/v1/replay" {
                continue;
            }
            let r = s.call_as(Some(&operator), m, &path, body).await;
            assert_problem(&r, 403, "forbidden");
        }
        let (st, v) = s
            .call_as(Some(&operator), Method::GET, "/v1/replay", None)
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        let listed: Vec<&str> = v["entities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["queue"].as_str().unwrap())
            .collect();
        assert_eq!(listed, ["a1"], "{name}: only what the grant covers");
        let (st, v) = s.admin(Method::GET, "/v1/replay", None).await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(v["entities"].as_array().unwrap().len(), 2, "{name}");
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_retention_round_trips_on_queues_and_subscriptions() {
    for backend in Backend::all("the retention API test") {
        let name = backend.name();
        let s = server(backend).await;
        // Queues: the default, 0 (forever), a change, and out of range.
        s.queue("plain", json!({})).await;
        let (_, v) = s.get("/v1/queues/plain").await;
        assert_eq!(
            v["policy"]["dead_letter_retention_ms"], 2_592_000_000u64,
            "{name}: 30 days by default"
        );
        s.queue("forever", json!({"dead_letter_retention_ms": 0}))
            .await;
        let (_, v) = s.get("/v1/queues/forever").await;
        assert_eq!(v["policy"]["dead_letter_retention_ms"], 0, "{name}");
        let (st, v) = s
            .patch(
                "/v1/queues/forever",
                json!({"dead_letter_retention_ms": 86_400_000}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(
            v["policy"]["dead_letter_retention_ms"], 86_400_000,
            "{name}"
        );
        assert_eq!(v["policy_version"], 2, "{name}");
        let r = s
            .patch(
                "/v1/queues/forever",
                json!({"dead_letter_retention_ms": 315_360_000_001u64}),
            )
            .await;
        assert_problem(&r, 400, "invalid_policy");
        assert_eq!(r.1["field"], "dead_letter_retention_ms", "{name}");
        let (_, v) = s.get("/v1/queues/forever").await;
        assert_eq!(
            (
                &v["policy"]["dead_letter_retention_ms"],
                &v["policy_version"]
            ),
            (&json!(86_400_000), &json!(2)),
            "{name}: a refused change changes nothing"
        );
        let r = s
            .post(
                "/v1/queues",
                json!({"name": "toolong", "policy": {"dead_letter_retention_ms": 315_360_000_001u64}}),
            )
            .await;
        assert_problem(&r, 400, "invalid_policy");
        assert_eq!(r.1["field"], "dead_letter_retention_ms", "{name}");
        assert_problem(&s.get("/v1/queues/toolong").await, 404, "queue_not_found");
        let (st, v) = s
            .patch(
                "/v1/queues/plain",
                json!({"dead_letter_retention_ms": 315_360_000_000u64}),
            )
            .await;
        assert_eq!(st, 200, "{name}: the longest retention is allowed: {v}");

        // Subscriptions: the same rules, shown with the subscription and on its queue.
        s.topic("t", json!({})).await;
        let (st, v) = s
            .post(
                "/v1/topics/t/subscriptions",
                json!({"name": "keep", "type": "pull", "dead_letter_retention_ms": 0}),
            )
            .await;
        assert_eq!(st, 201, "{name}: {v}");
        assert_eq!(v["dead_letter_retention_ms"], 0, "{name}");
        let (st, v) = s
            .post(
                "/v1/topics/t/subscriptions",
                json!({"name": "dflt", "type": "pull"}),
            )
            .await;
        assert_eq!(st, 201, "{name}: {v}");
        assert_eq!(v["dead_letter_retention_ms"], 2_592_000_000u64, "{name}");
        let (st, v) = s
            .patch(
                "/v1/topics/t/subscriptions/keep",
                json!({"dead_letter_retention_ms": 3_600_000}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(v["dead_letter_retention_ms"], 3_600_000, "{name}");
        let (_, v) = s.get("/v1/topics/t/subscriptions/keep").await;
        assert_eq!(v["dead_letter_retention_ms"], 3_600_000, "{name}");
        let (_, q) = s.get("/v1/queues/t.keep").await;
        assert_eq!(
            q["policy"]["dead_letter_retention_ms"], 3_600_000,
            "{name}: mirrored onto its queue: {q}"
        );
        let r = s
            .patch(
                "/v1/topics/t/subscriptions/keep",
                json!({"dead_letter_retention_ms": 315_360_000_001u64}),
            )
            .await;
        assert_problem(&r, 400, "invalid_policy");
        assert_eq!(r.1["field"], "dead_letter_retention_ms", "{name}");
        let (_, v) = s.get("/v1/topics/t/subscriptions/keep").await;
        assert_eq!(
            v["dead_letter_retention_ms"], 3_600_000,
            "{name}: unchanged"
        );
        let r = s
            .post(
                "/v1/topics/t/subscriptions",
                json!({"name": "toolong", "type": "pull",
                       "dead_letter_retention_ms": 315_360_000_001u64}),
            )
            .await;
        assert_problem(&r, 400, "invalid_policy");
        assert_eq!(r.1["field"], "dead_letter_retention_ms", "{name}");
        assert_problem(
            &s.get("/v1/topics/t/subscriptions/toolong").await,
            404,
            "subscription_not_found",
        );
        s.stop().await;
    }
}

/// Bounded replay's dry run (seed 001): an unbounded plan is refused naming what it
/// leaves out (matrix row 9); the seed's worked example — 240 items at 1 item/s, 64 KiB/s,
/// 2 concurrent, window 10 — takes at least 240 s; each item names the gate that blocks
/// it; a destination that is still the failing path is refused; nothing is touched.
#[tokio::test]
async fn a_replay_plan_preview_refuses_unbounded_plans_and_names_each_items_gate() {
    for backend in Backend::all("the plan preview test") {
        let name = backend.name();
        let s = crate::replay::server(backend).await;
        s.queue("orders", json!({})).await;
        s.queue("repair", json!({})).await;
        let entry = redrive_core::register::RegisterEntry::new(
            "orders:*".parse().unwrap(),
            redrive_core::register::Idempotency::Idempotent,
            None,
        )
        .unwrap();
        s.broker
            .set_register_entry(&redrive_broker::Actor::system("test"), entry)
            .await
            .unwrap();
        let body = "x".repeat(40 * 1024);
        for i in 0..240 {
            let (st, v) = s
                .post(
                    "/v1/queues/orders/messages",
                    json!({"message_id": format!("o-{i}"), "body": body, "intent": format!("i-{i}")}),
                )
                .await;
            assert_eq!(st, 201, "{name}: {v}");
        }
        for _ in 0..24 {
            let got = s.receive("orders", 10).await;
            for m in got {
                s.settle(
                    "orders",
                    m["lock_token"].as_str().unwrap(),
                    "dead_letter",
                    json!({"reason": "ParseError"}),
                )
                .await;
            }
        }
        // Every dead letter now: the failing path of `orders` clears five minutes on.
        let failing_until = s.clock().now().plus_millis(300_000).to_rfc3339();
        s.broker.cases_once().await.unwrap();
        s.broker.cases_once().await.unwrap();
        s.broker.cases_once().await.unwrap();
        let (st, v) = s.post("/v1/intents/i-0/cancel", json!({})).await;
        assert_eq!(st, 200, "{name}: {v}");
        let dependency = json!({"name": "ledger", "probe_url": "http://ledger.internal/health", "max_error_rate": 0.05, "max_latency_ms": 250});
        let spec = |budget: Value, destination: Value| {
            json!({
                "selection": {"queue": "orders", "reasons": ["ParseError"]},
                "destination": destination,
                "budget": budget,
            })
        };
        // Row 9: an unbounded bulk redrive is refused.
        let r = s
            .post(
                "/v1/replay/plans/preview",
                spec(json!({"items_per_s": 1.0}), Value::Null),
            )
            .await;
        assert_problem(&r, 400, "replay_unbounded");
        assert_eq!(
            r.1["missing"],
            json!(["bytes_per_s", "max_concurrent", "dependency"]),
            "{name}"
        );
        let seed = json!({"items_per_s": 1.0, "bytes_per_s": 64 * 1024, "max_concurrent": 2, "window": 10, "dependency": dependency});
        // Every item still needs a tested correction.
        let (st, v) = s
            .post(
                "/v1/replay/plans/preview",
                spec(seed.clone(), json!("repair")),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(
            v["items"], 239,
            "{name}: the cancelled intent's case is closed"
        );
        assert_eq!(v["bytes"], 239 * 40 * 1024, "{name}");
        assert_eq!(v["lower_bound_ms"], 239_000, "{name}: one item a second");
        assert_eq!(v["by_reason"]["ParseError"], 239);
        assert_eq!(
            v["blocked"]["no_tested_correction"], 239,
            "{name}: {}",
            v["blocked"]
        );
        assert_eq!(v["eligible"], 0);
        assert_eq!(v["item_list"].as_array().unwrap().len(), 239);
        assert_eq!(v["item_list"][0]["gate"], "no_tested_correction");
        // Each blocking gate with what it means; waiting on a person, it has no time.
        assert_eq!(
            v["gates"],
            json!([{"gate": "no_tested_correction", "items": 239,
                    "detail": "it needs a diagnosis and a correction tested on its exact payload"}]),
            "{name}"
        );
        assert!(v["item_list"][0].get("clears_at").is_none(), "{name}: {v}");
        // One item taken through its gates: the origin, which dead-lettered with its reason
        // moments ago, is still the failing path; a queue that does not exist is no
        // destination; after five quiet minutes the origin is valid again.
        let one = v["item_list"][5]["case_id"].as_str().unwrap().to_owned();
        for (action, body) in [
            ("claim", json!({"lease_ms": 3_600_000})),
            (
                "diagnosis",
                json!({"hypothesis": "h", "disconfirming_evidence": "d"}),
            ),
            (
                "corrections",
                json!({"kind": "code", "identity": "c", "addresses": "parse"}),
            ),
            (
                "tests",
                json!({"destination": "repair", "outcome": "pass", "evidence": "ok"}),
            ),
        ] {
            let (st, v) = s.post(&format!("/v1/cases/{one}/{action}"), body).await;
            assert_eq!(st, 200, "{name} {action}: {v}");
        }
        let only = |destination: Value| {
            json!({
                "selection": {"queue": "orders", "case_ids": [one]},
                "destination": destination,
                "budget": seed,
            })
        };
        // The failing path is time-bound: the item and its gate say when it clears.
        let (_, v) = s.post("/v1/replay/plans/preview", only(Value::Null)).await;
        assert_eq!(v["blocked"]["destination_invalid"], 1, "{name}: {v}");
        assert_eq!(v["item_list"][0]["clears_at"], failing_until, "{name}: {v}");
        assert_eq!(
            v["gates"],
            json!([{"gate": "destination_invalid", "items": 1, "clears_at": failing_until,
                    "detail": "the destination orders is the failing path: it dead-lettered the item's reason within the last 300 s"}]),
            "{name}"
        );
        // A destination that does not exist is not cleared by the clock.
        let (_, v) = s
            .post("/v1/replay/plans/preview", only(json!("nowhere")))
            .await;
        assert_eq!(v["blocked"]["destination_invalid"], 1, "{name}: {v}");
        assert_eq!(
            v["gates"],
            json!([{"gate": "destination_invalid", "items": 1,
                    "detail": "the destination queue nowhere does not exist"}]),
            "{name}"
        );
        assert!(v["item_list"][0].get("clears_at").is_none(), "{name}: {v}");
        // A millisecond before the time it is still the failing path; at it, clear.
        s.advance(300_000 - 1);
        let (_, v) = s.post("/v1/replay/plans/preview", only(Value::Null)).await;
        assert_eq!(v["item_list"][0]["clears_at"], failing_until, "{name}: {v}");
        s.advance(1);
        let (_, v) = s.post("/v1/replay/plans/preview", only(Value::Null)).await;
        assert_eq!(v["eligible"], 1, "{name}: {v}");
        assert!(v["item_list"][0].get("gate").is_none(), "{name}: {v}");
        assert_eq!(v["gates"], json!([]), "{name}");
        // A shorter window configured on the node is honoured: a fresh dead letter with
        // the reason holds the item for that long only.
        s.broker
            .set_plan_settings(redrive_broker::PlanSettings {
                failing_path_window_ms: 45_000,
            })
            .unwrap();
        dead_letter(
            &s,
            "orders",
            Letter::message(json!({"message_id": "fresh", "body": "b"})).reason("ParseError"),
        )
        .await;
        let fresh_until = s.clock().now().plus_millis(45_000).to_rfc3339();
        let (_, v) = s.post("/v1/replay/plans/preview", only(Value::Null)).await;
        assert_eq!(v["item_list"][0]["clears_at"], fresh_until, "{name}: {v}");
        assert!(
            v["gates"][0]["detail"]
                .as_str()
                .unwrap()
                .ends_with("within the last 45 s"),
            "{name}: {v}"
        );
        s.advance(45_000);
        let (_, v) = s.post("/v1/replay/plans/preview", only(Value::Null)).await;
        assert_eq!(v["eligible"], 1, "{name}: {v}");
        // Nothing was touched.
        let (_, page) = s.get("/v1/cases?queue=orders&state=replay_admitted").await;
        assert_eq!(page["cases"], json!([]), "{name}");
        s.stop().await;
    }
}

/// A server on `backend` without its replay and plan workers (the tests drive them).
async fn plan_server(backend: Backend, access: Option<AccessSettings>) -> TestServer {
    let b = TestServer::builder()
        .backend(backend)
        .settings(redrive_server::Settings {
            replay_worker: false,
            plan_worker: false,
            ..default_settings()
        });
    match access {
        Some(a) => b.auth(a).start().await,
        None => b.start().await,
    }
}

/// A bounded budget (the probe is never called: the plan worker is off).
fn plan_budget() -> Value {
    json!({
        "items_per_s": 2.0, "bytes_per_s": 65536, "max_concurrent": 2, "window": 5,
        "dependency": {"name": "ledger", "probe_url": "http://ledger.internal/health",
                       "max_error_rate": 0.05, "max_latency_ms": 250}
    })
}

/// Sends `n` messages to `queue` and dead-letters them with `reason`, as `token` (the
/// admin's when access is on); then lets the case worker look once.
async fn dead_letters_as(s: &TestServer, token: Option<&str>, queue: &str, n: usize) {
    for i in 0..n {
        let mut letter = Letter::message(
            json!({"message_id": format!("{queue}-{i}"), "body": format!("body {i}")}),
        )
        .reason("ParseError");
        if let Some(t) = token {
            letter = letter.token(t);
        }
        dead_letter(s, queue, letter).await;
    }
    s.broker.cases_once().await.unwrap();
}

/// A plan refused because its destination is the failing path says when that clears: the
/// destination's latest dead letter with the items' reason plus the node's failing-path
/// window, as `clears_at` and in the detail. A millisecond before that it is still refused;
/// at it the plan is created. A later dead letter moves the time; a shorter window
/// configured on the node is honoured; a window out of range is refused and changes
/// nothing.
#[tokio::test]
async fn a_failing_path_refusal_says_when_it_clears_and_follows_the_nodes_window() {
    for backend in Backend::all("the failing-path window test") {
        let name = backend.name();
        let s = plan_server(backend, None).await;
        s.queue("orders", json!({})).await;
        dead_letters_as(&s, None, "orders", 2).await;
        let first = s.clock().now();
        let body = json!({"selection": {"queue": "orders", "reasons": ["ParseError"]}, "budget": plan_budget()});
        let refused = |r: &(StatusCode, Value),
                       clears: redrive_core::Timestamp,
                       in_s: u64,
                       window_ms: u64| {
            assert_problem(r, 409, "plan_conflict");
            let p = &r.1;
            assert_eq!(p["reason"], "destination_invalid", "{name}: {p}");
            assert_eq!(p["destination"], "orders", "{name}: {p}");
            assert_eq!(p["dead_letter_reason"], "ParseError", "{name}: {p}");
            assert_eq!(p["window_ms"], window_ms, "{name}: {p}");
            assert_eq!(p["clears_at"], clears.to_rfc3339(), "{name}: {p}");
            let detail = p["detail"].as_str().unwrap();
            assert!(
                detail.ends_with(&format!(
                    "it clears at {} (in {in_s} s)",
                    clears.to_rfc3339()
                )),
                "{name}: {detail}"
            );
        };
        let r = s.post("/v1/replay/plans", body.clone()).await;
        refused(&r, first.plus_millis(300_000), 300, 300_000);
        // A dead letter with the reason a minute later moves the time on by a minute.
        s.advance(60_000);
        dead_letter(
            &s,
            "orders",
            Letter::message(json!({"message_id": "later", "body": "b"})).reason("ParseError"),
        )
        .await;
        let clears = first.plus_millis(60_000 + 300_000);
        s.advance(299_999);
        let r = s.post("/v1/replay/plans", body.clone()).await;
        refused(&r, clears, 1, 300_000);
        s.advance(1);
        let (st, plan) = s.post("/v1/replay/plans", body.clone()).await;
        assert_eq!(st, StatusCode::CREATED, "{name}: {plan}");
        assert_eq!(plan["progress"]["items"], 3, "{name}: {plan}");

        // The node's window, shorter: a fresh dead letter holds the destination that long.
        s.broker
            .set_plan_settings(redrive_broker::PlanSettings {
                failing_path_window_ms: 30_000,
            })
            .unwrap();
        dead_letter(
            &s,
            "orders",
            Letter::message(json!({"message_id": "fresh", "body": "b"})).reason("ParseError"),
        )
        .await;
        let clears = s.clock().now().plus_millis(30_000);
        let r = s.post("/v1/replay/plans", body.clone()).await;
        refused(&r, clears, 30, 30_000);
        assert!(
            r.1["detail"]
                .as_str()
                .unwrap()
                .contains("dead-lettered ParseError within the last 30 s"),
            "{name}: {}",
            r.1
        );
        s.advance(30_000);
        let (st, plan) = s.post("/v1/replay/plans", body.clone()).await;
        assert_eq!(st, StatusCode::CREATED, "{name}: {plan}");
        // Out of its range (1 s to 24 h), a window is refused and the node keeps its own.
        for bad in [0, 999, 86_400_001] {
            let e = s
                .broker
                .set_plan_settings(redrive_broker::PlanSettings {
                    failing_path_window_ms: bad,
                })
                .unwrap_err();
            assert!(
                matches!(&e, redrive_broker::BrokerError::InvalidRequest { field, .. } if field == "failing_path_window"),
                "{name}: {e:?}"
            );
        }
        assert_eq!(
            s.broker.plan_settings().failing_path_window_ms,
            30_000,
            "{name}"
        );
        s.stop().await;
    }
}

/// Bounded replay plans over HTTP: created (201, every field of the plan), refused when
/// unbounded (400 `replay_unbounded`) or when the destination does not exist or is the
/// failing path (409 `plan_conflict` `destination_invalid`); read, listed and their items
/// paged; started, paused, resumed and cancelled by their owner, each change its status
/// does not allow refused (409 `plan_conflict` `plan_state`); an unknown plan is a 404;
/// bad filters are 400s naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_plans_are_created_read_and_moved_through_their_states() {
    for backend in Backend::all("the replay plan API test") {
        let name = backend.name();
        let s = plan_server(backend, None).await;
        s.queue("orders", json!({})).await;
        s.queue("repair", json!({})).await;
        dead_letters_as(&s, None, "orders", 3).await;
        let body = |budget: Value, destination: Value| {
            json!({
                "selection": {"queue": "orders", "reasons": ["ParseError"]},
                "destination": destination,
                "budget": budget,
                "correction": "fix-1",
                "lease_ms": 600_000,
                "observe_ms": 5_000,
            })
        };
        // Row 9: an unbounded bulk redrive is refused, naming what it leaves out.
        let r = s
            .post(
                "/v1/replay/plans",
                body(json!({"items_per_s": 1.0}), json!("repair")),
            )
            .await;
        assert_problem(&r, 400, "replay_unbounded");
        assert_eq!(
            r.1["missing"],
            json!(["bytes_per_s", "max_concurrent", "dependency"]),
            "{name}"
        );
        // No such destination; the origin, which dead-lettered the items' reason moments
        // ago, is the failing path.
        for destination in [json!("nowhere"), Value::Null] {
            let r = s
                .post("/v1/replay/plans", body(plan_budget(), destination))
                .await;
            assert_problem(&r, 409, "plan_conflict");
            assert_eq!(r.1["reason"], "destination_invalid", "{name}: {}", r.1);
        }
        let r = s
            .post(
                "/v1/replay/plans",
                json!({"selection": {"queue": "orders"}, "budget": plan_budget(), "lease_ms": 0}),
            )
            .await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(r.1["field"], "lease_ms", "{name}");
        let r = s
            .post(
                "/v1/replay/plans",
                json!({"selection": {"queue": "orders"}, "budget": plan_budget(), "extra": 1}),
            )
            .await;
        assert_problem(&r, 400, "malformed_body");
        assert_eq!(
            s.get("/v1/replay/plans").await.1["plans"],
            json!([]),
            "{name}: refusals create nothing"
        );

        let (st, plan) = s
            .post("/v1/replay/plans", body(plan_budget(), json!("repair")))
            .await;
        assert_eq!(st, 201, "{name}: {plan}");
        let id = plan["id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("plan_"), "{name}: {id}");
        assert_eq!(plan["queue"], "orders");
        assert_eq!(plan["destination"], "repair");
        assert_eq!(plan["owner"], "anonymous");
        assert_eq!(plan["status"], "planned");
        assert_eq!(plan["stop_reason"], Value::Null);
        assert_eq!(plan["stop_detail"], Value::Null);
        for t in ["created_at", "updated_at", "owner_until"] {
            let v = plan[t].as_str().unwrap_or_default();
            assert!(
                redrive_core::Timestamp::parse_rfc3339(v).is_some(),
                "{name}: {t} {v:?}"
            );
        }
        assert_eq!(
            plan["selection"],
            json!({"reasons": ["ParseError"], "types": [], "from": null, "to": null, "case_ids": []})
        );
        assert_eq!(plan["correction"], "fix-1");
        assert_eq!(plan["budget"]["window"], 5);
        assert_eq!(plan["budget"]["bytes_per_s"], 65536);
        assert_eq!(plan["budget"]["dependency"]["name"], "ledger");
        assert_eq!(
            (plan["lease_ms"].as_u64(), plan["observe_ms"].as_u64()),
            (Some(600_000), Some(5_000))
        );
        assert_eq!(plan["sessions"], json!({}));
        assert_eq!(plan["baseline"], Value::Null);
        assert_eq!(plan["readings"], json!([]));
        let p = &plan["progress"];
        assert_eq!(
            (p["items"].as_u64(), p["waiting"].as_u64()),
            (Some(3), Some(3)),
            "{name}: {p}"
        );
        assert_eq!(p["admitted"], 0);
        assert_eq!(p["items_per_s"], 0.0);
        assert_eq!(p["bytes_per_s"], 0.0);
        assert_eq!(p["eta_ms"], 1_500, "{name}: 3 items at 2/s");

        // Read, listed, paged.
        let (st, shown) = s.get(&format!("/v1/replay/plans/{id}")).await;
        assert_eq!(st, 200, "{name}: {shown}");
        assert_eq!(shown, plan, "{name}");
        for (query, n) in [
            ("", 1),
            ("?status=planned", 1),
            ("?status=running,paused", 0),
            ("?queue=orders", 1),
            ("?queue=repair", 0),
            ("?limit=1", 1),
            (&format!("?after={id}") as &str, 0),
        ] {
            let (st, v) = s.get(&format!("/v1/replay/plans{query}")).await;
            assert_eq!(st, 200, "{name} {query}: {v}");
            assert_eq!(
                v["plans"].as_array().unwrap().len(),
                n,
                "{name} {query}: {v}"
            );
        }
        for (query, field) in [
            ("?status=nope", "status"),
            ("?limit=0", "limit"),
            ("?limit=1001", "limit"),
            ("?queue=bad%20name", ""),
        ] {
            let (st, v) = s.get(&format!("/v1/replay/plans{query}")).await;
            assert_eq!(st, 400, "{name} {query}: {v}");
            if !field.is_empty() {
                assert_eq!(v["field"], field, "{name} {query}: {v}");
            }
        }
        assert_problem(
            &s.get("/v1/replay/plans?colour=red").await,
            400,
            "invalid_request",
        );
        let (st, items) = s.get(&format!("/v1/replay/plans/{id}/items")).await;
        assert_eq!(st, 200, "{name}: {items}");
        let items = items["items"].as_array().unwrap().clone();
        assert_eq!(items.len(), 3, "{name}");
        for (i, item) in items.iter().enumerate() {
            assert_eq!(item["seq"], i, "{name}: {item}");
            assert_eq!(item["state"], "waiting");
            assert!(
                item["case_id"].as_str().unwrap().starts_with("case_"),
                "{item}"
            );
            assert_eq!(item["window"], Value::Null);
            assert_eq!(item["message_id"], Value::Null);
            assert!(item["bytes"].as_u64().unwrap() > 0);
            assert!(item["updated_at"].is_string());
        }
        let (_, v) = s
            .get(&format!("/v1/replay/plans/{id}/items?after=0&limit=1"))
            .await;
        assert_eq!(v["items"].as_array().unwrap().len(), 1, "{name}: {v}");
        assert_eq!(v["items"][0]["seq"], 1, "{name}: {v}");
        let (_, v) = s
            .get(&format!("/v1/replay/plans/{id}/items?state=held,admitted"))
            .await;
        assert_eq!(v["items"], json!([]), "{name}");
        let r = s
            .get(&format!("/v1/replay/plans/{id}/items?state=lost"))
            .await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(r.1["field"], "state");
        let r = s
            .get(&format!("/v1/replay/plans/{id}/items?limit=10001"))
            .await;
        assert_problem(&r, 400, "invalid_request");

        // The owner's changes, and the ones the status refuses.
        let change = |action: &str| {
            let path = format!("/v1/replay/plans/{id}/{action}");
            let s = &s;
            async move { s.call(Method::POST, &path, None).await }
        };
        for action in ["pause", "resume"] {
            let r = change(action).await;
            assert_problem(&r, 409, "plan_conflict");
            assert_eq!(r.1["reason"], "plan_state", "{name} {action}: {}", r.1);
        }
        let (st, v) = change("start").await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(v["status"], "running");
        assert!(
            v["owner_until"].as_str() > plan["owner_until"].as_str(),
            "{name}: {v}"
        );
        let r = change("start").await;
        assert_problem(&r, 409, "plan_conflict");
        assert_eq!(r.1["reason"], "plan_state");
        let (st, v) = change("pause").await;
        assert_eq!(
            (st.as_u16(), v["status"].as_str()),
            (200, Some("paused")),
            "{name}: {v}"
        );
        let (_, v) = s.get("/v1/replay/plans?status=paused").await;
        assert_eq!(v["plans"][0]["id"], id.as_str(), "{name}: {v}");
        let (st, v) = change("resume").await;
        assert_eq!(
            (st.as_u16(), v["status"].as_str()),
            (200, Some("running")),
            "{name}: {v}"
        );
        let (st, v) = change("cancel").await;
        assert_eq!(
            (st.as_u16(), v["status"].as_str()),
            (200, Some("cancelled")),
            "{name}: {v}"
        );
        for action in ["cancel", "start", "pause", "resume"] {
            let r = change(action).await;
            assert_problem(&r, 409, "plan_conflict");
            assert_eq!(r.1["reason"], "plan_state", "{name} {action}: {}", r.1);
        }

        // No such plan.
        assert_problem(
            &s.get("/v1/replay/plans/plan_nope").await,
            404,
            "replay_plan_not_found",
        );
        assert_problem(
            &s.get("/v1/replay/plans/plan_nope/items").await,
            404,
            "replay_plan_not_found",
        );
        for action in ["start", "pause", "resume", "cancel"] {
            let r = s
                .call(
                    Method::POST,
                    &format!("/v1/replay/plans/plan_nope/{action}"),
                    None,
                )
                .await;
            assert_problem(&r, 404, "replay_plan_not_found");
        }
        s.stop().await;
    }
}

/// With access on: creating and moving a plan needs `replayer` on its queue, reading it
/// `operator`; a listing shows only plans over queues the caller may read cases of; only
/// the plan's owner (or an admin) moves it — another replayer is refused with 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_plans_need_their_roles_and_only_their_owner_moves_them() {
    for backend in Backend::all("the replay plan roles test") {
        let name = backend.name();
        let s = plan_server(backend, Some(auth_on())).await;
        for q in ["orders", "repair", "other"] {
            let (st, v) = s
                .admin(Method::POST, "/v1/queues", Some(json!({"name": q})))
                .await;
            assert_eq!(st, 201, "{name}: {v}");
        }
        dead_letters_as(&s, Some(redrive_testkit::ADMIN), "orders", 2).await;
        let (_, alice) = s.token("alice", &["replayer", "operator"]).await;
        let (_, bob) = s.token("bob", &["replayer", "operator"]).await;
        let (_, reader) = s.token("reader", &["operator:orders"]).await;
        let (_, outsider) = s
            .token("outsider", &["operator:other", "replayer:other"])
            .await;
        let create = json!({
            "selection": {"queue": "orders"},
            "destination": "repair",
            "budget": plan_budget(),
        });
        let r = s
            .call_as(
                Some(&reader),
                Method::POST,
                "/v1/replay/plans",
                Some(create.clone()),
            )
            .await;
        assert_problem(&r, 403, "forbidden");
        let r = s
            .call_as(
                Some(&outsider),
                Method::POST,
                "/v1/replay/plans",
                Some(create.clone()),
            )
            .await;
        assert_problem(&r, 403, "forbidden");
        let (st, plan) = s
            .call_as(Some(&alice), Method::POST, "/v1/replay/plans", Some(create))
            .await;
        assert_eq!(st, 201, "{name}: {plan}");
        assert_eq!(plan["owner"], "alice", "{name}");
        let id = plan["id"].as_str().unwrap().to_owned();
        let path = format!("/v1/replay/plans/{id}");

        // Reading: operator on the plan's queue.
        let (st, v) = s.call_as(Some(&reader), Method::GET, &path, None).await;
        assert_eq!(st, 200, "{name}: {v}");
        let (st, v) = s
            .call_as(Some(&reader), Method::GET, &format!("{path}/items"), None)
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_problem(
            &s.call_as(Some(&outsider), Method::GET, &path, None).await,
            403,
            "forbidden",
        );
        assert_problem(
            &s.call_as(Some(&outsider), Method::GET, &format!("{path}/items"), None)
                .await,
            403,
            "forbidden",
        );
        let (st, v) = s
            .call_as(Some(&outsider), Method::GET, "/v1/replay/plans", None)
            .await;
        assert_eq!((st.as_u16(), &v["plans"]), (200, &json!([])), "{name}: {v}");
        assert_problem(
            &s.call_as(
                Some(&outsider),
                Method::GET,
                "/v1/replay/plans?queue=orders",
                None,
            )
            .await,
            403,
            "forbidden",
        );
        let (_, v) = s
            .call_as(Some(&reader), Method::GET, "/v1/replay/plans", None)
            .await;
        assert_eq!(v["plans"][0]["id"], id.as_str(), "{name}: {v}");

        // Moving: replayer on the queue, and the owner or an admin.
        let start = format!("{path}/start");
        assert_problem(
            &s.call_as(Some(&reader), Method::POST, &start, None).await,
            403,
            "forbidden",
        );
        assert_problem(
            &s.call_as(Some(&outsider), Method::POST, &start, None).await,
            403,
            "forbidden",
        );
        let r = s.call_as(Some(&bob), Method::POST, &start, None).await;
        assert_problem(&r, 403, "forbidden");
        assert_eq!(
            s.call_as(Some(&alice), Method::GET, &path, None).await.1["status"],
            "planned",
            "{name}: refusals change nothing"
        );
        let (st, v) = s.call_as(Some(&alice), Method::POST, &start, None).await;
        assert_eq!(
            (st.as_u16(), v["status"].as_str()),
            (200, Some("running")),
            "{name}: {v}"
        );
        let (st, v) = s
            .call_as(Some(&bob), Method::POST, &format!("{path}/pause"), None)
            .await;
        assert_eq!(st, 403, "{name}: {v}");
        let (st, v) = s.admin(Method::POST, &format!("{path}/pause"), None).await;
        assert_eq!(
            (st.as_u16(), v["status"].as_str()),
            (200, Some("paused")),
            "{name}: {v}"
        );
        let (st, v) = s
            .call_as(Some(&alice), Method::POST, &format!("{path}/cancel"), None)
            .await;
        assert_eq!(
            (st.as_u16(), v["status"].as_str()),
            (200, Some("cancelled")),
            "{name}: {v}"
        );
        s.stop().await;
    }
}

/// A plan id is refused as before ids were typed: one of another shape or too long for a
/// plan (a plan's `plan_…`, a move task's `mv_…`) names no plan, as an unknown one; one
/// past the bound of every value, or with a NUL, is an invalid `id`; the checks of the
/// query come first.
#[tokio::test]
async fn a_malformed_plan_id_is_refused_as_before() {
    for backend in Backend::all("malformed plan ids") {
        let name = backend.name();
        let s = server(backend).await;
        let long = format!("plan_{}", "a".repeat(100));
        for id in [
            "plan_nope",
            "mv_nope",
            "nope",
            "grp_1",
            "case_1",
            long.as_str(),
        ] {
            let r = s.get(&format!("/v1/replay/plans/{id}")).await;
            assert_problem(&r, 404, "replay_plan_not_found");
            assert_eq!(
                r.1["detail"],
                format!("replay plan \"{id}\" does not exist"),
                "{name}: {id}"
            );
            let r = s.get(&format!("/v1/replay/plans/{id}/items")).await;
            assert_problem(&r, 404, "replay_plan_not_found");
            let r = s
                .call(Method::POST, &format!("/v1/replay/plans/{id}/pause"), None)
                .await;
            assert_problem(&r, 404, "replay_plan_not_found");
        }
        for id in ["a".repeat(257), "plan_a%00b".to_owned()] {
            let r = s.get(&format!("/v1/replay/plans/{id}")).await;
            assert_problem(&r, 400, "invalid_request");
            assert_eq!(r.1["field"], "id", "{name}: {}", r.1);
        }
        let r = s.get("/v1/replay/plans/nope/items?state=lost").await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(r.1["field"], "state", "{name}: {}", r.1);
        s.stop().await;
    }
}
