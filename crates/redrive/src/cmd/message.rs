//! `redrive send|receive|settle|peek`: messages on a queue.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::Context as _;
use base64::Engine as _;
use clap::{ArgGroup, Args, ValueEnum};
use redrive_api::message::{
    AcceptSession, BodyEncoding, Message, ReceiveDeferred, ReceiveRequest, SendMessage,
    SendRequest, SessionLock, Settle, SettleKind, SettleResponse,
};
use serde_json::{Map, Value, json};

use super::{Ctx, queue_name};
use crate::failure::input_error;
use crate::output::{KeyValues, Table, body_preview, or_dash, print_json};
use crate::units::{
    parse_duration_ms, parse_future_time, parse_time, ranged, ranged_u32, sequence,
};

/// `redrive send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// Queue name.
    #[arg(value_parser = queue_name)]
    pub queue: String,
    /// The body; without it and without --file, the body is read from stdin.
    #[arg(conflicts_with = "file")]
    pub body: Option<String>,
    /// Read the body from this file.
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Message id (the duplicate-detection key); generated when absent.
    #[arg(long, value_name = "ID")]
    pub message_id: Option<String>,
    /// MIME type of the body.
    #[arg(long, value_name = "MIME")]
    pub content_type: Option<String>,
    /// Application property KEY=VALUE (repeatable); numbers and true/false are typed,
    /// a value in double quotes stays a string.
    #[arg(long = "property", short = 'p', value_name = "KEY=VALUE", value_parser = parse_property)]
    pub properties: Vec<(String, Value)>,
    /// Correlation id.
    #[arg(long, value_name = "ID")]
    pub correlation_id: Option<String>,
    /// Session id (required on session queues).
    #[arg(long, value_name = "ID")]
    pub session_id: Option<String>,
    /// Message type.
    #[arg(long = "type", value_name = "TYPE")]
    pub message_type: Option<String>,
    /// Stable id of the semantic operation.
    #[arg(long, value_name = "ID")]
    pub intent: Option<String>,
    /// Time after which completing the message no longer helps (RFC 3339 or +DUR; a time
    /// already past is refused).
    #[arg(long, value_name = "TIME", value_parser = parse_future_time)]
    pub valid_until: Option<String>,
    /// Deliver no earlier than this (RFC 3339, or +DUR from now).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub schedule: Option<String>,
    /// Time to live (e.g. 1h).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub ttl: Option<u64>,
}

/// `redrive receive`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("action").args(["complete", "abandon", "defer", "dead_letter"])))]
#[command(group(ArgGroup::new("session_choice").args(["session", "next_session"])))]
pub struct ReceiveArgs {
    /// Queue name.
    #[arg(value_parser = queue_name)]
    pub queue: String,
    /// At most this many messages (1 to 1000).
    #[arg(long, default_value_t = 1, value_parser = ranged_u32(1, 1_000))]
    pub max: u32,
    /// Long-poll up to this long for a first message (e.g. 5s, at most 20s).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub wait: Option<u64>,
    /// Lock duration (default: the queue's).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub lock: Option<u64>,
    /// Session queues: accept this session first.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Session queues: accept the next available session first.
    #[arg(long)]
    pub next_session: bool,
    /// Receive this deferred message by sequence number instead (repeatable).
    #[arg(long, value_name = "SEQ", value_parser = sequence,
          conflicts_with_all = ["session", "next_session", "wait"])]
    pub deferred: Vec<i64>,
    /// Complete what was received.
    #[arg(long)]
    pub complete: bool,
    /// Abandon what was received (redelivered later).
    #[arg(long)]
    pub abandon: bool,
    /// With --abandon: delay before redelivery.
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms, requires = "abandon")]
    pub delay: Option<u64>,
    /// Defer what was received (receivable by sequence number only).
    #[arg(long)]
    pub defer: bool,
    /// Dead-letter what was received with this reason.
    #[arg(long, value_name = "REASON")]
    pub dead_letter: Option<String>,
    /// With --dead-letter: a description.
    #[arg(long, value_name = "TEXT", requires = "dead_letter")]
    pub description: Option<String>,
    /// With --dead-letter: the consumer that applied the reason.
    #[arg(long, value_name = "ID", requires = "dead_letter")]
    pub consumer: Option<String>,
    /// With --dead-letter: the version of the consumer's classification rule.
    #[arg(long, value_name = "VERSION", requires = "dead_letter")]
    pub rule_version: Option<String>,
    /// A live view: receive again and again (each a long poll of --wait, 20s by default),
    /// settling and printing each batch as it arrives, until interrupted (Ctrl-C) or
    /// --count messages were received. With --json, one JSON object per message and line.
    #[arg(long, conflicts_with_all = ["session", "next_session", "deferred"])]
    pub watch: bool,
    /// With --watch: stop after this many messages (1 to 1000000).
    #[arg(long, value_name = "N", requires = "watch", value_parser = ranged(1, 1_000_000))]
    pub count: Option<u64>,
}

