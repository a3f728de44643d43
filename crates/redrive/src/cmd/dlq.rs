//! `redrive dlq list|show|resubmit|move`: a queue's dead-letter store.

use anyhow::Context as _;
use base64::Engine as _;
use clap::Subcommand;
use redrive_api::dead_letter::DeadLetter;
use redrive_api::message::BodyEncoding;
use serde_json::json;

use super::{Ctx, area, queue_name};
use crate::client::DeadLetterQuery;
use crate::output::{KeyValues, Table, or_dash, preview, print_json};
use crate::units::parse_time;

/// `redrive dlq ...`.
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters, oldest first.
    List {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        queue: String,
        /// Only this reason code.
        #[arg(long, value_name = "REASON")]
        reason: Option<String>,
        /// Area: live, archived or quarantine [server default: live].
        #[arg(long, value_name = "AREA", value_parser = area)]
        area: Option<String>,
        /// Dead-lettered at or after (RFC 3339, or -DUR for "ago").
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        from: Option<String>,
        /// Dead-lettered before (RFC 3339, or -DUR for "ago").
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        to: Option<String>,
        /// Page size.
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
        /// Continue after a previous page.
        #[arg(long, value_name = "CURSOR")]
        cursor: Option<String>,
    },
    /// Show one dead letter with its evidence and body.
    Show {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        queue: String,
        /// Dead-letter id (dl_…).
        id: String,
    },
    /// Send a dead letter back to its queue as a new message.
    Resubmit {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        queue: String,
        /// Dead-letter id.
        id: String,
    },
    /// Move a dead letter to another area.
    Move {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        queue: String,
        /// Dead-letter id.
        id: String,
        /// Target area: live, archived or quarantine.
        #[arg(value_parser = area)]
        area: String,
    },
}

/// Runs a `dlq` command.
pub async fn run(ctx: &Ctx, cmd: DlqCommand) -> anyhow::Result<()> {
    match cmd {
        DlqCommand::List {
            queue,
            reason,
            area,
            from,
            to,
            limit,
            cursor,
        } => {
            let query = DeadLetterQuery {
                area,
                reason,
                from,
                to,
                cursor,
                limit,
            };
            let page = ctx
                .client
                .dead_letters(&queue, &query)
                .await
                .with_context(|| format!("list dead letters of {queue}"))?;
            if ctx.json {
                return print_json(&page);
            }
            if page.dead_letters.is_empty() {
                println!("no dead letters");
            } else {
                let mut t = Table::new([
                    "ID",
                    "AREA",
                    "REASON",
                    "MESSAGE-ID",
                    "SEQ",
                    "DELIVERIES",
                    "DEAD-LETTERED-AT",
                ]);
                for d in &page.dead_letters {
                    t.row([
                        d.id.clone(),
                        d.area.clone(),
                        d.reason.clone(),
                        d.message_id.clone(),
                        d.sequence_number.to_string(),
                        d.delivery_count.to_string(),
                        d.dead_lettered_at.clone(),
                    ]);
                }
                print!("{}", t.render());
            }
            if let Some(c) = &page.next_cursor {
                println!("more: --cursor {c}");
            }
        }
        DlqCommand::Show { queue, id } => {
            let d = ctx
                .client
                .dead_letter(&queue, &id)
                .await
                .with_context(|| format!("show dead letter {id} of {queue}"))?;
            if ctx.json {
                return print_json(&d);
            }
            print!("{}", describe(&d).render());
            println!("body:");
            println!("{}", body_text(&d));
        }
        DlqCommand::Resubmit { queue, id } => {
            let r = ctx
                .client
                .resubmit(&queue, &id)
                .await
                .with_context(|| format!("resubmit dead letter {id} of {queue}"))?;
            if ctx.json {
                return print_json(&r);
            }
            println!(
                "resubmitted {id} to {queue} as message {} (sequence {})",
                r.message_id, r.sequence_number
            );
        }
        DlqCommand::Move { queue, id, area } => {
            ctx.client
                .move_dead_letter(&queue, &id, &area)
                .await
                .with_context(|| format!("move dead letter {id} of {queue}"))?;
            if ctx.json {
                return print_json(&json!({"id": id, "area": area}));
            }
            println!("moved {id} to {area}");
        }
    }
    Ok(())
}

/// A dead letter's evidence as `key: value` lines (without the body).
pub fn describe(d: &DeadLetter) -> KeyValues {
    let mut kv = KeyValues::new();
    kv.add("id", d.id.clone())
        .add("queue", d.queue.clone())
        .add("area", d.area.clone())
        .add("reason", d.reason.clone())
        .add_opt("description", d.description.clone())
        .add("message_id", d.message_id.clone())
        .add("sequence_number", d.sequence_number.to_string())
        .add_opt("session_id", d.session_id.clone())
        .add(
            "delivery_count",
            format!("{} ({})", d.delivery_count, d.delivery_count_quality),
        )
        .add("first_delivered_at", or_dash(d.first_delivered_at.clone()))
        .add("last_delivered_at", or_dash(d.last_delivered_at.clone()))
        .add("enqueued_time", d.enqueued_time.clone())
        .add("dead_lettered_at", d.dead_lettered_at.clone())
        .add("routed_by", d.routed_by.clone())
        .add("policy_version", d.policy_version.to_string())
        .add_opt("forwarded_to_queue", d.forwarded_to_queue.clone())
        .add_opt(
            "forwarded_sequence_number",
            d.forwarded_sequence_number.map(|s| s.to_string()),
        )
        .add(
            "dead_letter_delivery_count",
            d.dead_letter_delivery_count.to_string(),
        )
        .add_opt("content_type", d.content_type.clone())
        .add_opt("correlation_id", d.correlation_id.clone())
        .add_opt("type", d.message_type.clone())
        .add("body_size", d.body_size.to_string())
        .add("body_sha256", d.body_sha256.clone());
    for (k, v) in &d.properties {
        kv.add(format!("property {k}"), v.to_string());
    }
    kv
}

/// The body for a terminal: the text, or a note with a base64 preview for binary bodies.
/// Without payload access (no `payload-reader` grant) the server sends no body.
fn body_text(d: &DeadLetter) -> String {
    let Some(body) = &d.body else {
        return "<body not shown: the token has no payload-reader grant on this queue>".to_owned();
    };
    match d.body_encoding {
        BodyEncoding::Utf8 => body.clone(),
        BodyEncoding::Base64 => match base64::engine::general_purpose::STANDARD.decode(body) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(s) => s,
                Err(_) => format!("<binary, base64: {}>", preview(body, 200)),
            },
            Err(_) => format!("<base64: {}>", preview(body, 200)),
        },
    }
}
