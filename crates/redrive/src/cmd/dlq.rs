//! `redrive dlq list|show|resubmit|move|restore|import|export`: a queue's dead-letter
//! store.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use base64::Engine as _;
use clap::Subcommand;
use redrive_api::dead_letter::{DeadLetter, RestoreResult};
use redrive_api::message::BodyEncoding;
use serde_json::{Map, Value, json};

use super::replay::counts_text;
use super::{Ctx, area, queue_name};
use crate::failure::input_error;
use crate::output::{KeyValues, Table, or_dash, preview, print_json};
use crate::progress::{Progress, Step};
use crate::units::{parse_time, ranged_u32};
use redrive_client::DeadLetterQuery;

/// Largest input `dlq import` sends: the server refuses more in one import (64 MiB, the
/// import parser's bound), so it is refused before anything is sent.
pub const MAX_IMPORT_BYTES: u64 = 64 * 1024 * 1024;

/// Records asked for per page by `dlq export` (bodies included, so pages stay moderate).
const EXPORT_PAGE: u32 = 100;

/// Events of a judgement listed by `dlq show`; `--json` has them all.
const SHOWN_EVENTS: usize = 50;

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
        /// Page size (1 to 1000) [server default: 100].
        #[arg(long, value_name = "N", value_parser = ranged_u32(1, 1_000))]
        limit: Option<u32>,
        /// Continue after a previous page.
        #[arg(long, value_name = "CURSOR")]
        cursor: Option<String>,
        /// Only this message type.
        #[arg(long = "type", value_name = "TYPE")]
        message_type: Option<String>,
        /// Only this source (the message's `source` property or CloudEvent source).
        #[arg(long, value_name = "SOURCE")]
        source: Option<String>,
        /// Only this delivery-count quality: exact, approximate, incomplete or unavailable.
        #[arg(long, value_name = "QUALITY",
              value_parser = ["exact", "approximate", "incomplete", "unavailable"])]
        quality: Option<String>,
        /// Only descriptions containing this text (ASCII letters without case).
        #[arg(long, value_name = "TEXT")]
        text: Option<String>,
        /// Only records of this failure signature (an id `redrive failures` prints).
        #[arg(long, value_name = "ID")]
        signature: Option<String>,
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
    /// Restore a quarantined dead letter to the live area (--dry-run: only preview it).
    ///
    /// Prints what the next replay judgement will do with the record: events republished,
    /// events quarantined again by cause (a restore clears only the replay-attempt cap),
    /// and whether the queue replays automatically.
    Restore {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        queue: String,
        /// Dead-letter id (in the quarantine area).
        id: String,
        /// Only show what a restore would do; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Import dead letters (Event Grid blob, SQS output, or a `dlq export` file).
    ///
    /// The records go to the queue's live area: all of them, or none. Prints how many
    /// were imported and their ids.
    Import {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        queue: String,
        /// What the input is: eventgrid (one dead-letter blob), sqs (the JSON of
        /// ReceiveMessage) or json (JSON Lines written by `dlq export`).
        #[arg(long, value_name = "FORMAT", value_parser = ["eventgrid", "sqs", "json"])]
        format: String,
        /// The file to read, or `-` for stdin (at most 64 MiB of UTF-8 text).
        #[arg(value_name = "FILE|-")]
        file: String,
    },
    /// Write a queue's dead letters as JSON Lines (the `json` format of `dlq import`).
    ///
    /// One API record per line, body included: this needs the payload-reader role on the
    /// queue, and fails rather than write records without bodies.
    Export {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        queue: String,
        /// Area: live, archived or quarantine [server default: live].
        #[arg(long, value_name = "AREA", value_parser = area)]
        area: Option<String>,
        /// The file to write (replaced only once the export is complete), or `-` for
        /// stdout [default: stdout].
        #[arg(value_name = "FILE|-")]
        file: Option<String>,
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
            message_type,
            source,
            quality,
            text,
            signature,
        } => {
            let query = DeadLetterQuery {
                area,
                reason,
                from,
                to,
                cursor,
                limit,
                message_type,
                source,
                quality,
                text,
                signature,
                payload: None,
            };
            let page = ctx
                .client
                .recovery()
                .dead_letters(&queue, &query)
                .await
                .with_context(|| format!("list dead letters of {queue}"))?;
            if ctx.json {
                return print_json(&page);
            }
            if page.dead_letters.is_empty() && page.undecodable.is_empty() {
                println!("no dead letters");
            } else if !page.dead_letters.is_empty() {
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
            for u in &page.undecodable {
                println!("cannot be read: {} ({})", u.id, u.reason);
            }
            if let Some(c) = &page.next_cursor {
                println!("more: --cursor {c}");
            }
        }
        DlqCommand::Show { queue, id } => {
            let d = ctx
                .client
                .recovery()
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
                .recovery()
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
                .recovery()
                .move_dead_letter(&queue, &id, &area)
                .await
                .with_context(|| format!("move dead letter {id} of {queue}"))?;
            if ctx.json {
                return print_json(&json!({"id": id, "area": area}));
            }
            println!("moved {id} to {area}");
        }
        DlqCommand::Restore { queue, id, dry_run } => {
            let r = ctx
                .client
                .recovery()
                .restore_dead_letter(&queue, &id, dry_run)
                .await
                .with_context(|| format!("restore dead letter {id} of {queue}"))?;
            if ctx.json {
                return print_json(&r);
            }
            print!("{}", restore_text(&queue, &r));
        }
        DlqCommand::Import {
            queue,
            format,
            file,
        } => {
            let content = read_import(&file)?;
            let r = ctx
                .client
                .recovery()
                .import_dead_letters(&queue, &format, content)
                .await
                .with_context(|| format!("import {format} dead letters into {queue}"))?;
            if ctx.json {
                return print_json(&r);
            }
            println!(
                "imported {} dead {} into {queue}",
                r.imported,
                if r.imported == 1 { "letter" } else { "letters" }
            );
            for id in &r.ids {
                println!("{id}");
            }
        }
        DlqCommand::Export { queue, area, file } => {
            let target = file.filter(|f| f != "-").map(PathBuf::from);
            let n = match &target {
                None => {
                    let mut out = std::io::BufWriter::new(std::io::stdout());
                    export(ctx, &queue, area, &mut out).await?
                }
                Some(path) => export_to_file(ctx, &queue, area, path).await?,
            };
            if let Some(path) = target {
                if ctx.json {
                    return print_json(&json!({"exported": n, "file": path.display().to_string()}));
                }
                println!(
                    "exported {n} dead {} of {queue} to {}",
                    if n == 1 { "letter" } else { "letters" },
                    path.display()
                );
            }
        }
    }
    Ok(())
}

