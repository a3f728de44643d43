//! `redrive replay status`: where each queue's dead letters stand in automatic replay; and
//! the replay flags shared by `queue create|update` and `sub create|update` (auto-replay
//! and dead-letter retention), with how `queue show` / `sub show` print them.

use std::collections::BTreeMap;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use redrive_core::plan;
use redrive_core::policy::{MAX_DEAD_LETTER_RETENTION_MS, check_dead_letter_retention};
use redrive_core::replay::{
    AutoReplay, AutoReplayPatch, MAX_CHUNK_EVENTS_LIMIT, MAX_REPLAY_ATTEMPTS_LIMIT,
    ReplayDestination,
};

use super::{Ctx, queue_name};
use crate::failure::{Stopped, input_error};
use crate::output::{KeyValues, Table, or_dash, print_json};
use crate::progress::{Progress, Step};
use crate::units::{
    format_duration_ms, parse_duration_ms, parse_size, parse_size_u32, ranged, ranged_u32,
};
use redrive_api::replay::{CreatePlan, PlanItemList, ReplayPlan, ReplayStatus};

/// Auto-replay and retention flags: only those given are set (a create starts from the
/// defaults).
#[derive(Debug, Clone, Default, Args)]
pub struct ReplayArgs {
    /// Replay live dead letters automatically (`=false` turns it off).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    pub auto_replay: Option<bool>,
    /// Replays of one event before it is quarantined (1 to 100; default 3).
    #[arg(long, value_name = "N", value_parser = ranged_u32(1, MAX_REPLAY_ATTEMPTS_LIMIT))]
    pub max_replay_attempts: Option<u32>,
    /// Delay before a dead letter is judged for replay (e.g. 30s; at most 7d; default 0).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub replay_delay: Option<u64>,
    /// Byte budget of one republished chunk (e.g. 512KiB; 1KiB to 256MiB; default 1MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u32)]
    pub replay_chunk_bytes: Option<u32>,
    /// Event budget of one republished chunk (1 to 5000; default 5000).
    #[arg(long, value_name = "N", value_parser = ranged_u32(1, MAX_CHUNK_EVENTS_LIMIT))]
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
    /// Replay counts of one queue, or of every queue with dead letters; or, given a plan id
    /// (`plan_…`, or an SQS move task's `mv_…`), where that replay plan stands.
    ///
    /// Live records, replay candidates, failing and flagged ones, undecodable ones (rows
    /// this build cannot read, set aside), archived ones, and quarantined ones by cause
    /// (`manual`: moved there by an operator). For a plan: its
    /// status, progress, rates, window, ETA and stop reason (a stopped plan still exits 0;
    /// followed, it exits 4).
    Status {
        /// Queue name (every queue with dead letters when left out), or a plan id.
        #[arg(value_parser = queue_name)]
        queue: Option<String>,
        /// For a plan: redraw its progress every second until it ends.
        #[arg(long)]
        follow: bool,
    },
    /// The dry run of a bounded replay plan: what it would replay, grouped by reason and
    /// type, its bytes and the least time it takes under the budget, and the gate that
    /// blocks each item now. Nothing is touched. Every budget limit must be given (the
    /// window defaults to 10): an unbounded replay is refused.
    Preview(Box<PreviewArgs>),
    /// Creates a bounded replay plan owned by the caller: its items (the open cases the
    /// selection names now), budget and destination are fixed; it starts planned. Every
    /// budget limit must be given (the window defaults to 10): an unbounded replay is
    /// refused.
    Plan(Box<PlanArgs>),
    /// Starts a planned plan.
    Start {
        /// The plan id.
        id: String,
        /// Redraw its progress every second until it ends.
        #[arg(long)]
        follow: bool,
    },
    /// Pauses a running plan: nothing more is admitted; replays in flight are still
    /// observed.
    Pause {
        /// The plan id.
        id: String,
    },
    /// Resumes a paused plan under the same budget and evidence.
    Resume {
        /// The plan id.
        id: String,
    },
    /// Cancels a plan that has not ended.
    Cancel {
        /// The plan id.
        id: String,
    },
    /// Lists replay plans (those over queues the token may read cases of).
    Plans {
        /// Only plans in this status (planned, running, paused, stopped, completed,
        /// cancelled; repeatable).
        #[arg(long = "status", value_name = "STATUS")]
        statuses: Vec<String>,
        /// Only plans over this queue.
        #[arg(long, value_parser = queue_name)]
        queue: Option<String>,
    },
    /// Lists a plan's items in admission order.
    Items {
        /// The plan id.
        id: String,
        /// Only items in this state (waiting, held, admitted, completed, stopped, closed;
        /// repeatable).
        #[arg(long = "state", value_name = "STATE")]
        states: Vec<String>,
        /// At most this many items (1 to 10000) [server default: 1000].
        #[arg(long, value_name = "N", allow_negative_numbers = true,
              value_parser = ranged(1, 10_000))]
        limit: Option<u64>,
        /// Only items after this position in admission order (from an earlier page).
        #[arg(long, value_name = "SEQ", allow_negative_numbers = true,
              value_parser = ranged(0, u64::from(u32::MAX)))]
        after: Option<u64>,
    },
}