/// The action of `redrive settle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SettleAction {
    /// Remove the message.
    Complete,
    /// Release it for redelivery.
    Abandon,
    /// Set it aside.
    Defer,
    /// Move it to the dead-letter store.
    DeadLetter,
    /// Extend the lock.
    Renew,
}

/// `redrive settle`.
#[derive(Debug, Args)]
pub struct SettleArgs {
    /// Queue name.
    #[arg(value_parser = queue_name)]
    pub queue: String,
    /// The lock token printed by `receive`.
    pub lock_token: String,
    /// What to do.
    pub action: SettleAction,
    /// abandon: delay before redelivery.
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub delay: Option<u64>,
    /// dead-letter: reason code.
    #[arg(long, value_name = "REASON")]
    pub reason: Option<String>,
    /// dead-letter: description.
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    /// dead-letter: the consumer that applied the reason.
    #[arg(long, value_name = "ID")]
    pub consumer: Option<String>,
    /// dead-letter: the version of the consumer's classification rule.
    #[arg(long, value_name = "VERSION")]
    pub rule_version: Option<String>,
    /// renew: new lock duration.
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub lock: Option<u64>,
}

/// `redrive peek`.
#[derive(Debug, Args)]
pub struct PeekArgs {
    /// Queue name.
    #[arg(value_parser = queue_name)]
    pub queue: String,
    /// Start at this sequence number.
    #[arg(long, value_name = "SEQ", value_parser = sequence)]
    pub from: Option<i64>,
    /// At most this many (1 to 1000).
    #[arg(long, value_name = "N", value_parser = ranged_u32(1, 1_000))]
    pub limit: Option<u32>,
}

/// `redrive unschedule`.
#[derive(Debug, Args)]
pub struct UnscheduleArgs {
    /// Queue name.
    #[arg(value_parser = queue_name)]
    pub queue: String,
    /// Sequence number of the scheduled message (printed by `send`).
    #[arg(value_parser = sequence)]
    pub sequence: i64,
}

/// `redrive unschedule`: cancels a scheduled message that is not yet visible.
pub async fn unschedule(ctx: &Ctx, args: UnscheduleArgs) -> anyhow::Result<()> {
    ctx.client
        .wire()
        .cancel_scheduled(&args.queue, args.sequence)
        .await
        .with_context(|| {
            format!(
                "cancel scheduled message {} on {}",
                args.sequence, args.queue
            )
        })?;
    if ctx.json {
        return print_json(&json!({"cancelled": args.sequence}));
    }
    println!(
        "cancelled scheduled message {} on {}",
        args.sequence, args.queue
    );
    Ok(())
}

