//! The `processor` scenario: how much of the server's receive + complete rate a
//! `redrive-client` processor keeps. Each round fills the queue with N messages and drains
//! it with a processor (64 concurrent calls, a no-op handler, automatic completion), then
//! fills it again and drains it with the load tool's own loop (batched receives, each
//! batch completed with one settle request); the order alternates between rounds so that
//! neither side always runs on a warmer server. It prints both rates per round and the
//! ratio of their sums.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use redrive_api::message::ReceiveRequest;
use redrive_client::{Message, ProcessorOptions, QueuePolicy};

use crate::native::completions;
use crate::report::{Report, rate, round2, secs};
use redrive_client::Client;

#[derive(Debug, Args)]
pub(crate) struct ProcessorArgs {
    /// Messages per drain.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    messages: u64,
    /// Rounds (each: one processor drain and one loop drain).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// The processor's concurrent calls.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_000))]
    concurrency: u64,
    /// The processor's prefetch; by default, so many that the processor holds as many
    /// messages as the loop has in flight (`receivers` × `receive_batch`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    prefetch: Option<u64>,
    /// The load tool's loop: receives in flight.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    receivers: u32,
    /// The load tool's loop: messages per receive.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    receive_batch: u32,
}

impl ProcessorArgs {
    /// The prefetch asked for, or the loop's messages in flight less the handlers'.
    fn prefetch(&self) -> u64 {
        self.prefetch.unwrap_or_else(|| {
            (u64::from(self.receivers) * u64::from(self.receive_batch))
                .saturating_sub(self.concurrency)
        })
    }
}

/// Runs the rounds on `queue`.
pub(crate) async fn run(
    url: &str,
    token: Option<&str>,
    tool: &Client,
    queue: &str,
    a: ProcessorArgs,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut builder = redrive_client::Client::builder(url).timeout(Duration::from_secs(120));
    if let Some(t) = token {
        builder = builder.token(t);
    }
    let client = builder.build().context("the redrive-client client")?;
    client
        .admin()
        .create_queue(queue, QueuePolicy::default())
        .await
        .with_context(|| format!("create bench queue {queue}"))?;
    let (mut p_total, mut l_total) = (Duration::ZERO, Duration::ZERO);
    for round in 1..=a.rounds {
        let mut p = Duration::ZERO;
        let mut l = Duration::ZERO;
        for side in 0..2 {
            fill(&client, queue, a.messages).await?;
            // Odd rounds: the processor first; even rounds: the loop first.
            if (side == 0) == (round % 2 == 1) {
                p = drain_with_processor(&client, queue, &a).await?;
            } else {
                l = drain_with_loop(tool, queue, &a).await?;
            }
        }
        let (pr, lr) = (rate(a.messages, p), rate(a.messages, l));
        eprintln!(
            "round {round}: processor {pr}/s ({:.2} s), load tool loop {lr}/s ({:.2} s)",
            secs(p),
            secs(l)
        );
        report.add(&format!("round{round}_processor_rate"), pr, "messages/s");
        report.add(&format!("round{round}_loop_rate"), lr, "messages/s");
        p_total += p;
        l_total += l;
    }
    let total = a.messages * u64::from(a.rounds);
    let (pr, lr) = (rate(total, p_total), rate(total, l_total));
    report.add("messages_per_drain", a.messages, "messages");
    report.add("processor_concurrency", a.concurrency, "calls");
    report.add("processor_prefetch", a.prefetch(), "messages");
    report.add("processor_rate", pr, "messages/s");
    report.add("loop_rate", lr, "messages/s");
    #[allow(clippy::cast_precision_loss)] // rates far below 2^52
    let ratio = if lr == 0 { 0.0 } else { pr as f64 / lr as f64 };
    report.add("processor_to_loop", round2(ratio), "ratio");
    Ok(())
}

/// Sends `n` messages in batches of 1000 and returns once all are stored.
async fn fill(client: &redrive_client::Client, queue: &str, n: u64) -> anyhow::Result<()> {
    let sender = client.sender(queue);
    let mut left = n;
    while left > 0 {
        let k = left.min(1_000);
        let batch: Vec<Message> = (0..k).map(|_| Message::new(vec![b'x'; 256])).collect();
        sender.send_batch(batch).await.context("fill")?;
        left -= k;
    }
    Ok(())
}

/// Drains `a.messages` with a processor; the time from its start to the last completion.
async fn drain_with_processor(
    client: &redrive_client::Client,
    queue: &str,
    a: &ProcessorArgs,
) -> anyhow::Result<Duration> {
    let options = ProcessorOptions::new()
        .max_concurrent_calls(usize::try_from(a.concurrency)?)
        .prefetch(usize::try_from(a.prefetch())?)
        .receive_wait(Duration::from_millis(200))
        .on_error(|e| eprintln!("processor: {:?}: {}", e.source, e.error));
    let start = Instant::now();
    let handle = client
        .processor(queue, options, |_d| async { Ok(()) })
        .context("the processor")?
        .start();
    let mut watch = handle.watch_stats();
    let target = a.messages;
    tokio::time::timeout(
        Duration::from_secs(600),
        watch.wait_for(|s| s.completed >= target),
    )
    .await
    .context("the processor did not drain the queue within 600 s")?
    .context("the processor stopped")?;
    let took = start.elapsed();
    handle
        .shutdown(Duration::from_secs(10))
        .await
        .context("the processor's shutdown")?;
    Ok(took)
}

/// Drains `a.messages` with the load tool's loop: `receivers` tasks, each receiving a
/// batch and completing it with one settle request.
async fn drain_with_loop(
    tool: &Client,
    queue: &str,
    a: &ProcessorArgs,
) -> anyhow::Result<Duration> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..a.receivers {
        let (tool, queue, done) = (tool.clone(), queue.to_owned(), done.clone());
        let (total, max) = (a.messages, a.receive_batch);
        tasks.spawn(async move {
            while done.load(Ordering::SeqCst) < total {
                let req = ReceiveRequest {
                    max_messages: Some(max),
                    wait_ms: Some(200),
                    ..ReceiveRequest::default()
                };
                let list = tool.wire().receive(&queue, &req).await.context("receive")?;
                let settlements = completions(&list);
                if settlements.is_empty() {
                    continue;
                }
                let r = tool
                    .wire()
                    .settle_batch(&queue, settlements)
                    .await
                    .context("settle")?;
                let ok = r.results.iter().filter(|r| r.error.is_none()).count() as u64;
                done.fetch_add(ok, Ordering::SeqCst);
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(start.elapsed())
}
