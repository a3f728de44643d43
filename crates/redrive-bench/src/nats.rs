//! `redrive-bench nats-baseline`: redrive's own scenarios (`w1`, `latency`, `w2`) run
//! against NATS JetStream, the broker redrive is most often weighed against. It needs no
//! redrive server: each run creates a file-storage work-queue stream of its own (one
//! subject, `<stream>.msgs`), publishes with JetStream publish acks, consumes through one
//! durable pull consumer with explicit acks, and deletes the stream afterwards unless
//! `--keep` is given. The server is the one at `--nats-url` (`REDRIVE_BENCH_NATS_URL`,
//! by default `nats://127.0.0.1:4222`); `--compare nats` on redrive's scenarios runs the
//! same functions between redrive's rounds (`compare`).
//!
//! The shapes follow redrive's scenarios, with the same arguments and defaults where they
//! apply:
//!
//! - `w1`: N messages published with K publish acks awaited at once (K is `--in-flight`,
//!   redrive's send requests in flight), then received in pull batches and each message
//!   acked; the consume phase ends when the stream reports itself empty, i.e. when the
//!   server has processed every ack (a work queue drops a message once it is acked).
//! - `latency`: a fixed publish rate, the send time in each body, consumers with
//!   outstanding long pull requests; percentiles of publish → receive.
//! - `w2`: a consumer with `max_deliver = 3` whose consumers NAK every delivery; the run
//!   ends when N `MAX_DELIVERIES` advisories have arrived, the JetStream counterpart of a
//!   dead-lettered message.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::context::{GetStreamErrorKind, PublishAckFuture};
use async_nats::jetstream::{self, AckKind, ErrorCode, stream};
use bytes::Bytes;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;

use crate::failure::input_error;
use crate::native;
use crate::report::{Progress, Report, percentile, rate, round2, secs};
use crate::units::{parse_duration_ms, parse_size};

/// The NATS server a run uses unless `--nats-url` or [`URL_VAR`] names another.
pub(crate) const DEFAULT_URL: &str = "nats://127.0.0.1:4222";

/// The variable naming the NATS server.
pub(crate) const URL_VAR: &str = "REDRIVE_BENCH_NATS_URL";

/// The longest `--nats-url` accepted.
const MAX_URL_LEN: usize = 2_048;

/// The durable consumer's name on every stream a run creates.
const CONSUMER: &str = "bench";

/// How long a connection attempt may take before the server counts as absent.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a phase may go without progress before the run fails as stalled.
const STALL: Duration = Duration::from_secs(60);

/// `redrive-bench nats-baseline`.
#[derive(Debug, Args)]
pub(crate) struct NatsBaselineArgs {
    /// Stream to create for the run (default: a fresh `bench_<scenario>_…`); must not
    /// exist.
    #[arg(long, global = true, value_name = "NAME", value_parser = stream_name)]
    pub(crate) stream: Option<String>,
    #[command(subcommand)]
    pub(crate) scenario: NatsScenario,
}

/// The scenarios `nats-baseline` runs, each the counterpart of redrive's of that name.
#[derive(Debug, Clone, Subcommand)]
pub(crate) enum NatsScenario {
    /// Throughput: publish N messages with K publish acks in flight, then a durable pull
    /// consumer receives them in batches and acks each one.
    W1(W1Args),
    /// Publish→receive latency at a fixed publish rate with long-pulling consumers.
    Latency(LatencyArgs),
    /// Dead-lettering: consumers NAK every delivery until `max_deliver` (3) is reached;
    /// one `MAX_DELIVERIES` advisory per message.
    W2(W2Args),
}

impl NatsScenario {
    /// The scenario's name, as redrive's counterpart is called.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            NatsScenario::W1(_) => "w1",
            NatsScenario::Latency(_) => "latency",
            NatsScenario::W2(_) => "w2",
        }
    }
}

