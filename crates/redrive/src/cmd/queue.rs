//! `redrive queue create|update|show|list|delete|purge|history`: queues and their policies.

use anyhow::Context as _;
use clap::{Args, Subcommand};
use redrive_api::queue::{Backoff, QueueInfo, QueuePolicy, UpdateQueue};
use redrive_core::EntityName;
use serde_json::{Map, Value, json};

use super::replay::{self, ReplayArgs};
use super::{Ctx, queue_name};
use crate::failure::input_error;
use crate::output::{KeyValues, Table, or_dash, print_json};
use crate::units::{format_duration_ms, parse_duration_ms, parse_size_u32, ranged, ranged_u32};
use redrive_core::policy::MAX_DELIVERY_COUNT_LIMIT;

/// `redrive queue ...`.
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Create a queue; policy fields not given take their defaults.
    Create {
        /// Queue name: letters, digits, '-', '_', '.'; up to 80 characters.
        #[arg(value_parser = queue_name)]
        name: String,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Change a queue's policy: only the fields given are changed (a JSON merge patch).
    Update {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        name: String,
        #[command(flatten)]
        policy: PolicyArgs,
        /// Refuse unless the stored policy version is this one.
        #[arg(long, value_name = "N", value_parser = ranged(1, i64::MAX as u64))]
        expected_version: Option<u64>,
    },
    /// Show a queue's policy and counts.
    Show {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        name: String,
    },
    /// List every queue.
    List,
    /// Delete a queue (refused when it holds messages, unless --force).
    Delete {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        name: String,
        /// Delete even with messages or live dead letters; they are lost.
        #[arg(long)]
        force: bool,
    },
    /// Remove every message of a queue, whatever its state: messages locked by receivers
    /// too (their settlements then fail with lock_lost). Dead letters stay. Audited.
    Purge {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        name: String,
    },
    /// Show a queue's policy history, newest version first: each version, when it was
    /// written and its policy as JSON (who changed it is in `redrive audit`).
    History {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        name: String,
        /// At most this many versions (1 to 100) [server default: 20].
        #[arg(long, value_name = "N", value_parser = ranged_u32(1, 100))]
        limit: Option<u32>,
        /// Only versions below this one (from an earlier page's `more:` line).
        #[arg(long, value_name = "VERSION", value_parser = ranged(1, i64::MAX as u64))]
        before: Option<u64>,
    },
}

/// Policy flags of `queue create` and `queue update`.
#[derive(Debug, Clone, Default, Args)]
pub struct PolicyArgs {
    /// Lock taken by a receive (e.g. 30s; 1s to 5m).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub lock_duration: Option<u64>,
    /// Deliveries after which a message is dead-lettered (1 to 10000).
    #[arg(long, value_name = "N", value_parser = ranged_u32(1, MAX_DELIVERY_COUNT_LIMIT))]
    pub max_delivery_count: Option<u32>,
    /// Time to live of messages that set none (e.g. 7d), or `none`.
    #[arg(long, value_name = "DUR|none", value_parser = parse_clearable_duration)]
    pub default_ttl: Option<Clearable<u64>>,
    /// Dead-letter expired messages instead of dropping them (`=false` turns it off).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    pub dead_letter_on_expiry: Option<bool>,
    /// Duplicate-detection window on message ids (e.g. 10m; 0 turns it off).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub duplicate_detection_window: Option<u64>,
    /// Every message needs a session id and is received through a session (`=false`
    /// turns it off).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    pub requires_session: Option<bool>,
    /// Messages of one group (their session id) are delivered in order, one in flight,
    /// without session locks (`=false` turns it off).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    pub group_ordering: Option<bool>,
    /// A test sandbox: the only kind of queue a recovery case's isolated test may send its
    /// fixture to (`=false` turns it off).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    pub test_sandbox: Option<bool>,
    /// Redelivery backoff: none, fixed:DUR, or exponential:INITIAL:MAX[:JITTER].
    #[arg(long, value_name = "SPEC", value_parser = parse_backoff)]
    pub backoff: Option<Backoff>,
    /// Largest accepted body (e.g. 256KiB, 1MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u32)]
    pub max_message_size: Option<u32>,
    /// Forward dead letters to this queue, or `none` for the queue's own store.
    #[arg(long, value_name = "QUEUE|none", value_parser = parse_clearable_queue)]
    pub dead_letter_queue: Option<Clearable<EntityName>>,
    #[command(flatten)]
    pub replay: ReplayArgs,
}

