//! `overview`: the console's first look on a large store. Fills the server with
//! `--entities` queues and `--dead-letters` dead letters spread evenly over them (through
//! the API: each queue's records imported as JSON Lines of redrive's own export format,
//! at most 10,000 per request, `--writers` requests at once; every record is live and
//! stands for an open case, as a dead letter nobody has replayed does), then times
//! `GET /v1/overview` `--calls` times one after the other from this client: the median,
//! the 90th percentile and the slowest round trip over loopback, the answer parsed
//! (client-side latency; the server's own time is at most that).
//!
//! The fill is kept (a million records take a while to write): `--skip-fill` times a
//! store filled before.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::plans::call;
use crate::report::{Progress, Report, percentile, rate, secs};
use redrive_client::Client;

/// Records per import request (the import's own bound is 10,000).
const PER_REQUEST: u64 = 10_000;

/// Reasons the bench records take in turn, so that the store holds several shapes.
const REASONS: [&str; 4] = [
    "MaxDeliveryCountExceeded",
    "ValidationFailed",
    "TTLExpired",
    "DownstreamTimeout",
];

#[derive(Debug, Args)]
pub(crate) struct OverviewArgs {
    /// Queues to create (named `<queue>-0000`, `<queue>-0001`, …).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    entities: u64,
    /// Dead letters in all, spread evenly over the queues.
    #[arg(long, default_value_t = 1_000_000)]
    dead_letters: u64,
    /// Bytes of each record's body.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Import requests at once while filling.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    writers: u32,
    /// Overview requests to time, one after the other.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    calls: u32,
    /// Time the overview of a store filled before (same `--queue`, nothing written).
    #[arg(long)]
    skip_fill: bool,
}

/// `n` records numbered from `first`, as JSON Lines of redrive's export.
fn export_lines(first: u64, n: u64, size: usize) -> String {
    let body = "x".repeat(size);
    let mut out = String::with_capacity(usize::try_from(n).unwrap_or(0) * (size + 300));
    for i in first..first + n {
        let reason = REASONS[usize::try_from(i % 4).unwrap_or(0)];
        let line = json!({
            "message_id": format!("ov-{i}"), "body": body, "body_encoding": "utf8",
            "reason": reason, "description": format!("order {i} failed"),
            "delivery_count": 3, "delivery_count_quality": "exact",
            "enqueued_time": "2026-12-01T10:00:00Z",
            "dead_lettered_at": "2026-12-01T11:00:00Z"
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

fn queue_name(prefix: &str, i: u64) -> String {
    format!("{prefix}-{i:04}")
}

/// Creates the queues and imports the dead letters.
async fn fill(
    client: &Client,
    prefix: &str,
    a: &OverviewArgs,
    report: &mut Report,
) -> anyhow::Result<()> {
    let start = Instant::now();
    for i in 0..a.entities {
        call(
            client,
            reqwest::Method::POST,
            &["v1", "queues"],
            Some(json!({"name": queue_name(prefix, i), "policy": {}})),
        )
        .await
        .with_context(|| format!("create queue {i}"))?;
    }
    report.add("fill_queues_s", secs(start.elapsed()), "s");
    // (queue index, first record number, records): every request within one queue.
    let per_queue = a.dead_letters / a.entities;
    let extra = a.dead_letters % a.entities;
    let mut requests = Vec::new();
    let mut next = 0;
    for i in 0..a.entities {
        let n = per_queue + u64::from(i < extra);
        let mut done = 0;
        while done < n {
            let k = PER_REQUEST.min(n - done);
            requests.push((i, next, k));
            next += k;
            done += k;
        }
    }
    let written = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("dead letters", a.dead_letters, written.clone());
    let start = Instant::now();
    let mut writers = tokio::task::JoinSet::new();
    let chunk = requests.len().div_ceil(a.writers as usize).max(1);
    for part in requests.chunks(chunk) {
        let (part, client, prefix) = (part.to_vec(), client.clone(), prefix.to_owned());
        let (size, written) = (a.size, written.clone());
        writers.spawn(async move {
            for (q, first, n) in part {
                let body = json!({"format": "json", "content": export_lines(first, n, size)});
                let name = queue_name(&prefix, q);
                call(
                    &client,
                    reqwest::Method::POST,
                    &["v1", "queues", &name, "dead-letters", "import"],
                    Some(body),
                )
                .await
                .with_context(|| format!("import into {name}"))?;
                written.fetch_add(n, Ordering::Relaxed);
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = writers.join_next().await {
        r.context("an import task")??;
    }
    progress.finish().await;
    let took = start.elapsed();
    report.add("fill_dead_letters", a.dead_letters, "records");
    report.add("fill_dead_letters_s", secs(took), "s");
    report.add(
        "fill_dead_letters_rate",
        rate(a.dead_letters, took),
        "records/s",
    );
    Ok(())
}

/// `overview`: fill (unless told not to), then time the overview.
pub(crate) async fn run(
    client: &Client,
    prefix: &str,
    a: OverviewArgs,
    report: &mut Report,
) -> anyhow::Result<()> {
    if !a.skip_fill {
        fill(client, prefix, &a, report).await?;
    }
    let mut took: Vec<u64> = Vec::with_capacity(a.calls as usize);
    let mut last = Value::Null;
    // One call first, not timed: the server's caches (and the store's pages) warm.
    call(client, reqwest::Method::GET, &["v1", "overview"], None)
        .await
        .context("GET /v1/overview")?;
    for _ in 0..a.calls {
        let start = Instant::now();
        last = call(client, reqwest::Method::GET, &["v1", "overview"], None)
            .await
            .context("GET /v1/overview")?;
        took.push(u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    took.sort_unstable();
    let ours: Vec<&Value> = last["queues"]
        .as_array()
        .map(|qs| {
            qs.iter()
                .filter(|q| {
                    q["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(&format!("{prefix}-")))
                })
                .collect()
        })
        .unwrap_or_default();
    let dead: u64 = ours
        .iter()
        .map(|q| q["counts"]["dead_lettered"].as_u64().unwrap_or(0))
        .sum();
    if !a.skip_fill && (ours.len() as u64 != a.entities || dead != a.dead_letters) {
        bail!(
            "the overview shows {} bench queues with {dead} dead letters, not {} with {}",
            ours.len(),
            a.entities,
            a.dead_letters
        );
    }
    let ms = |us: Option<u64>| us.map_or(0.0, |u| Duration::from_micros(u).as_secs_f64() * 1000.0);
    let round = |x: f64| (x * 10.0).round() / 10.0;
    report.add("overview_queues", ours.len() as u64, "queues");
    report.add("overview_dead_letters", dead, "records");
    report.add(
        "overview_open_cases",
        last["cases"]["open"].as_u64().unwrap_or(0),
        "cases",
    );
    report.add("overview_calls", u64::from(a.calls), "calls");
    report.add("overview_p50_ms", round(ms(percentile(&took, 0.5))), "ms");
    report.add("overview_p90_ms", round(ms(percentile(&took, 0.9))), "ms");
    report.add("overview_max_ms", round(ms(took.last().copied())), "ms");
    Ok(())
}
