//! Automatic replay: `replay` measures the server from dead-letter write to republished —
//! N dead-lettered events of a given size written into a replaying queue's live area (as
//! Event Grid dead-letter blobs of `--per-record` events, or, with `--per-record 1`, as
//! single-message records of redrive's own export format), all of a type the register
//! marks idempotent; the clock runs from the first write to the moment the queue holds
//! every republished event. `judge` measures the judgement of one record in this process:
//! parse the blob, judge every event, build every republished event — what the replay
//! worker does between reading a record and writing its effects.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use redrive_core::AutoReplay;
use redrive_core::judgement::{self, Destination};
use redrive_core::register::{Idempotency, RegisterEntry, RegisterKey, register_of};
use redrive_events::dead_letter_events;
use serde_json::{Value, json};

use crate::plans::call;
use crate::report::{Report, rate, round2};
use redrive_client::Client;

/// The register entry every bench event's type has.
const EVENT_TYPE: &str = "bench.replayed";

#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// Dead-lettered events in all.
    #[arg(long, short = 'n', default_value_t = 100_000)]
    events: u64,
    /// Bytes of each event's data.
    #[arg(long, default_value_t = 256)]
    size: usize,
    /// Events per dead-letter record (1: one message per record, written 10,000 records
    /// per request; more: Event Grid blobs of that many events, at most 5,000).
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=5_000))]
    per_record: u64,
    /// Requests writing dead letters at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    writers: u32,
}

#[derive(Debug, Args)]
pub(crate) struct JudgeArgs {
    /// Events in the record.
    #[arg(long, short = 'n', default_value_t = 5_000)]
    events: usize,
    /// Bytes of each event's data.
    #[arg(long, default_value_t = 256)]
    size: usize,
    /// Judgements to time (the median and the slowest are reported).
    #[arg(long, default_value_t = 50)]
    runs: usize,
}

/// One Event Grid dead-letter blob: `n` CloudEvents numbered from `first`, `size` bytes
/// of data each, with Event Grid's dead-letter diagnostics.
fn blob(first: u64, n: u64, size: usize) -> Vec<u8> {
    let data = "x".repeat(size);
    let events: Vec<Value> = (first..first + n)
        .map(|i| {
            json!({
                "specversion": "1.0", "id": format!("ev-{i}"), "source": "/bench",
                "type": EVENT_TYPE, "data": data,
                "deadLetterReason": "MaxDeliveryAttemptsExceeded", "deliveryAttempts": 10,
                "lastDeliveryOutcome": "Probation",
                "publishTime": "2026-12-01T10:00:00Z",
                "lastDeliveryAttemptTime": "2026-12-01T11:00:00Z"
            })
        })
        .collect();
    serde_json::to_vec(&events).unwrap_or_default()
}