/// `redrive send`.
pub async fn send(ctx: &Ctx, args: SendArgs) -> anyhow::Result<()> {
    let bytes = match (&args.body, &args.file) {
        (Some(b), _) => b.clone().into_bytes(),
        (None, Some(f)) => std::fs::read(f)
            .map_err(|e| input_error(format!("cannot read {}: {e}", f.display())))?,
        (None, None) => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| input_error(format!("cannot read the body from stdin: {e}")))?;
            buf
        }
    };
    let (body, body_encoding) = encode_body(bytes);
    let msg = SendMessage {
        message_id: args.message_id,
        body,
        body_encoding,
        content_type: args.content_type,
        properties: args.properties.into_iter().collect::<Map<String, Value>>(),
        correlation_id: args.correlation_id,
        session_id: args.session_id,
        message_type: args.message_type,
        intent: args.intent,
        valid_until: args.valid_until,
        scheduled_enqueue_time: args.schedule,
        time_to_live_ms: args.ttl,
    };
    let resp = ctx
        .client
        .wire()
        .send(&args.queue, &SendRequest::One(Box::new(msg)))
        .await
        .with_context(|| format!("send to {}", args.queue))?;
    if ctx.json {
        return print_json(&resp);
    }
    for r in &resp.results {
        if r.duplicate {
            println!(
                "duplicate of message {} (sequence {}); nothing enqueued",
                r.message_id, r.sequence_number
            );
        } else {
            println!(
                "sent message {} (sequence {})",
                r.message_id, r.sequence_number
            );
        }
    }
    Ok(())
}

/// Bytes as a body: the text itself when it is UTF-8, else base64.
pub fn encode_body(bytes: Vec<u8>) -> (String, BodyEncoding) {
    match String::from_utf8(bytes) {
        Ok(s) => (s, BodyEncoding::Utf8),
        Err(e) => (
            base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
            BodyEncoding::Base64,
        ),
    }
}

/// `redrive receive`.
pub async fn receive(ctx: &Ctx, args: ReceiveArgs) -> anyhow::Result<()> {
    if args.watch {
        return watch(ctx, &args).await;
    }
    let queue = args.queue.as_str();
    let session = if args.session.is_some() || args.next_session {
        let req = AcceptSession {
            session_id: args.session.clone(),
            lock_duration_ms: args.lock,
            wait_ms: args.wait,
        };
        let lock = ctx
            .client
            .wire()
            .accept_session(queue, &req)
            .await
            .with_context(|| format!("accept a session on {queue}"))?;
        match lock {
            Some(l) => Some(l),
            None => {
                if ctx.json {
                    return print_json(&json!({"messages": []}));
                }
                println!("no session available");
                return Ok(());
            }
        }
    } else {
        None
    };
    let list = if args.deferred.is_empty() {
        let req = ReceiveRequest {
            max_messages: Some(args.max),
            lock_duration_ms: args.lock,
            wait_ms: args.wait,
            session_id: session.as_ref().map(|s| s.session_id.clone()),
            session_lock_token: session.as_ref().map(|s| s.lock_token.clone()),
        };
        ctx.client.wire().receive(queue, &req).await
    } else {
        let req = ReceiveDeferred {
            sequence_numbers: args.deferred.clone(),
            lock_duration_ms: args.lock,
        };
        ctx.client.wire().receive_deferred(queue, &req).await
    }
    .with_context(|| format!("receive from {queue}"))?;

    let Some(kind) = action(&args) else {
        // Leave the messages locked and show the tokens that settle them.
        if ctx.json {
            return print_json(&json!({
                "messages": list.messages,
                "session": session,
            }));
        }
        print_session(session.as_ref());
        print_messages(&list.messages, true);
        return Ok(());
    };

    let settled = settle_all(ctx, &args, &list.messages, kind).await?;
    if let Some(s) = &session {
        ctx.client
            .wire()
            .release_session(queue, &s.session_id, &s.lock_token)
            .await
            .with_context(|| format!("release session {}", s.session_id))?;
    }
    if ctx.json {
        print_json(&json!({"messages": list.messages, "settled": settled}))?;
    } else {
        print_settled(&list.messages, &settled, kind);
    }
    settle_failures(&settled)
}

