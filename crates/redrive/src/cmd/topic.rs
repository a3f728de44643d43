//! `redrive topic create|list|show|delete`, `redrive sub create|update|list|show|pause|resume|delete`
//! and `redrive publish`: topics, their subscriptions, and publishing CloudEvents.

use std::io::Read as _;
use std::path::PathBuf;

use clap::Subcommand;
use redrive_api::topic::{
    AutoReplay, CreateSubscription, CreateTopic, DeadLetterDestination, Filter, PublishResults,
    PushMode, RetryPolicy, SubscriptionDeleted, SubscriptionInfo, SubscriptionKind,
    SubscriptionList, SubscriptionType, TopicInfo, TopicList, TopicPolicy, UpdateSubscription,
};
use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::replay::{self, ReplayArgs};
use super::{Ctx, queue_name};
use crate::failure::input_error;
use crate::output::{KeyValues, Table, print_json};
use crate::units::{format_duration_ms, parse_duration_ms, parse_size_u32, ranged_u32};
use redrive_client::AdminError;

/// The topic command families, flattened into the top level.
#[derive(Debug, Subcommand)]
pub enum TopicCommands {
    /// Manage topics.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Manage subscriptions of a topic.
    #[command(subcommand)]
    Sub(SubCommand),
    /// Publish one CloudEvent (data from the argument, --file, or stdin).
    Publish(PublishArgs),
}

/// `redrive topic ...`.
#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        /// Topic name.
        #[arg(value_parser = queue_name)]
        name: String,
        /// Duplicate-detection window on source + id (e.g. 10m; 0 turns it off).
        #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
        duplicate_detection_window: Option<u64>,
        /// Largest event accepted (e.g. 1MiB).
        #[arg(long, value_name = "SIZE", value_parser = parse_size_u32)]
        max_event_size: Option<u32>,
    },
    /// List topics.
    List,
    /// Show a topic.
    Show {
        /// Topic name.
        #[arg(value_parser = queue_name)]
        name: String,
    },
    /// Delete a topic (refused while it has subscriptions, unless --force).
    Delete {
        /// Topic name.
        #[arg(value_parser = queue_name)]
        name: String,
        /// Also delete its subscriptions with their undelivered events.
        #[arg(long)]
        force: bool,
    },
}