/// Whether `s` names a replay plan rather than a queue.
fn is_plan_id(s: &str) -> bool {
    s.starts_with("plan_") || is_move_task_handle(s)
}

/// Whether `s` has the shape of an SQS message move task's handle (`mv_` and 32 lowercase
/// hex digits): such a task is an `sqs_move` replay plan, shown as one.
fn is_move_task_handle(s: &str) -> bool {
    s.strip_prefix("mv_").is_some_and(|hex| {
        hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// `redrive replay preview`.
#[derive(Debug, Args)]
pub struct PreviewArgs {
    /// The queue whose dead letters (open cases) are replayed (with --group or
    /// --signature, the group's or the signature's queue when left out).
    #[arg(value_parser = queue_name, required_unless_present_any = ["group", "signature"])]
    pub queue: Option<String>,
    /// What is selected, and where it goes.
    #[command(flatten)]
    pub selection: SelectionArgs,
    /// The budget.
    #[command(flatten)]
    pub budget: BudgetArgs,
}

/// What a plan replays, in words: its queue, its case group, or its failure signature.
fn what(queue: Option<&str>, selection: &SelectionArgs) -> String {
    match (queue, &selection.group, &selection.signature) {
        (_, Some(g), _) => format!("case group {g}"),
        (Some(q), None, Some(sig)) => format!("{q} (failure signature {sig})"),
        (None, None, Some(sig)) => format!("failure signature {sig}"),
        (Some(q), None, None) => q.to_owned(),
        (None, None, None) => "(no queue)".to_owned(),
    }
}

impl PreviewArgs {
    /// What the preview replays, in words.
    fn what(&self) -> String {
        what(self.queue.as_deref(), &self.selection)
    }
}

/// A plan's selection (but its queue) and destination.
#[derive(Debug, Clone, Args)]
pub struct SelectionArgs {
    /// Only this reason code (repeatable).
    #[arg(long = "reason", value_name = "REASON")]
    pub reasons: Vec<String>,
    /// Only this message type (repeatable).
    #[arg(long = "type", value_name = "TYPE")]
    pub types: Vec<String>,
    /// Only this case (repeatable).
    #[arg(long = "case", value_name = "ID", conflicts_with = "group")]
    pub cases: Vec<String>,
    /// The cases of this case group (grp_…; `redrive case group create`).
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Only the cases whose dead letter has this failure signature (32 hex digits; see
    /// `redrive failures`).
    #[arg(long, value_name = "SIG", conflicts_with_all = ["group", "cases"])]
    pub signature: Option<String>,
    /// Dead-lettered at or after (RFC 3339).
    #[arg(long)]
    pub from: Option<String>,
    /// Dead-lettered before (RFC 3339).
    #[arg(long)]
    pub to: Option<String>,
    /// Replay to this queue instead of the one the items came from.
    #[arg(long, value_parser = queue_name)]
    pub destination: Option<String>,
}

impl SelectionArgs {
    fn selection(&self, queue: Option<&str>) -> redrive_api::replay::PlanSelection {
        redrive_api::replay::PlanSelection {
            queue: queue.unwrap_or_default().to_owned(),
            group: self.group.clone(),
            reasons: self.reasons.clone(),
            types: self.types.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            case_ids: self.cases.clone(),
            signature: self.signature.clone(),
        }
    }
}

/// A plan's budget: every limit but the window must be given (the server refuses an
/// unbounded replay, naming what is left out).
#[derive(Debug, Clone, Args)]
pub struct BudgetArgs {
    /// Items admitted per second (0.001 to 100000).
    #[arg(long, value_name = "N", value_parser = items_per_s_arg)]
    pub items_per_s: Option<f64>,
    /// Bytes admitted per second (e.g. 64KiB; 1KiB to 10GiB).
    #[arg(long, value_name = "SIZE", value_parser = bytes_per_s_arg)]
    pub bytes_per_s: Option<u64>,
    /// Deliveries in flight at once (1 to 1000).
    #[arg(long, value_name = "N", value_parser = concurrency_arg)]
    pub concurrency: Option<u32>,
    /// Items per admission window (1 to 100000; default 10).
    #[arg(long, value_name = "N", value_parser = window_arg)]
    pub window: Option<u32>,
    /// The dependency the replay draws on (1 to 128 letters, digits, '-', '_', '.', ':').
    #[arg(long, value_name = "NAME", value_parser = dependency_arg,
          requires_all = ["probe", "max_error_rate", "max_latency"])]
    pub dependency: Option<String>,
    /// Its health probe URL (http:// or https://).
    #[arg(long, value_name = "URL", value_parser = probe_arg)]
    pub probe: Option<String>,
    /// The highest error rate (0 to 1) that lets the plan go on.
    #[arg(long, value_name = "RATE", value_parser = error_rate_arg)]
    pub max_error_rate: Option<f64>,
    /// The highest latency that lets the plan go on (e.g. 250ms; at most 1h).
    #[arg(long, value_name = "DUR", value_parser = latency_arg)]
    pub max_latency: Option<u64>,
}

// The budget flags are judged by the same functions as the server's (redrive_core::plan),
// so a flag out of its range is refused here, naming the field and the range, with exit
// status 2, before a request is sent.

fn items_per_s_arg(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("invalid number {s:?}"))?;
    plan::check_items_per_s(v).map_err(|e| e.to_string())
}

fn bytes_per_s_arg(s: &str) -> Result<u64, String> {
    let lower = s.trim().to_ascii_lowercase();
    let giga = [("gib", 1u64 << 30), ("g", 1 << 30), ("gb", 1_000_000_000)];
    let v = match giga
        .iter()
        .find_map(|(unit, f)| lower.strip_suffix(unit).map(|n| (n.trim(), *f)))
    {
        Some((n, f)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => n
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(f))
            .ok_or_else(|| format!("invalid size {s:?} (expected e.g. 64KiB, 1MiB, 2GiB)"))?,
        _ => parse_size(s)?,
    };
    plan::check_bytes_per_s(v).map_err(|e| e.to_string())
}

fn concurrency_arg(s: &str) -> Result<u32, String> {
    let v: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("invalid number {s:?}"))?;
    plan::check_max_concurrent(v).map_err(|e| e.to_string())
}

