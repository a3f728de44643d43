//! `redrive token create|list|revoke` and `redrive audit list|verify`: API tokens and the
//! audit log (admin).

use anyhow::Context as _;
use clap::{Args, Subcommand};
use redrive_api::access::{CreateToken, Token};
use redrive_core::access::Grant;

use super::Ctx;
use crate::failure::input_error;
use crate::output::{KeyValues, Table, or_dash, print_json};
use crate::units::ranged_u32;
use redrive_client::AuditQuery;

/// `redrive token …`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token; its secret is printed once.
    Create(CreateArgs),
    /// List tokens (never their secrets).
    List,
    /// Revoke a token: refused from the next request on; its long polls and move tasks
    /// end.
    Revoke {
        /// The token id (`tok_…`).
        id: String,
    },
}

/// `redrive token create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// A name for people.
    #[arg(long)]
    pub name: String,
    /// A grant: `role`, `role:queue` or `role:prefix*` (roles: producer, consumer,
    /// operator, replayer, payload-reader, admin). Repeat for several.
    #[arg(long = "grant", required = true, value_parser = grant)]
    pub grants: Vec<String>,
    /// RFC 3339 time after which the token is refused.
    #[arg(long)]
    pub expires_at: Option<String>,
    /// Also make SQS credentials (access key id and secret access key).
    #[arg(long)]
    pub sqs: bool,
}

fn grant(s: &str) -> Result<String, String> {
    s.parse::<Grant>()
        .map(|g| g.to_string())
        .map_err(|e| e.to_string())
}

/// Runs `token …`.
pub async fn run_token(ctx: &Ctx, c: TokenCommand) -> anyhow::Result<()> {
    match c {
        TokenCommand::Create(a) => {
            let created = ctx
                .client
                .access()
                .create_token(&CreateToken {
                    name: a.name.clone(),
                    grants: a.grants,
                    expires_at: a.expires_at,
                    sqs: a.sqs,
                })
                .await
                .with_context(|| format!("creating token {}", a.name))?;
            if ctx.json {
                return print_json(&created);
            }
            let mut kv = KeyValues::new();
            kv.add("id", &created.token.id)
                .add("name", &created.token.name)
                .add("grants", created.token.grants.join(" "))
                .add("token", &created.secret)
                .add_opt("sqs access key id", created.token.sqs_access_key_id.clone())
                .add_opt(
                    "sqs secret access key",
                    created.sqs_secret_access_key.clone(),
                );
            print!("{}", kv.render());
            eprintln!("the token is shown only now: keep it (export REDRIVE_TOKEN=…)");
            if created.sqs_secret_access_key.is_some() {
                eprintln!(
                    "the sqs secret access key is shown only now too (the server keeps it \
                     to check signatures, and never shows it again)"
                );
            }
            Ok(())
        }
        TokenCommand::List => {
            let list = ctx
                .client
                .access()
                .list_tokens()
                .await
                .context("listing tokens")?;
            if ctx.json {
                return print_json(&list);
            }
            if list.tokens.is_empty() {
                println!("no tokens");
                return Ok(());
            }
            print!("{}", tokens_table(&list.tokens).render());
            Ok(())
        }
        TokenCommand::Revoke { id } => {
            let t = ctx
                .client
                .access()
                .revoke_token(&id)
                .await
                .with_context(|| format!("revoking token {id}"))?;
            if ctx.json {
                return print_json(&t);
            }
            println!("revoked {} ({})", t.id, t.name);
            Ok(())
        }
    }
}

fn tokens_table(tokens: &[Token]) -> Table {
    let mut t = Table::new(["ID", "NAME", "STATUS", "GRANTS", "CREATED", "SQS KEY"]);
    for tok in tokens {
        t.row([
            tok.id.clone(),
            tok.name.clone(),
            tok.status.clone(),
            tok.grants.join(" "),
            tok.created_at.clone(),
            or_dash(tok.sqs_access_key_id.clone()),
        ]);
    }
    t
}

/// `redrive audit …`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// List audit entries, oldest first.
    List(AuditListArgs),
    /// Check the audit log's hash chain; exits 1 when it is broken.
    Verify,
}

/// `redrive audit list`.
#[derive(Debug, Args)]
pub struct AuditListArgs {
    /// Only this actor (token id).
    #[arg(long)]
    pub actor: Option<String>,
    /// Only this queue or topic.
    #[arg(long)]
    pub entity: Option<String>,
    /// Only this action (`dead_letter.read`, `token.revoke`, …).
    #[arg(long)]
    pub action: Option<String>,
    /// Entries at or after this RFC 3339 time.
    #[arg(long)]
    pub from: Option<String>,
    /// Entries before this RFC 3339 time.
    #[arg(long)]
    pub to: Option<String>,
    /// Entries after this cursor (from a previous page).
    #[arg(long)]
    pub cursor: Option<String>,
    /// At most this many (1 to 1000).
    #[arg(long, default_value_t = 100, value_parser = ranged_u32(1, 1_000))]
    pub limit: u32,
}

/// Runs `audit …`.
pub async fn run_audit(ctx: &Ctx, c: AuditCommand) -> anyhow::Result<()> {
    match c {
        AuditCommand::List(a) => {
            if a.limit == 0 || a.limit > 1_000 {
                return Err(input_error("--limit must be between 1 and 1000"));
            }
            let page = ctx
                .client
                .access()
                .list_audit(&AuditQuery {
                    actor: a.actor,
                    entity: a.entity,
                    action: a.action,
                    from: a.from,
                    to: a.to,
                    cursor: a.cursor,
                    limit: Some(a.limit),
                })
                .await
                .context("listing the audit log")?;
            if ctx.json {
                return print_json(&page);
            }
            if page.entries.is_empty() {
                println!("no audit entries");
                return Ok(());
            }
            let mut t = Table::new([
                "SEQ", "AT", "ACTOR", "ACTION", "ENTITY", "TARGETS", "OUTCOME",
            ]);
            for e in &page.entries {
                t.row([
                    e.seq.to_string(),
                    e.at.clone(),
                    format!("{} ({})", e.actor_name, e.actor_id),
                    e.action.clone(),
                    or_dash(e.entity.clone()),
                    e.targets.join(" "),
                    e.outcome.clone(),
                ]);
            }
            print!("{}", t.render());
            if let Some(c) = page.next_cursor {
                println!("next page: --cursor {c}");
            }
            Ok(())
        }
        AuditCommand::Verify => {
            let v = ctx
                .client
                .access()
                .verify_audit()
                .await
                .context("verifying the audit log")?;
            if ctx.json {
                print_json(&v)?;
            } else if v.ok {
                println!(
                    "audit log intact: {} entries (seq {} to {}); head: seq {} hash {}",
                    v.entries,
                    v.first_seq,
                    v.last_seq,
                    v.head_seq.unwrap_or(0),
                    v.head_hash.as_deref().unwrap_or("-")
                );
            }
            if v.ok {
                Ok(())
            } else {
                anyhow::bail!(
                    "the audit log's chain is broken at entry {}: {}",
                    v.broken_at.unwrap_or(0),
                    v.detail.unwrap_or_default()
                )
            }
        }
    }
}
