//! `redrive case group …`: case groups, the cases of one queue a person works as one —
//! create one from a selection, show or list them, and claim, release, diagnose,
//! correct, test and close every member by one decision.
//!
//! A decision goes to every member; a member that refuses it (claimed by another owner,
//! closed, not at the state it needs) is printed with why, the others take it, and the
//! command exits 5 so that a script notices.

use anyhow::Context as _;
use clap::{Args, Subcommand};
use redrive_api::case::{CaseGroup, ClaimCase, CloseCase, CreateCaseGroup, TestCaseGroup};

use super::case::{CorrectionArgs, DiagnosisArgs};
use super::{Ctx, queue_name};
use crate::failure::Partial;
use crate::output::{KeyValues, Table, or_dash, print_json};
use crate::units::{parse_duration_ms, parse_time, ranged_u32};

/// `redrive case group …`.
#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Create a group: the open cases of one queue that match every filter, now (its
    /// members are fixed then; at most 1000).
    Create(CreateArgs),
    /// Show a group: its selection, its decisions, and its members as they are now.
    Show {
        /// Group id (grp_…).
        id: String,
    },
    /// List groups, by id.
    List {
        /// Only the groups of this queue.
        #[arg(long, value_parser = queue_name)]
        queue: Option<String>,
        /// Continue after a previous page.
        #[arg(long)]
        cursor: Option<String>,
        /// Page size (1 to 1000) [server default: 100].
        #[arg(long, value_name = "N", value_parser = ranged_u32(1, 1_000))]
        limit: Option<u32>,
    },
    /// Claim every member (or renew one's claims): each is claimed as one case is.
    Claim {
        /// Group id.
        id: String,
        /// How long each claim holds (e.g. 1h; at most 24h) [server default: 15m].
        #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
        lease: Option<u64>,
    },
    /// Give up one's claim on every member.
    Release {
        /// Group id.
        id: String,
    },
    /// One diagnosis for every member: a hypothesis and what would disconfirm it.
    Diagnose {
        /// Group id.
        id: String,
        #[command(flatten)]
        diagnosis: DiagnosisArgs,
    },
    /// One correction for every member.
    Correct {
        /// Group id.
        id: String,
        #[command(flatten)]
        correction: CorrectionArgs,
    },
    /// An isolated test of each member's exact payload at one sandbox queue, as a batch.
    Test(TestArgs),
    /// Close every open member rejected or indeterminate, and the group.
    Close {
        /// Group id.
        id: String,
        /// The terminal state.
        #[arg(long, value_parser = ["rejected", "indeterminate"])]
        state: String,
        /// The evidence.
        #[arg(long)]
        evidence: String,
    },
}

/// `redrive case group create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The queue whose open cases the group holds.
    #[arg(value_parser = queue_name)]
    queue: String,
    /// Only this dead-letter reason code.
    #[arg(long)]
    reason: Option<String>,
    /// Only this message type.
    #[arg(long = "type", value_name = "TYPE")]
    message_type: Option<String>,
    /// Dead-lettered at or after (RFC 3339, or -DUR for "ago").
    #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
    from: Option<String>,
    /// Dead-lettered before (RFC 3339, or -DUR for "ago").
    #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
    to: Option<String>,
    /// Only this failure signature: the description with ids, numbers and times masked
    /// (`no amount in order <id>`), as `case group show` prints it.
    #[arg(long, value_name = "SIGNATURE")]
    signature: Option<String>,
    /// Only intents whose id starts with this.
    #[arg(long, value_name = "PREFIX")]
    intent_prefix: Option<String>,
}

/// `redrive case group test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Group id.
    id: String,
    /// The sandbox queue (a queue created with --test-sandbox).
    #[arg(long, value_name = "SANDBOX", value_parser = queue_name)]
    destination: String,
    /// Send each member's exact payload there now.
    #[arg(long)]
    send: bool,
    /// The outcome observed for every member not named by --failed.
    #[arg(long, value_parser = ["pass", "fail"])]
    outcome: String,
    /// A member whose payload failed the test (repeat for each).
    #[arg(long, value_name = "CASE")]
    failed: Vec<String>,
    /// The evidence of the outcome.
    #[arg(long)]
    evidence: String,
}

