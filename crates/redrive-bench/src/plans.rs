//! Bounded replay: `plan` measures a replay plan against its budget. N dead letters of a
//! type the register marks not idempotent are imported into a queue; each case is worked
//! to replay eligibility through the API (claim, diagnosis, correction, an isolated test
//! on its exact payload); this tool serves the effect authority (an intent's effect is
//! present once the tool's consumer applied it) and the dependency's probe, and consumes
//! the replays. Then one plan at `--rate` items/s runs them all; the tool reads the plan's
//! admitted count every 100 ms and reports the rate over every 10 s window and its
//! largest deviation from the budget. `--rate 0` asks for the highest rate a plan may name
//! (100,000 items/s): the engine's own rate with the budget out of the way.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use serde_json::{Value, json};

use crate::report::{Report, rate, round2};
use redrive_client::Client;

/// The bench messages' type.
const TYPE: &str = "bench.plan";

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// Items in the plan.
    #[arg(long, short = 'n', default_value_t = 100_000)]
    items: u64,
    /// The plan's items/s budget (0: the highest a plan may name).
    #[arg(long, default_value_t = 1_000)]
    rate: u32,
    /// Bytes of each payload.
    #[arg(long, default_value_t = 256)]
    size: usize,
    /// The plan's concurrency bound.
    #[arg(long, default_value_t = 1_000)]
    concurrency: u32,
    /// The plan's admission window.
    #[arg(long, default_value_t = 10_000)]
    window: u32,
    /// Writes every sample (seconds since the start, items admitted) to this file.
    #[arg(long, value_name = "FILE")]
    samples: Option<std::path::PathBuf>,
    /// Requests working cases at once during the set-up.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
}

#[derive(Default)]
struct Ledger {
    applied: Mutex<HashSet<String>>,
}

