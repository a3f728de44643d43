//! SQS message move tasks as replay plans over the native API, on every backend, on the
//! manual clock: a task started through the broker (as `StartMessageMoveTask` starts it)
//! is an `sqs_move` plan — listed, read, its items empty; the owner's start, pause and
//! resume do not apply to it; cancel is `CancelMessageMoveTask`'s; a failed task is a
//! stopped plan with its failure reason.

use std::time::Duration;

use redrive_broker::{Actor, MoveSpec};
use redrive_testkit::recovery::{plan, until_moved, without_workers};
use redrive_testkit::{Backend, TestServer, assert_problem};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn server(backend: Backend) -> TestServer {
    TestServer::builder()
        .backend(backend)
        .settings(without_workers())
        .start()
        .await
}

/// Waits until the plan satisfies `ok`, looking again after each write of its runner.
async fn until_plan(s: &TestServer, id: &str, ok: impl Fn(&Value) -> bool) -> Value {
    until_moved(s, &format!("/v1/replay/plans/{id}"), ok).await
}

async fn send(s: &TestServer, queue: &str, n: usize) {
    for i in 0..n {
        let (st, v) = s
            .post(
                &format!("/v1/queues/{queue}/messages"),
                json!({"body": format!("m{i}")}),
            )
            .await;
        assert_eq!(st, 201, "{v}");
    }
}

