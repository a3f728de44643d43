//! Hardening of replay plans: every budget field of a plan has a documented range, judged
//! in one place (`redrive_core::plan`) before anything is stored. A nonsensical budget —
//! 1e-300 items a second, 2⁶⁴−1 bytes a second or milliseconds of latency, a 10 kB
//! dependency name, a number JSON cannot hold — is refused with a 400 problem naming the
//! field and its range, by the preview and by creation, and no plan is stored; the edges
//! of every range are taken. On every backend.

use redrive_testkit::{Backend, TestServer, assert_problem};
use serde_json::{Value, json};

/// A budget inside every range, with `change` applied (a JSON merge of one level, and of
/// the dependency).
fn budget(change: Value) -> Value {
    let mut b = json!({
        "items_per_s": 1.0, "bytes_per_s": 64 * 1024, "max_concurrent": 2, "window": 10,
        "dependency": {"name": "ledger-db", "probe_url": "http://ledger.internal/health",
                       "max_error_rate": 0.05, "max_latency_ms": 250},
    });
    for (k, v) in change.as_object().unwrap() {
        if k == "dependency" && v.is_object() {
            for (dk, dv) in v.as_object().unwrap() {
                b["dependency"][dk] = dv.clone();
            }
        } else {
            b[k] = v.clone();
        }
    }
    b
}

fn plan(budget: Value, extra: Value) -> Value {
    let mut p = json!({"selection": {"queue": "orders"}, "budget": budget});
    for (k, v) in extra.as_object().unwrap() {
        p[k] = v.clone();
    }
    p
}