/// How `w1` and `w2` publish.
#[derive(Debug, Clone, Args)]
pub(crate) struct PublishArgs {
    /// Body size (e.g. 256, 1KiB); at most the server's maximum payload.
    #[arg(long, default_value = "256", value_parser = parse_size)]
    pub(crate) size: u64,
    /// Publish acks awaited at once (redrive's w1 and w2: send requests in flight).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=4_096))]
    pub(crate) in_flight: u32,
}

/// `nats-baseline w1`.
#[derive(Debug, Clone, Args)]
pub(crate) struct W1Args {
    /// Messages to publish and consume.
    #[arg(long, short = 'n', default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub(crate) messages: u64,
    #[command(flatten)]
    pub(crate) publish: PublishArgs,
    /// Messages per pull request.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub(crate) receive_batch: u32,
    /// Pull subscriptions on the consumer at once (redrive's receives in flight).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) receive_in_flight: u32,
}

/// `nats-baseline latency`.
#[derive(Debug, Clone, Args)]
pub(crate) struct LatencyArgs {
    /// Messages per second to publish.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) rate: u64,
    /// How long to publish (e.g. 20s).
    #[arg(long, default_value = "20s", value_parser = parse_duration_ms)]
    pub(crate) duration: u64,
    /// Body size (at least 24 bytes: the body carries the send time).
    #[arg(long, default_value = "256", value_parser = parse_size)]
    pub(crate) size: u64,
    /// Publish tick: each tick publishes what is due since the last one.
    #[arg(long, default_value = "5ms", value_parser = parse_duration_ms)]
    pub(crate) tick: u64,
    /// Long-pulling consumers.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) consumers: u32,
    /// Messages per pull request.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub(crate) receive_batch: u32,
}

/// `nats-baseline w2`.
#[derive(Debug, Clone, Args)]
pub(crate) struct W2Args {
    /// Messages to publish (each is delivered 3 times, then reported as dead).
    #[arg(long, short = 'n', default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub(crate) messages: u64,
    #[command(flatten)]
    pub(crate) publish: PublishArgs,
    /// Consumers that receive and NAK.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) consumers: u32,
    /// Messages per pull request.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub(crate) receive_batch: u32,
}

impl From<&native::W1Args> for W1Args {
    fn from(a: &native::W1Args) -> W1Args {
        W1Args {
            messages: a.messages,
            publish: PublishArgs::from(&a.publish),
            receive_batch: a.receive_batch,
            receive_in_flight: a.receive_in_flight,
        }
    }
}

impl From<&native::LatencyArgs> for LatencyArgs {
    fn from(a: &native::LatencyArgs) -> LatencyArgs {
        LatencyArgs {
            rate: a.rate,
            duration: a.duration,
            size: a.size,
            tick: a.tick,
            consumers: a.consumers,
            receive_batch: a.receive_batch,
        }
    }
}

impl From<&native::W2Args> for W2Args {
    fn from(a: &native::W2Args) -> W2Args {
        W2Args {
            messages: a.messages,
            publish: PublishArgs::from(&a.publish),
            consumers: a.consumers,
            receive_batch: a.receive_batch,
        }
    }
}

impl From<&native::PublishArgs> for PublishArgs {
    fn from(a: &native::PublishArgs) -> PublishArgs {
        PublishArgs {
            size: a.size,
            in_flight: a.in_flight,
        }
    }
}

/// Checks a `--stream` name: 1 to 64 ASCII letters, digits, `_` or `-` (a valid stream
/// name and subject token both).
pub(crate) fn stream_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "invalid stream name {s:?}: use 1 to 64 letters, digits, '_' or '-'"
        ))
    }
}

/// A fresh stream name for `scenario` (`bench_w1_…`).
pub(crate) fn fresh_stream(scenario: &str) -> String {
    format!("bench_{scenario}_{}", crate::units::now().0)
}