/// A value, or `none` to clear it.
#[derive(Debug, Clone, PartialEq)]
pub struct Clearable<T>(pub Option<T>);

impl PolicyArgs {
    /// The full policy for a create: defaults overlaid with the flags.
    pub fn policy(&self) -> QueuePolicy {
        let mut p = QueuePolicy::default();
        if let Some(v) = self.lock_duration {
            p.lock_duration_ms = v;
        }
        if let Some(v) = self.max_delivery_count {
            p.max_delivery_count = v;
        }
        if let Some(v) = &self.default_ttl {
            p.default_ttl_ms = v.0;
        }
        if let Some(v) = self.dead_letter_on_expiry {
            p.dead_letter_on_expiry = v;
        }
        if let Some(v) = self.duplicate_detection_window {
            p.duplicate_detection_window_ms = v;
        }
        if let Some(v) = self.group_ordering {
            p.group_ordering = v;
        }
        if let Some(v) = self.test_sandbox {
            p.test_sandbox = v;
        }
        if let Some(v) = self.requires_session {
            p.requires_session = v;
        }
        if let Some(v) = &self.backoff {
            p.redelivery_backoff = v.clone();
        }
        if let Some(v) = self.max_message_size {
            p.max_message_size = v;
        }
        if let Some(v) = &self.dead_letter_queue {
            p.dead_letter_queue.clone_from(&v.0);
        }
        p.auto_replay = p.auto_replay.patched(&self.replay.patch());
        if let Some(v) = self.replay.dead_letter_retention {
            p.dead_letter_retention_ms = v;
        }
        p
    }

    /// A JSON merge patch (RFC 7386) of only the fields given. A backoff replaces the
    /// stored one entirely: the other kind's fields are removed with `null`.
    pub fn merge_patch(&self) -> Map<String, Value> {
        let mut m = Map::new();
        if let Some(v) = self.lock_duration {
            m.insert("lock_duration_ms".into(), json!(v));
        }
        if let Some(v) = self.max_delivery_count {
            m.insert("max_delivery_count".into(), json!(v));
        }
        if let Some(v) = &self.default_ttl {
            m.insert("default_ttl_ms".into(), json!(v.0));
        }
        if let Some(v) = self.dead_letter_on_expiry {
            m.insert("dead_letter_on_expiry".into(), json!(v));
        }
        if let Some(v) = self.duplicate_detection_window {
            m.insert("duplicate_detection_window_ms".into(), json!(v));
        }
        if let Some(v) = self.group_ordering {
            m.insert("group_ordering".into(), json!(v));
        }
        if let Some(v) = self.test_sandbox {
            m.insert("test_sandbox".into(), json!(v));
        }
        if let Some(v) = self.requires_session {
            m.insert("requires_session".into(), json!(v));
        }
        if let Some(b) = &self.backoff {
            let mut patch = Map::new();
            for k in ["delay_ms", "initial_ms", "max_ms", "jitter"] {
                patch.insert(k.into(), Value::Null);
            }
            if let Ok(Value::Object(set)) = serde_json::to_value(b) {
                patch.extend(set);
            }
            m.insert("redelivery_backoff".into(), Value::Object(patch));
        }
        if let Some(v) = self.max_message_size {
            m.insert("max_message_size".into(), json!(v));
        }
        if let Some(v) = &self.dead_letter_queue {
            m.insert(
                "dead_letter_queue".into(),
                v.0.as_ref().map_or(Value::Null, |q| json!(q.as_str())),
            );
        }
        let replay = self.replay.patch();
        if !replay.is_empty() {
            // The patch serializes only its fields given: a merge patch of the section.
            m.insert("auto_replay".into(), json!(replay));
        }
        if let Some(v) = self.replay.dead_letter_retention {
            m.insert("dead_letter_retention_ms".into(), json!(v));
        }
        m
    }
}