async fn serve(ledger: Arc<Ledger>) -> anyhow::Result<String> {
    let l = ledger.clone();
    let app = Router::new()
        .route(
            "/effects",
            post(move |Json(q): Json<Value>| {
                let l = l.clone();
                async move {
                    let intent = q["intent_id"].as_str().unwrap_or_default().to_owned();
                    let present = l
                        .applied
                        .lock()
                        .map(|s| s.contains(&intent))
                        .unwrap_or(false);
                    Json(json!({
                        "effect": if present { "present" } else { "absent" },
                        "evidence": format!("bench ledger: {intent}"),
                    }))
                }
            }),
        )
        .route(
            "/health",
            get(|| async { Json(json!({"error_rate": 0.0, "latency_ms": 1})) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://{addr}"))
}

/// One request of the native API (a set-up call or a poll, not what is measured): the
/// JSON answer, or the client's error.
pub(crate) async fn call(
    client: &Client,
    method: reqwest::Method,
    path: &[&str],
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let answer: Option<Value> = client
        .wire()
        .request(
            method,
            path,
            None,
            body.as_ref().map(|b| ("application/json", b)),
        )
        .await
        .context("request")?;
    Ok(answer.unwrap_or(Value::Null))
}

/// `plan`: one plan's admissions against its budget.
pub(crate) async fn run(
    client: &Client,
    queue: &str,
    a: PlanArgs,
    report: &mut Report,
) -> anyhow::Result<()> {
    let ledger = Arc::new(Ledger::default());
    let base = serve(ledger.clone()).await?;
    let put = reqwest::Method::PUT;
    let postm = reqwest::Method::POST;
    call(
        client,
        put.clone(),
        &["v1", "register", TYPE],
        Some(json!({"answer": "not_idempotent"})),
    )
    .await
    .context("register the bench type")?;
    call(
        client,
        put,
        &["v1", "effect-authorities", TYPE],
        Some(json!({"url": format!("{base}/effects"), "timeout_ms": 5000})),
    )
    .await
    .context("register the bench effect authority (the server must allow loopback: push_allowed_networks)")?;
    let sandbox = format!("{queue}-sandbox");
    for q in [queue, sandbox.as_str()] {
        call(
            client,
            postm.clone(),
            &["v1", "queues"],
            Some(json!({"name": q})),
        )
        .await
        .with_context(|| format!("create {q}"))?;
    }

    // The dead letters, imported 10,000 a request.
    let setup = Instant::now();
    let body = "x".repeat(a.size);
    let mut first = 0;
    while first < a.items {
        let n = (a.items - first).min(10_000);
        let mut lines = String::new();
        for i in first..first + n {
            let line = json!({
                "message_id": format!("p-{i}"), "body": body, "body_encoding": "utf8",
                "reason": "MaxDeliveryCountExceeded", "route": "broker_routed", "policy_version": 1, "delivery_count": 3, "delivery_count_quality": "exact",
                "type": TYPE, "intent": format!("pi-{i}"),
                "enqueued_time": "2026-12-01T10:00:00Z", "dead_lettered_at": "2026-12-01T11:00:00Z"
            });
            lines.push_str(&line.to_string());
            lines.push('\n');
        }
        call(
            client,
            postm.clone(),
            &["v1", "queues", queue, "dead-letters", "import"],
            Some(json!({"format": "json", "content": lines})),
        )
        .await
        .context("import dead letters")?;
        first += n;
    }

    // Every case worked to replay eligibility.
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = redrive_client::CaseQuery {
            queue: Some(queue.to_owned()),
            open: Some(true),
            limit: Some(1000),
            cursor: cursor.take(),
            ..redrive_client::CaseQuery::default()
        };
        let page = client
            .recovery()
            .list_cases(&query)
            .await
            .context("list the cases")?;
        ids.extend(page.cases.into_iter().map(|c| c.id));
        match page.next_cursor {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    if ids.len() as u64 != a.items {
        bail!("{} cases opened for {} dead letters", ids.len(), a.items);
    }
    let ids = Arc::new(ids);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..a.workers {
        let (ids, next, client, sandbox) =
            (ids.clone(), next.clone(), client.clone(), sandbox.clone());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(id) = ids.get(i) else {
                    return anyhow::Ok(());
                };
                for (action, body) in [
                    ("claim", json!({"lease_ms": 86_400_000})),
                    ("diagnosis", json!({"hypothesis": "the v2 parser", "disconfirming_evidence": "v1 parses it"})),
                    ("corrections", json!({"kind": "code", "identity": "c1", "addresses": "parse"})),
                    ("tests", json!({"destination": sandbox, "outcome": "pass", "evidence": "bench"})),
                ] {
                    call(
        &client,
                        reqwest::Method::POST,
                        &["v1", "cases", id, action],
                        Some(body),
                    )
                    .await
                    .with_context(|| format!("{action} {id}"))?;
                }
            }
        });
    }
    while let Some(r) = workers.join_next().await {
        r??;
    }
    let setup_s = setup.elapsed();

    // The consumer: applies each replay's effect, completes it.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let consumer = {
        let (client, queue, ledger, stop) = (
            client.clone(),
            queue.to_owned(),
            ledger.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let got = match client
                    .wire()
                    .receive(
                        &queue,
                        &redrive_api::message::ReceiveRequest {
                            max_messages: Some(100),
                            wait_ms: Some(200),
                            ..Default::default()
                        },
                    )
                    .await
                {
                    Ok(g) => g.messages,
                    Err(_) => continue,
                };
                if let Ok(mut set) = ledger.applied.lock() {
                    // The effect's key is the intent: the message's own, else its original
                    // message id (what a case takes as its intent).
                    for m in &got {
                        let intent = m.intent.clone().unwrap_or_else(|| {
                            redrive_core::id::split_replay_count(&m.message_id)
                                .0
                                .to_owned()
                        });
                        set.insert(intent);
                    }
                }
                let settlements = crate::native::completions(&redrive_api::message::MessageList {
                    messages: got,
                });
                if !settlements.is_empty() {
                    let _ = client.wire().settle_batch(&queue, settlements).await;
                }
            }
        })
    };

    // The plan.
    let items_per_s = if a.rate == 0 { 100_000 } else { a.rate };
    let plan = call(
        client,
        reqwest::Method::POST,
        &["v1", "replay", "plans"],
        Some(json!({
            "selection": {"queue": queue},
            "budget": {
                "items_per_s": f64::from(items_per_s), "bytes_per_s": 1u64 << 30,
                "max_concurrent": a.concurrency, "window": a.window,
                "dependency": {"name": "bench", "probe_url": format!("{base}/health"),
                               "max_error_rate": 0.5, "max_latency_ms": 10_000}
            },
            "lease_ms": 86_400_000,
        })),
    )
    .await
    .context("create the plan")?;
    let id = plan["id"].as_str().unwrap_or_default().to_owned();
    let start = Instant::now();
    call(
        client,
        reqwest::Method::POST,
        &["v1", "replay", "plans", &id, "start"],
        None,
    )
    .await?;
    let mut samples: Vec<(f64, u64)> = Vec::new();
    // The most replays in flight seen: at the concurrency bound, that bound (not the
    // items/s budget) is what paces the plan.
    let mut in_flight_max = 0;
    let status = loop {
        let p = call(
            client,
            reqwest::Method::GET,
            &["v1", "replay", "plans", &id],
            None,
        )
        .await?;
        let admitted = p["progress"]["admitted"].as_u64().unwrap_or(0);
        in_flight_max = in_flight_max.max(p["progress"]["in_flight"].as_u64().unwrap_or(0));
        samples.push((start.elapsed().as_secs_f64(), admitted));
        let st = p["status"].as_str().unwrap_or_default().to_owned();
        if st != "running" {
            break p;
        }
        if start.elapsed() > Duration::from_secs(3_600) {
            bail!("plan not finished after an hour: {p}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let elapsed = start.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = consumer.await;
    if status["status"] != "completed" {
        bail!(
            "the plan ended {}: {}",
            status["status"],
            status["stop_detail"]
        );
    }
    if let Some(path) = &a.samples {
        let text: String = samples
            .iter()
            .map(|(t, n)| format!("{t:.3} {n}\n"))
            .collect();
        std::fs::write(path, text).with_context(|| format!("write {}", path.display()))?;
    }
    // The rate over every 10 s window between the first and the last admission.
    let first_t = samples.iter().find(|s| s.1 > 0).map_or(0.0, |s| s.0);
    let last_t = samples
        .iter()
        .find(|s| s.1 >= a.items)
        .map_or(elapsed.as_secs_f64(), |s| s.0);
    let mut windows = Vec::new();
    for (i, (t, n)) in samples.iter().enumerate() {
        if *t < first_t || *t + 10.0 > last_t {
            continue;
        }
        if let Some((u, m)) = samples[i..].iter().find(|(u, _)| *u >= t + 10.0) {
            windows.push((m - n) as f64 / (u - t));
        }
    }
    let target = f64::from(items_per_s);
    report.add("items", a.items, "");
    report.add("budget_items_per_s", u64::from(items_per_s), "items/s");
    report.add("setup_s", round2(setup_s.as_secs_f64()), "s");
    report.add("plan_s", round2(elapsed.as_secs_f64()), "s");
    report.add("in_flight_max", in_flight_max, "");
    report.add("concurrency", u64::from(a.concurrency), "");
    report.add(
        "admitted_rate",
        rate(
            a.items,
            Duration::from_secs_f64((last_t - first_t).max(0.001)),
        ),
        "items/s",
    );
    if a.rate > 0 && !windows.is_empty() {
        let min = windows.iter().copied().fold(f64::INFINITY, f64::min);
        let max = windows.iter().copied().fold(0.0, f64::max);
        report.add("windows_10s", windows.len() as u64, "");
        report.add("window_rate_min", round2(min), "items/s");
        report.add("window_rate_max", round2(max), "items/s");
        let dev = windows
            .iter()
            .map(|w| ((w - target) / target).abs())
            .fold(0.0, f64::max);
        report.add("window_max_deviation_pct", round2(dev * 100.0), "%");
    }
    Ok(())
}