/// The settlement the flags ask for, if any.
fn action(args: &ReceiveArgs) -> Option<SettleKind> {
    if args.complete {
        Some(SettleKind::Complete)
    } else if args.abandon {
        Some(SettleKind::Abandon)
    } else if args.defer {
        Some(SettleKind::Defer)
    } else if args.dead_letter.is_some() {
        Some(SettleKind::DeadLetter)
    } else {
        None
    }
}

/// Settles every received message as `kind`, in one batch.
async fn settle_all(
    ctx: &Ctx,
    args: &ReceiveArgs,
    messages: &[Message],
    kind: SettleKind,
) -> anyhow::Result<SettleResponse> {
    let queue = args.queue.as_str();
    let settlements: Vec<Settle> = messages
        .iter()
        .filter_map(|m| m.lock_token.clone())
        .map(|lock_token| Settle {
            lock_token,
            action: kind,
            delay_ms: args.delay,
            reason: args.dead_letter.clone(),
            description: args.description.clone(),
            consumer: args.consumer.clone(),
            rule_version: args.rule_version.clone(),
            lock_duration_ms: None,
        })
        .collect();
    if settlements.is_empty() {
        return Ok(SettleResponse {
            results: Vec::new(),
        });
    }
    ctx.client
        .wire()
        .settle_batch(queue, settlements)
        .await
        .with_context(|| format!("settle on {queue}"))
}

/// An error naming the first failed settlement, if any failed.
fn settle_failures(settled: &SettleResponse) -> anyhow::Result<()> {
    let failed: Vec<String> = settled
        .results
        .iter()
        .filter_map(|r| r.error.as_ref().map(|p| format!("{}: {p}", r.lock_token)))
        .collect();
    if let Some(first) = failed.first() {
        anyhow::bail!(
            "{} of {} settlements failed; first: {first}",
            failed.len(),
            settled.results.len()
        );
    }
    Ok(())
}

/// `receive --watch`: long polls one after the other, each batch settled as the flags say
/// and printed as it arrives (with `--json`, a line per message: the message and its
/// settlement), until Ctrl-C or `--count` messages. A failed settlement ends the watch.
async fn watch(ctx: &Ctx, args: &ReceiveArgs) -> anyhow::Result<()> {
    let queue = args.queue.as_str();
    let kind = action(args);
    let mut received: u64 = 0;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let wire = ctx.client.wire();
    loop {
        let left = args.count.map(|c| c - received);
        let max = left.map_or(args.max, |l| {
            args.max.min(u32::try_from(l).unwrap_or(u32::MAX))
        });
        let req = ReceiveRequest {
            max_messages: Some(max),
            lock_duration_ms: args.lock,
            wait_ms: Some(args.wait.unwrap_or(WATCH_WAIT_MS)),
            session_id: None,
            session_lock_token: None,
        };
        let list = tokio::select! {
            list = wire.receive(queue, &req) => {
                list.with_context(|| format!("receive from {queue}"))?
            }
            _ = &mut interrupted => return Ok(()),
        };
        if list.messages.is_empty() {
            continue;
        }
        let settled = match kind {
            Some(k) => Some(settle_all(ctx, args, &list.messages, k).await?),
            None => None,
        };
        if ctx.json {
            for m in &list.messages {
                let result = settled.as_ref().and_then(|s| {
                    s.results
                        .iter()
                        .find(|r| Some(&r.lock_token) == m.lock_token.as_ref())
                });
                println!("{}", json!({"message": m, "settled": result}));
            }
        } else {
            match (&settled, kind) {
                (Some(s), Some(k)) => print_settled(&list.messages, s, k),
                _ => print_messages(&list.messages, true),
            }
        }
        if let Some(s) = &settled {
            settle_failures(s)?;
        }
        received += list.messages.len() as u64;
        if args.count.is_some_and(|c| received >= c) {
            return Ok(());
        }
    }
}