/// `redrive sub ...`.
#[derive(Debug, Subcommand)]
pub enum SubCommand {
    /// Create a pull subscription, or a push one with --push URL.
    Create {
        /// Topic name.
        #[arg(value_parser = queue_name)]
        topic: String,
        /// Subscription name (its queue is TOPIC.NAME).
        #[arg(value_parser = queue_name)]
        name: String,
        /// Push to this endpoint (http or https) instead of pull.
        #[arg(long, value_name = "URL")]
        push: Option<String>,
        /// Push in binary mode (default structured).
        #[arg(long)]
        binary: bool,
        /// Skip the endpoint validation handshake (trusted endpoints only).
        #[arg(long)]
        skip_validation: bool,
        /// Accepted event types (repeatable; any when none).
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
        /// The subject must begin with this.
        #[arg(long, value_name = "PREFIX")]
        subject_begins_with: Option<String>,
        /// The subject must end with this.
        #[arg(long, value_name = "SUFFIX")]
        subject_ends_with: Option<String>,
        /// Dead-letter destination: own, queue:NAME, topic:NAME (push), or drop (accepts
        /// dropping events).
        #[arg(long, value_name = "DEST", value_parser = parse_dead_letter)]
        dead_letter: Option<DeadLetterDestination>,
        /// Pull: deliveries before an event is dead-lettered (1 to 10000).
        #[arg(long, value_name = "N", value_parser = ranged_u32(1, 10_000))]
        max_delivery_count: Option<u32>,
        /// Push: attempts before an event is dead-lettered (1 to 30).
        #[arg(long, value_name = "N", value_parser = ranged_u32(1, 30))]
        max_attempts: Option<u32>,
        /// Push: minutes after publishing when retrying stops (1 to 1440).
        #[arg(long, value_name = "MIN", value_parser = ranged_u32(1, 1_440))]
        event_ttl_minutes: Option<u32>,
        #[command(flatten)]
        replay: ReplayArgs,
    },
    /// Change a subscription's auto-replay policy and dead-letter retention: only the
    /// fields given are changed.
    Update {
        /// Topic name.
        #[arg(value_parser = queue_name)]
        topic: String,
        /// Subscription name.
        #[arg(value_parser = queue_name)]
        name: String,
        #[command(flatten)]
        replay: ReplayArgs,
    },
    /// List a topic's subscriptions with their stats.
    List {
        /// Topic name.
        #[arg(value_parser = queue_name)]
        topic: String,
    },
    /// Show a subscription with its stats.
    Show {
        /// Topic name.
        #[arg(value_parser = queue_name)]
        topic: String,
        /// Subscription name.
        #[arg(value_parser = queue_name)]
        name: String,
    },
    /// Pause a subscription (events are kept, no delivery attempts).
    Pause {
        /// Topic name.
        #[arg(value_parser = queue_name)]
        topic: String,
        /// Subscription name.
        #[arg(value_parser = queue_name)]
        name: String,
    },
    /// Resume a paused subscription.
    Resume {
        /// Topic name.
        #[arg(value_parser = queue_name)]
        topic: String,
        /// Subscription name.
        #[arg(value_parser = queue_name)]
        name: String,
    },
    /// Delete a subscription and its queue (refused with undelivered events, unless --force).
    Delete {
        /// Topic name.
        #[arg(value_parser = queue_name)]
        topic: String,
        /// Subscription name.
        #[arg(value_parser = queue_name)]
        name: String,
        /// Discard undelivered events.
        #[arg(long)]
        force: bool,
    },
}

/// `redrive publish`.
#[derive(Debug, clap::Args)]
pub struct PublishArgs {
    /// Topic name.
    #[arg(value_parser = queue_name)]
    pub topic: String,
    /// The event's `type`.
    #[arg(long = "type", value_name = "TYPE")]
    pub event_type: String,
    /// The event's `source`.
    #[arg(long)]
    pub source: String,
    /// The event's `id` (default: a new UUID).
    #[arg(long)]
    pub id: Option<String>,
    /// The event's `subject`.
    #[arg(long)]
    pub subject: Option<String>,
    /// The data (JSON if it parses as JSON, else a string); without it and without
    /// --file, read from stdin.
    pub data: Option<String>,
    /// Read the data from this file.
    #[arg(long, conflicts_with = "data")]
    pub file: Option<PathBuf>,
}

fn parse_dead_letter(s: &str) -> Result<DeadLetterDestination, String> {
    match s {
        "own" | "own_store" => Ok(DeadLetterDestination::OwnStore),
        "drop" => Ok(DeadLetterDestination::Drop { acknowledged: true }),
        _ => {
            if let Some(q) = s.strip_prefix("queue:") {
                Ok(DeadLetterDestination::Queue {
                    name: q.parse().map_err(|e| format!("{e}"))?,
                })
            } else if let Some(t) = s.strip_prefix("topic:") {
                Ok(DeadLetterDestination::Topic {
                    name: t.parse().map_err(|e| format!("{e}"))?,
                })
            } else {
                Err(format!(
                    "invalid dead-letter destination {s:?} (expected own, queue:NAME, topic:NAME or drop)"
                ))
            }
        }
    }
}

/// One request; a problem document becomes the client's error.
async fn request<T: DeserializeOwned>(
    ctx: &Ctx,
    method: Method,
    segments: &[&str],
    query: Option<(&str, &str)>,
    body: Option<&impl Serialize>,
) -> Result<Option<T>, AdminError> {
    // A JSON array of events is a CloudEvents batch; everything else is plain JSON.
    let ct = if segments.last() == Some(&"events") {
        "application/cloudevents-batch+json"
    } else {
        "application/json"
    };
    ctx.client
        .wire()
        .request(method, segments, query, body.map(|b| (ct, b)))
        .await
}