fn window_arg(s: &str) -> Result<u32, String> {
    let v: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("invalid number {s:?}"))?;
    plan::check_window(v).map_err(|e| e.to_string())
}

fn dependency_arg(s: &str) -> Result<String, String> {
    plan::check_dependency_name(s)
        .map(str::to_owned)
        .map_err(|e| e.to_string())
}

fn probe_arg(s: &str) -> Result<String, String> {
    plan::check_probe_url(s)
        .map(str::to_owned)
        .map_err(|e| e.to_string())
}

fn error_rate_arg(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("invalid number {s:?}"))?;
    plan::check_max_error_rate(v).map_err(|e| e.to_string())
}

fn latency_arg(s: &str) -> Result<u64, String> {
    plan::check_max_latency_ms(parse_duration_ms(s)?).map_err(|e| e.to_string())
}

fn lease_arg(s: &str) -> Result<u64, String> {
    plan::check_lease_ms(Some(parse_duration_ms(s)?)).map_err(|e| e.to_string())
}

fn observe_arg(s: &str) -> Result<u64, String> {
    plan::check_observe_ms(Some(parse_duration_ms(s)?)).map_err(|e| e.to_string())
}

fn correction_arg(s: &str) -> Result<String, String> {
    plan::check_correction(s)
        .map(str::to_owned)
        .map_err(|e| e.to_string())
}

impl BudgetArgs {
    fn budget(&self) -> redrive_api::replay::PlanBudget {
        use redrive_api::replay::{PlanBudget, PlanDependency};
        PlanBudget {
            items_per_s: self.items_per_s,
            bytes_per_s: self.bytes_per_s,
            max_concurrent: self.concurrency,
            window: self.window,
            dependency: self.dependency.clone().map(|name| PlanDependency {
                name,
                probe_url: self.probe.clone().unwrap_or_default(),
                max_error_rate: self.max_error_rate.unwrap_or_default(),
                max_latency_ms: self.max_latency.unwrap_or_default(),
            }),
        }
    }
}

