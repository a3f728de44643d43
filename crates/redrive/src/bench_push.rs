//! `redrive bench push`: push delivery end to end. The bench runs its own fast HTTP
//! receiver on 127.0.0.1 (it agrees to the validation handshake and answers 200 to every
//! POST, counting events: one per structured request, N per batch array), creates a topic
//! with one push subscription to it, publishes N events through the native API, and
//! reports events per second from the first publish to the last event received. A tool
//! for people, never a timed test.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use clap::Args;
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;

use crate::bench::{Report, rate, round2, secs};
use crate::failure::input_error;
use crate::units::parse_size;

/// `redrive bench push`.
#[derive(Debug, Args)]
pub struct PushBenchArgs {
    /// Events to publish and have delivered.
    #[arg(long, short = 'n', default_value_t = 100_000)]
    events: u64,
    /// Size of each event's data (e.g. 1KiB).
    #[arg(long, default_value = "1KiB", value_parser = parse_size)]
    size: u64,
    /// The subscription's `delivery.max_events_per_batch` (1: no batching).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=5_000))]
    batch: u32,
    /// The subscription's `delivery.max_concurrency` (the dispatcher uses at most 100).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    concurrency: u32,
    /// Events per publish request.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    publish_batch: u32,
    /// Publish requests in flight at most.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1_024))]
    publish_in_flight: u32,
    /// Give up waiting for deliveries after this many seconds.
    #[arg(long, default_value_t = 600)]
    wait_secs: u64,
}

/// What the receiver counted.
#[derive(Default)]
struct Received {
    events: AtomicU64,
    requests: AtomicU64,
    target: AtomicU64,
    done_at: OnceLock<Instant>,
    done: Notify,
}

async fn on_post(rx: Arc<Received>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let batch = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/cloudevents-batch+json"));
    let n = if batch {
        serde_json::from_slice::<Vec<serde::de::IgnoredAny>>(&body).map_or(0, |v| v.len() as u64)
    } else {
        1
    };
    rx.requests.fetch_add(1, Ordering::Relaxed);
    let total = rx.events.fetch_add(n, Ordering::AcqRel) + n;
    if total >= rx.target.load(Ordering::Acquire) && rx.done_at.set(Instant::now()).is_ok() {
        rx.done.notify_one();
    }
    StatusCode::OK
}

/// Starts the receiver; returns its URL.
async fn receiver(rx: Arc<Received>) -> anyhow::Result<String> {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::options(|headers: HeaderMap| async move {
            let origin = headers
                .get("webhook-request-origin")
                .cloned()
                .unwrap_or(HeaderValue::from_static("*"));
            let mut h = HeaderMap::new();
            h.insert("webhook-allowed-origin", origin);
            (StatusCode::OK, h)
        })
        .post(move |headers: HeaderMap, body: Bytes| on_post(rx.clone(), headers, body)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the bench receiver")?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(url)
}

async fn expect(resp: reqwest::Response, what: &str) -> anyhow::Result<()> {
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    let body = resp.text().await.unwrap_or_default();
    anyhow::bail!("{what}: HTTP {status}: {body}")
}

/// Runs the scenario against the server at `base` into `report`; returns the topic name.
pub async fn run(
    base: &str,
    a: PushBenchArgs,
    topic: String,
    keep: bool,
    report: &mut Report,
) -> anyhow::Result<String> {
    if a.events == 0 {
        return Err(input_error("--events must be at least 1"));
    }
    let size = usize::try_from(a.size).context("--size is too large")?;
    let base = base.trim_end_matches('/').to_owned();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()?;
    let rx = Arc::new(Received::default());
    rx.target.store(a.events, Ordering::Release);
    let url = receiver(rx.clone()).await?;

    let max_event_size = (size + 1_024).max(65_536);
    let resp = http
        .post(format!("{base}/v1/topics"))
        .json(&json!({"name": topic, "policy": {"max_event_size": max_event_size}}))
        .send()
        .await?;
    expect(resp, "creating the topic").await?;
    let outcome = run_on(&http, &base, &topic, &url, &a, size, &rx, report).await;
    if !keep {
        let deleted = http
            .delete(format!("{base}/v1/topics/{topic}?force=true"))
            .send()
            .await;
        if let Err(e) = match deleted {
            Ok(r) => expect(r, "deleting the topic").await,
            Err(e) => Err(e.into()),
        } {
            eprintln!("warning: could not delete bench topic {topic}: {e}");
        }
    }
    outcome.map(|()| topic)
}

#[allow(clippy::too_many_arguments)]
async fn run_on(
    http: &reqwest::Client,
    base: &str,
    topic: &str,
    url: &str,
    a: &PushBenchArgs,
    size: usize,
    rx: &Arc<Received>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let resp = http
        .post(format!("{base}/v1/topics/{topic}/subscriptions"))
        .json(&json!({
            "name": "push", "type": "push", "endpoint": url,
            "dead_letter": {"type": "own_store"},
            "delivery": {"max_events_per_batch": a.batch, "max_concurrency": a.concurrency},
        }))
        .send()
        .await?;
    expect(resp, "creating the push subscription").await?;

    let data = "x".repeat(size);
    let permits = Arc::new(Semaphore::new(a.publish_in_flight as usize));
    let mut tasks = JoinSet::new();
    let start = Instant::now();
    let mut next = 0u64;
    while next < a.events {
        let n = (a.events - next).min(u64::from(a.publish_batch));
        let events: Vec<Value> = (next..next + n)
            .map(|i| {
                json!({"specversion": "1.0", "id": i.to_string(), "source": "/bench",
                       "type": "bench.push", "data": data})
            })
            .collect();
        next += n;
        let body = serde_json::to_vec(&events)?;
        let permit = permits.clone().acquire_owned().await?;
        let (http, endpoint) = (http.clone(), format!("{base}/v1/topics/{topic}/events"));
        tasks.spawn(async move {
            let _permit = permit;
            let resp = http
                .post(endpoint)
                .header("content-type", "application/cloudevents-batch+json")
                .body(body)
                .send()
                .await?;
            expect(resp, "publishing").await
        });
        while let Some(r) = tasks.try_join_next() {
            r??;
        }
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let published = start.elapsed();

    let wait = Duration::from_secs(a.wait_secs);
    if tokio::time::timeout(wait, rx.done.notified())
        .await
        .is_err()
        && rx.done_at.get().is_none()
    {
        anyhow::bail!(
            "only {} of {} events were delivered within {} s",
            rx.events.load(Ordering::Relaxed),
            a.events,
            a.wait_secs
        );
    }
    let done = rx.done_at.get().copied().unwrap_or_else(Instant::now);
    let elapsed = done.duration_since(start);
    let events = rx.events.load(Ordering::Relaxed);
    report.add("events", a.events, "");
    report.add("event_data_size", size as u64, "B");
    report.add("max_events_per_batch", a.batch, "");
    report.add("max_concurrency", a.concurrency, "");
    report.add("publish_s", round2(secs(published)), "s");
    report.add("publish_rate", rate(a.events, published), "events/s");
    report.add("delivered_s", round2(secs(elapsed)), "s");
    report.add("delivered_rate", rate(a.events, elapsed), "events/s");
    report.add("events_received", events, "");
    report.add("requests_received", rx.requests.load(Ordering::Relaxed), "");
    Ok(())
}
