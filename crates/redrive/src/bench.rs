//! `redrive bench`: load scenarios against a running server (w1 throughput, latency, w2
//! dead-lettering, fill), with optional sampling of the server's resident memory, and
//! `pg-baseline`, a raw PostgreSQL queue to compare the PostgreSQL store with (see
//! `bench_pg`), plus `sqs` (`bench_sqs`) and `push` (`bench_push`). This is a tool for people, never a timed test.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, Subcommand};
use redrive_api::message::{
    MessageList, ReceiveRequest, SendMessage, SendRequest, Settle, SettleKind,
};
use redrive_api::queue::{CreateQueue, QueuePolicy};
use serde_json::{Map, Value, json};
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinSet;

use crate::bench_cpu::CpuWatch;
use crate::client::Client;
use crate::cmd::{Ctx, queue_name};
use crate::failure::input_error;
use crate::output::{Table, print_json};
use crate::units::{parse_duration_ms, parse_size};

/// `redrive bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    scenario: Scenario,
    /// Sample this server process's resident memory (VmRSS from /proc/PID/status).
    #[arg(long, global = true, value_name = "PID")]
    server_pid: Option<u32>,
    /// Use this queue name instead of a fresh `bench-…` one.
    #[arg(long, global = true, value_name = "NAME", value_parser = queue_name)]
    queue: Option<String>,
    /// Keep the queue afterwards (fill always keeps it).
    #[arg(long, global = true)]
    keep: bool,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Throughput: publish N messages in batches, then receive and complete them all.
    W1(W1Args),
    /// Send→receive latency at a fixed publish rate with concurrent long-polling consumers.
    Latency(LatencyArgs),
    /// Dead-lettering: consumers abandon everything until max delivery count (3) is hit.
    W2(W2Args),
    /// Leave N messages waiting in a queue and report the server's memory after.
    Fill(FillArgs),
    /// Raw pgmq-style baseline in SQL (no server): inserts, then receive + delete.
    PgBaseline(crate::bench_pg::PgBaselineArgs),
    /// SQS endpoint, end to end with the AWS SDK: SendMessageBatch 10, ReceiveMessage 10,
    /// DeleteMessageBatch, producers and consumers at once.
    Sqs(crate::bench_sqs::SqsBenchArgs),
    /// Push delivery: a local receiver, a topic with one push subscription to it, N events
    /// published; events per second from the first publish to the last event received
    /// (`--backlog`: the drain of a paused subscription's backlog after its resume;
    /// `--rate`: publish → first delivery attempt latency at a fixed rate).
    Push(crate::bench_push::PushBenchArgs),
    /// Push retries: many push subscriptions to a receiver that answers 500, every event
    /// waiting in backoff after its first attempt; the server's memory then.
    PushBackoff(crate::bench_push::PushBackoffArgs),
}

#[derive(Debug, Args)]
struct PublishArgs {
    /// Body size (e.g. 256, 1KiB).
    #[arg(long, default_value = "256", value_parser = parse_size)]
    size: u64,
    /// Messages per send request.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch: u32,
    /// Send requests in flight at most.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=4_096))]
    in_flight: u32,
}

#[derive(Debug, Args)]
struct W1Args {
    /// Messages to publish and consume.
    #[arg(long, short = 'n', default_value_t = 200_000)]
    messages: u64,
    #[command(flatten)]
    publish: PublishArgs,
    /// max_messages of each receive.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    receive_batch: u32,
    /// Receive requests in flight at once (the one consumer pipelines its receives).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    receive_in_flight: u32,
    /// Settle requests in flight at most (pipelined behind the receives).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    settle_in_flight: u32,
    /// Another node of the same cluster (repeatable): sends, receives and settles go
    /// round-robin over --url and these.
    #[arg(long, value_name = "URL")]
    also: Vec<String>,
    /// Also report the CPU time of every `postgres` process on this machine, per message
    /// and phase (next to the load tool's and, with --server-pid, the server's).
    #[arg(long)]
    postgres_cpu: bool,
}

