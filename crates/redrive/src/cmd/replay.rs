//! `redrive replay status`: where each queue's dead letters stand in automatic replay; and
//! the replay flags shared by `queue create|update` and `sub create|update` (auto-replay
//! and dead-letter retention), with how `queue show` / `sub show` print them.

use std::collections::BTreeMap;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use redrive_core::policy::{MAX_DEAD_LETTER_RETENTION_MS, check_dead_letter_retention};
use redrive_core::replay::{AutoReplay, AutoReplayPatch, ReplayDestination};

use super::{Ctx, queue_name};
use crate::output::{KeyValues, Table, print_json};
use crate::units::{format_duration_ms, parse_duration_ms, parse_size_u32};
use redrive_api::replay::ReplayStatus;

/// Auto-replay and retention flags: only those given are set (a create starts from the
/// defaults).
#[derive(Debug, Clone, Default, Args)]
pub struct ReplayArgs {
    /// Replay live dead letters automatically (`=false` turns it off).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    pub auto_replay: Option<bool>,
    /// Replays of one event before it is quarantined (1 to 100; default 3).
    #[arg(long, value_name = "N")]
    pub max_replay_attempts: Option<u32>,
    /// Delay before a dead letter is judged for replay (e.g. 30s; at most 7d; default 0).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub replay_delay: Option<u64>,
    /// Byte budget of one republished chunk (e.g. 512KiB; 1KiB to 256MiB; default 1MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u32)]
    pub replay_chunk_bytes: Option<u32>,
    /// Event budget of one republished chunk (1 to 5000; default 5000).
    #[arg(long, value_name = "N")]
    pub replay_chunk_events: Option<u32>,
    /// How long dead-letter records are kept, in every area (e.g. 90d; at most 3650d;
    /// 0 keeps them forever; default 30d).
    #[arg(long, value_name = "DUR", value_parser = parse_retention_ms)]
    pub dead_letter_retention: Option<u64>,
}

impl ReplayArgs {
    /// The auto-replay fields given, as a patch of the auto-replay policy.
    pub fn patch(&self) -> AutoReplayPatch {
        AutoReplayPatch {
            enabled: self.auto_replay,
            max_replay_attempts: self.max_replay_attempts,
            judge_delay_ms: self.replay_delay,
            max_chunk_bytes: self.replay_chunk_bytes,
            max_chunk_events: self.replay_chunk_events,
            destination: None,
        }
    }

    /// Whether no flag at all was given.
    pub fn is_empty(&self) -> bool {
        self.patch().is_empty() && self.dead_letter_retention.is_none()
    }
}

/// A clap value parser for `--dead-letter-retention`: a duration of at most 3650 days, or
/// `0` (forever). Returns milliseconds.
pub fn parse_retention_ms(s: &str) -> Result<u64, String> {
    let ms = parse_duration_ms(s)?;
    check_dead_letter_retention(ms, "dead_letter_retention_ms").map_err(|e| {
        format!(
            "invalid dead-letter retention {s:?}: {} (at most {})",
            e.why,
            format_duration_ms(MAX_DEAD_LETTER_RETENTION_MS)
        )
    })?;
    Ok(ms)
}

/// A retention as `--dead-letter-retention` reads it, `forever` for 0.
pub fn retention_text(ms: u64) -> String {
    if ms == 0 {
        "forever".to_owned()
    } else {
        format_duration_ms(ms)
    }
}

/// Adds the auto-replay policy to `kv`, one line per field; `sep` joins the words of a
/// key (`_` for `queue show`, ` ` for `sub show`, as their other keys).
pub fn describe(kv: &mut KeyValues, a: &AutoReplay, sep: &str) {
    let key = |k: &str| k.replace('_', sep);
    kv.add(key("auto_replay"), if a.enabled { "on" } else { "off" })
        .add(
            key("max_replay_attempts"),
            a.max_replay_attempts.to_string(),
        )
        .add(key("replay_delay"), format_duration_ms(a.judge_delay_ms))
        .add(key("replay_chunk_bytes"), a.max_chunk_bytes.to_string())
        .add(key("replay_chunk_events"), a.max_chunk_events.to_string())
        .add(
            key("replay_destination"),
            match a.destination {
                ReplayDestination::Origin => "origin",
            },
        );
}