/// Checks `--nats-url` before anything connects: a `nats://` URL of bounded length.
pub(crate) fn check_url(url: &str) -> anyhow::Result<()> {
    if url.len() > MAX_URL_LEN {
        return Err(input_error(format!(
            "--nats-url: longer than {MAX_URL_LEN} bytes"
        )));
    }
    let rest = url.strip_prefix("nats://").unwrap_or_default();
    if rest.is_empty() || rest.chars().any(char::is_whitespace) {
        return Err(input_error(format!(
            "--nats-url {url:?}: expected nats://HOST:PORT (e.g. {DEFAULT_URL})"
        )));
    }
    Ok(())
}

/// A connection to a NATS server with JetStream, checked when made.
pub(crate) struct Nats {
    url: String,
    client: async_nats::Client,
}

impl Nats {
    /// Connects to `url` and asks for the account's JetStream limits; fails fast, naming
    /// the URL and how to start a server, when none answers or JetStream is off.
    pub(crate) async fn connect(url: &str) -> anyhow::Result<Nats> {
        check_url(url)?;
        let how = format!(
            "start one with JetStream on (`nats-server -js`), or name another with \
             --nats-url or {URL_VAR}"
        );
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(CONNECT_TIMEOUT)
            .connect(url)
            .await
            .map_err(|e| anyhow!("no NATS server answers at {url} ({e}); {how}"))?;
        // The account's JetStream information, read as plain JSON: a server without
        // JetStream has no responder for it, or answers with an error.
        let answer = client
            .request("$JS.API.INFO", Bytes::new())
            .await
            .map_err(|e| {
                anyhow!("the NATS server at {url} does not serve JetStream ({e}); {how}")
            })?;
        let info: Value = serde_json::from_slice(&answer.payload).unwrap_or(Value::Null);
        if !info["error"].is_null() || info["type"].is_null() {
            return Err(anyhow!(
                "the NATS server at {url} does not serve JetStream ({}); {how}",
                info["error"]["description"]
                    .as_str()
                    .unwrap_or("an unexpected answer")
            ));
        }
        Ok(Nats {
            url: url.to_owned(),
            client,
        })
    }

    /// The server's URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// A JetStream context that keeps at most `acks` publish acks in flight, waiting for
    /// one to arrive before publishing more.
    fn context(&self, acks: u32) -> jetstream::Context {
        jetstream::ContextBuilder::new()
            .timeout(Duration::from_secs(30))
            .max_ack_inflight(usize::try_from(acks).unwrap_or(usize::MAX))
            .backpressure_on_inflight(true)
            .build(self.client.clone())
    }

    /// `size` as a body length, refused above the server's maximum payload.
    fn body_size(&self, size: u64) -> anyhow::Result<usize> {
        let max = self.client.server_info().max_payload;
        match usize::try_from(size) {
            Ok(n) if n <= max => Ok(n),
            _ => Err(input_error(format!(
                "--size {size}: above the NATS server's maximum payload of {max} bytes"
            ))),
        }
    }
}

/// Runs `scenario` on a stream named `name` that the run creates (refused if it exists)
/// and deletes afterwards unless `keep`; fills `report`.
pub(crate) async fn run(
    nats: &Nats,
    scenario: &NatsScenario,
    name: &str,
    keep: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    let js = nats.context(64);
    match js.get_stream(name).await {
        Ok(_) => {
            return Err(input_error(format!(
                "stream {name} already exists on {}; nats-baseline only uses a stream it \
                 creates",
                nats.url
            )));
        }
        Err(e) => match e.kind() {
            GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND => {}
            _ => return Err(anyhow::Error::new(e).context(format!("look for stream {name}"))),
        },
    }
    let stream = js
        .create_stream(stream::Config {
            name: name.to_owned(),
            subjects: vec![subject(name)],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..stream::Config::default()
        })
        .await
        .with_context(|| format!("create stream {name}"))?;
    let outcome = match scenario {
        NatsScenario::W1(a) => w1(nats, &stream, a, report).await,
        NatsScenario::Latency(a) => latency(nats, &stream, a, report).await,
        NatsScenario::W2(a) => w2(nats, &stream, a, report).await,
    };
    if keep {
        eprintln!("kept stream {name}");
    } else if let Err(e) = js.delete_stream(name).await {
        eprintln!("warning: could not delete stream {name}: {e}");
    }
    outcome
}

