//! The auto-replay policy of queues and subscriptions over HTTP, on every backend:
//! created with the entity, changed one field at a time at the next version, shown, and
//! refused field by field (a 400 problem naming the field) without changing anything.

use serde_json::json;

use redrive_testkit::{Backend, TestServer, assert_problem};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_carries_its_auto_replay_policy_on_every_backend() {
    for backend in Backend::all("the queue auto-replay test") {
        let name = backend.name();
        let s = TestServer::builder().backend(backend).start().await;
        s.queue("plain", json!({})).await;
        let (_, v) = s.get("/v1/queues/plain").await;
        assert_eq!(v["policy"]["auto_replay"]["enabled"], false, "{name}: {v}");
        assert_eq!(
            v["policy"]["auto_replay"]["max_replay_attempts"], 3,
            "{name}"
        );
        assert_eq!(
            v["policy"]["auto_replay"]["max_chunk_bytes"],
            1 << 20,
            "{name}"
        );
        assert_eq!(
            v["policy"]["auto_replay"]["max_chunk_events"], 5_000,
            "{name}"
        );
        assert_eq!(v["policy"]["auto_replay"]["judge_delay_ms"], 0, "{name}");
        assert_eq!(
            v["policy"]["auto_replay"]["destination"], "origin",
            "{name}"
        );

        let (st, v) = s
            .post(
                "/v1/queues",
                json!({"name": "orders", "policy": {
                    "auto_replay": {"enabled": true, "max_replay_attempts": 5}}}),
            )
            .await;
        assert_eq!(st, 201, "{name}: {v}");
        assert_eq!(v["policy"]["auto_replay"]["enabled"], true, "{name}");
        assert_eq!(
            v["policy"]["auto_replay"]["max_replay_attempts"], 5,
            "{name}"
        );
        assert_eq!(
            v["policy"]["auto_replay"]["max_chunk_events"], 5_000,
            "{name}"
        );

        let (st, v) = s
            .patch(
                "/v1/queues/orders",
                json!({"auto_replay": {"judge_delay_ms": 30_000}}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(v["policy_version"], 2, "{name}");
        let a = &v["policy"]["auto_replay"];
        assert_eq!(a["judge_delay_ms"], 30_000, "{name}");
        assert_eq!(a["enabled"], true, "{name}: the merge keeps the others");
        assert_eq!(a["max_replay_attempts"], 5, "{name}");

        for (patch, field) in [
            (
                json!({"max_replay_attempts": 0}),
                "auto_replay.max_replay_attempts",
            ),
            (
                json!({"max_replay_attempts": 101}),
                "auto_replay.max_replay_attempts",
            ),
            (
                json!({"max_chunk_events": 5_001}),
                "auto_replay.max_chunk_events",
            ),
            (
                json!({"max_chunk_bytes": 1_023}),
                "auto_replay.max_chunk_bytes",
            ),
            (
                json!({"judge_delay_ms": 604_800_001_u64}),
                "auto_replay.judge_delay_ms",
            ),
        ] {
            let r = s
                .patch("/v1/queues/orders", json!({"auto_replay": patch}))
                .await;
            assert_problem(&r, 400, "invalid_policy");
            assert_eq!(r.1["field"], field, "{name}: {}", r.1);
        }
        assert_problem(
            &s.patch(
                "/v1/queues/orders",
                json!({"auto_replay": {"destination": "elsewhere"}}),
            )
            .await,
            400,
            "invalid_policy",
        );
        let r = s
            .post(
                "/v1/queues",
                json!({"name": "bad", "policy": {"auto_replay": {"max_chunk_events": 0}}}),
            )
            .await;
        assert_problem(&r, 400, "invalid_policy");
        assert_eq!(r.1["field"], "auto_replay.max_chunk_events", "{name}");
        assert_problem(
            &s.post(
                "/v1/queues",
                json!({"name": "bad", "policy": {"auto_replay": {"bogus": 1}}}),
            )
            .await,
            400,
            "malformed_body",
        );

        assert_problem(&s.get("/v1/queues/bad").await, 404, "queue_not_found");
        let (_, v) = s.get("/v1/queues/orders").await;
        assert_eq!(v["policy_version"], 2, "{name}: refusals changed nothing");
        assert_eq!(
            v["policy"]["auto_replay"]["max_replay_attempts"], 5,
            "{name}"
        );
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_carries_its_auto_replay_policy_on_every_backend() {
    for backend in Backend::all("the subscription auto-replay test") {
        let name = backend.name();
        let s = TestServer::builder().backend(backend).start().await;
        s.topic("orders", json!({})).await;
        let path = "/v1/topics/orders/subscriptions";
        let (st, v) = s.post(path, json!({"name": "plain", "type": "pull"})).await;
        assert_eq!(st, 201, "{name}: {v}");
        assert_eq!(v["auto_replay"]["enabled"], false, "{name}: off by default");
        assert_eq!(v["auto_replay"]["max_replay_attempts"], 3, "{name}");

        let (st, v) = s
            .post(
                path,
                json!({"name": "audit", "type": "pull",
                       "auto_replay": {"enabled": true, "max_chunk_events": 100}}),
            )
            .await;
        assert_eq!(st, 201, "{name}: {v}");
        assert_eq!(v["version"], 1, "{name}");
        assert_eq!(v["auto_replay"]["enabled"], true, "{name}");
        assert_eq!(v["auto_replay"]["max_chunk_events"], 100, "{name}");

        let sub = "/v1/topics/orders/subscriptions/audit";
        let (st, v) = s
            .patch(sub, json!({"auto_replay": {"max_replay_attempts": 7}}))
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(v["version"], 2, "{name}");
        assert_eq!(v["auto_replay"]["max_replay_attempts"], 7, "{name}");
        assert_eq!(v["auto_replay"]["max_chunk_events"], 100, "{name}: kept");
        assert_eq!(v["auto_replay"]["enabled"], true, "{name}: kept");
        let (_, v) = s.get(sub).await;
        assert_eq!(v["auto_replay"]["max_replay_attempts"], 7, "{name}: stored");

        let r = s
            .patch(sub, json!({"auto_replay": {"max_chunk_bytes": 10}}))
            .await;
        assert_problem(&r, 400, "invalid_policy");
        assert_eq!(r.1["field"], "auto_replay.max_chunk_bytes", "{name}");
        assert_problem(
            &s.patch(sub, json!({"auto_replay": {"nope": true}})).await,
            400,
            "malformed_body",
        );
        let r = s
            .post(
                path,
                json!({"name": "bad", "type": "pull",
                       "auto_replay": {"max_replay_attempts": 0}}),
            )
            .await;
        assert_problem(&r, 400, "invalid_policy");
        assert_eq!(r.1["field"], "auto_replay.max_replay_attempts", "{name}");

        assert_problem(
            &s.get("/v1/topics/orders/subscriptions/bad").await,
            404,
            "subscription_not_found",
        );
        let (_, v) = s.get(sub).await;
        assert_eq!(v["version"], 2, "{name}: refusals changed nothing");
        assert_eq!(v["auto_replay"]["max_chunk_bytes"], 1 << 20, "{name}");
        s.stop().await;
    }
}
