//! `redrive-bench push` and `redrive-bench push-backoff`: push delivery end to end. The
//! bench runs its own HTTP receiver on 127.0.0.1 (it agrees to the validation handshake
//! and answers every POST, counting events: one per structured request, N per batch
//! array), creates a topic with push subscriptions to it, publishes through the native
//! API, and reports what it measured. A tool for people, never a timed test.
//!
//! - `push` (throughput): N events, one push subscription; events per second from the
//!   first publish to the last event received. With `--backlog` the subscription is
//!   created paused, everything is published, and the figure is the drain: from the
//!   resume to the last event received.
//! - `push --rate R` (latency): one event per publish request at a fixed rate; for each
//!   event, the time from the start of its publish request to its first delivery attempt
//!   arriving at the receiver (the publish time travels in the event's data).
//! - `push-backoff` (memory): S push subscriptions to a receiver that answers 500 to every
//!   POST, N events in total (N / S matching each subscription by its event-type filter),
//!   a retry schedule long enough that nothing is retried during the run; waits until
//!   every event has had its first attempt and waits in backoff, then reads the server's
//!   resident memory.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use clap::Args;
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;

use redrive_client::Client;
use reqwest::Method;

use crate::failure::input_error;
use crate::report::{Report, percentile, rate, read_status_kib, round2, secs};
use crate::units::parse_size;

/// `redrive-bench push`.
#[derive(Debug, Args)]
pub struct PushBenchArgs {
    /// Events to publish and have delivered (throughput; with --rate, --duration-s decides).
    #[arg(long, short = 'n', default_value_t = 100_000)]
    events: u64,
    /// Size of each event's data (e.g. 1KiB).
    #[arg(long, default_value = "1KiB", value_parser = parse_size)]
    size: u64,
    /// The subscription's `delivery.max_events_per_batch` (1: no batching).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=5_000))]
    batch: u32,
    /// The subscription's `delivery.preferred_batch_bytes` (used when batching; the
    /// broker's default is 64 KiB, which holds ≈ 59 events of 1 KiB).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    batch_bytes: u64,
    /// The subscription's `delivery.max_concurrency`.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    concurrency: u32,
    /// Events per publish request.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    publish_batch: u32,
    /// Publish requests in flight at most.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1_024))]
    publish_in_flight: u32,
    /// Publish everything to a paused subscription first, then resume it and time the
    /// drain of the backlog alone.
    #[arg(long, conflicts_with = "rate")]
    backlog: bool,
    /// Latency instead of throughput: publish one event per request at this many events
    /// per second and report publish → first delivery attempt percentiles.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    rate: Option<u64>,
    /// How long to publish at --rate.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    duration_s: u64,
    /// Give up waiting for deliveries after this many seconds.
    #[arg(long, default_value_t = 600)]
    wait_secs: u64,
}

/// `redrive-bench push-backoff`.
#[derive(Debug, Args)]
pub struct PushBackoffArgs {
    /// Events in total (an equal share matches each subscription).
    #[arg(long, short = 'n', default_value_t = 100_000)]
    events: u64,
    /// Push subscriptions.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    subscriptions: u32,
    /// Size of each event's data (e.g. 1KiB).
    #[arg(long, default_value = "1KiB", value_parser = parse_size)]
    size: u64,
    /// Each subscription's `delivery.max_concurrency`.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    concurrency: u32,
    /// Events per publish request.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    publish_batch: u32,
    /// Publish requests in flight at most.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1_024))]
    publish_in_flight: u32,
    /// Seconds to wait once everything is in backoff before reading the memory again.
    #[arg(long, default_value_t = 5)]
    settle_secs: u64,
    /// Give up waiting for first attempts after this many seconds.
    #[arg(long, default_value_t = 600)]
    wait_secs: u64,
}

/// What the receiver counted.
struct Received {
    events: AtomicU64,
    requests: AtomicU64,
    target: AtomicU64,
    done_at: OnceLock<Instant>,
    done: Notify,
    /// The status every POST gets.
    status: StatusCode,
    /// The clock publish stamps are taken on (`data.t_us`, microseconds since it).
    base: Instant,
    /// Latency mode: publish → first attempt, in microseconds.
    samples: Option<Mutex<Vec<u64>>>,
}