impl PreviewArgs {
    /// The plan as the API takes it.
    pub fn spec(&self) -> redrive_api::replay::PlanSpec {
        redrive_api::replay::PlanSpec {
            selection: self.selection.selection(self.queue.as_deref()),
            destination: self.selection.destination.clone(),
            budget: self.budget.budget(),
        }
    }
}

/// `redrive replay plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The queue whose dead letters (open cases) are replayed (with --group or
    /// --signature, the group's or the signature's queue when left out).
    #[arg(value_parser = queue_name, required_unless_present_any = ["group", "signature"])]
    pub queue: Option<String>,
    /// What is selected, and where it goes.
    #[command(flatten)]
    pub selection: SelectionArgs,
    /// The correction every item's case must carry (its identity).
    #[arg(long, value_name = "ID", value_parser = correction_arg)]
    pub correction: Option<String>,
    /// The owner's lease on the plan, renewed by start and resume (e.g. 2h; default 1h,
    /// 1m to 7d): when it runs out the plan stops.
    #[arg(long, value_name = "DUR", value_parser = lease_arg)]
    pub lease: Option<u64>,
    /// The dependency's observation window (e.g. 30s; default 10s, 100ms to 1h).
    #[arg(long, value_name = "DUR", value_parser = observe_arg)]
    pub observe: Option<u64>,
    /// The budget.
    #[command(flatten)]
    pub budget: BudgetArgs,
}

impl PlanArgs {
    /// What the plan replays, in words: its queue, its case group or its signature.
    fn what(&self) -> String {
        what(self.queue.as_deref(), &self.selection)
    }

    /// The plan as the API takes it.
    pub fn request(&self) -> CreatePlan {
        CreatePlan {
            selection: self.selection.selection(self.queue.as_deref()),
            destination: self.selection.destination.clone(),
            budget: self.budget.budget(),
            correction: self.correction.clone(),
            lease_ms: self.lease,
            observe_ms: self.observe,
        }
    }
}

/// Runs a `replay` command.
pub async fn run(ctx: &Ctx, cmd: ReplayCommand) -> anyhow::Result<()> {
    match cmd {
        ReplayCommand::Status {
            queue: Some(id),
            follow,
        } if is_plan_id(&id) => {
            plan_status(ctx, &id, follow).await?;
        }
        ReplayCommand::Status { follow: true, .. } => {
            return Err(input_error("--follow takes a plan id (plan_…)"));
        }
        ReplayCommand::Status {
            queue: Some(queue), ..
        } => {
            let status = ctx
                .client
                .recovery()
                .replay_status(&queue)
                .await
                .with_context(|| format!("replay status of {queue}"))?;
            if ctx.json {
                return print_json(&status);
            }
            print!("{}", status_table(std::slice::from_ref(&status)).render());
        }
        ReplayCommand::Status { queue: None, .. } => {
            let list = ctx
                .client
                .recovery()
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
                .recovery()
                .preview_plan(&args.spec())
                .await
                .with_context(|| format!("preview a replay of {}", args.what()))?;
            if ctx.json {
                return print_json(&p);
            }
            print!("{}", preview_text(&p));
        }
        ReplayCommand::Plan(args) => {
            let plan = ctx
                .client
                .recovery()
                .create_plan(&args.request())
                .await
                .with_context(|| format!("create a replay plan of {}", args.what()))?;
            if ctx.json {
                return print_json(&plan);
            }
            println!("created plan {} ({})", plan.id, plan.status);
            print!("{}", plan_summary(&plan).render());
            println!("start it with: redrive replay start {}", plan.id);
        }
        ReplayCommand::Start { id, follow } => {
            let plan = ctx
                .client
                .recovery()
                .change_plan(&id, "start")
                .await
                .with_context(|| format!("start replay plan {id}"))?;
            if follow {
                return follow_plan(ctx, plan).await;
            }
            changed(ctx, &plan, "started")?;
        }
        ReplayCommand::Pause { id } => {
            let plan = ctx
                .client
                .recovery()
                .change_plan(&id, "pause")
                .await
                .with_context(|| format!("pause replay plan {id}"))?;
            changed(ctx, &plan, "paused")?;
        }
        ReplayCommand::Resume { id } => {
            let plan = ctx
                .client
                .recovery()
                .change_plan(&id, "resume")
                .await
                .with_context(|| format!("resume replay plan {id}"))?;
            changed(ctx, &plan, "resumed")?;
        }
        ReplayCommand::Cancel { id } => {
            let plan = ctx
                .client
                .recovery()
                .change_plan(&id, "cancel")
                .await
                .with_context(|| format!("cancel replay plan {id}"))?;
            changed(ctx, &plan, "cancelled")?;
        }
        ReplayCommand::Plans { statuses, queue } => {
            let mut pairs = Vec::new();
            if !statuses.is_empty() {
                pairs.push(("status", statuses.join(",")));
            }
            if let Some(q) = queue {
                pairs.push(("queue", q));
            }
            let list = ctx
                .client
                .recovery()
                .list_plans(&pairs)
                .await
                .context("list replay plans")?;
            if ctx.json {
                return print_json(&list);
            }
            if list.plans.is_empty() {
                println!("no replay plans");
                return Ok(());
            }
            let mut t = Table::new([
                "ID",
                "KIND",
                "QUEUE",
                "DESTINATION",
                "OWNER",
                "STATUS",
                "ITEMS",
                "DONE",
                "CREATED",
            ]);
            for p in &list.plans {
                t.row([
                    p.id.clone(),
                    p.kind.clone(),
                    p.queue.clone(),
                    destination_text(p),
                    p.owner.clone(),
                    status_text(p),
                    p.progress.items.to_string(),
                    done(p).to_string(),
                    p.created_at.clone(),
                ]);
            }
            print!("{}", t.render());
        }
        ReplayCommand::Items {
            id,
            states,
            limit,
            after,
        } => {
            let mut pairs = Vec::new();
            if !states.is_empty() {
                pairs.push(("state", states.join(",")));
            }
            if let Some(n) = limit {
                pairs.push(("limit", n.to_string()));
            }
            if let Some(seq) = after {
                pairs.push(("after", seq.to_string()));
            }
            let list = ctx
                .client
                .recovery()
                .plan_items(&id, &pairs)
                .await
                .with_context(|| format!("items of replay plan {id}"))?;
            if ctx.json {
                return print_json(&list);
            }
            print!("{}", items_table(&list).render());
        }
    }
    Ok(())
}

