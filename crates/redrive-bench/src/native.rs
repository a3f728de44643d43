//! The scenarios against a running server's native API: w1 (throughput, optionally
//! round-robin over several nodes), latency, w2 (dead-lettering) and fill.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use redrive_api::message::{
    MessageList, ReceiveRequest, SendMessage, SendRequest, Settle, SettleKind,
};
use redrive_api::queue::QueuePolicy;
use serde_json::{Value, json};
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinSet;

use crate::compare::CompareArgs;
use crate::cpu::CpuWatch;
use crate::failure::input_error;
use crate::report::{Progress, Report, percentile, rate, round2, secs};
use crate::units::{parse_duration_ms, parse_size};
use redrive_client::{Client, RetryOptions};

#[derive(Debug, Clone, Args)]
pub(crate) struct PublishArgs {
    /// Body size (e.g. 256, 1KiB).
    #[arg(long, default_value = "256", value_parser = parse_size)]
    pub(crate) size: u64,
    /// Messages per send request.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) batch: u32,
    /// Send requests in flight at most.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=4_096))]
    pub(crate) in_flight: u32,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct W1Args {
    /// Messages to publish and consume.
    #[arg(long, short = 'n', default_value_t = 200_000)]
    pub(crate) messages: u64,
    #[command(flatten)]
    pub(crate) publish: PublishArgs,
    /// max_messages of each receive.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub(crate) receive_batch: u32,
    /// Receive requests in flight at once (the one consumer pipelines its receives).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) receive_in_flight: u32,
    /// Settle requests in flight at most (pipelined behind the receives).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) settle_in_flight: u32,
    /// Another node of the same cluster (repeatable): sends, receives and settles go
    /// round-robin over --url and these.
    #[arg(long, value_name = "URL")]
    pub(crate) also: Vec<String>,
    /// Also report the CPU time of every `postgres` process on this machine, per message
    /// and phase (next to the load tool's and, with --server-pid, the server's).
    #[arg(long)]
    pub(crate) postgres_cpu: bool,
    // `--compare SYSTEM` and `--rounds`: this scenario against another system.
    #[command(flatten)]
    pub(crate) compare: CompareArgs,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct LatencyArgs {
    /// Messages per second to publish.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) rate: u64,
    /// How long to publish (e.g. 20s).
    #[arg(long, default_value = "20s", value_parser = parse_duration_ms)]
    pub(crate) duration: u64,
    /// Body size (at least 24 bytes: the body carries the send time).
    #[arg(long, default_value = "256", value_parser = parse_size)]
    pub(crate) size: u64,
    /// Publish tick: each tick sends what is due since the last one in one request.
    #[arg(long, default_value = "5ms", value_parser = parse_duration_ms)]
    pub(crate) tick: u64,
    /// Long-polling consumers.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) consumers: u32,
    /// max_messages of each receive.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub(crate) receive_batch: u32,
    // `--compare SYSTEM` and `--rounds`: this scenario against another system.
    #[command(flatten)]
    pub(crate) compare: CompareArgs,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct W2Args {
    /// Messages to publish (each is delivered 3 times, then dead-lettered).
    #[arg(long, short = 'n', default_value_t = 50_000)]
    pub(crate) messages: u64,
    #[command(flatten)]
    pub(crate) publish: PublishArgs,
    /// Consumers that receive and abandon.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) consumers: u32,
    /// max_messages of each receive.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub(crate) receive_batch: u32,
    // `--compare SYSTEM` and `--rounds`: this scenario against another system.
    #[command(flatten)]
    pub(crate) compare: CompareArgs,
}

#[derive(Debug, Args)]
pub(crate) struct FillArgs {
    /// Messages to leave waiting.
    #[arg(long, short = 'n', default_value_t = 1_000_000)]
    messages: u64,
    #[command(flatten)]
    publish: PublishArgs,
}

/// The nodes a scenario spreads its requests over, round-robin.
#[derive(Clone)]
pub(crate) struct Nodes {
    pub(crate) clients: Arc<Vec<Client>>,
    next: Arc<AtomicU64>,
}

impl Nodes {
    pub(crate) fn one(client: Client) -> Nodes {
        Nodes {
            clients: Arc::new(vec![client]),
            next: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The next node in turn.
    fn pick(&self) -> &Client {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        let n = self.clients.len() as u64;
        // i % n < n = clients.len(), which fits a usize.
        &self.clients[usize::try_from(i % n).unwrap_or(0)]
    }

    fn first(&self) -> &Client {
        &self.clients[0]
    }
}

/// A client of the server at `url` as the load tool uses it: no retries (a failure is
/// part of what a run reports, not something to hide), a long timeout for big batches.
/// The scenarios send the native API's requests through its wire-level calls
/// ([`Client::wire`]): the same requests a raw HTTP client would send, so what is
/// measured is the server.
pub(crate) fn client(url: &str, token: Option<&str>) -> anyhow::Result<Client> {
    let mut builder = Client::builder(url)
        .timeout(Duration::from_secs(120))
        .retry(RetryOptions::none());
    if let Some(t) = token.filter(|t| !t.trim().is_empty()) {
        builder = builder.token(t);
    }
    Ok(builder.build()?)
}

/// `--url` plus every `--also` URL, each checked and given once.
pub(crate) fn nodes(main: &Client, token: Option<&str>, also: &[String]) -> anyhow::Result<Nodes> {
    let mut clients = vec![main.clone()];
    for url in also {
        let client =
            client(url, token).map_err(|e| input_error(format!("--also {url:?}: {e:#}")))?;
        if clients.iter().any(|c| c.url() == client.url()) {
            return Err(input_error(format!(
                "--also {url:?}: {} is already a node of this run",
                client.url()
            )));
        }
        clients.push(client);
    }
    Ok(Nodes {
        clients: Arc::new(clients),
        next: Arc::new(AtomicU64::new(0)),
    })
}

// ---- scenarios ------------------------------------------------------------------------

pub(crate) async fn w1(
    nodes: &Nodes,
    queue: &str,
    a: W1Args,
    server_pid: Option<u32>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let cpu = CpuWatch {
        server: server_pid,
        postgres: a.postgres_cpu,
    };
    create_queue(nodes.first(), queue, QueuePolicy::default()).await?;
    let body = "x".repeat(usize::try_from(a.publish.size)?);
    let before_publish = cpu.mark();
    let published = publish_to(nodes, queue, a.messages, &a.publish, &|_| body.clone()).await?;
    let after_publish = cpu.mark();
    if nodes.clients.len() > 1 {
        report.add("nodes", nodes.clients.len() as u64, "");
    }
    report.add("messages", a.messages, "");
    report.add("body_size", a.publish.size, "bytes");
    report.add("send_batch", a.publish.batch, "messages/request");
    report.add("publish_seconds", secs(published), "s");
    report.add("publish_rate", rate(a.messages, published), "msgs/s");
    report.add(
        "publish_throughput",
        round2(rate(a.messages * a.publish.size, published) as f64 / 1_048_576.0),
        "MiB/s",
    );
    cpu.report(report, "publish", before_publish, after_publish, a.messages);
    let before_consume = cpu.mark();
    let consumed = receive_and_complete(nodes, queue, a.messages, &a).await?;
    let after_consume = cpu.mark();
    report.add("receive_batch", a.receive_batch, "messages/request");
    report.add("consume_seconds", secs(consumed), "s");
    report.add(
        "receive_complete_rate",
        rate(a.messages, consumed),
        "msgs/s",
    );
    cpu.report(report, "consume", before_consume, after_consume, a.messages);
    Ok(())
}

pub(crate) async fn latency(
    client: &Client,
    queue: &str,
    a: LatencyArgs,
    report: &mut Report,
) -> anyhow::Result<()> {
    if a.size < 24 {
        return Err(input_error(
            "--size must be at least 24 bytes for the latency scenario",
        ));
    }
    if a.tick == 0 {
        return Err(input_error("--tick must be positive"));
    }
    create_queue(client, queue, QueuePolicy::default()).await?;
    let base = Instant::now();
    let size = usize::try_from(a.size)?;
    let acked = Arc::new(AtomicU64::new(0));
    let producer_done = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::<u64>::new()));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));

    let mut consumers = JoinSet::new();
    for _ in 0..a.consumers {
        let (client, queue) = (client.clone(), queue.to_owned());
        let (acked, done, samples, errors) = (
            acked.clone(),
            producer_done.clone(),
            samples.clone(),
            errors.clone(),
        );
        let max = a.receive_batch;
        consumers.spawn(async move {
            let mut settles = JoinSet::new();
            let mut drain_deadline: Option<Instant> = None;
            loop {
                let received = samples.lock().await.len() as u64;
                if done.load(Ordering::SeqCst) {
                    if received >= acked.load(Ordering::SeqCst) {
                        break;
                    }
                    let deadline = *drain_deadline
                        .get_or_insert_with(|| Instant::now() + Duration::from_secs(10));
                    if Instant::now() > deadline {
                        break;
                    }
                }
                let req = ReceiveRequest {
                    max_messages: Some(max),
                    wait_ms: Some(500),
                    ..ReceiveRequest::default()
                };
                let list = match client.wire().receive(&queue, &req).await {
                    Ok(l) => l,
                    Err(e) => {
                        errors.lock().await.push(format!("receive: {e}"));
                        break;
                    }
                };
                let now = base.elapsed().as_micros();
                {
                    let mut s = samples.lock().await;
                    for m in &list.messages {
                        if let Some(sent) = sent_micros(&m.body) {
                            s.push(u64::try_from(now.saturating_sub(sent)).unwrap_or(u64::MAX));
                        }
                    }
                }
                let settlements = completions(&list);
                if !settlements.is_empty() {
                    let (client, queue, errors) = (client.clone(), queue.clone(), errors.clone());
                    settles.spawn(async move {
                        if let Err(e) = client.wire().settle_batch(&queue, settlements).await {
                            errors.lock().await.push(format!("settle: {e}"));
                        }
                    });
                }
                while settles.try_join_next().is_some() {}
            }
            while settles.join_next().await.is_some() {}
        });
    }

    // Producer: every tick, send what is due by now at the fixed rate, without waiting for
    // earlier sends (bounded), so that a slow answer does not slow the schedule.
    let window = Arc::new(Semaphore::new(64));
    let mut sends = JoinSet::new();
    let total_ms = a.duration;
    let mut tick = tokio::time::interval(Duration::from_millis(a.tick));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = Instant::now();
    let mut issued: u64 = 0;
    loop {
        tick.tick().await;
        let elapsed_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let due = a.rate.saturating_mul(elapsed_ms.min(total_ms)) / 1_000;
        let n = due.saturating_sub(issued);
        if n > 0 {
            let stamp = base.elapsed().as_micros();
            let body = stamped_body(stamp, size);
            let messages: Vec<SendMessage> = (0..n).map(|_| message(body.clone())).collect();
            issued += n;
            let permit = window.clone().acquire_owned().await?;
            let (client, queue, acked, errors) = (
                client.clone(),
                queue.to_owned(),
                acked.clone(),
                errors.clone(),
            );
            sends.spawn(async move {
                let _permit = permit;
                match client
                    .wire()
                    .send(&queue, &SendRequest::Batch { messages })
                    .await
                {
                    Ok(r) => {
                        acked.fetch_add(r.results.len() as u64, Ordering::SeqCst);
                    }
                    Err(e) => errors.lock().await.push(format!("send: {e}")),
                }
            });
            while sends.try_join_next().is_some() {}
        }
        if elapsed_ms >= total_ms {
            break;
        }
    }
    while sends.join_next().await.is_some() {}
    let publish_elapsed = start.elapsed();
    producer_done.store(true, Ordering::SeqCst);
    while consumers.join_next().await.is_some() {}

    let errors = errors.lock().await.clone();
    if let Some(first) = errors.first() {
        anyhow::bail!("{} requests failed; first: {first}", errors.len());
    }
    let mut samples = samples.lock().await.clone();
    samples.sort_unstable();
    let sent = acked.load(Ordering::SeqCst);
    report.add("target_rate", a.rate, "msgs/s");
    report.add("achieved_rate", rate(sent, publish_elapsed), "msgs/s");
    report.add("sent", sent, "");
    report.add("received", samples.len() as u64, "");
    for (name, q) in [("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("max", 1.0)] {
        let v =
            percentile(&samples, q).map_or(Value::Null, |us| json!(round2(us as f64 / 1_000.0)));
        report.add(&format!("latency_{name}"), v, "ms");
    }
    Ok(())
}

pub(crate) async fn w2(
    client: &Client,
    queue: &str,
    a: W2Args,
    report: &mut Report,
) -> anyhow::Result<()> {
    let policy = QueuePolicy {
        max_delivery_count: 3,
        ..QueuePolicy::default()
    };
    create_queue(client, queue, policy).await?;
    let body = "x".repeat(usize::try_from(a.publish.size)?);
    let published = publish(client, queue, a.messages, &a.publish, &|_| body.clone()).await?;
    report.add("messages", a.messages, "");
    report.add("publish_rate", rate(a.messages, published), "msgs/s");

    let stop = Arc::new(AtomicBool::new(false));
    let deliveries = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut consumers = JoinSet::new();
    for _ in 0..a.consumers {
        let (client, queue, stop, deliveries) = (
            client.clone(),
            queue.to_owned(),
            stop.clone(),
            deliveries.clone(),
        );
        let max = a.receive_batch;
        consumers.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let req = ReceiveRequest {
                    max_messages: Some(max),
                    wait_ms: Some(200),
                    ..ReceiveRequest::default()
                };
                let list = client.wire().receive(&queue, &req).await?;
                deliveries.fetch_add(list.messages.len() as u64, Ordering::Relaxed);
                let settlements: Vec<Settle> = list
                    .messages
                    .iter()
                    .filter_map(|m| m.lock_token.clone())
                    .map(|t| settle(t, SettleKind::Abandon))
                    .collect();
                if !settlements.is_empty() {
                    client.wire().settle_batch(&queue, settlements).await?;
                }
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    // Watch the dead-letter count until every message has arrived there.
    let mut last = (0u64, Instant::now());
    let result = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let dead = match client.admin().get_queue(queue).await {
            Ok(q) => q.counts.dead_lettered,
            Err(e) => break Err(anyhow::Error::new(e).context("read the dead-letter count")),
        };
        if dead >= a.messages {
            break Ok(start.elapsed());
        }
        if dead != last.0 {
            last = (dead, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(60) {
            break Err(anyhow::anyhow!(
                "stalled: {dead} of {} dead-lettered after 60 s without progress",
                a.messages
            ));
        }
        if let Some(Ok(Err(e))) = consumers.try_join_next() {
            break Err(e.context("consumer"));
        }
    };
    stop.store(true, Ordering::SeqCst);
    while consumers.join_next().await.is_some() {}
    let elapsed = result?;
    report.add("consumers", a.consumers, "");
    report.add("deliveries", deliveries.load(Ordering::Relaxed), "");
    report.add("dead_letter_seconds", secs(elapsed), "s");
    report.add("dead_letter_rate", rate(a.messages, elapsed), "msgs/s");
    Ok(())
}

pub(crate) async fn fill(
    client: &Client,
    queue: &str,
    a: FillArgs,
    report: &mut Report,
) -> anyhow::Result<()> {
    create_queue(client, queue, QueuePolicy::default()).await?;
    let body = "x".repeat(usize::try_from(a.publish.size)?);
    let published = publish(client, queue, a.messages, &a.publish, &|_| body.clone()).await?;
    report.add("messages", a.messages, "");
    report.add("body_size", a.publish.size, "bytes");
    report.add("publish_seconds", secs(published), "s");
    report.add("publish_rate", rate(a.messages, published), "msgs/s");
    let waiting = client
        .admin()
        .get_queue(queue)
        .await
        .context("read the queue's counts")?;
    report.add("active_after", waiting.counts.active, "");
    Ok(())
}

// ---- building blocks ------------------------------------------------------------------

async fn create_queue(client: &Client, queue: &str, policy: QueuePolicy) -> anyhow::Result<()> {
    client
        .admin()
        .create_queue(queue, policy)
        .await
        .with_context(|| format!("create bench queue {queue}"))?;
    Ok(())
}

fn message(body: String) -> SendMessage {
    SendMessage {
        body,
        ..SendMessage::default()
    }
}

fn settle(lock_token: String, action: SettleKind) -> Settle {
    Settle {
        lock_token,
        action,
        delay_ms: None,
        reason: None,
        description: None,
        consumer: None,
        rule_version: None,
        lock_duration_ms: None,
    }
}

pub(crate) fn completions(list: &MessageList) -> Vec<Settle> {
    list.messages
        .iter()
        .filter_map(|m| m.lock_token.clone())
        .map(|t| settle(t, SettleKind::Complete))
        .collect()
}

/// Publishes `total` messages in batches with a window of requests in flight; returns
/// the time from the first request to the last acknowledgement.
async fn publish(
    client: &Client,
    queue: &str,
    total: u64,
    args: &PublishArgs,
    body: &(dyn Fn(u64) -> String + Sync),
) -> anyhow::Result<Duration> {
    publish_to(&Nodes::one(client.clone()), queue, total, args, body).await
}

/// [`publish`] with the requests spread round-robin over `nodes`.
async fn publish_to(
    nodes: &Nodes,
    queue: &str,
    total: u64,
    args: &PublishArgs,
    body: &(dyn Fn(u64) -> String + Sync),
) -> anyhow::Result<Duration> {
    let window = Arc::new(Semaphore::new(usize::try_from(args.in_flight)?));
    let acked = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("published", total, acked.clone());
    let mut tasks: JoinSet<Result<(), redrive_client::SendError>> = JoinSet::new();
    let start = Instant::now();
    let mut next: u64 = 0;
    let mut failure = None;
    while next < total {
        let n = u64::from(args.batch).min(total - next);
        let messages: Vec<SendMessage> = (next..next + n).map(|i| message(body(i))).collect();
        next += n;
        let permit = window.clone().acquire_owned().await?;
        let (client, queue, acked) = (nodes.pick().clone(), queue.to_owned(), acked.clone());
        tasks.spawn(async move {
            let _permit = permit;
            let r = client
                .wire()
                .send(&queue, &SendRequest::Batch { messages })
                .await?;
            acked.fetch_add(r.results.len() as u64, Ordering::Relaxed);
            Ok(())
        });
        while let Some(done) = tasks.try_join_next() {
            if let Ok(Err(e)) = done {
                failure.get_or_insert(e);
            }
        }
        if failure.is_some() {
            break;
        }
    }
    while let Some(done) = tasks.join_next().await {
        if let Ok(Err(e)) = done {
            failure.get_or_insert(e);
        }
    }
    let elapsed = start.elapsed();
    progress.finish().await;
    match failure {
        Some(e) => Err(anyhow::Error::new(e).context("publish")),
        None => Ok(elapsed),
    }
}

/// Receives in batches and completes each batch with one settle request, settles
/// pipelined behind the receives; returns the time until the last completion.
async fn receive_and_complete(
    nodes: &Nodes,
    queue: &str,
    total: u64,
    a: &W1Args,
) -> anyhow::Result<Duration> {
    let completed = Arc::new(AtomicU64::new(0));
    let finished_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let settle_window = Arc::new(Semaphore::new(usize::try_from(a.settle_in_flight)?));
    let progress = Progress::start("completed", total, completed.clone());
    let start = Instant::now();
    let mut receivers: JoinSet<anyhow::Result<()>> = JoinSet::new();
    for _ in 0..a.receive_in_flight {
        let (nodes, queue) = (nodes.clone(), queue.to_owned());
        let (completed, finished_at, window) = (
            completed.clone(),
            finished_at.clone(),
            settle_window.clone(),
        );
        let max = a.receive_batch;
        receivers.spawn(async move {
            let mut settles: JoinSet<anyhow::Result<()>> = JoinSet::new();
            let mut last_progress = Instant::now();
            while completed.load(Ordering::SeqCst) < total {
                let req = ReceiveRequest {
                    max_messages: Some(max),
                    wait_ms: Some(200),
                    ..ReceiveRequest::default()
                };
                let node = nodes.pick();
                let list = node
                    .wire()
                    .receive(&queue, &req)
                    .await
                    .with_context(|| format!("receive from {}", node.url()))?;
                if list.messages.is_empty() {
                    if last_progress.elapsed() > Duration::from_secs(60) {
                        anyhow::bail!("stalled: nothing to receive for 60 s");
                    }
                } else {
                    last_progress = Instant::now();
                }
                let settlements = completions(&list);
                if settlements.is_empty() {
                    continue;
                }
                let permit = window.clone().acquire_owned().await?;
                let (client, queue, completed, finished_at) = (
                    nodes.pick().clone(),
                    queue.clone(),
                    completed.clone(),
                    finished_at.clone(),
                );
                settles.spawn(async move {
                    let _permit = permit;
                    let r = client
                        .wire()
                        .settle_batch(&queue, settlements)
                        .await
                        .with_context(|| format!("settle on {}", client.url()))?;
                    let ok = r.results.iter().filter(|r| r.error.is_none()).count() as u64;
                    let before = completed.fetch_add(ok, Ordering::SeqCst);
                    if before < total
                        && before + ok >= total
                        && let Ok(mut at) = finished_at.lock()
                    {
                        *at = Some(Instant::now());
                    }
                    Ok(())
                });
                while let Some(done) = settles.try_join_next() {
                    done??;
                }
            }
            while let Some(done) = settles.join_next().await {
                done??;
            }
            Ok(())
        });
    }
    let mut failure = None;
    while let Some(done) = receivers.join_next().await {
        let outcome = done.map_err(anyhow::Error::new).and_then(|r| r);
        if let Err(e) = outcome {
            failure.get_or_insert(e);
            receivers.abort_all();
        }
    }
    progress.finish().await;
    if let Some(e) = failure {
        return Err(e.context("consume"));
    }
    let end = finished_at
        .lock()
        .ok()
        .and_then(|at| *at)
        .unwrap_or_else(Instant::now);
    Ok(end.duration_since(start))
}

/// A body of `size` bytes that starts with the send time in microseconds.
pub(crate) fn stamped_body(micros: u128, size: usize) -> String {
    let mut s = format!("t={micros:020};");
    while s.len() < size {
        s.push('x');
    }
    s
}

pub(crate) fn sent_micros(body: &str) -> Option<u128> {
    body.strip_prefix("t=")?.get(..20)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamped_bodies_carry_the_send_time_and_size() {
        let b = stamped_body(123_456, 256);
        assert_eq!(b.len(), 256);
        assert_eq!(sent_micros(&b), Some(123_456));
        assert_eq!(sent_micros("garbage"), None);
    }
}