/// The one subject of stream `name`.
fn subject(name: &str) -> String {
    format!("{name}.msgs")
}

/// How many unacknowledged deliveries the consumer allows: enough for every pull
/// subscription's batch twice over, and never fewer than the server's default (1000).
fn max_ack_pending(subscriptions: u32, batch: u32) -> i64 {
    (i64::from(subscriptions) * i64::from(batch) * 2).max(1_000)
}

/// The durable pull consumer with explicit acks that every scenario reads through.
async fn consumer(
    stream: &stream::Stream,
    max_deliver: i64,
    max_ack_pending: i64,
) -> anyhow::Result<PullConsumer> {
    stream
        .create_consumer(pull::Config {
            durable_name: Some(CONSUMER.to_owned()),
            ack_policy: AckPolicy::Explicit,
            // A NAK redelivers at once; the ack wait only bounds a delivery that is
            // neither acked nor NAKed (one buffered when a run stops).
            ack_wait: Duration::from_secs(2),
            max_deliver,
            max_ack_pending,
            ..pull::Config::default()
        })
        .await
        .context("create the durable pull consumer")
}

/// The next item of a stream of the client (a pull subscription, a core subscription).
async fn next<S: futures_core::Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| Pin::new(&mut *s).poll_next(cx)).await
}

// ---- scenarios ------------------------------------------------------------------------

async fn w1(
    nats: &Nats,
    stream: &stream::Stream,
    a: &W1Args,
    report: &mut Report,
) -> anyhow::Result<()> {
    let size = nats.body_size(a.publish.size)?;
    let js = nats.context(a.publish.in_flight);
    let body = Bytes::from(vec![b'x'; size]);
    let subject = subject(&stream.cached_info().config.name);
    let published = publish(&js, &subject, a.messages, body, a.publish.in_flight).await?;
    report.add("messages", a.messages, "");
    report.add("body_size", a.publish.size, "bytes");
    report.add("publish_acks_in_flight", a.publish.in_flight, "acks");
    report.add("publish_seconds", secs(published), "s");
    report.add("publish_rate", rate(a.messages, published), "msgs/s");
    report.add(
        "publish_throughput",
        round2(rate(a.messages * a.publish.size, published) as f64 / 1_048_576.0),
        "MiB/s",
    );
    let consumed = receive_and_ack(nats, stream, a).await.context("consume")?;
    report.add("receive_batch", a.receive_batch, "messages/pull");
    report.add("consume_seconds", secs(consumed), "s");
    report.add("receive_ack_rate", rate(a.messages, consumed), "msgs/s");
    Ok(())
}

