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
//! store filled before. `--list-pages N` then walks the first queue's dead-letter list
//! by its keyset cursor, 100 records a page, timing every page (the last as the first:
//! no offset), and a page filtered by reason and one by text.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::plans::call;
use crate::report::{Progress, Report, percentile, rate, secs};
use redrive_client::Client;
use redrive_client::DeadLetterQuery;

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
    /// Then walk the first queue's dead-letter list, 100 records a page without
    /// payloads, following each page's cursor, for at most this many pages (0: no walk),
    /// and time a page filtered by reason and one by text in the description.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    list_pages: u32,
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

/// Round trips in microseconds: median, 90th percentile, slowest, in milliseconds.
fn add_times(report: &mut Report, name: &str, took: &mut [u64]) {
    took.sort_unstable();
    let ms = |us: Option<u64>| us.map_or(0.0, |u| Duration::from_micros(u).as_secs_f64() * 1000.0);
    let round = |x: f64| (x * 10.0).round() / 10.0;
    report.add(
        &format!("{name}_p50_ms"),
        round(ms(percentile(took, 0.5))),
        "ms",
    );
    report.add(
        &format!("{name}_p90_ms"),
        round(ms(percentile(took, 0.9))),
        "ms",
    );
    report.add(
        &format!("{name}_max_ms"),
        round(ms(took.last().copied())),
        "ms",
    );
}

/// Walks the dead-letter list of `queue` by keyset (100 a page, no payloads) for at most
/// `pages` pages, timing each page; then times ten first pages filtered by reason and ten
/// by text in the description.
async fn walk_list(
    client: &Client,
    queue: &str,
    pages: u32,
    report: &mut Report,
) -> anyhow::Result<()> {
    let recovery = client.recovery();
    let mut took = Vec::new();
    let mut records = 0u64;
    let mut cursor = None;
    let (mut first_ms, mut last_ms) = (0.0, 0.0);
    for _ in 0..pages {
        let q = DeadLetterQuery {
            limit: Some(100),
            payload: Some(false),
            cursor: cursor.take(),
            ..DeadLetterQuery::default()
        };
        let start = Instant::now();
        let page = recovery
            .dead_letters(queue, &q)
            .await
            .context("GET dead-letters")?;
        let t = start.elapsed();
        took.push(u64::try_from(t.as_micros()).unwrap_or(u64::MAX));
        last_ms = t.as_secs_f64() * 1000.0;
        if took.len() == 1 {
            first_ms = last_ms;
        }
        records += page.dead_letters.len() as u64;
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let round = |x: f64| (x * 10.0).round() / 10.0;
    report.add("list_pages", took.len() as u64, "pages");
    report.add("list_records", records, "records");
    report.add("list_first_page_ms", round(first_ms), "ms");
    report.add("list_last_page_ms", round(last_ms), "ms");
    add_times(report, "list_page", &mut took);
    for (name, q) in [
        (
            "list_by_reason",
            DeadLetterQuery {
                reason: Some(REASONS[1].to_owned()),
                ..DeadLetterQuery::default()
            },
        ),
        (
            "list_by_text",
            DeadLetterQuery {
                text: Some("order 9".to_owned()),
                ..DeadLetterQuery::default()
            },
        ),
    ] {
        let q = DeadLetterQuery {
            limit: Some(100),
            payload: Some(false),
            ..q
        };
        let mut took = Vec::new();
        for _ in 0..10 {
            let start = Instant::now();
            recovery.dead_letters(queue, &q).await.context(name)?;
            took.push(u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX));
        }
        add_times(report, name, &mut took);
    }
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
    report.add("overview_queues", ours.len() as u64, "queues");
    report.add("overview_dead_letters", dead, "records");
    report.add(
        "overview_open_cases",
        last["cases"]["open"].as_u64().unwrap_or(0),
        "cases",
    );
    report.add("overview_calls", u64::from(a.calls), "calls");
    add_times(report, "overview", &mut took);
    if a.list_pages > 0 {
        walk_list(client, &queue_name(prefix, 0), a.list_pages, report).await?;
    }
    Ok(())
}