/// Runs a `queue` command.
pub async fn run(ctx: &Ctx, cmd: QueueCommand) -> anyhow::Result<()> {
    match cmd {
        QueueCommand::Create { name, policy } => {
            let policy = policy.policy();
            policy
                .validate()
                .map_err(|e| input_error(format!("queue {name}: {e}")))?;
            let info = ctx
                .client
                .admin()
                .create_queue(&name, policy)
                .await
                .with_context(|| format!("create queue {name}"))?;
            if ctx.json {
                return print_json(&info);
            }
            println!("created queue {}", info.name);
            print!("{}", describe(&info).render());
        }
        QueueCommand::Update {
            name,
            policy,
            expected_version,
        } => {
            let patch = policy.merge_patch();
            if patch.is_empty() {
                return Err(input_error(
                    "nothing to update: give at least one policy flag (see --help)",
                ));
            }
            let req = UpdateQueue {
                policy: Value::Object(patch),
                expected_version,
            };
            let info = ctx
                .client
                .admin()
                .update_queue(&name, &req)
                .await
                .with_context(|| format!("update queue {name}"))?;
            if ctx.json {
                return print_json(&info);
            }
            println!(
                "updated queue {} (policy version {})",
                info.name, info.policy_version
            );
            print!("{}", describe(&info).render());
        }
        QueueCommand::Show { name } => {
            let info = ctx
                .client
                .admin()
                .get_queue(&name)
                .await
                .with_context(|| format!("show queue {name}"))?;
            if ctx.json {
                return print_json(&info);
            }
            print!("{}", describe(&info).render());
        }
        QueueCommand::List => {
            let list = ctx
                .client
                .admin()
                .list_queues()
                .await
                .context("list queues")?;
            if ctx.json {
                return print_json(&list);
            }
            if list.queues.is_empty() {
                println!("no queues");
                return Ok(());
            }
            let mut t = Table::new([
                "NAME",
                "VERSION",
                "LOCK",
                "MAX-DELIVERIES",
                "TTL",
                "SESSIONS",
                "BACKOFF",
                "DEAD-LETTERS-TO",
                "MESSAGES",
            ]);
            for q in &list.queues {
                let p = &q.policy;
                let c = &q.counts;
                t.row([
                    q.name.clone(),
                    q.policy_version.to_string(),
                    format_duration_ms(p.lock_duration_ms),
                    p.max_delivery_count.to_string(),
                    or_dash(p.default_ttl_ms.map(format_duration_ms)),
                    yes_no(p.requires_session).to_owned(),
                    backoff_text(&p.redelivery_backoff),
                    p.dead_letter_queue
                        .as_ref()
                        .map_or_else(|| "(own store)".to_owned(), ToString::to_string),
                    (c.active + c.scheduled + c.locked + c.deferred).to_string(),
                ]);
            }
            print!("{}", t.render());
        }
        QueueCommand::Delete { name, force } => {
            ctx.client
                .admin()
                .delete_queue(&name, force)
                .await
                .with_context(|| format!("delete queue {name}"))?;
            if ctx.json {
                return print_json(&json!({"deleted": name}));
            }
            println!("deleted queue {name}");
        }
        QueueCommand::Purge { name } => {
            let out = ctx
                .client
                .admin()
                .purge_queue(&name)
                .await
                .with_context(|| format!("purge queue {name}"))?;
            if ctx.json {
                return print_json(&out);
            }
            let s = if out.removed == 1 { "" } else { "s" };
            println!("purged queue {name}: {} message{s} removed", out.removed);
        }
        QueueCommand::History {
            name,
            limit,
            before,
        } => {
            let page = ctx
                .client
                .admin()
                .policy_versions(&name, before, limit)
                .await
                .with_context(|| format!("show the policy history of queue {name}"))?;
            if ctx.json {
                return print_json(&page);
            }
            if page.versions.is_empty() {
                println!("no policy versions");
                return Ok(());
            }
            let mut t = Table::new(["VERSION", "CHANGED", "POLICY"]);
            for v in &page.versions {
                t.row([
                    v.version.to_string(),
                    v.changed_at.clone(),
                    serde_json::to_string(&v.policy)?,
                ]);
            }
            print!("{}", t.render());
            if let Some(b) = page.next {
                println!("more: --before {b}");
            }
        }
    }
    Ok(())
}