/// `redrive replay ...`.
#[derive(Debug, Subcommand)]
pub enum ReplayCommand {
    /// Replay counts of one queue, or of every queue with dead letters.
    ///
    /// Live records, replay candidates, failing and flagged ones, archived ones, and
    /// quarantined ones by cause (`manual`: moved there by an operator).
    Status {
        /// Queue name (every queue with dead letters when left out).
        #[arg(value_parser = queue_name)]
        queue: Option<String>,
    },
    /// The dry run of a bounded replay plan: what it would replay, grouped by reason and
    /// type, its bytes and the least time it takes under the budget, and the gate that
    /// blocks each item now. Nothing is touched. Every budget limit must be given (the
    /// window defaults to 10): an unbounded replay is refused.
    Preview(Box<PreviewArgs>),
}

/// `redrive replay preview`.
#[derive(Debug, Args)]
pub struct PreviewArgs {
    /// The queue whose dead letters (open cases) are replayed.
    #[arg(value_parser = queue_name)]
    pub queue: String,
    /// Only this reason code (repeatable).
    #[arg(long = "reason", value_name = "REASON")]
    pub reasons: Vec<String>,
    /// Only this message type (repeatable).
    #[arg(long = "type", value_name = "TYPE")]
    pub types: Vec<String>,
    /// Only this case (repeatable).
    #[arg(long = "case", value_name = "ID")]
    pub cases: Vec<String>,
    /// Dead-lettered at or after (RFC 3339).
    #[arg(long)]
    pub from: Option<String>,
    /// Dead-lettered before (RFC 3339).
    #[arg(long)]
    pub to: Option<String>,
    /// Replay to this queue instead of the one the items came from.
    #[arg(long, value_parser = queue_name)]
    pub destination: Option<String>,
    /// Items admitted per second.
    #[arg(long, value_name = "N")]
    pub items_per_s: Option<f64>,
    /// Bytes admitted per second (e.g. 64KiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u32)]
    pub bytes_per_s: Option<u32>,
    /// Deliveries in flight at once.
    #[arg(long, value_name = "N")]
    pub concurrency: Option<u32>,
    /// Items per admission window (default 10).
    #[arg(long, value_name = "N")]
    pub window: Option<u32>,
    /// The dependency the replay draws on.
    #[arg(long, value_name = "NAME", requires_all = ["probe", "max_error_rate", "max_latency"])]
    pub dependency: Option<String>,
    /// Its health probe URL.
    #[arg(long, value_name = "URL")]
    pub probe: Option<String>,
    /// The highest error rate (0 to 1) that lets the plan go on.
    #[arg(long, value_name = "RATE")]
    pub max_error_rate: Option<f64>,
    /// The highest latency that lets the plan go on (e.g. 250ms).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub max_latency: Option<u64>,
}

impl PreviewArgs {
    /// The plan as the API takes it.
    pub fn spec(&self) -> redrive_api::replay::PlanSpec {
        use redrive_api::replay::{PlanBudget, PlanDependency, PlanSelection, PlanSpec};
        PlanSpec {
            selection: PlanSelection {
                queue: self.queue.clone(),
                reasons: self.reasons.clone(),
                types: self.types.clone(),
                from: self.from.clone(),
                to: self.to.clone(),
                case_ids: self.cases.clone(),
            },
            destination: self.destination.clone(),
            budget: PlanBudget {
                items_per_s: self.items_per_s,
                bytes_per_s: self.bytes_per_s.map(u64::from),
                max_concurrent: self.concurrency,
                window: self.window,
                dependency: self.dependency.clone().map(|name| PlanDependency {
                    name,
                    probe_url: self.probe.clone().unwrap_or_default(),
                    max_error_rate: self.max_error_rate.unwrap_or_default(),
                    max_latency_ms: self.max_latency.unwrap_or_default(),
                }),
            },
        }
    }
}