/// `n` single-message records numbered from `first`, as JSON Lines of redrive's export.
fn export_lines(first: u64, n: u64, size: usize) -> String {
    let body = "x".repeat(size);
    let mut out = String::new();
    for i in first..first + n {
        let line = json!({
            "message_id": format!("m-{i}"), "body": body, "body_encoding": "utf8",
            "reason": "MaxDeliveryCountExceeded", "delivery_count": 10,
            "delivery_count_quality": "exact", "type": EVENT_TYPE,
            "enqueued_time": "2026-12-01T10:00:00Z",
            "dead_lettered_at": "2026-12-01T11:00:00Z"
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

/// `replay`: from dead-letter write to republished.
pub(crate) async fn run(
    client: &Client,
    queue: &str,
    a: ReplayArgs,
    report: &mut Report,
) -> anyhow::Result<()> {
    call(
        client,
        reqwest::Method::PUT,
        &["v1", "register", EVENT_TYPE],
        Some(json!({"answer": "idempotent"})),
    )
    .await
    .context("register the bench event type")?;
    call(
        client,
        reqwest::Method::POST,
        &["v1", "queues"],
        Some(json!({"name": queue, "policy": {
            "auto_replay": {"enabled": true},
            "max_message_size": 1_048_576
        }})),
    )
    .await
    .context("create the bench queue")?;

    let per_request = if a.per_record == 1 {
        10_000
    } else {
        a.per_record
    };
    let requests: Vec<(u64, u64)> = (0..a.events)
        .step_by(usize::try_from(per_request)?)
        .map(|first| (first, per_request.min(a.events - first)))
        .collect();
    let start = Instant::now();
    let mut writers = tokio::task::JoinSet::new();
    let chunk = requests.len().div_ceil(a.writers as usize).max(1);
    for part in requests.chunks(chunk) {
        let (part, client, queue) = (part.to_vec(), client.clone(), queue.to_owned());
        let (per_record, size) = (a.per_record, a.size);
        writers.spawn(async move {
            for (first, n) in part {
                let body = if per_record == 1 {
                    json!({"format": "json", "content": export_lines(first, n, size)})
                } else {
                    let content = String::from_utf8(blob(first, n, size))?;
                    json!({"format": "eventgrid", "content": content})
                };
                call(
                    &client,
                    reqwest::Method::POST,
                    &["v1", "queues", &queue, "dead-letters", "import"],
                    Some(body),
                )
                .await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = writers.join_next().await {
        r??;
    }
    let written = start.elapsed();
    // Done when no record of the queue is left live (each was republished and archived),
    // looked at through the replay status every 50 ms — a count the server keeps cheap —
    // rather than by counting the queue's messages, which would compete with the replay
    // for the two cores.
    loop {
        let st = call(client, reqwest::Method::GET, &["v1", "replay", queue], None).await?;
        if st["live"].as_u64() == Some(0) {
            break;
        }
        if start.elapsed() > Duration::from_secs(600) {
            bail!("replay not finished after 600 s: {st}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = start.elapsed();
    let q = client.admin().get_queue(queue).await?;
    if q.counts.active < a.events {
        bail!("{} of {} events republished", q.counts.active, a.events);
    }
    report.add("events", a.events, "");
    report.add("event_bytes", u64::try_from(a.size)?, "B");
    report.add("events_per_record", a.per_record, "");
    report.add("write_s", round2(written.as_secs_f64()), "s");
    report.add("total_s", round2(elapsed.as_secs_f64()), "s");
    report.add("replay_rate", rate(a.events, elapsed), "events/s");
    Ok(())
}

/// `judge`: one record's judgement in this process.
pub(crate) fn judge(a: &JudgeArgs, report: &mut Report) -> anyhow::Result<()> {
    let body = blob(0, u64::try_from(a.events)?, a.size);
    let entity = "bench".parse()?;
    let register = register_of([RegisterEntry::new(
        RegisterKey::Type(EVENT_TYPE.to_owned()),
        Idempotency::Idempotent,
        None,
    )?]);
    let policy = AutoReplay {
        enabled: true,
        ..AutoReplay::default()
    };
    let mut times = Vec::with_capacity(a.runs);

    let mut republished = 0;
    for _ in 0..a.runs.max(1) {
        let t = Instant::now();
        let events = dead_letter_events::parse_events(&body)?;
        let refs: Vec<_> = events.iter().map(dead_letter_events::event_ref).collect();
        let part = judgement::partition(
            &policy,
            &register,
            &entity,
            Destination { exists: true },
            &refs,
        );
        let bodies: Vec<Vec<u8>> = part
            .republish
            .iter()
            .map(|(i, id)| {
                let (original, _) = redrive_core::id::split_replay_count(id);
                dead_letter_events::republished(&events[*i], id, original)
            })
            .collect();
        let sizes: Vec<usize> = bodies.iter().map(Vec::len).collect();
        let chunks = judgement::chunks(&sizes, policy.max_chunk_bytes, policy.max_chunk_events);
        times.push(t.elapsed());
        republished = bodies.len();
        std::hint::black_box(chunks);
    }
    times.sort();

    let ms = |d: Duration| round2(d.as_secs_f64() * 1_000.0);
    report.add("events", u64::try_from(a.events)?, "");
    report.add("event_bytes", u64::try_from(a.size)?, "B");
    report.add("republished", u64::try_from(republished)?, "");
    report.add("judge_median_ms", ms(times[times.len() / 2]), "ms");
    report.add("judge_max_ms", ms(times[times.len() - 1]), "ms");
    Ok(())
}