#[derive(Debug, Args)]
struct LatencyArgs {
    /// Messages per second to publish.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    rate: u64,
    /// How long to publish (e.g. 20s).
    #[arg(long, default_value = "20s", value_parser = parse_duration_ms)]
    duration: u64,
    /// Body size (at least 24 bytes: the body carries the send time).
    #[arg(long, default_value = "256", value_parser = parse_size)]
    size: u64,
    /// Publish tick: each tick sends what is due since the last one in one request.
    #[arg(long, default_value = "5ms", value_parser = parse_duration_ms)]
    tick: u64,
    /// Long-polling consumers.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    consumers: u32,
    /// max_messages of each receive.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    receive_batch: u32,
}

#[derive(Debug, Args)]
struct W2Args {
    /// Messages to publish (each is delivered 3 times, then dead-lettered).
    #[arg(long, short = 'n', default_value_t = 50_000)]
    messages: u64,
    #[command(flatten)]
    publish: PublishArgs,
    /// Consumers that receive and abandon.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    consumers: u32,
    /// max_messages of each receive.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    receive_batch: u32,
}

#[derive(Debug, Args)]
struct FillArgs {
    /// Messages to leave waiting.
    #[arg(long, short = 'n', default_value_t = 1_000_000)]
    messages: u64,
    #[command(flatten)]
    publish: PublishArgs,
}

/// Runs a scenario and prints its report.
pub async fn run(ctx: &Ctx, args: BenchArgs) -> anyhow::Result<()> {
    if let Scenario::PgBaseline(a) = args.scenario {
        return run_pg_baseline(ctx, a, args.server_pid, args.queue.is_some(), args.keep).await;
    }
    if let Scenario::Sqs(a) = args.scenario {
        let memory = match args.server_pid {
            Some(pid) => Some(MemorySampler::start(pid)?),
            None => None,
        };
        let mut report = Report::new("sqs", "");
        let outcome = crate::bench_sqs::run(a, args.keep, &mut report).await;
        if let Some(m) = memory {
            m.finish(&mut report).await;
        }
        report.queue = outcome?;
        return print_report(ctx, &report);
    }
    if let Scenario::Push(_) | Scenario::PushBackoff(_) = args.scenario {
        let base = ctx.client.base().as_str().to_owned();
        let probe = Client::new(&base, Duration::from_secs(120))?.with_token(ctx.client.token());
        probe
            .healthz()
            .await
            .with_context(|| format!("server at {base}"))?;
        let memory = match args.server_pid {
            Some(pid) => Some(MemorySampler::start(pid)?),
            None => None,
        };
        let name = match args.scenario {
            Scenario::PushBackoff(_) => "push-backoff",
            _ => "push",
        };
        let topic = args
            .queue
            .clone()
            .unwrap_or_else(|| format!("bench-{name}-{}", crate::units::now().0));
        let mut report = Report::new(name, &topic);
        let outcome = match args.scenario {
            Scenario::PushBackoff(a) => {
                let pid = args.server_pid;
                crate::bench_push::run_backoff(&base, a, topic, args.keep, pid, &mut report).await
            }
            Scenario::Push(a) => {
                crate::bench_push::run(&base, a, topic, args.keep, &mut report).await
            }
            _ => unreachable!("a push scenario"),
        };
        if let Some(m) = memory {
            m.finish(&mut report).await;
        }
        report.queue = outcome?;
        return print_report(ctx, &report);
    }
    let client = Client::new(ctx.client.base().as_str(), Duration::from_secs(120))?
        .with_token(ctx.client.token());
    let nodes = match &args.scenario {
        Scenario::W1(a) => nodes(&client, &a.also)?,
        _ => Nodes::one(client.clone()),
    };
    for node in nodes.clients.iter() {
        node.healthz()
            .await
            .with_context(|| format!("server at {}", node.base()))?;
    }
    let memory = match args.server_pid {
        Some(pid) => Some(MemorySampler::start(pid)?),
        None => None,
    };
    let scenario_name = match &args.scenario {
        Scenario::W1(_) => "w1",
        Scenario::Latency(_) => "latency",
        Scenario::W2(_) => "w2",
        Scenario::Fill(_) => "fill",
        Scenario::PgBaseline(_) => "pg-baseline",
        Scenario::Sqs(_) => "sqs",
        Scenario::Push(_) => "push",
        Scenario::PushBackoff(_) => "push-backoff",
    };
    let queue = args
        .queue
        .clone()
        .unwrap_or_else(|| format!("bench-{scenario_name}-{}", crate::units::now().0));
    let mut report = Report::new(scenario_name, &queue);
    let keep = args.keep || matches!(args.scenario, Scenario::Fill(_));
    let outcome = match args.scenario {
        Scenario::W1(a) => w1(&nodes, &queue, a, args.server_pid, &mut report).await,
        Scenario::Latency(a) => latency(&client, &queue, a, &mut report).await,
        Scenario::W2(a) => w2(&client, &queue, a, &mut report).await,
        Scenario::Fill(a) => fill(&client, &queue, a, &mut report).await,
        Scenario::PgBaseline(_)
        | Scenario::Sqs(_)
        | Scenario::Push(_)
        | Scenario::PushBackoff(_) => {
            unreachable!("handled above")
        }
    };
    if let Some(m) = memory {
        m.finish(&mut report).await;
    }
    if !keep && let Err(e) = client.delete_queue(&queue, true).await {
        eprintln!("warning: could not delete bench queue {queue}: {e}");
    }
    outcome?;
    print_report(ctx, &report)
}