async fn plans(s: &TestServer) -> Vec<Value> {
    let (st, v) = s.get("/v1/replay/plans").await;
    assert_eq!(st, 200, "{v}");
    v["plans"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonsensical_plan_budgets_are_refused_naming_the_field_and_its_range_on_every_backend() {
    for backend in Backend::all("the plan budget ranges test") {
        let name = backend.name();
        let s = TestServer::builder().backend(backend).start().await;
        s.queue("orders", json!({})).await;
        let huge_name = "d".repeat(10_000);
        let long_url = format!("http://h/{}", "p".repeat(2_048 - 9));
        // (the change, the field refused, a word of the range the detail names)
        let refused: Vec<(Value, Value, &str, &str)> = vec![
            // The item's examples.
            (
                json!({"items_per_s": 1e-300}),
                json!({}),
                "items_per_s",
                "0.001",
            ),
            (
                json!({"bytes_per_s": u64::MAX}),
                json!({}),
                "bytes_per_s",
                "10737418240",
            ),
            (
                json!({"dependency": {"max_latency_ms": u64::MAX}}),
                json!({}),
                "dependency.max_latency_ms",
                "3600000",
            ),
            (
                json!({"dependency": {"name": huge_name}}),
                json!({}),
                "dependency.name",
                "128",
            ),
            // One past each edge.
            (
                json!({"items_per_s": 0.000_999}),
                json!({}),
                "items_per_s",
                "0.001",
            ),
            (
                json!({"items_per_s": 100_000.5}),
                json!({}),
                "items_per_s",
                "100000",
            ),
            (
                json!({"items_per_s": 0.0}),
                json!({}),
                "items_per_s",
                "0.001",
            ),
            (
                json!({"bytes_per_s": 1_023}),
                json!({}),
                "bytes_per_s",
                "1024",
            ),
            (
                json!({"bytes_per_s": (10u64 << 30) + 1}),
                json!({}),
                "bytes_per_s",
                "10737418240",
            ),
            (
                json!({"max_concurrent": 0}),
                json!({}),
                "max_concurrent",
                "1000",
            ),
            (
                json!({"max_concurrent": 1_001}),
                json!({}),
                "max_concurrent",
                "1000",
            ),
            (json!({"window": 0}), json!({}), "window", "100000"),
            (json!({"window": 100_001}), json!({}), "window", "100000"),
            (
                json!({"dependency": {"name": "a".repeat(129)}}),
                json!({}),
                "dependency.name",
                "128",
            ),
            (
                json!({"dependency": {"name": "ledger db"}}),
                json!({}),
                "dependency.name",
                "letters",
            ),
            (
                json!({"dependency": {"name": ""}}),
                json!({}),
                "dependency.name",
                "128",
            ),
            (
                json!({"dependency": {"probe_url": format!("{long_url}p")}}),
                json!({}),
                "dependency.probe_url",
                "2048",
            ),
            (
                json!({"dependency": {"probe_url": "ftp://ledger/health"}}),
                json!({}),
                "dependency.probe_url",
                "http",
            ),
            (
                json!({"dependency": {"max_error_rate": 1.000_1}}),
                json!({}),
                "dependency.max_error_rate",
                "0 to 1",
            ),
            (
                json!({"dependency": {"max_error_rate": -0.1}}),
                json!({}),
                "dependency.max_error_rate",
                "0 to 1",
            ),
            (
                json!({"dependency": {"max_latency_ms": 0}}),
                json!({}),
                "dependency.max_latency_ms",
                "3600000",
            ),
            (
                json!({"dependency": {"max_latency_ms": 3_600_001}}),
                json!({}),
                "dependency.max_latency_ms",
                "3600000",
            ),
            (json!({}), json!({"lease_ms": 59_999}), "lease_ms", "60000"),
            (
                json!({}),
                json!({"lease_ms": 604_800_001u64}),
                "lease_ms",
                "604800000",
            ),
            (json!({}), json!({"observe_ms": 99}), "observe_ms", "100"),
            (
                json!({}),
                json!({"observe_ms": 3_600_001}),
                "observe_ms",
                "3600000",
            ),
            (
                json!({}),
                json!({"correction": "c".repeat(257)}),
                "correction",
                "256",
            ),
        ];
        for (change, extra, field, range) in &refused {
            let body = plan(budget(change.clone()), extra.clone());
            let r = s.post("/v1/replay/plans", body.clone()).await;
            assert_problem(&r, 400, "invalid_request");
            assert_eq!(r.1["field"], *field, "{name}: {change} {extra}: {}", r.1);
            let detail = r.1["detail"].as_str().unwrap();
            assert!(detail.contains(range), "{name}: {field}: {detail}");
            assert!(
                detail.len() < 1_024,
                "{name}: the detail does not echo the input"
            );
            // The preview judges the budget the same way (it has no lease or correction).
            if extra.as_object().unwrap().is_empty() {
                let r = s.post("/v1/replay/plans/preview", body).await;
                assert_problem(&r, 400, "invalid_request");
                assert_eq!(r.1["field"], *field, "{name}: preview {change}");
            }
        }
        // Numbers JSON cannot carry as a finite f64, more than one dependency, and a
        // dependency list are refused as bodies.
        for raw in [
            r#"{"selection": {"queue": "orders"}, "budget": {"items_per_s": 1e400, "bytes_per_s": 65536, "max_concurrent": 2, "dependency": {"name": "d", "probe_url": "http://d/h", "max_error_rate": 0.1, "max_latency_ms": 250}}}"#,
            r#"{"selection": {"queue": "orders"}, "budget": {"items_per_s": 1, "bytes_per_s": 18446744073709551616, "max_concurrent": 2, "dependency": {"name": "d", "probe_url": "http://d/h", "max_error_rate": 0.1, "max_latency_ms": 250}}}"#,
            r#"{"selection": {"queue": "orders"}, "budget": {"items_per_s": 1, "bytes_per_s": 65536, "max_concurrent": 2, "dependency": [{"name": "d", "probe_url": "http://d/h", "max_error_rate": 0.1, "max_latency_ms": 250}]}}"#,
            r#"{"selection": {"queue": "orders"}, "budget": {"items_per_s": 1, "bytes_per_s": 65536, "max_concurrent": 2, "dependencies": []}}"#,
        ] {
            let resp = s
                .http
                .post(format!("{}/v1/replay/plans", s.url))
                .header("content-type", "application/json")
                .body(raw)
                .send()
                .await
                .unwrap();
            let st = resp.status();
            let v: Value = resp.json().await.unwrap();
            assert_problem(&(st, v), 400, "malformed_body");
        }
        assert_eq!(
            plans(&s).await,
            Vec::<Value>::new(),
            "{name}: nothing stored"
        );

        // Every edge is taken: the lowest of each range, then the highest.
        let lowest = budget(json!({
            "items_per_s": 0.001, "bytes_per_s": 1_024, "max_concurrent": 1, "window": 1,
            "dependency": {"name": "d", "probe_url": "http://d", "max_error_rate": 0.0,
                           "max_latency_ms": 1},
        }));
        let highest = budget(json!({
            "items_per_s": 100_000.0, "bytes_per_s": 10u64 << 30, "max_concurrent": 1_000,
            "window": 100_000,
            "dependency": {"name": "n".repeat(128), "probe_url": long_url,
                           "max_error_rate": 1.0, "max_latency_ms": 3_600_000},
        }));
        for (b, extra) in [
            (
                lowest,
                json!({"lease_ms": 60_000, "observe_ms": 100, "correction": "c"}),
            ),
            (
                highest,
                json!({"lease_ms": 604_800_000u64, "observe_ms": 3_600_000,
                       "correction": "c".repeat(256)}),
            ),
        ] {
            let (st, v) = s
                .post("/v1/replay/plans/preview", plan(b.clone(), json!({})))
                .await;
            assert_eq!(st, 200, "{name}: {v}");
            let (st, v) = s.post("/v1/replay/plans", plan(b.clone(), extra)).await;
            assert_eq!(st, 201, "{name}: {v}");
            assert_eq!(v["budget"]["items_per_s"], b["items_per_s"], "{name}");
            assert_eq!(v["budget"]["bytes_per_s"], b["bytes_per_s"], "{name}");
            assert_eq!(
                v["budget"]["dependency"]["max_latency_ms"], b["dependency"]["max_latency_ms"],
                "{name}"
            );
        }
        assert_eq!(plans(&s).await.len(), 2, "{name}");
        s.stop().await;
    }
}