/// The long poll of each `receive --watch` round when `--wait` names none, ms.
const WATCH_WAIT_MS: u64 = 20_000;

fn print_session(session: Option<&SessionLock>) {
    if let Some(s) = session {
        println!(
            "session {} held until {} (session lock token {})",
            s.session_id, s.locked_until, s.lock_token
        );
    }
}

fn print_messages(messages: &[Message], with_locks: bool) {
    if messages.is_empty() {
        println!("no messages");
        return;
    }
    let mut headers = vec!["SEQ", "MESSAGE-ID", "DELIVERIES"];
    if with_locks {
        headers.extend(["LOCK-TOKEN", "LOCKED-UNTIL"]);
    }
    headers.push("BODY");
    let mut t = Table::new(headers);
    for m in messages {
        let mut row = vec![
            m.sequence_number.to_string(),
            m.message_id.clone(),
            m.delivery_count.to_string(),
        ];
        if with_locks {
            row.push(or_dash(m.lock_token.clone()));
            row.push(or_dash(m.locked_until.clone()));
        }
        row.push(body_preview(&m.body, m.body_encoding));
        t.row(row);
    }
    print!("{}", t.render());
}

fn print_settled(messages: &[Message], settled: &SettleResponse, kind: SettleKind) {
    if messages.is_empty() {
        println!("no messages");
        return;
    }
    let done = match kind {
        SettleKind::Complete => "completed",
        SettleKind::Abandon => "abandoned",
        SettleKind::Defer => "deferred",
        SettleKind::DeadLetter => "dead-lettered",
        SettleKind::Renew => "renewed",
    };
    let mut t = Table::new(["SEQ", "MESSAGE-ID", "DELIVERIES", "OUTCOME", "BODY"]);
    for m in messages {
        let result = settled
            .results
            .iter()
            .find(|r| Some(&r.lock_token) == m.lock_token.as_ref());
        let outcome = match result {
            Some(r) => match &r.error {
                Some(p) => format!("failed: {}", p.code),
                None => match &r.dead_letter_id {
                    Some(id) => format!("{done} ({id})"),
                    None => done.to_owned(),
                },
            },
            None => "not settled".to_owned(),
        };
        t.row([
            m.sequence_number.to_string(),
            m.message_id.clone(),
            m.delivery_count.to_string(),
            outcome,
            body_preview(&m.body, m.body_encoding),
        ]);
    }
    print!("{}", t.render());
}

/// `redrive settle`.
pub async fn settle(ctx: &Ctx, args: SettleArgs) -> anyhow::Result<()> {
    let action = match args.action {
        SettleAction::Complete => SettleKind::Complete,
        SettleAction::Abandon => SettleKind::Abandon,
        SettleAction::Defer => SettleKind::Defer,
        SettleAction::DeadLetter => SettleKind::DeadLetter,
        SettleAction::Renew => SettleKind::Renew,
    };
    let misplaced = [
        ("--delay", args.delay.is_some(), SettleKind::Abandon),
        ("--reason", args.reason.is_some(), SettleKind::DeadLetter),
        (
            "--description",
            args.description.is_some(),
            SettleKind::DeadLetter,
        ),
        (
            "--consumer",
            args.consumer.is_some(),
            SettleKind::DeadLetter,
        ),
        (
            "--rule-version",
            args.rule_version.is_some(),
            SettleKind::DeadLetter,
        ),
        ("--lock", args.lock.is_some(), SettleKind::Renew),
    ];
    for (flag, given, only_for) in misplaced {
        if given && action != only_for {
            return Err(input_error(format!(
                "{flag} does not apply to {:?}",
                args.action
            )));
        }
    }
    let req = Settle {
        lock_token: args.lock_token.clone(),
        action,
        delay_ms: args.delay,
        reason: args.reason,
        description: args.description,
        consumer: args.consumer,
        rule_version: args.rule_version,
        lock_duration_ms: args.lock,
    };
    let r = ctx
        .client
        .wire()
        .settle(&args.queue, req)
        .await
        .with_context(|| format!("settle {} on {}", args.lock_token, args.queue))?;
    if ctx.json {
        return print_json(&r);
    }
    if let Some(p) = &r.error {
        anyhow::bail!("settle {}: {p}", r.lock_token);
    }
    let mut kv = KeyValues::new();
    kv.add("lock_token", r.lock_token.clone())
        .add_opt("sequence_number", r.sequence_number.map(|s| s.to_string()))
        .add_opt("locked_until", r.locked_until.clone())
        .add_opt("dead_letter_id", r.dead_letter_id.clone());
    print!("{}", kv.render());
    Ok(())
}