/// What a restore did, or would do, in a few lines.
pub fn restore_text(queue: &str, r: &RestoreResult) -> String {
    let mut out = if r.restored {
        format!("restored {} of {queue} to the live area\n", r.id)
    } else {
        format!(
            "dry run: {} of {queue} was not restored (nothing changed); a restore would move it to the live area\n",
            r.id
        )
    };
    out.push_str("the next replay judgement will:\n");
    let mut kv = KeyValues::new();
    kv.add("republish", events_text(r.republish))
        .add(
            "quarantine again",
            if r.requarantine.is_empty() {
                "none".to_owned()
            } else {
                let n: u64 = r.requarantine.values().sum();
                format!("{} ({})", events_text(n), counts_text(&r.requarantine))
            },
        )
        .add(
            "auto replay",
            if r.replay_enabled {
                format!("on for {queue}: the record is judged when it is due")
            } else {
                format!(
                    "off for {queue}: the record waits in the live area until auto replay is turned on (or resubmit it)"
                )
            },
        );
    for line in kv.render().lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn events_text(n: u64) -> String {
    format!("{n} {}", if n == 1 { "event" } else { "events" })
}

/// The text to import: `path`, or stdin for `-`; at most [`MAX_IMPORT_BYTES`], refused
/// before anything is sent, and UTF-8 (every import format is JSON).
fn read_import(path: &str) -> anyhow::Result<String> {
    let (bytes, name) = if path == "-" {
        let bytes = read_bounded(std::io::stdin().lock(), MAX_IMPORT_BYTES)
            .map_err(|e| input_error(format!("cannot read stdin: {e}")))?;
        (bytes, "stdin".to_owned())
    } else {
        let name = path.to_owned();
        let file = std::fs::File::open(path)
            .map_err(|e| input_error(format!("cannot read {name}: {e}")))?;
        // A file's size is known: refuse a large one without reading it.
        let len = file
            .metadata()
            .map_err(|e| input_error(format!("cannot read {name}: {e}")))?
            .len();
        if len > MAX_IMPORT_BYTES {
            return Err(too_large(&name));
        }
        let bytes = read_bounded(file, MAX_IMPORT_BYTES)
            .map_err(|e| input_error(format!("cannot read {name}: {e}")))?;
        (bytes, name)
    };
    let Some(bytes) = bytes else {
        return Err(too_large(&name));
    };
    String::from_utf8(bytes).map_err(|e| {
        input_error(format!(
            "{name} is not UTF-8 text (invalid byte at offset {}): every import format is JSON",
            e.utf8_error().valid_up_to()
        ))
    })
}

fn too_large(name: &str) -> anyhow::Error {
    input_error(format!(
        "{name} holds more than 64 MiB, the most one import takes: split it into several imports (nothing was sent)"
    ))
}

/// Everything `r` holds, or `None` when that is more than `limit` bytes (it reads at most
/// one byte past the limit).
pub fn read_bounded(r: impl Read, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    r.take(limit.saturating_add(1)).read_to_end(&mut buf)?;
    Ok((buf.len() as u64 <= limit).then_some(buf))
}

/// Why an exported record could not be imported again, if it could not: it must carry
/// its body, which the server sends only to a payload reader.
pub fn check_exportable(record: &Map<String, Value>, queue: &str) -> Result<(), String> {
    match record.get("body") {
        Some(Value::String(_)) => Ok(()),
        _ => Err(format!(
            "the server sent dead letter {} without its body: exporting needs the payload-reader role on {queue}, and records without bodies cannot be imported (nothing more was written)",
            record.get("id").and_then(Value::as_str).unwrap_or("?")
        )),
    }
}

/// Writes every record of the area to `out` as JSON Lines, page by page; returns how many.
async fn export(
    ctx: &Ctx,
    queue: &str,
    area: Option<String>,
    out: &mut impl Write,
) -> anyhow::Result<u64> {
    let mut query = DeadLetterQuery {
        area,
        limit: Some(EXPORT_PAGE),
        ..DeadLetterQuery::default()
    };
    let mut n: u64 = 0;
    // The records go to `out` (standard output, or a file): the progress to standard error.
    let mut progress = Progress::stderr();
    let step = |n: u64| Step {
        name: format!("export {queue}"),
        done: n,
        total: None,
        unit: "records",
        detail: String::new(),
    };
    loop {
        progress.show(&step(n));
        let page = ctx
            .client
            .recovery()
            .dead_letters_raw(queue, &query)
            .await
            .with_context(|| format!("export dead letters of {queue}"))?;
        for record in &page.dead_letters {
            check_exportable(record, queue).map_err(anyhow::Error::msg)?;
            let line = serde_json::to_string(record)?;
            writeln!(out, "{line}").context("write the export")?;
            n += 1;
        }
        for u in &page.undecodable {
            // Not exportable: the server cannot read it (docs/operations.md).
            eprintln!(
                "dead letter {} of {queue} cannot be read and is not exported: {}",
                u.id, u.reason
            );
        }
        let rows = page.dead_letters.len() + page.undecodable.len();
        match page.next_cursor {
            Some(c) if rows > 0 => query.cursor = Some(c),
            _ => break,
        }
    }
    out.flush().context("write the export")?;
    progress.finish(&step(n));
    Ok(n)
}

/// [`export`] into a file beside `path`, renamed onto it once complete: a failed export
/// leaves no file that looks like a whole one.
async fn export_to_file(
    ctx: &Ctx,
    queue: &str,
    area: Option<String>,
    path: &Path,
) -> anyhow::Result<u64> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(".partial-{}", std::process::id()));
    let partial = PathBuf::from(partial);
    let file = std::fs::File::create(&partial)
        .map_err(|e| input_error(format!("cannot write {}: {e}", partial.display())))?;
    let mut out = std::io::BufWriter::new(file);
    let result: anyhow::Result<u64> = async {
        let n = export(ctx, queue, area, &mut out).await?;
        let file = out
            .into_inner()
            .map_err(|e| anyhow::anyhow!("write {}: {}", partial.display(), e.error()))?;
        file.sync_all()
            .with_context(|| format!("write {}", partial.display()))?;
        std::fs::rename(&partial, path)
            .map_err(|e| input_error(format!("cannot write {}: {e}", path.display())))?;
        Ok(n)
    }
    .await;
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
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
        .add_opt("route", d.route.clone())
        .add_opt("route_rule", d.route_rule.clone())
        .add(
            "policy_version",
            d.policy_version
                .map_or_else(|| "unknown".to_owned(), |v| v.to_string()),
        )
        .add_opt("consumer", d.consumer.clone())
        .add_opt("rule_version", d.rule_version.clone())
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
    describe_replay(&mut kv, d);
    kv
}