/// Prints a plan after an owner's change.
fn changed(ctx: &Ctx, plan: &ReplayPlan, what: &str) -> anyhow::Result<()> {
    if ctx.json {
        return print_json(plan);
    }
    println!("{what} plan {} ({})", plan.id, plan.status);
    print!("{}", plan_summary(plan).render());
    Ok(())
}

/// `replay status ID [--follow]`.
async fn plan_status(ctx: &Ctx, id: &str, follow: bool) -> anyhow::Result<()> {
    let plan = ctx
        .client
        .recovery()
        .get_plan(id)
        .await
        .with_context(|| format!("status of replay plan {id}"))?;
    if follow {
        return follow_plan(ctx, plan).await;
    }
    if ctx.json {
        return print_json(&plan);
    }
    print!("{}", plan_summary(&plan).render());
    Ok(())
}

/// Whether a plan has ended (stopped, completed or cancelled).
fn ended(plan: &ReplayPlan) -> bool {
    matches!(plan.status.as_str(), "stopped" | "completed" | "cancelled")
}

/// Follows a plan every second until it ends: a bar redrawn in place on a terminal, a
/// line per interval when piped ([`Progress`]); with `--json`, the plan as it ended. A
/// plan that ended stopped exits 4 ([`Stopped`]) after printing its stop detail. The
/// interval is the client's wall time (display only).
async fn follow_plan(ctx: &Ctx, mut plan: ReplayPlan) -> anyhow::Result<()> {
    let mut progress = Progress::stdout(ctx.json);
    while !ended(&plan) {
        progress.show(&progress_step(&plan));
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        plan = ctx
            .client
            .recovery()
            .get_plan(&plan.id)
            .await
            .with_context(|| format!("status of replay plan {}", plan.id))?;
    }
    progress.finish(&progress_step(&plan));
    if ctx.json {
        print_json(&plan)?;
    } else if let Some(d) = &plan.stop_detail {
        println!("stopped: {d}");
    }
    if plan.status == "stopped" {
        return Err(anyhow::Error::new(Stopped(format!(
            "replay plan {} stopped ({})",
            plan.id,
            plan.stop_reason.as_deref().unwrap_or("no reason given")
        ))));
    }
    Ok(())
}