/// Runs `case group …`.
pub async fn run(ctx: &Ctx, cmd: GroupCommand) -> anyhow::Result<()> {
    let c = &ctx.client;
    let (group, verb) = match cmd {
        GroupCommand::Create(a) => {
            let req = CreateCaseGroup {
                queue: a.queue,
                reason: a.reason,
                message_type: a.message_type,
                from: a.from,
                to: a.to,
                signature: a.signature,
                intent_prefix: a.intent_prefix,
            };
            let g = c
                .recovery()
                .create_case_group(&req)
                .await
                .context("create a case group")?;
            if ctx.json {
                return print_json(&g);
            }
            println!("created {} with {} cases of {}", g.id, g.size, g.queue);
            print!("{}", show_text(&g));
            return Ok(());
        }
        GroupCommand::Show { id } => {
            let g = c
                .recovery()
                .get_case_group(&id)
                .await
                .with_context(|| format!("show case group {id}"))?;
            if ctx.json {
                return print_json(&g);
            }
            print!("{}", show_text(&g));
            return Ok(());
        }
        GroupCommand::List {
            queue,
            cursor,
            limit,
        } => {
            let page = c
                .recovery()
                .list_case_groups(queue.as_deref(), cursor.as_deref(), limit)
                .await
                .context("list case groups")?;
            if ctx.json {
                return print_json(&page);
            }
            if page.groups.is_empty() {
                println!("no case groups");
            } else {
                let mut t = Table::new(["ID", "QUEUE", "CASES", "DECISIONS", "CREATED", "CLOSED"]);
                for g in &page.groups {
                    t.row([
                        g.id.clone(),
                        g.queue.clone(),
                        g.size.to_string(),
                        g.decisions.to_string(),
                        g.created_at.clone(),
                        or_dash(g.closed_at.as_deref()),
                    ]);
                }
                print!("{}", t.render());
            }
            if let Some(cursor) = &page.next_cursor {
                println!("more: --cursor {cursor}");
            }
            return Ok(());
        }
        GroupCommand::Claim { id, lease } => (
            c.recovery()
                .decide_case_group(&id, "claim", Some(&ClaimCase { lease_ms: lease }))
                .await
                .with_context(|| format!("claim case group {id}"))?,
            "claimed",
        ),
        GroupCommand::Release { id } => (
            c.recovery()
                .decide_case_group(&id, "release", None::<&()>)
                .await
                .with_context(|| format!("release case group {id}"))?,
            "released",
        ),
        GroupCommand::Diagnose { id, diagnosis } => (
            c.recovery()
                .decide_case_group(&id, "diagnosis", Some(&diagnosis.request()))
                .await
                .with_context(|| format!("diagnose case group {id}"))?,
            "diagnosed",
        ),
        GroupCommand::Correct { id, correction } => (
            c.recovery()
                .decide_case_group(&id, "corrections", Some(&correction.request()))
                .await
                .with_context(|| format!("correct case group {id}"))?,
            "corrected",
        ),
        GroupCommand::Test(a) => {
            let req = TestCaseGroup {
                destination: a.destination,
                send: a.send,
                outcome: a.outcome,
                failed: a.failed,
                evidence: a.evidence,
            };
            (
                c.recovery()
                    .decide_case_group(&a.id, "tests", Some(&req))
                    .await
                    .with_context(|| format!("test case group {}", a.id))?,
                "tested",
            )
        }
        GroupCommand::Close {
            id,
            state,
            evidence,
        } => (
            c.recovery()
                .decide_case_group(&id, "close", Some(&CloseCase { state, evidence }))
                .await
                .with_context(|| format!("close case group {id}"))?,
            "closed",
        ),
    };
    decided(ctx, &group, verb)
}

/// Prints a decision's answer: the wire JSON, or one line per member that refused and a
/// count; exit 5 when any refused.
fn decided(ctx: &Ctx, g: &CaseGroup, verb: &str) -> anyhow::Result<()> {
    let refused: Vec<_> = g.outcomes.iter().filter(|o| !o.ok).collect();
    if ctx.json {
        print_json(g)?;
    } else {
        for o in &refused {
            println!(
                "refused {}: {} ({})",
                o.case_id,
                o.detail.as_deref().unwrap_or("-"),
                o.code.as_deref().unwrap_or("-")
            );
        }
        println!(
            "{verb} {} of {} cases of {} ({} refused); by state: {}",
            g.outcomes.len() - refused.len(),
            g.outcomes.len(),
            g.id,
            refused.len(),
            states(g)
        );
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(anyhow::Error::new(Partial(format!(
            "{} of the {} cases of {} refused the decision",
            refused.len(),
            g.outcomes.len(),
            g.id
        ))))
    }
}

fn states(g: &CaseGroup) -> String {
    if g.by_state.is_empty() {
        return "-".into();
    }
    g.by_state
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `case group show`: the group, its decisions, then one row per member.
pub fn show_text(g: &CaseGroup) -> String {
    let s = &g.selection;
    let mut kv = KeyValues::new();
    kv.add("id", g.id.clone())
        .add("queue", g.queue.clone())
        .add_opt("reason", s.reason.clone())
        .add_opt("type", s.message_type.clone())
        .add_opt("from", s.from.clone())
        .add_opt("to", s.to.clone())
        .add_opt("signature", s.signature.clone())
        .add_opt("intent prefix", s.intent_prefix.clone())
        .add("created", format!("{} by {}", g.created_at, g.created_by))
        .add_opt("closed", g.closed_at.clone())
        .add("cases", g.size.to_string())
        .add("by state", states(g));
    let mut out = kv.render();
    if !g.decisions.is_empty() {
        out.push_str("decisions:\n");
        for d in &g.decisions {
            let mut line = format!(
                "  {}  {}  {}  applied {} refused {}",
                d.at, d.actor, d.action, d.applied, d.refused
            );
            for (k, v) in d.fields.iter().filter(|(_, v)| !v.is_empty()) {
                line.push_str(&format!("  {k}={v}"));
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    out.push_str(&super::case::list_table(&g.cases).render());
    out
}