async fn latency(
    nats: &Nats,
    stream: &stream::Stream,
    a: &LatencyArgs,
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
    let size = nats.body_size(a.size)?;
    let pending = max_ack_pending(a.consumers, a.receive_batch);
    let consumer = consumer(stream, -1, pending).await?;
    let js = nats.context(4_096);
    let subject = async_nats::Subject::from(subject(&stream.cached_info().config.name));
    let base = Instant::now();
    let acked = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let producer_done = Arc::new(AtomicBool::new(false));

    let mut consumers: JoinSet<anyhow::Result<Vec<u64>>> = JoinSet::new();
    for _ in 0..a.consumers {
        let (consumer, acked, received, done) = (
            consumer.clone(),
            acked.clone(),
            received.clone(),
            producer_done.clone(),
        );
        let batch = usize::try_from(a.receive_batch)?;
        consumers.spawn(async move {
            let mut messages = consumer
                .stream()
                .max_messages_per_batch(batch)
                .expires(Duration::from_secs(5))
                .messages()
                .await
                .context("pull")?;
            let mut samples = Vec::new();
            let mut drain_deadline: Option<Instant> = None;
            loop {
                if done.load(Ordering::SeqCst) {
                    if received.load(Ordering::SeqCst) >= acked.load(Ordering::SeqCst) {
                        break;
                    }
                    let deadline = *drain_deadline
                        .get_or_insert_with(|| Instant::now() + Duration::from_secs(10));
                    if Instant::now() > deadline {
                        break;
                    }
                }
                let Ok(item) =
                    tokio::time::timeout(Duration::from_millis(100), next(&mut messages)).await
                else {
                    continue;
                };
                let m = item
                    .context("the pull subscription ended")?
                    .context("receive")?;
                let now = base.elapsed().as_micros();
                if let Some(sent) = std::str::from_utf8(&m.payload)
                    .ok()
                    .and_then(native::sent_micros)
                {
                    samples.push(u64::try_from(now.saturating_sub(sent)).unwrap_or(u64::MAX));
                }
                received.fetch_add(1, Ordering::SeqCst);
                m.ack().await.map_err(|e| anyhow!("ack: {e}"))?;
            }
            Ok(samples)
        });
    }

    // Producer: every tick, publish what is due by now at the fixed rate; the acks are
    // awaited by a collector, so that a slow ack does not slow the schedule.
    let (tx, collector) = ack_collector(4_096, acked.clone());
    let mut tick = tokio::time::interval(Duration::from_millis(a.tick));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = Instant::now();
    let mut issued: u64 = 0;
    let mut failure = None;
    'publish: loop {
        tick.tick().await;
        let elapsed_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let due = a.rate.saturating_mul(elapsed_ms.min(a.duration)) / 1_000;
        let n = due.saturating_sub(issued);
        if n > 0 {
            let body = Bytes::from(native::stamped_body(base.elapsed().as_micros(), size));
            for _ in 0..n {
                match js.publish(subject.clone(), body.clone()).await {
                    Ok(ack) => {
                        if tx.send(ack).await.is_err() {
                            break 'publish;
                        }
                    }
                    Err(e) => {
                        failure = Some(anyhow::Error::new(e).context("publish"));
                        break 'publish;
                    }
                }
            }
            issued += n;
        }
        if elapsed_ms >= a.duration {
            break;
        }
    }
    drop(tx);
    let collected = collector.await.context("the publish ack collector")?;
    let publish_elapsed = start.elapsed();
    producer_done.store(true, Ordering::SeqCst);
    let mut samples = Vec::new();
    let mut consumer_failure = None;
    while let Some(done) = consumers.join_next().await {
        match done.map_err(anyhow::Error::new).and_then(|r| r) {
            Ok(s) => samples.extend(s),
            Err(e) => {
                consumer_failure.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    collected?;
    if let Some(e) = consumer_failure {
        return Err(e.context("consumer"));
    }
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

async fn w2(
    nats: &Nats,
    stream: &stream::Stream,
    a: &W2Args,
    report: &mut Report,
) -> anyhow::Result<()> {
    let size = nats.body_size(a.publish.size)?;
    let name = stream.cached_info().config.name.clone();
    let js = nats.context(a.publish.in_flight);
    let body = Bytes::from(vec![b'x'; size]);
    let published = publish(&js, &subject(&name), a.messages, body, a.publish.in_flight).await?;
    report.add("messages", a.messages, "");
    report.add("publish_rate", rate(a.messages, published), "msgs/s");

    // In place before the first delivery: one advisory per message that reached
    // max_deliver.
    let mut advisories = nats
        .client
        .subscribe(format!(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{name}.{CONSUMER}"
        ))
        .await
        .context("subscribe to the max-deliveries advisories")?;
    nats.client
        .flush()
        .await
        .context("flush the advisory subscription")?;
    let pending = max_ack_pending(a.consumers, a.receive_batch);
    let consumer = consumer(stream, 3, pending).await?;

    let deliveries = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut consumers: JoinSet<anyhow::Result<()>> = JoinSet::new();
    for _ in 0..a.consumers {
        let (consumer, deliveries) = (consumer.clone(), deliveries.clone());
        let batch = usize::try_from(a.receive_batch)?;
        consumers.spawn(async move {
            let mut messages = consumer
                .stream()
                .max_messages_per_batch(batch)
                .messages()
                .await
                .context("pull")?;
            while let Some(m) = next(&mut messages).await {
                let m = m.context("receive")?;
                deliveries.fetch_add(1, Ordering::Relaxed);
                m.ack_with(AckKind::Nak(None))
                    .await
                    .map_err(|e| anyhow!("nak: {e}"))?;
            }
            anyhow::bail!("the pull subscription ended")
        });
    }
    // Count the advisories (one per stream sequence) until every message has one.
    let dead_count = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("dead", a.messages, dead_count.clone());
    let mut dead = HashSet::new();
    let mut last = (0usize, Instant::now());
    let result = loop {
        tokio::select! {
            advisory = next(&mut advisories) => {
                let Some(m) = advisory else {
                    break Err(anyhow!("the advisory subscription ended"));
                };
                let seq = serde_json::from_slice::<Value>(&m.payload)
                    .ok()
                    .and_then(|v| v["stream_seq"].as_u64());
                match seq {
                    Some(seq) => {
                        dead.insert(seq);
                        dead_count.store(dead.len() as u64, Ordering::Relaxed);
                    }
                    None => break Err(anyhow!("an advisory without a stream_seq")),
                }
                if dead.len() as u64 >= a.messages {
                    break Ok(start.elapsed());
                }
            }
            done = consumers.join_next() => {
                let e = match done {
                    Some(Ok(Err(e))) => e,
                    Some(Err(e)) => anyhow::Error::new(e),
                    Some(Ok(Ok(()))) | None => anyhow!("every consumer stopped"),
                };
                break Err(e.context("consumer"));
            }
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        if dead.len() != last.0 {
            last = (dead.len(), Instant::now());
        } else if last.1.elapsed() > STALL {
            break Err(anyhow!(
                "stalled: {} of {} messages reached max_deliver after 60 s without progress",
                dead.len(),
                a.messages
            ));
        }
    };
    consumers.abort_all();
    while consumers.join_next().await.is_some() {}
    progress.finish().await;
    let elapsed = result?;
    report.add("consumers", a.consumers, "");
    report.add("deliveries", deliveries.load(Ordering::Relaxed), "");
    report.add("dead_letter_seconds", secs(elapsed), "s");
    report.add("dead_letter_rate", rate(a.messages, elapsed), "msgs/s");
    Ok(())
}

// ---- building blocks ------------------------------------------------------------------

/// A channel of publish-ack futures and the task that awaits them in order, adding one
/// to `acked` per ack; the task ends at the first failed ack, or when the channel closes.
fn ack_collector(
    capacity: u32,
    acked: Arc<AtomicU64>,
) -> (
    mpsc::Sender<PublishAckFuture>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let (tx, mut rx) =
        mpsc::channel::<PublishAckFuture>(usize::try_from(capacity).unwrap_or(usize::MAX));
    let task = tokio::spawn(async move {
        while let Some(ack) = rx.recv().await {
            ack.await.context("publish ack")?;
            acked.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    });
    (tx, task)
}

/// Publishes `total` copies of `body` to `subject` with at most `in_flight` acks awaited
/// at once (the context's own bound); returns the time from the first publish to the
/// last ack.
async fn publish(
    js: &jetstream::Context,
    subject: &str,
    total: u64,
    body: Bytes,
    in_flight: u32,
) -> anyhow::Result<Duration> {
    let acked = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("published", total, acked.clone());
    let (tx, collector) = ack_collector(in_flight, acked.clone());
    let subject = async_nats::Subject::from(subject.to_owned());
    let start = Instant::now();
    let mut failure = None;
    for _ in 0..total {
        match js.publish(subject.clone(), body.clone()).await {
            Ok(ack) => {
                // A closed channel means the collector stopped on a failed ack.
                if tx.send(ack).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                failure = Some(anyhow::Error::new(e).context("publish"));
                break;
            }
        }
    }
    drop(tx);
    let collected = collector.await.context("the publish ack collector");
    let elapsed = start.elapsed();
    progress.finish().await;
    if let Some(e) = failure {
        return Err(e);
    }
    collected?.context("publish")?;
    let n = acked.load(Ordering::SeqCst);
    if n != total {
        anyhow::bail!("publish: {n} acks for {total} messages");
    }
    Ok(elapsed)
}

/// `receive_in_flight` pull subscriptions on one durable consumer receive in batches and
/// ack every message; returns the time until the server has processed the last ack (the
/// work-queue stream reports no message left).
async fn receive_and_ack(
    nats: &Nats,
    stream: &stream::Stream,
    a: &W1Args,
) -> anyhow::Result<Duration> {
    let total = a.messages;
    let pending = max_ack_pending(a.receive_in_flight, a.receive_batch);
    let consumer = consumer(stream, -1, pending).await?;
    let acked = Arc::new(AtomicU64::new(0));
    let all_acked = Arc::new(Notify::new());
    let progress = Progress::start("acked", total, acked.clone());
    let start = Instant::now();
    let mut tasks: JoinSet<anyhow::Result<()>> = JoinSet::new();
    for _ in 0..a.receive_in_flight {
        let (consumer, acked, all_acked) = (consumer.clone(), acked.clone(), all_acked.clone());
        let batch = usize::try_from(a.receive_batch)?;
        tasks.spawn(async move {
            let mut messages = consumer
                .stream()
                .max_messages_per_batch(batch)
                .messages()
                .await
                .context("pull")?;
            while let Some(m) = next(&mut messages).await {
                let m = m.context("receive")?;
                m.ack().await.map_err(|e| anyhow!("ack: {e}"))?;
                if acked.fetch_add(1, Ordering::SeqCst) + 1 == total {
                    all_acked.notify_one();
                }
            }
            anyhow::bail!("the pull subscription ended")
        });
    }
    let mut last = (0u64, Instant::now());
    let result = loop {
        tokio::select! {
            () = all_acked.notified() => break Ok(()),
            done = tasks.join_next() => {
                let e = match done {
                    Some(Ok(Err(e))) => e,
                    Some(Err(e)) => anyhow::Error::new(e),
                    Some(Ok(Ok(()))) | None => anyhow!("every pull subscription stopped"),
                };
                break Err(e);
            }
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let n = acked.load(Ordering::SeqCst);
        if n != last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() > STALL {
            break Err(anyhow!(
                "stalled: {n} of {total} acked after 60 s without progress"
            ));
        }
    };
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let result = match result {
        Ok(()) => wait_empty(nats, stream).await,
        Err(e) => Err(e),
    };
    let elapsed = start.elapsed();
    progress.finish().await;
    result?;
    Ok(elapsed)
}

/// Flushes the connection (every ack written and read by the server), then polls the
/// stream until it holds no message.
async fn wait_empty(nats: &Nats, stream: &stream::Stream) -> anyhow::Result<()> {
    nats.client.flush().await.context("flush the acks")?;
    let since = Instant::now();
    loop {
        let info = stream.get_info().await.context("read the stream's state")?;
        if info.state.messages == 0 {
            return Ok(());
        }
        if since.elapsed() > STALL {
            anyhow::bail!(
                "{} messages still in the stream 60 s after the last ack",
                info.state.messages
            );
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: NatsBaselineArgs,
    }

    fn parse(args: &[&str]) -> Result<NatsBaselineArgs, clap::Error> {
        let mut v = vec!["t"];
        v.extend_from_slice(args);
        T::try_parse_from(v).map(|t| t.a)
    }

    #[test]
    fn defaults_mirror_redrives_scenarios() {
        let a = parse(&["w1"]).unwrap();
        let NatsScenario::W1(w1) = a.scenario else {
            panic!("w1 parsed as {:?}", a.scenario)
        };
        assert_eq!(w1.messages, 200_000);
        assert_eq!(w1.publish.size, 256);
        assert_eq!(w1.publish.in_flight, 256);
        assert_eq!(w1.receive_batch, 256);
        assert_eq!(w1.receive_in_flight, 2);
        let NatsScenario::W2(w2) = parse(&["w2"]).unwrap().scenario else {
            panic!("w2")
        };
        assert_eq!((w2.messages, w2.consumers), (50_000, 4));
        let NatsScenario::Latency(l) = parse(&["latency"]).unwrap().scenario else {
            panic!("latency")
        };
        assert_eq!(
            (l.rate, l.duration, l.tick, l.consumers),
            (5_000, 20_000, 5, 1)
        );
    }

    #[test]
    fn out_of_range_arguments_are_refused() {
        for bad in [
            &["w1", "-n", "0"][..],
            &["w1", "--in-flight", "0"],
            &["w1", "--in-flight", "4097"],
            &["w1", "--receive-batch", "1001"],
            &["w2", "--consumers", "0"],
            &["latency", "--rate", "0"],
            &["latency", "--rate", "1000001"],
            &["--stream", "a.b", "w1"],
            &["--stream", "", "w1"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        let a = parse(&["--stream", "my_stream-1", "w1"]).unwrap();
        assert_eq!(a.stream.as_deref(), Some("my_stream-1"));
    }

    #[test]
    fn stream_names_are_checked() {
        assert!(stream_name("bench_w1_1").is_ok());
        assert!(stream_name(&"a".repeat(64)).is_ok());
        assert!(stream_name(&"a".repeat(65)).is_err());
        for bad in ["", "a.b", "a b", "a*", "a>", "ä"] {
            assert!(stream_name(bad).is_err(), "{bad:?}");
        }
        assert!(fresh_stream("w2").starts_with("bench_w2_"));
        assert!(stream_name(&fresh_stream("latency")).is_ok());
    }

    #[test]
    fn urls_are_checked_before_connecting() {
        assert!(check_url(DEFAULT_URL).is_ok());
        assert!(check_url("nats://user:pw@host:1").is_ok());
        for bad in [
            "",
            "nats://",
            "http://127.0.0.1:4222",
            "127.0.0.1:4222",
            "nats://a b",
        ] {
            let e = check_url(bad).unwrap_err();
            assert_eq!(crate::failure::exit_code(&e), 2, "{bad:?}: {e:#}");
            assert!(format!("{e:#}").contains("--nats-url"), "{e:#}");
        }
        let long = format!("nats://{}", "h".repeat(MAX_URL_LEN));
        assert_eq!(crate::failure::exit_code(&check_url(&long).unwrap_err()), 2);
    }

    #[test]
    fn redrive_arguments_carry_over() {
        #[derive(Debug, Parser)]
        struct N {
            #[command(flatten)]
            a: native::W1Args,
        }
        let n = N::parse_from([
            "t",
            "-n",
            "7",
            "--size",
            "1KiB",
            "--in-flight",
            "9",
            "--receive-batch",
            "11",
            "--receive-in-flight",
            "3",
        ])
        .a;
        let w = W1Args::from(&n);
        assert_eq!(
            (w.messages, w.publish.size, w.publish.in_flight),
            (7, 1_024, 9)
        );
        assert_eq!((w.receive_batch, w.receive_in_flight), (11, 3));
    }

    #[test]
    fn ack_pending_covers_every_batch() {
        assert_eq!(max_ack_pending(1, 10), 1_000);
        assert_eq!(max_ack_pending(4, 256), 2_048);
    }
}