fn print_report(ctx: &Ctx, report: &Report) -> anyhow::Result<()> {
    if ctx.json {
        print_json(&report.json())
    } else {
        print!("{}", report.table().render());
        Ok(())
    }
}

/// `pg-baseline`: no server involved; `--server-pid` may still sample a process (e.g. a
/// PostgreSQL backend or the postmaster).
async fn run_pg_baseline(
    ctx: &Ctx,
    a: crate::bench_pg::PgBaselineArgs,
    server_pid: Option<u32>,
    queue_given: bool,
    keep: bool,
) -> anyhow::Result<()> {
    if queue_given {
        return Err(input_error(
            "--queue does not apply to pg-baseline (use --schema NAME)",
        ));
    }
    let memory = match server_pid {
        Some(pid) => Some(MemorySampler::start(pid)?),
        None => None,
    };
    let mut report = Report::new("pg-baseline", "");
    let outcome = crate::bench_pg::run(a, keep, &mut report).await;
    if let Some(m) = memory {
        m.finish(&mut report).await;
    }
    report.queue = outcome?;
    print_report(ctx, &report)
}

/// The nodes a scenario spreads its requests over, round-robin.
#[derive(Clone)]
struct Nodes {
    clients: Arc<Vec<Client>>,
    next: Arc<AtomicU64>,
}