/// A queue's policy and counts as `key: value` lines.
pub fn describe(q: &QueueInfo) -> KeyValues {
    let p = &q.policy;
    let c = &q.counts;
    let mut kv = KeyValues::new();
    kv.add("name", q.name.clone())
        .add("policy_version", q.policy_version.to_string())
        .add("created_at", q.created_at.clone())
        .add("updated_at", q.updated_at.clone())
        .add("lock_duration", format_duration_ms(p.lock_duration_ms))
        .add("max_delivery_count", p.max_delivery_count.to_string())
        .add(
            "default_ttl",
            or_dash(p.default_ttl_ms.map(format_duration_ms)),
        )
        .add("dead_letter_on_expiry", p.dead_letter_on_expiry.to_string())
        .add(
            "duplicate_detection_window",
            if p.duplicate_detection_window_ms == 0 {
                "off".to_owned()
            } else {
                format_duration_ms(p.duplicate_detection_window_ms)
            },
        )
        .add("requires_session", p.requires_session.to_string())
        .add("group_ordering", p.group_ordering.to_string())
        .add("redelivery_backoff", backoff_text(&p.redelivery_backoff))
        .add("max_message_size", p.max_message_size.to_string())
        .add(
            "dead_letter_queue",
            p.dead_letter_queue
                .as_ref()
                .map_or_else(|| "(own dead-letter store)".to_owned(), ToString::to_string),
        );
    replay::describe(&mut kv, &p.auto_replay, "_");
    kv.add(
        "dead_letter_retention",
        replay::retention_text(p.dead_letter_retention_ms),
    );
    kv.add("active", c.active.to_string())
        .add("scheduled", c.scheduled.to_string())
        .add("locked", c.locked.to_string())
        .add("deferred", c.deferred.to_string())
        .add("dead_lettered", c.dead_lettered.to_string())
        .add(
            "oldest_message_age",
            or_dash(c.oldest_message_age_ms.map(format_duration_ms)),
        );
    kv
}