async fn must<T: DeserializeOwned>(
    ctx: &Ctx,
    method: Method,
    segments: &[&str],
    body: Option<&impl Serialize>,
) -> anyhow::Result<T> {
    request(ctx, method, segments, None, body)
        .await?
        .ok_or_else(|| anyhow::anyhow!("empty answer from the server"))
}

const NO_BODY: Option<&()> = None;

/// Runs a topic, subscription or publish command.
pub async fn run(ctx: &Ctx, cmd: TopicCommands) -> anyhow::Result<()> {
    match cmd {
        TopicCommands::Topic(c) => topic(ctx, c).await,
        TopicCommands::Sub(c) => sub(ctx, c).await,
        TopicCommands::Publish(a) => publish(ctx, a).await,
    }
}

fn show_topic(t: &TopicInfo) {
    let mut kv = KeyValues::new();
    kv.add("name", &t.name)
        .add("version", t.version.to_string())
        .add(
            "duplicate detection window",
            format_duration_ms(t.policy.duplicate_detection_window_ms),
        )
        .add("max event size", t.policy.max_event_size.to_string())
        .add("created", &t.created_at)
        .add("updated", &t.updated_at);
    print!("{}", kv.render());
}

async fn topic(ctx: &Ctx, cmd: TopicCommand) -> anyhow::Result<()> {
    match cmd {
        TopicCommand::Create {
            name,
            duplicate_detection_window,
            max_event_size,
        } => {
            let mut policy = TopicPolicy::default();
            if let Some(w) = duplicate_detection_window {
                policy.duplicate_detection_window_ms = w;
            }
            if let Some(m) = max_event_size {
                policy.max_event_size = m;
            }
            let t: TopicInfo = must(
                ctx,
                Method::POST,
                &["v1", "topics"],
                Some(&CreateTopic { name, policy }),
            )
            .await?;
            if ctx.json {
                print_json(&t)
            } else {
                println!("created topic {}", t.name);
                Ok(())
            }
        }
        TopicCommand::List => {
            let l: TopicList = must(ctx, Method::GET, &["v1", "topics"], NO_BODY).await?;
            if ctx.json {
                return print_json(&l);
            }
            let mut table = Table::new(["TOPIC", "DEDUP WINDOW", "MAX EVENT SIZE", "CREATED"]);
            for t in &l.topics {
                table.row([
                    t.name.clone(),
                    format_duration_ms(t.policy.duplicate_detection_window_ms),
                    t.policy.max_event_size.to_string(),
                    t.created_at.clone(),
                ]);
            }
            print!("{}", table.render());
            Ok(())
        }
        TopicCommand::Show { name } => {
            let t: TopicInfo = must(ctx, Method::GET, &["v1", "topics", &name], NO_BODY).await?;
            if ctx.json {
                return print_json(&t);
            }
            show_topic(&t);
            Ok(())
        }
        TopicCommand::Delete { name, force } => {
            request::<Value>(
                ctx,
                Method::DELETE,
                &["v1", "topics", &name],
                force.then_some(("force", "true")),
                NO_BODY,
            )
            .await?;
            if ctx.json {
                print_json(&json!({"deleted": name}))
            } else {
                println!("deleted topic {name}");
                Ok(())
            }
        }
    }
}

fn kind_text(k: &SubscriptionKind) -> String {
    match k {
        SubscriptionKind::Pull => "pull".to_owned(),
        SubscriptionKind::Push {
            endpoint,
            validation,
            ..
        } => format!("push {endpoint} ({validation:?})").to_lowercase(),
    }
}