impl Nodes {
    fn one(client: Client) -> Nodes {
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

/// `--url` plus every `--also` URL, each checked and given once.
fn nodes(main: &Client, also: &[String]) -> anyhow::Result<Nodes> {
    let mut clients = vec![main.clone()];
    for url in also {
        let client = Client::new(url, Duration::from_secs(120))
            .map_err(|e| input_error(format!("--also {url:?}: {e:#}")))?
            .with_token(main.token());
        if clients.iter().any(|c| c.base() == client.base()) {
            return Err(input_error(format!(
                "--also {url:?}: {} is already a node of this run",
                client.base()
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

async fn w1(
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

async fn latency(
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
                let list = match client.receive(&queue, &req).await {
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
                        if let Err(e) = client.settle_batch(&queue, settlements).await {
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
                match client.send(&queue, &SendRequest::Batch { messages }).await {
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

async fn w2(client: &Client, queue: &str, a: W2Args, report: &mut Report) -> anyhow::Result<()> {
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
                let list = client.receive(&queue, &req).await?;
                deliveries.fetch_add(list.messages.len() as u64, Ordering::Relaxed);
                let settlements: Vec<Settle> = list
                    .messages
                    .iter()
                    .filter_map(|m| m.lock_token.clone())
                    .map(|t| settle(t, SettleKind::Abandon))
                    .collect();
                if !settlements.is_empty() {
                    client.settle_batch(&queue, settlements).await?;
                }
            }
            Ok::<(), crate::client::ClientError>(())
        });
    }
    // Watch the dead-letter count until every message has arrived there.
    let mut last = (0u64, Instant::now());
    let result = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let dead = match client.get_queue(queue).await {
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
            break Err(anyhow::Error::new(e).context("consumer"));
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

async fn fill(
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
        .get_queue(queue)
        .await
        .context("read the queue's counts")?;
    report.add("active_after", waiting.counts.active, "");
    Ok(())
}

// ---- building blocks ------------------------------------------------------------------

async fn create_queue(client: &Client, queue: &str, policy: QueuePolicy) -> anyhow::Result<()> {
    let req = CreateQueue {
        name: queue.to_owned(),
        policy,
    };
    client
        .create_queue(&req)
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
        lock_duration_ms: None,
    }
}

fn completions(list: &MessageList) -> Vec<Settle> {
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
    let mut tasks: JoinSet<Result<(), crate::client::ClientError>> = JoinSet::new();
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
                    .receive(&queue, &req)
                    .await
                    .with_context(|| format!("receive from {}", node.base()))?;
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
                        .settle_batch(&queue, settlements)
                        .await
                        .with_context(|| format!("settle on {}", client.base()))?;
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
fn stamped_body(micros: u128, size: usize) -> String {
    let mut s = format!("t={micros:020};");
    while s.len() < size {
        s.push('x');
    }
    s
}

fn sent_micros(body: &str) -> Option<u128> {
    body.strip_prefix("t=")?.get(..20)?.parse().ok()
}

/// Nearest-rank percentile of sorted samples (`q` in 0..=1).
pub(crate) fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0 <= q*n <= n
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    Some(sorted[rank - 1])
}

pub(crate) fn secs(d: Duration) -> f64 {
    round2(d.as_secs_f64())
}

/// Per second, rounded to a whole number.
pub(crate) fn rate(count: u64, d: Duration) -> u64 {
    let s = d.as_secs_f64();
    if s <= 0.0 {
        return 0;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a positive rate
    let r = (count as f64 / s).round() as u64;
    r
}

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

// ---- progress and memory ---------------------------------------------------------------

/// Prints `label n/total` on stderr twice a second while stderr is a terminal.
pub(crate) struct Progress {
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    pub(crate) fn start(label: &'static str, total: u64, count: Arc<AtomicU64>) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let task = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    eprint!("\r{label} {}/{total}   ", count.load(Ordering::Relaxed));
                }
                eprint!("\r{}\r", " ".repeat(label.len() + 32));
            })
        });
        Progress { stop, task }
    }

    pub(crate) async fn finish(self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.task {
            let _ = t.await;
        }
    }
}

/// Samples a process's VmRSS every 100 ms; reports idle (at start), peak, and end.
struct MemorySampler {
    pid: u32,
    idle_kib: u64,
    peak_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl MemorySampler {
    fn start(pid: u32) -> anyhow::Result<MemorySampler> {
        let idle_kib = read_status_kib(pid, "VmRSS").ok_or_else(|| {
            input_error(format!(
                "--server-pid {pid}: cannot read VmRSS from /proc/{pid}/status"
            ))
        })?;
        let peak_kib = Arc::new(AtomicU64::new(idle_kib));
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (peak, stop) = (peak_kib.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    if let Some(kib) = read_status_kib(pid, "VmRSS") {
                        peak.fetch_max(kib, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        Ok(MemorySampler {
            pid,
            idle_kib,
            peak_kib,
            stop,
            task,
        })
    }

    async fn finish(self, report: &mut Report) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let end = read_status_kib(self.pid, "VmRSS");
        if let Some(kib) = end {
            self.peak_kib.fetch_max(kib, Ordering::Relaxed);
        }
        let mib = |kib: u64| round2(kib as f64 / 1_024.0);
        report.add("server_rss_idle", mib(self.idle_kib), "MiB");
        report.add(
            "server_rss_peak",
            mib(self.peak_kib.load(Ordering::Relaxed)),
            "MiB",
        );
        report.add(
            "server_rss_after",
            end.map_or(Value::Null, |k| json!(mib(k))),
            "MiB",
        );
        if let Some(hwm) = read_status_kib(self.pid, "VmHWM") {
            report.add("server_rss_high_water", mib(hwm), "MiB");
        }
    }
}

/// A `kB` field of `/proc/PID/status`.
pub(crate) fn read_status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_field_kib(&text, field)
}

fn status_field_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

// ---- report -----------------------------------------------------------------------------

/// Figures of one run, in the order they were added.
pub(crate) struct Report {
    scenario: String,
    queue: String,
    figures: Vec<(String, Value, &'static str)>,
}

impl Report {
    pub(crate) fn new(scenario: &str, queue: &str) -> Report {
        Report {
            scenario: scenario.to_owned(),
            queue: queue.to_owned(),
            figures: Vec::new(),
        }
    }

    pub(crate) fn add(&mut self, name: &str, value: impl Into<Value>, unit: &'static str) {
        self.figures.push((name.to_owned(), value.into(), unit));
    }

    fn table(&self) -> Table {
        let mut t = Table::new(["METRIC", "VALUE", "UNIT"]);
        t.row(["scenario".to_owned(), self.scenario.clone(), String::new()]);
        t.row(["queue".to_owned(), self.queue.clone(), String::new()]);
        for (name, value, unit) in &self.figures {
            let v = match value {
                Value::String(s) => s.clone(),
                Value::Null => "-".to_owned(),
                other => other.to_string(),
            };
            t.row([name.clone(), v, (*unit).to_owned()]);
        }
        t
    }

    pub(crate) fn json(&self) -> Value {
        let mut m = Map::new();
        m.insert("scenario".into(), json!(self.scenario));
        m.insert("queue".into(), json!(self.queue));
        for (name, value, _) in &self.figures {
            m.insert(name.clone(), value.clone());
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let s: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&s, 0.50), Some(50));
        assert_eq!(percentile(&s, 0.90), Some(90));
        assert_eq!(percentile(&s, 0.99), Some(99));
        assert_eq!(percentile(&s, 1.0), Some(100));
        assert_eq!(percentile(&[7], 0.5), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn stamped_bodies_carry_the_send_time_and_size() {
        let b = stamped_body(123_456, 256);
        assert_eq!(b.len(), 256);
        assert_eq!(sent_micros(&b), Some(123_456));
        assert_eq!(sent_micros("garbage"), None);
    }

    #[test]
    fn status_fields_parse() {
        let status = "Name:\tredrive\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(status_field_kib(status, "VmRSS"), Some(10_240));
        assert_eq!(status_field_kib(status, "VmHWM"), Some(20_480));
        assert_eq!(status_field_kib(status, "VmSwap"), None);
    }

    #[test]
    fn reports_render_as_table_and_json() {
        let mut r = Report::new("w1", "q");
        r.add("publish_rate", 1234, "msgs/s");
        r.add("latency_p99", Value::Null, "ms");
        let t = r.table().render();
        assert!(t.contains("publish_rate"), "{t}");
        assert_eq!(r.json()["publish_rate"], json!(1234));
        assert_eq!(r.json()["scenario"], json!("w1"));
    }
}
