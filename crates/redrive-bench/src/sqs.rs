//! `redrive-bench sqs`: end-to-end throughput through the SQS-compatible endpoint with the
//! real AWS SDK for Rust — SendMessageBatch of 10, ReceiveMessage of 10, DeleteMessageBatch
//! — with producers and consumers running at the same time. A tool for people, never a
//! timed test.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context as _;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, SendMessageBatchRequestEntry};
use clap::Args;
use tokio::task::JoinSet;

use crate::failure::input_error;
use crate::report::Report;
use crate::units::parse_size;

/// `redrive-bench sqs`.
#[derive(Debug, Args)]
pub struct SqsBenchArgs {
    /// The SQS endpoint of the server.
    #[arg(long, default_value = "http://127.0.0.1:9324")]
    endpoint: String,
    /// Messages to send, receive and delete.
    #[arg(long, short = 'n', default_value_t = 100_000)]
    messages: u64,
    /// Body size (e.g. 256, 1KiB).
    #[arg(long, default_value = "256", value_parser = parse_size)]
    size: u64,
    /// Producer tasks and consumer tasks (each).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=512))]
    concurrency: u32,
}

fn client(endpoint: &str) -> Client {
    let conf = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("bench", "bench", None, None, "static"))
        .endpoint_url(endpoint)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(conf)
}

/// Runs the scenario into `report`; returns the queue name.
pub async fn run(a: SqsBenchArgs, keep: bool, report: &mut Report) -> anyhow::Result<String> {
    if a.messages == 0 {
        return Err(input_error("--messages must be at least 1"));
    }
    let size = usize::try_from(a.size).context("--size is too large")?;
    let sqs = client(&a.endpoint);
    let name = format!("bench-sqs-{}", crate::units::now().0);
    let url = sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .with_context(|| format!("cannot create a queue through {}", a.endpoint))?
        .queue_url
        .context("CreateQueue answered without a QueueUrl")?;
    let body: String = "x".repeat(size);
    let batches = a.messages.div_ceil(10);
    let next_batch = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks: JoinSet<anyhow::Result<()>> = JoinSet::new();
    for _ in 0..a.concurrency {
        let (sqs, url, body, next_batch) =
            (sqs.clone(), url.clone(), body.clone(), next_batch.clone());
        let total = a.messages;
        tasks.spawn(async move {
            loop {
                let b = next_batch.fetch_add(1, Ordering::Relaxed);
                if b >= batches {
                    return Ok(());
                }
                let count = (total - b * 10).min(10);
                let entries = (0..count)
                    .map(|i| {
                        SendMessageBatchRequestEntry::builder()
                            .id(format!("m{i}"))
                            .message_body(body.clone())
                            .build()
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let out = sqs
                    .send_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries))
                    .send()
                    .await?;
                if !out.failed.is_empty() {
                    anyhow::bail!("{} entries of a batch failed", out.failed.len());
                }
            }
        });
    }
    for _ in 0..a.concurrency {
        let (sqs, url, received) = (sqs.clone(), url.clone(), received.clone());
        let total = a.messages;
        tasks.spawn(async move {
            while received.load(Ordering::Relaxed) < total {
                let got = sqs
                    .receive_message()
                    .queue_url(&url)
                    .max_number_of_messages(10)
                    .wait_time_seconds(1)
                    .send()
                    .await?;
                let messages = got.messages.unwrap_or_default();
                if messages.is_empty() {
                    continue;
                }
                let entries = messages
                    .iter()
                    .enumerate()
                    .map(|(i, m)| {
                        DeleteMessageBatchRequestEntry::builder()
                            .id(format!("d{i}"))
                            .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
                            .build()
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let out = sqs
                    .delete_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries))
                    .send()
                    .await?;
                received.fetch_add(out.successful.len() as u64, Ordering::Relaxed);
            }
            Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a bench task panicked")??;
    }
    let secs = started.elapsed().as_secs_f64().max(f64::EPSILON);
    #[allow(clippy::cast_precision_loss)] // message counts are far below 2^52
    let rate = received.load(Ordering::Relaxed) as f64 / secs;
    report.add("endpoint", a.endpoint.as_str(), "");
    report.add("messages", a.messages, "");
    report.add("body_size", a.size, "bytes");
    report.add("concurrency", a.concurrency, "producers and consumers each");
    report.add("seconds", (secs * 100.0).round() / 100.0, "s");
    report.add("end_to_end_rate", rate.round(), "msgs/s");
    if !keep {
        let _ = sqs.delete_queue().queue_url(&url).send().await;
    }
    Ok(name)
}