/// Where a plan's replays go: its destination, or (an `sqs_move` plan naming none) each
/// message back to its source.
fn destination_text(p: &ReplayPlan) -> String {
    p.destination
        .clone()
        .unwrap_or_else(|| "(each to its source)".to_owned())
}

/// Items settled: completed, stopped, closed or held.
fn done(p: &ReplayPlan) -> u64 {
    let g = &p.progress;
    g.completed + g.stopped + g.closed + g.held
}

/// The status, with the stop reason when stopped.
fn status_text(p: &ReplayPlan) -> String {
    match &p.stop_reason {
        Some(r) => format!("{} ({r})", p.status),
        None => p.status.clone(),
    }
}

/// Where a plan stands, for [`Progress`]: items (or messages moved) done of total, then
/// what is in flight and waiting, the rates against the budget, the bytes, the window,
/// the ETA and the status with its stop reason.
pub fn progress_step(p: &ReplayPlan) -> Step {
    let g = &p.progress;
    if let Some(m) = &p.sqs_move {
        let budget = m
            .max_per_second
            .map_or_else(|| "no limit".to_owned(), |r| r.to_string());
        return Step {
            name: format!("{} (sqs_move)", p.id),
            done: m.moved,
            total: Some(m.to_move),
            unit: "messages moved",
            detail: format!(
                "{:.2} of {budget} items/s; eta {}; {}",
                m.items_per_s,
                format_duration_ms(g.eta_ms),
                status_text(p)
            ),
        };
    }
    let (rate, bytes_rate, window) = p.budget.as_ref().map_or_else(
        || ("-".to_owned(), "-".to_owned(), 0),
        |b| {
            (
                format_rate(b.items_per_s),
                b.bytes_per_s.to_string(),
                b.window,
            )
        },
    );
    Step {
        name: p.id.clone(),
        done: done(p),
        total: Some(g.items),
        unit: "items done",
        detail: format!(
            "{} in flight, {} waiting; {:.2} of {rate} items/s, {:.0} of {bytes_rate} bytes/s; {} bytes admitted; window {} ({}/{window}); eta {}; {}",
            g.in_flight,
            g.waiting,
            g.items_per_s,
            g.bytes_per_s,
            g.bytes_admitted,
            g.window,
            g.window_admitted,
            format_duration_ms(g.eta_ms),
            status_text(p)
        ),
    }
}