/// `a=1, b=2`, or `-` when empty.
fn counts_text(m: &std::collections::BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "-".to_owned();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_sub(s: &SubscriptionInfo) -> anyhow::Result<()> {
    let mut kv = KeyValues::new();
    kv.add("topic", &s.topic)
        .add("name", &s.name)
        .add("queue", &s.queue)
        .add("kind", kind_text(&s.kind))
        .add("paused", s.paused.to_string())
        .add("filter", serde_json::to_string(&s.filter)?)
        .add("dead letter", serde_json::to_string(&s.dead_letter)?);
    replay::describe(&mut kv, &s.auto_replay, " ");
    kv.add(
        "dead letter retention",
        replay::retention_text(s.dead_letter_retention_ms),
    );
    kv.add("pending", s.stats.pending.to_string())
        .add("in backoff", s.stats.in_backoff.to_string())
        .add("in flight", s.stats.in_flight.to_string())
        .add("dead-lettered", s.stats.dead_lettered.to_string())
        .add(
            "oldest pending",
            s.stats
                .oldest_pending_age_ms
                .map_or_else(|| "-".to_owned(), |ms| format!("{ms} ms")),
        )
        .add("delivered", s.stats.delivered.to_string())
        .add("failed attempts", counts_text(&s.stats.failed_attempts))
        .add(
            "dead-lettered by reason",
            counts_text(&s.stats.dead_lettered_by_reason),
        )
        .add("dropped", s.stats.dropped.to_string())
        .add("version", s.version.to_string());
    print!("{}", kv.render());
    Ok(())
}

async fn sub(ctx: &Ctx, cmd: SubCommand) -> anyhow::Result<()> {
    let out = |s: SubscriptionInfo| {
        if ctx.json {
            print_json(&s)
        } else {
            print_sub(&s)
        }
    };
    match cmd {
        SubCommand::Create {
            topic,
            name,
            push,
            binary,
            skip_validation,
            types,
            subject_begins_with,
            subject_ends_with,
            dead_letter,
            max_delivery_count,
            max_attempts,
            event_ttl_minutes,
            replay: flags,
        } => {
            let replay = flags.patch();
            replay
                .validate()
                .map_err(|e| input_error(format!("subscription {name}: {e}")))?;
            let mut retry_policy = RetryPolicy::default();
            if let Some(n) = max_attempts {
                retry_policy.max_delivery_attempts = n;
            }
            if let Some(m) = event_ttl_minutes {
                retry_policy.event_time_to_live_minutes = m;
            }
            let req = CreateSubscription {
                name,
                kind: if push.is_some() {
                    SubscriptionType::Push
                } else {
                    SubscriptionType::Pull
                },
                endpoint: push,
                mode: if binary {
                    PushMode::Binary
                } else {
                    PushMode::Structured
                },
                skip_validation,
                filter: Filter {
                    included_event_types: types,
                    subject_begins_with,
                    subject_ends_with,
                    ..Filter::default()
                },
                retry_policy,
                delivery: Default::default(),
                dead_letter,
                paused: false,
                max_delivery_count,
                auto_replay: AutoReplay::default().patched(&replay),
                dead_letter_retention_ms: flags.dead_letter_retention,
            };
            let s: SubscriptionInfo = must(
                ctx,
                Method::POST,
                &["v1", "topics", &topic, "subscriptions"],
                Some(&req),
            )
            .await?;
            out(s)
        }
        SubCommand::Update {
            topic,
            name,
            replay: flags,
        } => {
            if flags.is_empty() {
                return Err(input_error(
                    "nothing to update: give at least one auto-replay or retention flag (see --help)",
                ));
            }
            let patch = flags.patch();
            patch
                .validate()
                .map_err(|e| input_error(format!("subscription {name}: {e}")))?;
            let s: SubscriptionInfo = must(
                ctx,
                Method::PATCH,
                &["v1", "topics", &topic, "subscriptions", &name],
                Some(&UpdateSubscription {
                    auto_replay: (!patch.is_empty()).then_some(patch),
                    dead_letter_retention_ms: flags.dead_letter_retention,
                    ..UpdateSubscription::default()
                }),
            )
            .await?;
            out(s)
        }
        SubCommand::List { topic } => {
            let l: SubscriptionList = must(
                ctx,
                Method::GET,
                &["v1", "topics", &topic, "subscriptions"],
                NO_BODY,
            )
            .await?;
            if ctx.json {
                return print_json(&l);
            }
            let mut table = Table::new([
                "SUBSCRIPTION",
                "KIND",
                "PAUSED",
                "PENDING",
                "IN BACKOFF",
                "IN FLIGHT",
                "DEAD-LETTERED",
            ]);
            for s in &l.subscriptions {
                table.row([
                    s.name.clone(),
                    kind_text(&s.kind),
                    s.paused.to_string(),
                    s.stats.pending.to_string(),
                    s.stats.in_backoff.to_string(),
                    s.stats.in_flight.to_string(),
                    s.stats.dead_lettered.to_string(),
                ]);
            }
            print!("{}", table.render());
            Ok(())
        }
        SubCommand::Show { topic, name } => {
            let s: SubscriptionInfo = must(
                ctx,
                Method::GET,
                &["v1", "topics", &topic, "subscriptions", &name],
                NO_BODY,
            )
            .await?;
            out(s)
        }
        SubCommand::Pause { topic, name } => out(set_paused(ctx, &topic, &name, true).await?),
        SubCommand::Resume { topic, name } => out(set_paused(ctx, &topic, &name, false).await?),
        SubCommand::Delete { topic, name, force } => {
            let d: Option<SubscriptionDeleted> = request(
                ctx,
                Method::DELETE,
                &["v1", "topics", &topic, "subscriptions", &name],
                force.then_some(("force", "true")),
                NO_BODY,
            )
            .await?;
            let discarded = d.map_or(0, |d| d.discarded);
            if ctx.json {
                print_json(&json!({"deleted": name, "discarded": discarded}))
            } else {
                println!(
                    "deleted subscription {topic}/{name} ({discarded} undelivered events discarded)"
                );
                Ok(())
            }
        }
    }
}

async fn set_paused(
    ctx: &Ctx,
    topic: &str,
    name: &str,
    paused: bool,
) -> anyhow::Result<SubscriptionInfo> {
    must(
        ctx,
        Method::PATCH,
        &["v1", "topics", topic, "subscriptions", name],
        Some(&UpdateSubscription {
            paused: Some(paused),
            ..UpdateSubscription::default()
        }),
    )
    .await
}

async fn publish(ctx: &Ctx, args: PublishArgs) -> anyhow::Result<()> {
    let bytes = match (&args.data, &args.file) {
        (Some(d), _) => d.clone().into_bytes(),
        (None, Some(f)) => std::fs::read(f)
            .map_err(|e| input_error(format!("cannot read {}: {e}", f.display())))?,
        (None, None) => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| input_error(format!("cannot read the data from stdin: {e}")))?;
            buf
        }
    };
    let mut event = json!({
        "specversion": "1.0",
        "id": args.id.unwrap_or_else(redrive_core::id::new_message_id),
        "source": args.source,
        "type": args.event_type,
    });
    if let Some(s) = args.subject {
        event["subject"] = json!(s);
    }
    if !bytes.is_empty() {
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => {
                event["datacontenttype"] = json!("application/json");
                event["data"] = v;
            }
            Err(_) => match String::from_utf8(bytes) {
                Ok(text) => {
                    event["datacontenttype"] = json!("text/plain");
                    event["data"] = json!(text);
                }
                Err(e) => {
                    use base64::Engine as _;
                    event["datacontenttype"] = json!("application/octet-stream");
                    event["data_base64"] =
                        json!(base64::engine::general_purpose::STANDARD.encode(e.into_bytes()));
                }
            },
        }
    }
    let r: PublishResults = must(
        ctx,
        Method::POST,
        &["v1", "topics", &args.topic, "events"],
        Some(&vec![event]),
    )
    .await?;
    if ctx.json {
        return print_json(&r);
    }
    for e in &r.results {
        if e.duplicate {
            println!(
                "event {} accepted as a duplicate (not fanned out again)",
                e.id
            );
        } else {
            println!("published event {}", e.id);
        }
    }
    Ok(())
}