/// The record's format, its replay state and its last judgement.
fn describe_replay(kv: &mut KeyValues, d: &DeadLetter) {
    let r = &d.replay;
    kv.add("format", d.format.clone())
        .add(
            "replay",
            match (&r.due_at, r.candidate) {
                (Some(due), true) => format!("candidate, due at {due}"),
                (Some(due), false) => format!("not a candidate (due at {due})"),
                (None, _) => "not a candidate".to_owned(),
            },
        )
        .add("replay_failures", r.failures.to_string())
        .add_opt("replay_last_error", r.last_error.clone());
    let Some(j) = &d.judgement else {
        kv.add("judgement", "none yet");
        return;
    };
    kv.add(
        "judgement",
        format!(
            "{} (engine {}, judged at {})",
            j.cause.as_deref().unwrap_or("no quarantine cause"),
            j.engine,
            j.judged_at
        ),
    )
    .add_opt("judgement_copied_from", j.copied_from.clone())
    .add_opt("judgement_error", j.error.clone());
    for e in j.events.iter().take(SHOWN_EVENTS) {
        let mut text = e.cause.clone().unwrap_or_else(|| "replayable".to_owned());
        if let Some(t) = &e.event_type {
            text.push_str(&format!(", type {t}"));
        }
        text.push_str(&format!(", {} replay attempts", e.attempts));
        kv.add(format!("event {}", e.id), text);
    }
    if j.events.len() > SHOWN_EVENTS {
        kv.add(
            "events not shown",
            format!("{} (--json shows all)", j.events.len() - SHOWN_EVENTS),
        );
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_reads_refuse_one_byte_past_the_limit() {
        assert_eq!(
            read_bounded(&b"abcd"[..], 4).unwrap(),
            Some(b"abcd".to_vec())
        );
        assert_eq!(read_bounded(&b"abcde"[..], 4).unwrap(), None);
        assert_eq!(read_bounded(&b""[..], 4).unwrap(), Some(Vec::new()));
    }

    #[test]
    fn a_restore_says_whether_it_was_done_and_what_comes_next() {
        let mut r = RestoreResult {
            id: "dl_1".to_owned(),
            restored: false,
            replay_enabled: false,
            republish: 1,
            requarantine: [("NotIdempotent".to_owned(), 2)].into(),
        };
        let text = restore_text("orders", &r);
        assert!(
            text.starts_with("dry run: dl_1 of orders was not restored"),
            "{text}"
        );
        assert!(text.contains("republish:         1 event\n"), "{text}");
        assert!(
            text.contains("quarantine again:  2 events (NotIdempotent=2)"),
            "{text}"
        );
        assert!(text.contains("off for orders"), "{text}");
        r.restored = true;
        r.replay_enabled = true;
        r.requarantine.clear();
        let text = restore_text("orders", &r);
        assert!(
            text.starts_with("restored dl_1 of orders to the live area\n"),
            "{text}"
        );
        assert!(text.contains("quarantine again:  none"), "{text}");
        assert!(text.contains("on for orders"), "{text}");
    }

    #[test]
    fn records_without_bodies_cannot_be_exported() {
        let with = json!({"id": "dl_1", "body": "x", "body_encoding": "utf8"});
        assert_eq!(
            check_exportable(with.as_object().unwrap(), "orders"),
            Ok(())
        );
        let without = json!({"id": "dl_2", "body_encoding": "utf8"});
        let err = check_exportable(without.as_object().unwrap(), "orders").unwrap_err();
        assert!(err.contains("dl_2"), "{err}");
        assert!(err.contains("payload-reader"), "{err}");
    }
}
