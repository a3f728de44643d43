//! Lock tokens and dead-letter ids as requests give them, on every backend: a string that
//! cannot be one (another prefix, more than 64 bytes after it, a NUL, nothing at all)
//! answers exactly as a well-formed one that nobody holds or no record has: lock lost,
//! session lock lost, dead letter not found, after every check the request gets first
//! (its body, its lock duration, its queue) and audited as that refusal is; and it changes
//! nothing.

use redrive_testkit::{Backend, TestServer, assert_problem, default_settings};
use serde_json::{Value, json};

/// A server on `backend` without the replay and case workers, so that the audit log
/// holds what the requests wrote.
async fn server(backend: Backend) -> TestServer {
    TestServer::builder()
        .backend(backend)
        .settings(redrive_server::Settings {
            replay_worker: false,
            case_worker: false,
            ..default_settings()
        })
        .start()
        .await
}

/// Strings no lock token can be: another prefix, the prefix alone with more than 64
/// bytes after it, a NUL, empty, and another kind's id.
fn bad_tokens() -> Vec<String> {
    vec![
        "nope".to_owned(),
        format!("lk_{}", "a".repeat(65)),
        "lk_0123\u{0}.1".to_owned(),
        String::new(),
        "dl_0190a1b2c3d400000001deadbeef".to_owned(),
    ]
}

/// Strings no dead-letter record id can be (as a path segment shows them: a NUL
/// percent-encoded).
fn bad_ids() -> Vec<String> {
    vec![
        "nope".to_owned(),
        "lk_0123".to_owned(),
        format!("dl_{}", "a".repeat(65)),
        "dl_a\u{0}b".to_owned(),
        "case_0190a1b2c3d4".to_owned(),
    ]
}

/// `s` as a path segment.
fn segment(s: &str) -> String {
    s.replace('\u{0}', "%00")
}

/// `s` as it stands inside a JSON string.
fn escaped(s: &str) -> String {
    let t = json!(s).to_string();
    t[1..t.len() - 1].to_owned()
}

/// An answer with the id `from` named as `to`: quoted in its detail (`{:?}`, as errors
/// quote it) and as a value (a batch's `lock_token`). What an answer about `from` is
/// about `to`.
fn renamed(r: &(reqwest::StatusCode, Value), from: &str, to: &str) -> (u16, Value) {
    if from == to {
        return (r.0.as_u16(), r.1.clone());
    }
    let text =
        r.1.to_string()
            .replace(&escaped(&format!("{from:?}")), "\u{1}")
            .replace(&escaped(from), "\u{2}")
            .replace('\u{1}', &escaped(&format!("{to:?}")))
            .replace('\u{2}', &escaped(to));
    (r.0.as_u16(), serde_json::from_str(&text).unwrap())
}

/// The audit entries of dead-letter operations written since `seen` entries, as
/// (action, entity, targets, outcome).
async fn audit_since(s: &TestServer, seen: usize) -> Vec<Value> {
    s.audit("limit=1000").await[seen..]
        .iter()
        .filter(|e| e["action"].as_str().unwrap().starts_with("dead_letter."))
        .map(|e| json!([e["action"], e["entity"], e["targets"], e["outcome"]]))
        .collect()
}

/// The answers to every request naming record `id` of `queue` by its path.
async fn record_answers(
    s: &TestServer,
    queue: &str,
    id: &str,
) -> Vec<(reqwest::StatusCode, Value)> {
    let base = format!("/v1/queues/{queue}/dead-letters/{}", segment(id));
    vec![
        s.get(&base).await,
        s.post(&format!("{base}/resubmit"), json!({})).await,
        s.post(&format!("{base}/move"), json!({"area": "archived"}))
            .await,
        s.post(&format!("{base}/move"), json!({"area": "live"}))
            .await,
        s.post(&format!("{base}/move"), json!({"area": "nowhere"}))
            .await,
        s.post(&format!("{base}/restore"), json!({})).await,
        s.post(&format!("{base}/restore"), json!({"dry_run": true}))
            .await,
    ]
}