/// Runs a `replay` command.
pub async fn run(ctx: &Ctx, cmd: ReplayCommand) -> anyhow::Result<()> {
    match cmd {
        ReplayCommand::Status { queue: Some(queue) } => {
            let status = ctx
                .client
                .replay_status(&queue)
                .await
                .with_context(|| format!("replay status of {queue}"))?;
            if ctx.json {
                return print_json(&status);
            }
            print!("{}", status_table(std::slice::from_ref(&status)).render());
        }
        ReplayCommand::Status { queue: None } => {
            let list = ctx
                .client
                .replay_statuses()
                .await
                .context("replay status")?;
            if ctx.json {
                return print_json(&list);
            }
            if list.entities.is_empty() {
                println!("no queue has dead letters");
            } else {
                print!("{}", status_table(&list.entities).render());
            }
        }
        ReplayCommand::Preview(args) => {
            let p = ctx
                .client
                .preview_plan(&args.spec())
                .await
                .with_context(|| format!("preview a replay of {}", args.queue))?;
            if ctx.json {
                return print_json(&p);
            }
            let mut kv = KeyValues::new();
            kv.add("items", p.items.to_string())
                .add("bytes", p.bytes.to_string())
                .add("eligible now", p.eligible.to_string())
                .add(
                    "at least",
                    format!("{} under the budget", format_duration_ms(p.lower_bound_ms)),
                )
                .add("by reason", counts_text(&p.by_reason))
                .add(
                    "by type",
                    counts_text(
                        &p.by_type
                            .iter()
                            .map(|(k, v)| {
                                let k = if k.is_empty() { "(none)" } else { k.as_str() };
                                (k.to_owned(), *v)
                            })
                            .collect(),
                    ),
                )
                .add("blocked", counts_text(&p.blocked));
            print!("{}", kv.render());
            if !p.item_list.is_empty() {
                let mut t = Table::new(["CASE", "MESSAGE-ID", "REASON", "BYTES", "GATE"]);
                for i in &p.item_list {
                    t.row([
                        i.case_id.clone(),
                        i.message_id.clone(),
                        i.reason.clone(),
                        i.bytes.to_string(),
                        i.gate.clone().unwrap_or_else(|| "-".to_owned()),
                    ]);
                }
                print!("{}", t.render());
            }
            if p.truncated {
                println!("(first {} of {} items listed)", p.item_list.len(), p.items);
            }
        }
    }
    Ok(())
}

/// One row per queue; QUARANTINED is the total, BY-CAUSE its parts.
pub fn status_table(statuses: &[ReplayStatus]) -> Table {
    let mut t = Table::new([
        "QUEUE",
        "LIVE",
        "CANDIDATES",
        "FAILING",
        "FLAGGED",
        "ARCHIVED",
        "QUARANTINED",
        "BY-CAUSE",
    ]);
    for s in statuses {
        t.row([
            s.queue.clone(),
            s.live.to_string(),
            s.candidates.to_string(),
            s.failing.to_string(),
            s.flagged.to_string(),
            s.archived.to_string(),
            s.quarantined.values().sum::<u64>().to_string(),
            counts_text(&s.quarantined),
        ]);
    }
    t
}

/// `a=1, b=2` in key order, or `-` when empty.
pub fn counts_text(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "-".to_owned();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_takes_durations_and_zero_and_refuses_more_than_ten_years() {
        assert_eq!(parse_retention_ms("0"), Ok(0));
        assert_eq!(parse_retention_ms("7d"), Ok(604_800_000));
        assert_eq!(
            parse_retention_ms("3650d"),
            Ok(MAX_DEAD_LETTER_RETENTION_MS)
        );
        let err = parse_retention_ms("3651d").unwrap_err();
        assert!(err.contains("dead-letter retention"), "{err}");
        assert!(err.contains("3650d"), "{err}");
        assert!(parse_retention_ms("soon").unwrap_err().contains("duration"));
        assert_eq!(retention_text(0), "forever");
        assert_eq!(retention_text(604_800_000), "7d");
    }

    #[test]
    fn status_rows_total_the_quarantine_and_list_its_causes() {
        let s = ReplayStatus {
            queue: "orders".to_owned(),
            live: 3,
            candidates: 2,
            failing: 1,
            flagged: 0,
            archived: 4,
            quarantined: BTreeMap::from([
                ("NotIdempotent".to_owned(), 2),
                ("manual".to_owned(), 1),
            ]),
        };
        let text = status_table(&[s]).render();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("QUEUE"), "{text}");
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "orders",
                "3",
                "2",
                "1",
                "0",
                "4",
                "3",
                "NotIdempotent=2,",
                "manual=1"
            ]
        );
    }
}