impl Received {
    fn new(status: StatusCode, latency: bool) -> Received {
        Received {
            events: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            target: AtomicU64::new(u64::MAX),
            done_at: OnceLock::new(),
            done: Notify::new(),
            status,
            base: Instant::now(),
            samples: latency.then(|| Mutex::new(Vec::new())),
        }
    }

    fn micros(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

/// The publish stamp of a structured event.
#[derive(serde::Deserialize)]
struct Stamped {
    data: Stamp,
}

#[derive(serde::Deserialize)]
struct Stamp {
    t_us: u64,
}

async fn on_post(rx: Arc<Received>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let now = rx.micros();
    let batch = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/cloudevents-batch+json"));
    let n = if batch {
        serde_json::from_slice::<Vec<serde::de::IgnoredAny>>(&body).map_or(0, |v| v.len() as u64)
    } else {
        1
    };
    if let Some(samples) = &rx.samples {
        let first = headers
            .get("redrive-delivery-attempt")
            .is_some_and(|v| v.as_bytes() == b"1");
        if first
            && !batch
            && let Ok(s) = serde_json::from_slice::<Stamped>(&body)
        {
            let mut samples = samples.lock().unwrap_or_else(|e| e.into_inner());
            samples.push(now.saturating_sub(s.data.t_us));
        }
    }
    rx.requests.fetch_add(1, Ordering::Relaxed);
    let total = rx.events.fetch_add(n, Ordering::AcqRel) + n;
    if total >= rx.target.load(Ordering::Acquire) && rx.done_at.set(Instant::now()).is_ok() {
        rx.done.notify_one();
    }
    rx.status
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

/// One set-up call of the native API through the client (not what is measured): the
/// JSON answer, `null` for an empty one.
async fn call(
    client: &Client,
    method: Method,
    path: &[&str],
    query: Option<(&str, &str)>,
    body: Option<(&'static str, &Value)>,
) -> anyhow::Result<Value> {
    let answer: Option<Value> = client.wire().request(method, path, query, body).await?;
    Ok(answer.unwrap_or(Value::Null))
}

fn http_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()?)
}

/// Creates the topic, runs `body`, and deletes the topic (unless `keep`).
async fn with_topic<F>(
    http: &Client,
    topic: &str,
    size: usize,
    keep: bool,
    body: F,
) -> anyhow::Result<()>
where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    let max_event_size = (size + 1_024).max(65_536);
    let spec = json!({"name": topic, "policy": {"max_event_size": max_event_size}});
    call(
        http,
        Method::POST,
        &["v1", "topics"],
        None,
        Some(("application/json", &spec)),
    )
    .await
    .context("creating the topic")?;
    let outcome = body.await;
    if !keep {
        let deleted = call(
            http,
            Method::DELETE,
            &["v1", "topics", topic],
            Some(("force", "true")),
            None,
        )
        .await;
        if let Err(e) = deleted {
            eprintln!("warning: could not delete bench topic {topic}: {e}");
        }
    }
    outcome
}

/// Runs the `push` scenario against `client`'s server into `report`; returns the
/// topic name.
pub async fn run(
    client: &Client,
    a: PushBenchArgs,
    topic: String,
    keep: bool,
    report: &mut Report,
) -> anyhow::Result<String> {
    if a.events == 0 {
        return Err(input_error("--events must be at least 1"));
    }
    let size = usize::try_from(a.size).context("--size is too large")?;
    let base = client.url().as_str().trim_end_matches('/').to_owned();
    let http = client.clone();
    let rx = Arc::new(Received::new(StatusCode::OK, a.rate.is_some()));
    let url = receiver(rx.clone()).await?;
    let scenario = async {
        match a.rate {
            Some(r) => latency(&http, &base, &topic, &url, &a, r, size, &rx, report).await,
            None => throughput(&http, &topic, &url, &a, size, &rx, report).await,
        }
    };
    with_topic(&http, &topic, size, keep, scenario).await?;
    Ok(topic)
}

async fn create_push(http: &Client, topic: &str, spec: Value) -> anyhow::Result<()> {
    call(
        http,
        Method::POST,
        &["v1", "topics", topic, "subscriptions"],
        None,
        Some(("application/json", &spec)),
    )
    .await
    .context("creating a push subscription")?;
    Ok(())
}

/// Publishes `events` in batches of `per_request`, `in_flight` requests at most;
/// `event(i)` makes event `i`.
async fn publish_all(
    http: &Client,
    topic: &str,
    events: u64,
    per_request: u32,
    in_flight: u32,
    event: impl Fn(u64) -> Value,
) -> anyhow::Result<()> {
    let permits = Arc::new(Semaphore::new(in_flight as usize));
    let mut tasks = JoinSet::new();
    let mut next = 0u64;
    while next < events {
        let n = (events - next).min(u64::from(per_request));
        let batch: Vec<Value> = (next..next + n).map(&event).collect();
        next += n;
        let permit = permits.clone().acquire_owned().await?;
        let (http, topic) = (http.clone(), topic.to_owned());
        tasks.spawn(async move {
            let _permit = permit;
            let batch = Value::Array(batch);
            let batch = ("application/cloudevents-batch+json", &batch);
            call(
                &http,
                Method::POST,
                &["v1", "topics", &topic, "events"],
                None,
                Some(batch),
            )
            .await
            .context("publishing")?;
            Ok::<(), anyhow::Error>(())
        });
        while let Some(r) = tasks.try_join_next() {
            r??;
        }
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(())
}

/// Waits until the receiver has counted its target; the instant it did.
async fn delivered(rx: &Received, wait_secs: u64) -> anyhow::Result<Instant> {
    let wait = Duration::from_secs(wait_secs);
    if tokio::time::timeout(wait, rx.done.notified())
        .await
        .is_err()
        && rx.done_at.get().is_none()
    {
        anyhow::bail!(
            "only {} of {} events were delivered within {wait_secs} s",
            rx.events.load(Ordering::Relaxed),
            rx.target.load(Ordering::Relaxed),
        );
    }
    Ok(rx.done_at.get().copied().unwrap_or_else(Instant::now))
}

#[allow(clippy::too_many_arguments)]
async fn throughput(
    http: &Client,
    topic: &str,
    url: &str,
    a: &PushBenchArgs,
    size: usize,
    rx: &Arc<Received>,
    report: &mut Report,
) -> anyhow::Result<()> {
    rx.target.store(a.events, Ordering::Release);
    create_push(
        http,
        topic,
        json!({
            "name": "push", "type": "push", "endpoint": url,
            "dead_letter": {"type": "own_store"},
            "paused": a.backlog,
            "delivery": {"max_events_per_batch": a.batch, "max_concurrency": a.concurrency,
                         "preferred_batch_bytes": a.batch_bytes},
        }),
    )
    .await?;

    let data = "x".repeat(size);
    let start = Instant::now();
    publish_all(
        http,
        topic,
        a.events,
        a.publish_batch,
        a.publish_in_flight,
        |i| {
            json!({"specversion": "1.0", "id": i.to_string(), "source": "/bench",
                   "type": "bench.push", "data": data})
        },
    )
    .await?;
    let published = start.elapsed();
    let from = if a.backlog {
        let resumed = Instant::now();
        let resume = json!({"paused": false});
        call(
            http,
            Method::PATCH,
            &["v1", "topics", topic, "subscriptions", "push"],
            None,
            Some(("application/json", &resume)),
        )
        .await
        .context("resuming the subscription")?;
        resumed
    } else {
        start
    };
    let done = delivered(rx, a.wait_secs).await?;
    let elapsed = done.duration_since(from);
    report.add("events", a.events, "");
    report.add("event_data_size", size as u64, "B");
    report.add("max_events_per_batch", a.batch, "");
    if a.batch > 1 {
        report.add("preferred_batch_bytes", a.batch_bytes, "B");
    }
    report.add("max_concurrency", a.concurrency, "");
    report.add("publish_s", round2(secs(published)), "s");
    report.add("publish_rate", rate(a.events, published), "events/s");
    if a.backlog {
        report.add("drain_s", round2(secs(elapsed)), "s");
        report.add("drain_rate", rate(a.events, elapsed), "events/s");
    } else {
        report.add("delivered_s", round2(secs(elapsed)), "s");
        report.add("delivered_rate", rate(a.events, elapsed), "events/s");
    }
    report.add("events_received", rx.events.load(Ordering::Relaxed), "");
    report.add("requests_received", rx.requests.load(Ordering::Relaxed), "");
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn latency(
    http: &Client,
    base: &str,
    topic: &str,
    url: &str,
    a: &PushBenchArgs,
    per_s: u64,
    size: usize,
    rx: &Arc<Received>,
    report: &mut Report,
) -> anyhow::Result<()> {
    create_push(
        http,
        topic,
        json!({
            "name": "push", "type": "push", "endpoint": url,
            "dead_letter": {"type": "own_store"},
            "delivery": {"max_concurrency": a.concurrency},
        }),
    )
    .await?;
    let data = "x".repeat(size);
    let endpoint = format!("{base}/v1/topics/{topic}/events");
    // Each publish's latency is measured on the wire: a raw request, nothing of the
    // client's (retries, its error handling) between the clock and the socket.
    let raw = http_client()?;
    let publish_us = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(AtomicBool::new(false));
    let window = Arc::new(Semaphore::new(256));
    let mut tasks = JoinSet::new();
    // Every millisecond, publish what is due by now at the fixed rate, each event in its
    // own request, without waiting for earlier ones (bounded).
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let total_ms = a.duration_s * 1_000;
    let start = Instant::now();
    let mut issued = 0u64;
    loop {
        tick.tick().await;
        let elapsed_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let due = per_s.saturating_mul(elapsed_ms.min(total_ms)) / 1_000;
        while issued < due {
            let id = issued;
            issued += 1;
            let permit = window.clone().acquire_owned().await?;
            let (http, endpoint, rx, data) =
                (raw.clone(), endpoint.clone(), rx.clone(), data.clone());
            let (publish_us, failed) = (publish_us.clone(), failed.clone());
            tasks.spawn(async move {
                let _permit = permit;
                let t_us = rx.micros();
                let body = json!({"specversion": "1.0", "id": id.to_string(), "source": "/bench",
                                  "type": "bench.push", "data": {"t_us": t_us, "pad": data}});
                let sent = http
                    .post(endpoint)
                    .header("content-type", "application/cloudevents+json")
                    .body(body.to_string())
                    .send()
                    .await;
                let took = rx.micros().saturating_sub(t_us);
                match sent {
                    Ok(r) if r.status().is_success() => publish_us
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(took),
                    _ => failed.store(true, Ordering::Relaxed),
                }
            });
        }
        while tasks.try_join_next().is_some() {}
        if elapsed_ms >= total_ms {
            break;
        }
    }
    while tasks.join_next().await.is_some() {}
    let published_in = start.elapsed();
    if failed.load(Ordering::Relaxed) {
        anyhow::bail!("some publish requests failed");
    }
    rx.target.store(issued, Ordering::Release);
    if rx.events.load(Ordering::Acquire) >= issued {
        let _ = rx.done_at.set(Instant::now());
    }
    delivered(rx, a.wait_secs).await?;
    let mut samples = rx
        .samples
        .as_ref()
        .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).clone())
        .unwrap_or_default();
    samples.sort_unstable();
    let mut publish_us = publish_us.lock().unwrap_or_else(|e| e.into_inner()).clone();
    publish_us.sort_unstable();
    let ms = |v: Option<u64>| v.map_or(Value::Null, |us| json!(round2(us as f64 / 1_000.0)));
    report.add("target_rate", per_s, "events/s");
    report.add("achieved_rate", rate(issued, published_in), "events/s");
    report.add("event_data_size", size as u64, "B");
    report.add("published", issued, "");
    report.add("first_attempts", samples.len() as u64, "");
    for (name, q) in [("p50", 0.50), ("p99", 0.99)] {
        report.add(
            &format!("publish_{name}"),
            ms(percentile(&publish_us, q)),
            "ms",
        );
    }
    for (name, q) in [("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("max", 1.0)] {
        report.add(
            &format!("delivery_latency_{name}"),
            ms(percentile(&samples, q)),
            "ms",
        );
    }
    Ok(())
}

/// Runs the `push-backoff` scenario; returns the topic name.
pub async fn run_backoff(
    client: &Client,
    a: PushBackoffArgs,
    topic: String,
    keep: bool,
    server_pid: Option<u32>,
    report: &mut Report,
) -> anyhow::Result<String> {
    if a.events == 0 {
        return Err(input_error("--events must be at least 1"));
    }
    let size = usize::try_from(a.size).context("--size is too large")?;
    let http = client.clone();
    let rx = Arc::new(Received::new(StatusCode::INTERNAL_SERVER_ERROR, false));
    let url = receiver(rx.clone()).await?;
    let scenario = backoff(&http, &topic, &url, &a, size, server_pid, &rx, report);
    with_topic(&http, &topic, size, keep, scenario).await?;
    Ok(topic)
}

#[allow(clippy::too_many_arguments)]
async fn backoff(
    http: &Client,
    topic: &str,
    url: &str,
    a: &PushBackoffArgs,
    size: usize,
    server_pid: Option<u32>,
    rx: &Arc<Received>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let subs = u64::from(a.subscriptions);
    for s in 0..subs {
        create_push(
            http,
            topic,
            json!({
                "name": format!("s{s}"), "type": "push", "endpoint": url,
                "dead_letter": {"type": "own_store"},
                "filter": {"included_event_types": [format!("bench.{s}")]},
                // The second attempt comes 9–10 min after the first: nothing is retried
                // while the run looks.
                "retry_policy": {"schedule_ms": [600_000], "event_time_to_live_minutes": 1_440},
                "delivery": {"max_concurrency": a.concurrency},
            }),
        )
        .await?;
    }
    let data = "x".repeat(size);
    let start = Instant::now();
    publish_all(
        http,
        topic,
        a.events,
        a.publish_batch,
        a.publish_in_flight,
        |i| {
            json!({"specversion": "1.0", "id": i.to_string(), "source": "/bench",
                   "type": format!("bench.{}", i % subs), "data": data})
        },
    )
    .await?;
    let published = start.elapsed();
    // Wait until every event waits in backoff.
    let deadline = start + Duration::from_secs(a.wait_secs);
    let in_backoff = loop {
        let list: redrive_api::topic::SubscriptionList = serde_json::from_value(
            call(
                http,
                Method::GET,
                &["v1", "topics", topic, "subscriptions"],
                None,
                None,
            )
            .await?,
        )?;
        let waiting: u64 = list.subscriptions.iter().map(|s| s.stats.in_backoff).sum();
        if waiting >= a.events {
            break waiting;
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "only {waiting} of {} events were in backoff after {} s",
                a.events,
                a.wait_secs
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let all_in_backoff = start.elapsed();
    let mib = |kib: Option<u64>| kib.map_or(Value::Null, |k| json!(round2(k as f64 / 1_024.0)));
    let rss_now = server_pid.and_then(|p| read_status_kib(p, "VmRSS"));
    tokio::time::sleep(Duration::from_secs(a.settle_secs)).await;
    let rss_later = server_pid.and_then(|p| read_status_kib(p, "VmRSS"));
    report.add("subscriptions", subs, "");
    report.add("events", a.events, "");
    report.add("events_per_subscription", a.events / subs, "");
    report.add("event_data_size", size as u64, "B");
    report.add("publish_s", round2(secs(published)), "s");
    report.add("publish_rate", rate(a.events, published), "events/s");
    report.add("first_attempts", rx.requests.load(Ordering::Relaxed), "");
    report.add("all_in_backoff_s", round2(secs(all_in_backoff)), "s");
    report.add("in_backoff", in_backoff, "");
    if server_pid.is_some() {
        report.add("server_rss_all_in_backoff", mib(rss_now), "MiB");
        report.add(
            &format!("server_rss_{}s_later", a.settle_secs),
            mib(rss_later),
            "MiB",
        );
    }
    Ok(())
}