/// A dead letter on `queue` with reason `R`; its id.
async fn dead_letter(s: &TestServer, queue: &str) -> String {
    s.send(queue, &["x"]).await;
    let got = s.receive(queue, 1).await;
    let (st, v) = s
        .settle(
            queue,
            got[0]["lock_token"].as_str().unwrap(),
            "dead_letter",
            json!({"reason": "R"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    v["dead_letter_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_malformed_dead_letter_id_answers_as_an_unknown_one() {
    for backend in Backend::all("malformed dead-letter ids") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("q", json!({})).await;
        let kept = dead_letter(&s, "q").await;
        let unknown = "dl_0190a1b2c3d400000001deadbeef";

        // The well-formed unknown id: what every malformed one must answer.
        let answers = record_answers(&s, "q", unknown).await;
        let statuses: Vec<u16> = answers.iter().map(|r| r.0.as_u16()).collect();
        assert_eq!(statuses, [404, 404, 404, 404, 400, 404, 404], "{name}");
        assert_problem(&answers[0], 404, "dead_letter_not_found");
        assert_eq!(
            answers[0].1["detail"],
            format!("dead letter {unknown:?} not found on queue \"q\""),
            "{name}"
        );
        assert_problem(&answers[4], 400, "invalid_request");
        let on_unknown_queue = record_answers(&s, "nope", unknown).await;
        let on_bad_queue = record_answers(&s, "no%20queue", unknown).await;

        for bad in bad_ids() {
            let seen = s.audit("limit=1000").await.len();
            let want: Vec<_> = answers.iter().map(|r| renamed(r, unknown, &bad)).collect();
            let got: Vec<_> = record_answers(&s, "q", &bad)
                .await
                .iter()
                .map(|r| renamed(r, &bad, &bad))
                .collect();
            assert_eq!(got, want, "{name}: {bad:?}");
            let audited = audit_since(&s, seen).await;
            // Read, resubmit and the two moves are audited as refused; the area check and
            // the restore's lookup refuse before any audit.
            let want_audit: Vec<Value> = [
                json!(["dead_letter.read", "q", [bad], "error:notfound"]),
                json!(["dead_letter.resubmit", "q", [bad], "error:notfound"]),
                json!([
                    "dead_letter.move",
                    "q",
                    [bad, "to=archived"],
                    "error:notfound"
                ]),
                json!(["dead_letter.move", "q", [bad, "to=live"], "error:notfound"]),
            ]
            .into();
            assert_eq!(audited, want_audit, "{name}: {bad:?}");

            // The queue's own refusals come first.
            for (queue, before) in [("nope", &on_unknown_queue), ("no%20queue", &on_bad_queue)] {
                let want: Vec<_> = before.iter().map(|r| renamed(r, unknown, &bad)).collect();
                let got: Vec<_> = record_answers(&s, queue, &bad)
                    .await
                    .iter()
                    .map(|r| renamed(r, &bad, &bad))
                    .collect();
                assert_eq!(got, want, "{name}: {queue} {bad:?}");
            }
        }
        assert_problem(&on_unknown_queue[0], 404, "queue_not_found");
        assert_problem(&on_bad_queue[0], 400, "invalid_name");

        // Nothing changed: the one record is live, as it was.
        let (st, page) = s.get("/v1/queues/q/dead-letters").await;
        assert_eq!(st, 200, "{page}");
        let ids: Vec<&str> = page["dead_letters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [kept.as_str()], "{name}");
        s.stop().await;
    }
}

/// The answers to settling with `token` on `queue`: each action alone, then a batch of
/// it with a renewal of `held` (when given).
async fn settle_answers(
    s: &TestServer,
    queue: &str,
    token: &str,
) -> Vec<(reqwest::StatusCode, Value)> {
    let path = format!("/v1/queues/{queue}/settle");
    let mut out = Vec::new();
    for body in [
        json!({"lock_token": token, "action": "complete"}),
        json!({"lock_token": token, "action": "abandon", "delay_ms": 10}),
        json!({"lock_token": token, "action": "defer"}),
        json!({"lock_token": token, "action": "dead_letter", "reason": "R"}),
        json!({"lock_token": token, "action": "renew"}),
        json!({"lock_token": token, "action": "renew", "lock_duration_ms": 5}),
        // A batch's own checks come first: a reason the broker keeps for itself.
        json!({"settlements": [
            {"lock_token": token, "action": "complete"},
            {"lock_token": token, "action": "dead_letter", "reason": "TTLExpired"},
        ]}),
        json!({"settlements": [
            {"lock_token": token, "action": "complete"},
            {"lock_token": token, "action": "renew"},
        ]}),
    ] {
        out.push(s.post(&path, body).await);
    }
    out
}

#[tokio::test]
async fn a_malformed_lock_token_settles_as_a_lost_lock() {
    for backend in Backend::all("malformed lock tokens") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("q", json!({})).await;
        s.send("q", &["x"]).await;
        let got = s.receive("q", 1).await;
        let held = got[0]["lock_token"].as_str().unwrap().to_owned();
        // A well-formed token of the same row that nobody holds.
        let (_, key) = held.rsplit_once('.').unwrap();
        let unknown = format!("lk_{}.{key}", "0".repeat(32));

        let answers = settle_answers(&s, "q", &unknown).await;
        let statuses: Vec<u16> = answers.iter().map(|r| r.0.as_u16()).collect();
        assert_eq!(statuses, [409, 409, 409, 409, 409, 400, 400, 200], "{name}");
        assert_problem(&answers[0], 409, "lock_lost");
        assert_eq!(answers[7].1["results"][1]["error"]["code"], "lock_lost");
        let on_unknown_queue = settle_answers(&s, "nope", &unknown).await;
        assert_problem(&on_unknown_queue[0], 404, "queue_not_found");

        for bad in bad_tokens() {
            let want: Vec<_> = answers.iter().map(|r| renamed(r, &unknown, &bad)).collect();
            let got: Vec<_> = settle_answers(&s, "q", &bad)
                .await
                .iter()
                .map(|r| renamed(r, &bad, &bad))
                .collect();
            assert_eq!(got, want, "{name}: {bad:?}");
            let want: Vec<_> = on_unknown_queue
                .iter()
                .map(|r| renamed(r, &unknown, &bad))
                .collect();
            let got: Vec<_> = settle_answers(&s, "nope", &bad)
                .await
                .iter()
                .map(|r| renamed(r, &bad, &bad))
                .collect();
            assert_eq!(got, want, "{name}: nope {bad:?}");
        }

        // A batch of a held token and malformed ones: each item answered on its own.
        let (st, v) = s
            .post(
                "/v1/queues/q/settle",
                json!({"settlements": [
                    {"lock_token": "nope", "action": "complete"},
                    {"lock_token": held, "action": "renew", "lock_duration_ms": 60_000},
                    {"lock_token": format!("lk_{}", "a".repeat(65)), "action": "defer"},
                ]}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        let codes: Vec<&Value> = v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["error"]["code"])
            .collect();
        assert_eq!(
            codes,
            [&json!("lock_lost"), &Value::Null, &json!("lock_lost")]
        );
        assert_eq!(v["results"][0]["lock_token"], "nope");
        assert_eq!(v["results"][1]["sequence_number"], 1);

        // Nothing else changed: the message is still locked under its token.
        let (st, v) = s.settle("q", &held, "complete", json!({})).await;
        assert_eq!(st, 200, "{name}: {v}");
        s.stop().await;
    }
}

/// The answers to the session requests naming `token` for session `a` of `queue`.
async fn session_answers(
    s: &TestServer,
    queue: &str,
    token: &str,
) -> Vec<(reqwest::StatusCode, Value)> {
    let base = format!("/v1/queues/{queue}/sessions/a");
    vec![
        s.post(&format!("{base}/renew"), json!({"lock_token": token}))
            .await,
        s.post(
            &format!("{base}/renew"),
            json!({"lock_token": token, "lock_duration_ms": 60_000}),
        )
        .await,
        s.post(
            &format!("{base}/renew"),
            json!({"lock_token": token, "lock_duration_ms": 5}),
        )
        .await,
        s.post(&format!("{base}/release"), json!({"lock_token": token}))
            .await,
        s.post(
            &format!("/v1/queues/{queue}/receive"),
            json!({"session_id": "a", "session_lock_token": token}),
        )
        .await,
        s.post(
            &format!("/v1/queues/{queue}/receive"),
            json!({"session_id": "a", "session_lock_token": token, "max_messages": 0}),
        )
        .await,
    ]
}

#[tokio::test]
async fn a_malformed_session_lock_token_answers_as_a_lost_session_lock() {
    for backend in Backend::all("malformed session lock tokens") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("sq", json!({"requires_session": true})).await;
        s.queue("plain", json!({})).await;
        let (st, v) = s
            .post(
                "/v1/queues/sq/messages",
                json!({"body": "x", "session_id": "a"}),
            )
            .await;
        assert_eq!(st, 201, "{v}");
        let (st, lock) = s.post("/v1/queues/sq/sessions/accept", json!({})).await;
        assert_eq!(st, 200, "{lock}");
        let held = lock["lock_token"].as_str().unwrap().to_owned();
        let unknown = format!("lk_{}", "0".repeat(32));

        let mut before = Vec::new();
        for queue in ["sq", "plain", "nope"] {
            before.push((queue, session_answers(&s, queue, &unknown).await));
        }
        let statuses = |a: &[(reqwest::StatusCode, Value)]| -> Vec<u16> {
            a.iter().map(|r| r.0.as_u16()).collect()
        };
        assert_eq!(
            statuses(&before[0].1),
            [409, 409, 400, 409, 409, 400],
            "{name}"
        );
        assert_problem(&before[0].1[0], 409, "session_lock_lost");
        assert_problem(&before[1].1[0], 400, "session_not_allowed");
        assert_problem(&before[2].1[0], 404, "queue_not_found");

        for bad in bad_tokens() {
            for (queue, answers) in &before {
                let want: Vec<_> = answers.iter().map(|r| renamed(r, &unknown, &bad)).collect();
                let got: Vec<_> = session_answers(&s, queue, &bad)
                    .await
                    .iter()
                    .map(|r| renamed(r, &bad, &bad))
                    .collect();
                assert_eq!(got, want, "{name}: {queue} {bad:?}");
            }
        }

        // The session is still held under its token, and its message still waits.
        let (st, v) = s
            .post(
                "/v1/queues/sq/receive",
                json!({"session_id": "a", "session_lock_token": held}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(v["messages"][0]["body"], "x", "{name}");
        s.stop().await;
    }
}

#[tokio::test]
async fn a_malformed_dead_letter_lock_token_settles_as_a_lost_lock() {
    for backend in Backend::all("malformed dead-letter lock tokens") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("q", json!({})).await;
        let id = dead_letter(&s, "q").await;
        let (st, got) = s.post("/v1/queues/q/dead-letters/receive", json!({})).await;
        assert_eq!(st, 200, "{got}");
        let held = got["dead_letters"][0]["lock_token"]
            .as_str()
            .unwrap()
            .to_owned();
        let unknown = format!("lk_{}", "0".repeat(32));
        let answers = |queue: &'static str, token: String| {
            let s = &s;
            async move {
                let path = format!("/v1/queues/{queue}/dead-letters/settle");
                let mut out = Vec::new();
                for action in ["complete", "abandon"] {
                    let seen = s.audit("limit=1000").await.len();
                    let r = s
                        .post(&path, json!({"lock_token": token, "action": action}))
                        .await;
                    out.push((r, audit_since(s, seen).await));
                }
                out
            }
        };
        let before_q = answers("q", unknown.clone()).await;
        assert_problem(&before_q[0].0, 409, "lock_lost");
        let shown: String = unknown.chars().take(12).collect();
        assert_eq!(
            before_q[0].1,
            [json!([
                "dead_letter.complete",
                "q",
                [format!("lock={shown}")],
                "error:locklost"
            ])],
            "{name}"
        );
        let before_nope = answers("nope", unknown.clone()).await;
        assert_problem(&before_nope[0].0, 404, "queue_not_found");

        for bad in bad_tokens() {
            let bad_shown: String = bad.chars().take(12).collect();
            for (queue, before) in [("q", &before_q), ("nope", &before_nope)] {
                let got = answers(queue, bad.clone()).await;
                for ((want_r, want_a), (got_r, got_a)) in before.iter().zip(&got) {
                    assert_eq!(
                        renamed(got_r, &bad, &bad),
                        renamed(want_r, &unknown, &bad),
                        "{name}: {queue} {bad:?}"
                    );
                    let want_a: Vec<Value> = want_a
                        .iter()
                        .map(|e| {
                            let mut e = e.clone();
                            e[2] = json!([format!("lock={bad_shown}")]);
                            e
                        })
                        .collect();
                    assert_eq!(got_a, &want_a, "{name}: {queue} {bad:?}");
                }
            }
        }

        // The record is still locked under its token.
        let (st, v) = s
            .post(
                "/v1/queues/q/dead-letters/settle",
                json!({"lock_token": held, "action": "complete"}),
            )
            .await;
        assert_eq!(st, 204, "{name}: {v}");
        assert_problem(
            &s.get(&format!("/v1/queues/q/dead-letters/{id}")).await,
            404,
            "dead_letter_not_found",
        );
        s.stop().await;
    }
}