/// A budget's rate as typed (`1`, `0.5`), without trailing zeros.
fn format_rate(r: f64) -> String {
    let s = format!("{r:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A plan as key/value lines.
pub fn plan_summary(p: &ReplayPlan) -> KeyValues {
    let g = &p.progress;
    let mut kv = KeyValues::new();
    kv.add("id", p.id.clone())
        .add("kind", p.kind.clone())
        .add("status", p.status.clone());
    if let Some(r) = &p.stop_reason {
        kv.add("stop reason", r.clone());
    }
    if let Some(d) = &p.stop_detail {
        kv.add("stop detail", d.clone());
    }
    kv.add("queue", p.queue.clone())
        .add("destination", destination_text(p))
        .add("owner", p.owner.clone());
    if let Some(m) = &p.sqs_move {
        kv.add("moved", format!("{} of {}", m.moved, m.to_move))
            .add(
                "budget",
                match m.max_per_second {
                    Some(r) => format!("{r} items/s"),
                    None => format!(
                        "{} items/s (none named: the highest move rate)",
                        m.items_per_s
                    ),
                },
            )
            .add("eta", format!("at least {}", format_duration_ms(g.eta_ms)))
            .add("created", p.created_at.clone());
        return kv;
    }
    if let Some(u) = &p.owner_until {
        kv.add("owner until", u.clone());
    }
    kv.add(
        "items",
        format!(
            "{} ({} waiting, {} admitted, {} in flight, {} completed, {} stopped, {} closed, {} held)",
            g.items, g.waiting, g.admitted, g.in_flight, g.completed, g.stopped, g.closed, g.held
        ),
    )
    .add("bytes admitted", g.bytes_admitted.to_string())
    .add(
        "rate",
        format!("{:.2} items/s, {:.0} bytes/s", g.items_per_s, g.bytes_per_s),
    );
    if let Some(b) = &p.budget {
        kv.add(
            "window",
            format!(
                "{} ({} of {} admitted)",
                g.window, g.window_admitted, b.window
            ),
        )
        .add("eta", format!("at least {}", format_duration_ms(g.eta_ms)))
        .add(
            "budget",
            format!(
                "{} items/s, {} bytes/s, {} concurrent, window {}",
                b.items_per_s, b.bytes_per_s, b.max_concurrent, b.window
            ),
        )
        .add(
            "dependency",
            format!(
                "{} ({}; error rate <= {}, latency <= {})",
                b.dependency.name,
                b.dependency.probe_url,
                b.dependency.max_error_rate,
                format_duration_ms(b.dependency.max_latency_ms)
            ),
        );
    }
    if let Some(c) = &p.correction {
        kv.add("correction", c.clone());
    }
    kv.add("created", p.created_at.clone());
    kv
}

/// One row per item.
pub fn items_table(list: &PlanItemList) -> Table {
    let mut t = Table::new([
        "SEQ",
        "CASE",
        "BYTES",
        "STATE",
        "WINDOW",
        "MESSAGE-ID",
        "DETAIL",
    ]);
    for i in &list.items {
        t.row([
            i.seq.to_string(),
            i.case_id.clone(),
            i.bytes.to_string(),
            i.state.clone(),
            or_dash(i.window),
            or_dash(i.message_id.clone()),
            or_dash(i.detail.clone()),
        ]);
    }
    t
}

/// One row per queue; QUARANTINED is the total, BY-CAUSE its parts.
pub fn status_table(statuses: &[ReplayStatus]) -> Table {
    let mut t = Table::new([
        "QUEUE",
        "LIVE",
        "CANDIDATES",
        "FAILING",
        "FLAGGED",
        "UNDECODABLE",
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
            s.undecodable.to_string(),
            s.archived.to_string(),
            s.quarantined.values().sum::<u64>().to_string(),
            counts_text(&s.quarantined),
        ]);
    }
    t
}

/// A preview as `replay preview` prints it: the totals, each blocking gate (why it holds,
/// and when it clears if the clock clears it), then the items.
fn preview_text(p: &redrive_api::replay::PlanPreview) -> String {
    let mut out = String::new();
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
    out.push_str(&kv.render());
    if !p.gates.is_empty() {
        // Each blocking gate, why it holds, and when it clears if the clock clears it.
        let mut t = Table::new(["GATE", "ITEMS", "CLEARS AT", "WHY"]);
        for g in &p.gates {
            t.row([
                g.gate.clone(),
                g.items.to_string(),
                or_dash(g.clears_at.as_ref()),
                g.detail.clone(),
            ]);
        }
        out.push_str(&t.render());
    }
    if !p.item_list.is_empty() {
        // The clear time only when some item has one: most gates wait on a person.
        let timed = p.item_list.iter().any(|i| i.clears_at.is_some());
        let mut headers = vec!["CASE", "MESSAGE-ID", "REASON", "BYTES", "GATE"];
        if timed {
            headers.push("CLEARS AT");
        }
        let mut t = Table::new(headers);
        for i in &p.item_list {
            let mut row = vec![
                i.case_id.clone(),
                i.message_id.clone(),
                i.reason.clone(),
                i.bytes.to_string(),
                i.gate.clone().unwrap_or_else(|| "-".to_owned()),
            ];
            if timed {
                row.push(or_dash(i.clears_at.as_ref()));
            }
            t.row(row);
        }
        out.push_str(&t.render());
    }
    if p.truncated {
        out.push_str(&format!(
            "(first {} of {} items listed)\n",
            p.item_list.len(),
            p.items
        ));
    }
    out
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
    fn a_preview_prints_each_blocking_gate_and_when_the_failing_path_clears() {
        use redrive_api::replay::{PlanPreview, PreviewGate, PreviewItem};
        let clears = "2027-01-15T07:05:00.000Z";
        let item = |case: &str, gate: &str, clears_at: Option<&str>| PreviewItem {
            case_id: case.to_owned(),
            message_id: format!("m-{case}"),
            reason: "ParseError".to_owned(),
            message_type: None,
            bytes: 10,
            gate: Some(gate.to_owned()),
            clears_at: clears_at.map(str::to_owned),
        };
        let p = PlanPreview {
            items: 2,
            bytes: 20,
            eligible: 0,
            lower_bound_ms: 2_000,
            by_reason: BTreeMap::from([("ParseError".to_owned(), 2)]),
            by_type: BTreeMap::from([(String::new(), 2)]),
            blocked: BTreeMap::from([
                ("destination_invalid".to_owned(), 1),
                ("no_tested_correction".to_owned(), 1),
            ]),
            gates: vec![
                PreviewGate {
                    gate: "destination_invalid".to_owned(),
                    detail: "the destination orders is the failing path".to_owned(),
                    items: 1,
                    clears_at: Some(clears.to_owned()),
                },
                PreviewGate {
                    gate: "no_tested_correction".to_owned(),
                    detail: "it needs a tested correction".to_owned(),
                    items: 1,
                    clears_at: None,
                },
            ],
            item_list: vec![
                item("c1", "destination_invalid", Some(clears)),
                item("c2", "no_tested_correction", None),
            ],
            truncated: false,
        };
        let text = preview_text(&p);
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        let has = |row: &[&str]| rows.iter().any(|r| r == row);
        assert!(has(&["GATE", "ITEMS", "CLEARS", "AT", "WHY"]), "{text}");
        assert!(
            has(&[
                "destination_invalid",
                "1",
                clears,
                "the",
                "destination",
                "orders",
                "is",
                "the",
                "failing",
                "path"
            ]),
            "{text}"
        );
        assert!(
            has(&[
                "no_tested_correction",
                "1",
                "-",
                "it",
                "needs",
                "a",
                "tested",
                "correction"
            ]),
            "{text}"
        );
        // The items carry their own time, when one of them has one.
        assert!(
            has(&[
                "CASE",
                "MESSAGE-ID",
                "REASON",
                "BYTES",
                "GATE",
                "CLEARS",
                "AT"
            ]),
            "{text}"
        );
        assert!(
            has(&[
                "c1",
                "m-c1",
                "ParseError",
                "10",
                "destination_invalid",
                clears
            ]),
            "{text}"
        );
        assert!(
            has(&[
                "c2",
                "m-c2",
                "ParseError",
                "10",
                "no_tested_correction",
                "-"
            ]),
            "{text}"
        );
        // Without a time-bound item, the items have no such column.
        let untimed = PlanPreview {
            item_list: vec![item("c2", "no_tested_correction", None)],
            ..p
        };
        let text = preview_text(&untimed);
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == ["CASE", "MESSAGE-ID", "REASON", "BYTES", "GATE"]),
            "{text}"
        );
    }

    #[test]
    fn plan_ids_and_move_task_handles_name_plans_and_anything_else_a_queue() {
        assert!(is_plan_id("plan_0123"));
        assert!(is_plan_id(&format!("mv_{}", "0a".repeat(16))));
        for queue in ["orders", "mv_orders", &format!("mv_{}", "0A".repeat(16))] {
            assert!(!is_plan_id(queue), "{queue}");
        }
    }

    #[test]
    fn a_plans_progress_counts_items_and_says_rates_against_the_budget() {
        let plan: ReplayPlan = serde_json::from_value(serde_json::json!({
            "id": "plan_1", "kind": "cases", "queue": "orders", "destination": "orders",
            "owner": "ops", "status": "stopped", "stop_reason": "error_rate",
            "stop_detail": null, "created_at": "t", "updated_at": "t", "owner_until": null,
            "selection": {"queue": "orders", "reasons": [], "types": [], "from": null,
                          "to": null, "case_ids": []},
            "correction": null,
            "budget": {"items_per_s": 0.5, "bytes_per_s": 1024, "max_concurrent": 2,
                       "window": 10, "dependency": {"name": "d", "probe_url": "http://p",
                       "max_error_rate": 0.1, "max_latency_ms": 100}},
            "lease_ms": null, "observe_ms": null, "sessions": {}, "baseline": null,
            "readings": [],
            "progress": {"items": 10, "waiting": 4, "admitted": 6, "in_flight": 1,
                         "completed": 3, "stopped": 1, "closed": 1, "held": 0,
                         "bytes_admitted": 600, "window": 1, "window_admitted": 6,
                         "items_per_s": 0.49, "bytes_per_s": 50.0, "eta_ms": 8000},
            "sqs_move": null
        }))
        .unwrap();
        let step = progress_step(&plan);
        assert_eq!((step.done, step.total), (5, Some(10)));
        let line = step.line();
        assert!(
            line.starts_with("plan_1: 5/10 items done; 1 in flight, 4 waiting"),
            "{line}"
        );
        assert!(
            line.contains("0.49 of 0.5 items/s, 50 of 1024 bytes/s"),
            "{line}"
        );
        assert!(
            line.contains("window 1 (6/10); eta 8s; stopped (error_rate)"),
            "{line}"
        );
    }

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
            undecodable: 5,
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
                "5",
                "4",
                "3",
                "NotIdempotent=2,",
                "manual=1"
            ]
        );
    }
}