#[tokio::test]
async fn a_move_task_is_an_sqs_move_plan_on_the_plans_api() {
    for backend in Backend::all("move tasks as plans") {
        let name = backend.name();
        let s = server(backend).await;
        for q in ["dlq", "dest", "lonely"] {
            s.queue(q, json!({})).await;
        }
        send(&s, "dlq", 3).await;
        let before = s.clock().sleepers();
        let task = s
            .broker
            .start_move_task(MoveSpec {
                source: "dlq".to_owned(),
                destination: Some("dest".to_owned()),
                max_per_second: Some(1),
                owner: Actor::anonymous(),
            })
            .await
            .unwrap();
        let id = task.handle.clone();
        until_plan(&s, &id, |p| p["sqs_move"]["moved"] == 1).await;
        s.until_parked(before).await;

        // Listed beside the cases plans, by kind.
        let (st, all) = s.get("/v1/replay/plans?kind=sqs_move").await;
        assert_eq!(st, 200, "{name}: {all}");
        let plans = all["plans"].as_array().unwrap();
        assert_eq!(plans.len(), 1, "{name}: {all}");
        let p = &plans[0];
        assert_eq!(p["id"], id.as_str(), "{name}");
        assert_eq!(p["kind"], "sqs_move", "{name}");
        assert_eq!(
            (&p["queue"], &p["destination"], &p["status"]),
            (&json!("dlq"), &json!("dest"), &json!("running")),
            "{name}: {p}"
        );
        assert_eq!(
            p["sqs_move"],
            json!({"max_per_second": 1, "items_per_s": 1.0, "to_source": false, "moved": 1,
                   "to_move": 3, "failure_reason": null}),
            "{name}"
        );
        assert_eq!(
            (&p["budget"], &p["owner_until"], &p["lease_ms"]),
            (&Value::Null, &Value::Null, &Value::Null),
            "{name}: {p}"
        );
        assert_eq!(
            (
                &p["progress"]["items"],
                &p["progress"]["completed"],
                &p["progress"]["waiting"],
                &p["progress"]["eta_ms"]
            ),
            (&json!(3), &json!(1), &json!(2), &json!(2_000)),
            "{name}: {p}"
        );
        assert_eq!(plan(&s, &id).await, *p, "{name}");
        let (st, cases) = s.get("/v1/replay/plans?kind=cases").await;
        assert_eq!(st, 200, "{name}: {cases}");
        assert_eq!(cases["plans"], json!([]), "{name}");
        assert_problem(
            &s.get("/v1/replay/plans?kind=moves").await,
            400,
            "invalid_request",
        );
        let (st, items) = s.get(&format!("/v1/replay/plans/{id}/items")).await;
        assert_eq!(
            (st, &items["items"]),
            (StatusCode::OK, &json!([])),
            "{name}"
        );

        // The mover runs it: start, pause and resume do not apply.
        for action in ["start", "pause", "resume"] {
            let r = s
                .post(&format!("/v1/replay/plans/{id}/{action}"), json!({}))
                .await;
            assert_problem(&r, 409, "plan_conflict");
            assert_eq!(r.1["reason"], "plan_state", "{name} {action}: {}", r.1);
        }
        assert_eq!(plan(&s, &id).await["status"], "running", "{name}");
        // Nor through the broker's plan operations: refused, nothing written.
        let direct = s.broker.pause_plan(&id, &Actor::anonymous()).await;
        assert!(
            matches!(&direct, Err(redrive_broker::BrokerError::PlanConflict { code, .. }) if code == "plan_state"),
            "{name}: {direct:?}"
        );
        assert_eq!(plan(&s, &id).await["status"], "running", "{name}");

        // Cancel is CancelMessageMoveTask's: cancelling, then cancelled when its runner
        // stops (at once here: it runs on this node; elsewhere at its next look). The
        // answer is the plan as it is now.
        let (st, c) = s
            .post(&format!("/v1/replay/plans/{id}/cancel"), json!({}))
            .await;
        assert_eq!(st, 200, "{name}: {c}");
        assert!(
            c["status"] == "cancelling" || c["status"] == "cancelled",
            "{name}: {c}"
        );
        let again = s
            .post(&format!("/v1/replay/plans/{id}/cancel"), json!({}))
            .await;
        assert_problem(&again, 409, "plan_conflict");
        assert_eq!(again.1["reason"], "plan_state", "{name}");
        s.clock().advance(Duration::from_secs(1));
        let ended = until_plan(&s, &id, |p| p["status"] == "cancelled").await;
        assert_eq!(ended["sqs_move"]["moved"], 1, "{name}: {ended}");
        assert_eq!(ended["progress"]["waiting"], 0, "{name}: {ended}");
        let listed = s.broker.list_move_tasks("dlq", 10).await.unwrap();
        assert_eq!(
            listed[0].status,
            redrive_broker::MoveStatus::Cancelled,
            "{name}"
        );
        let log = s
            .broker
            .list_audit(&redrive_broker::model::AuditQuery {
                limit: 100,
                ..redrive_broker::model::AuditQuery::default()
            })
            .await
            .unwrap();
        let acts: Vec<(&str, &str)> = log
            .iter()
            .filter(|e| e.fields.targets.contains(&id))
            .map(|e| (e.fields.action.as_str(), e.fields.outcome.as_str()))
            .collect();
        for expected in [
            ("move_task.start", "ok"),
            ("replay.plan_pause", "error:plan_state"),
            ("move_task.cancel", "ok"),
            ("move_task.cancel", "error:refused"),
        ] {
            assert!(acts.contains(&expected), "{name}: {expected:?} in {acts:?}");
        }

        // A task that fails is a stopped plan with its failure reason; without a
        // destination, each message goes back to its source.
        send(&s, "lonely", 1).await;
        let failed = s
            .broker
            .start_move_task(MoveSpec {
                source: "lonely".to_owned(),
                destination: None,
                max_per_second: None,
                owner: Actor::anonymous(),
            })
            .await
            .unwrap();
        let f = until_plan(&s, &failed.handle, |p| p["status"] == "stopped").await;
        assert!(
            f["stop_reason"]
                .as_str()
                .is_some_and(|r| r.contains("no original source queue")),
            "{name}: {f}"
        );
        assert_eq!(f["stop_reason"], f["sqs_move"]["failure_reason"], "{name}");
        assert_eq!(f["destination"], Value::Null, "{name}");
        assert_eq!(f["sqs_move"]["to_source"], true, "{name}");
        assert_eq!(f["sqs_move"]["max_per_second"], Value::Null, "{name}");
        assert_eq!(f["sqs_move"]["items_per_s"], 500.0, "{name}");
        let (_, both) = s.get("/v1/replay/plans?status=stopped,cancelled").await;
        assert_eq!(both["plans"].as_array().unwrap().len(), 2, "{name}: {both}");
        s.stop().await;
    }
}