/// A backoff in the syntax `--backoff` reads.
pub fn backoff_text(b: &Backoff) -> String {
    match b {
        Backoff::None => "none".to_owned(),
        Backoff::Fixed { delay_ms } => format!("fixed:{}", format_duration_ms(*delay_ms)),
        Backoff::Exponential {
            initial_ms,
            max_ms,
            jitter,
        } => {
            let mut s = format!(
                "exponential:{}:{}",
                format_duration_ms(*initial_ms),
                format_duration_ms(*max_ms)
            );
            if *jitter > 0.0 {
                s.push_str(&format!(":{jitter}"));
            }
            s
        }
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// Parses `none`, `fixed:DUR` or `exponential:INITIAL:MAX[:JITTER]` (`exp:` also works).
pub fn parse_backoff(s: &str) -> Result<Backoff, String> {
    let parts: Vec<&str> = s.trim().split(':').collect();
    let usage = "expected none, fixed:DUR or exponential:INITIAL:MAX[:JITTER]";
    match parts.as_slice() {
        ["none"] => Ok(Backoff::None),
        ["fixed", d] => Ok(Backoff::Fixed {
            delay_ms: parse_duration_ms(d)?,
        }),
        ["exponential" | "exp", i, m, rest @ ..] if rest.len() <= 1 => {
            let jitter = match rest.first() {
                Some(j) => {
                    let j: f64 = j
                        .parse()
                        .map_err(|_| format!("invalid jitter {j:?}: expected 0 to 1"))?;
                    if !(0.0..=1.0).contains(&j) {
                        return Err(format!("invalid jitter {j}: expected 0 to 1"));
                    }
                    j
                }
                None => 0.0,
            };
            Ok(Backoff::Exponential {
                initial_ms: parse_duration_ms(i)?,
                max_ms: parse_duration_ms(m)?,
                jitter,
            })
        }
        _ => Err(format!("invalid backoff {s:?}: {usage}")),
    }
}

fn parse_clearable_duration(s: &str) -> Result<Clearable<u64>, String> {
    if is_none_word(s) {
        return Ok(Clearable(None));
    }
    parse_duration_ms(s).map(|v| Clearable(Some(v)))
}

fn parse_clearable_queue(s: &str) -> Result<Clearable<EntityName>, String> {
    if is_none_word(s) {
        return Ok(Clearable(None));
    }
    s.parse::<EntityName>()
        .map(|n| Clearable(Some(n)))
        .map_err(|e| e.to_string())
}

fn is_none_word(s: &str) -> bool {
    matches!(s.trim(), "none" | "off")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_specs_parse_and_print_back() {
        assert_eq!(parse_backoff("none"), Ok(Backoff::None));
        assert_eq!(
            parse_backoff("fixed:5s"),
            Ok(Backoff::Fixed { delay_ms: 5_000 })
        );
        let exp = parse_backoff("exponential:100ms:1m:0.5").unwrap();
        assert_eq!(
            exp,
            Backoff::Exponential {
                initial_ms: 100,
                max_ms: 60_000,
                jitter: 0.5
            }
        );
        assert_eq!(backoff_text(&exp), "exponential:100ms:1m:0.5");
        assert_eq!(
            parse_backoff(&backoff_text(&exp)).unwrap(),
            exp,
            "round trip"
        );
        for bad in [
            "fixed",
            "fixed:5",
            "exponential:1s",
            "exponential:1s:2s:3",
            "linear:1s",
            "",
        ] {
            assert!(parse_backoff(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn merge_patch_holds_only_given_fields() {
        let args = PolicyArgs {
            max_delivery_count: Some(3),
            default_ttl: Some(Clearable(None)),
            ..PolicyArgs::default()
        };
        assert_eq!(
            Value::Object(args.merge_patch()),
            json!({"max_delivery_count": 3, "default_ttl_ms": null})
        );
        assert!(PolicyArgs::default().merge_patch().is_empty());
    }

    #[test]
    fn retention_goes_into_the_policy_and_the_patch() {
        let args = PolicyArgs {
            replay: ReplayArgs {
                dead_letter_retention: Some(0),
                ..ReplayArgs::default()
            },
            ..PolicyArgs::default()
        };
        assert_eq!(args.policy().dead_letter_retention_ms, 0);
        assert_eq!(
            Value::Object(args.merge_patch()),
            json!({"dead_letter_retention_ms": 0})
        );
        assert_eq!(
            PolicyArgs::default().policy().dead_letter_retention_ms,
            redrive_core::policy::DEFAULT_DEAD_LETTER_RETENTION_MS
        );
    }

    #[test]
    fn backoff_patch_replaces_the_whole_object() {
        let args = PolicyArgs {
            backoff: Some(Backoff::Fixed { delay_ms: 5 }),
            ..PolicyArgs::default()
        };
        assert_eq!(
            Value::Object(args.merge_patch()),
            json!({"redelivery_backoff": {
                "kind": "fixed", "delay_ms": 5,
                "initial_ms": null, "max_ms": null, "jitter": null
            }})
        );
    }

    #[test]
    fn create_policy_overlays_defaults() {
        let args = PolicyArgs {
            lock_duration: Some(5_000),
            dead_letter_queue: Some(Clearable(Some("dlq".parse().unwrap()))),
            ..PolicyArgs::default()
        };
        let p = args.policy();
        assert_eq!(p.lock_duration_ms, 5_000);
        assert_eq!(p.max_delivery_count, 10);
        assert_eq!(p.dead_letter_queue.unwrap().as_str(), "dlq");
    }
}