/// `redrive peek`.
pub async fn peek(ctx: &Ctx, args: PeekArgs) -> anyhow::Result<()> {
    let list = ctx
        .client
        .wire()
        .peek(&args.queue, args.from, args.limit)
        .await
        .with_context(|| format!("peek {}", args.queue))?;
    if ctx.json {
        return print_json(&list);
    }
    if list.messages.is_empty() {
        println!("no messages");
        return Ok(());
    }
    let mut t = Table::new([
        "SEQ",
        "MESSAGE-ID",
        "STATE",
        "DELIVERIES",
        "ENQUEUED",
        "SESSION",
        "BODY",
    ]);
    for m in &list.messages {
        t.row([
            m.sequence_number.to_string(),
            m.message_id.clone(),
            m.state.clone(),
            m.delivery_count.to_string(),
            m.enqueued_time.clone(),
            or_dash(m.session_id.clone()),
            body_preview(&m.body, m.body_encoding),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}

/// Parses `KEY=VALUE`: integers and floats become numbers, `true`/`false` booleans, a
/// value in double quotes a string without them, anything else a string.
pub fn parse_property(s: &str) -> Result<(String, Value), String> {
    let Some((k, v)) = s.split_once('=') else {
        return Err(format!("invalid property {s:?}: expected KEY=VALUE"));
    };
    let k = k.trim();
    if k.is_empty() {
        return Err(format!("invalid property {s:?}: empty key"));
    }
    let value = if let Some(inner) = v.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
        Value::String(inner.to_owned())
    } else if v == "true" || v == "false" {
        Value::Bool(v == "true")
    } else if let Ok(i) = v.parse::<i64>() {
        json!(i)
    } else if let Some(f) = v
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite() && v.bytes().any(|b| b.is_ascii_digit()))
    {
        json!(f)
    } else {
        Value::String(v.to_owned())
    };
    Ok((k.to_owned(), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_are_typed() {
        assert_eq!(parse_property("n=42"), Ok(("n".into(), json!(42))));
        assert_eq!(parse_property("f=1.5"), Ok(("f".into(), json!(1.5))));
        assert_eq!(parse_property("b=true"), Ok(("b".into(), json!(true))));
        assert_eq!(parse_property("s=abc"), Ok(("s".into(), json!("abc"))));
        assert_eq!(parse_property("q=\"42\""), Ok(("q".into(), json!("42"))));
        assert_eq!(parse_property("e="), Ok(("e".into(), json!(""))));
        assert_eq!(parse_property("x=a=b"), Ok(("x".into(), json!("a=b"))));
        assert_eq!(parse_property("i=inf"), Ok(("i".into(), json!("inf"))));
        assert!(parse_property("novalue").is_err());
        assert!(parse_property("=v").is_err());
    }

    #[test]
    fn bodies_are_text_or_base64() {
        assert_eq!(
            encode_body(b"hello".to_vec()),
            ("hello".to_owned(), BodyEncoding::Utf8)
        );
        assert_eq!(
            encode_body(vec![0xff, 0x00]),
            ("/wA=".to_owned(), BodyEncoding::Base64)
        );
    }
}
