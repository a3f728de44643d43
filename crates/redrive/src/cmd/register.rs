//! `redrive register list|set|delete`: the idempotency register of replayable message
//! types (operator changes it; operator or replayer reads it). A key is a message type
//! or `<queue>:*` for that queue's messages sent without a type; a bad key or answer is
//! refused here, before any request (exit 2).

use anyhow::Context as _;
use clap::{Args, Subcommand};
use redrive_api::register::{RegisterEntry, SetRegisterEntry};
use redrive_core::register::{Idempotency, RegisterKey};

use super::Ctx;
use crate::output::{Table, or_dash, print_json};

/// `redrive register …`.
#[derive(Debug, Subcommand)]
pub enum RegisterCommand {
    /// List every entry, in key order.
    List,
    /// Create or replace an entry (audited when it changes something).
    Set(SetArgs),
    /// Remove an entry: its type is then not registered, and never replayed.
    Delete {
        /// A message type, or `<queue>:*`.
        #[arg(value_parser = key)]
        key: String,
    },
}

/// `redrive register set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    /// A message type (CloudEvents `type`), or `<queue>:*` for that queue's messages
    /// without a type.
    #[arg(value_parser = key)]
    pub key: String,
    /// `idempotent` or `not_idempotent`.
    #[arg(value_parser = answer)]
    pub answer: String,
    /// The attribute holding the ordering value a time-dependent handler compares
    /// (idempotent types only).
    #[arg(long)]
    pub ordering_attribute: Option<String>,
}

fn key(s: &str) -> Result<String, String> {
    s.parse::<RegisterKey>()
        .map(|k| k.to_string())
        .map_err(|e| e.to_string())
}

fn answer(s: &str) -> Result<String, String> {
    s.parse::<Idempotency>()
        .map(|a| a.to_string())
        .map_err(|e| e.to_string())
}

/// Runs `register …`.
pub async fn run(ctx: &Ctx, c: RegisterCommand) -> anyhow::Result<()> {
    match c {
        RegisterCommand::List => {
            let mut entries = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let page = ctx
                    .client
                    .access()
                    .list_register(cursor.as_deref())
                    .await
                    .context("listing the idempotency register")?;
                entries.extend(page.entries);
                match page.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            if ctx.json {
                return print_json(&entries);
            }
            if entries.is_empty() {
                println!("no register entries: every type is quarantined on replay");
                return Ok(());
            }
            print!("{}", table(&entries).render());
            Ok(())
        }
        RegisterCommand::Set(a) => {
            let set = ctx
                .client
                .access()
                .set_register_entry(
                    &a.key,
                    &SetRegisterEntry {
                        answer: a.answer,
                        ordering_attribute: a.ordering_attribute,
                    },
                )
                .await
                .with_context(|| format!("setting register entry {}", a.key))?;
            if ctx.json {
                return print_json(&set);
            }
            let e = &set.entry;
            let ordering = e
                .ordering_attribute
                .as_ref()
                .map(|o| format!(" (ordering attribute {o})"))
                .unwrap_or_default();
            match (&set.previous, set.changed) {
                (_, false) => println!("{} is already {}{ordering}: unchanged", e.key, e.answer),
                (None, true) => println!("{} is {}{ordering}", e.key, e.answer),
                (Some(p), true) => {
                    println!("{} is {}{ordering} (was {})", e.key, e.answer, p.answer)
                }
            }
            Ok(())
        }
        RegisterCommand::Delete { key } => {
            let gone = ctx
                .client
                .access()
                .delete_register_entry(&key)
                .await
                .with_context(|| format!("deleting register entry {key}"))?;
            if ctx.json {
                return print_json(&gone);
            }
            println!(
                "deleted {} (was {}): it is now not registered, and never replayed",
                gone.key, gone.answer
            );
            Ok(())
        }
    }
}

fn table(entries: &[RegisterEntry]) -> Table {
    let mut t = Table::new(["KEY", "ANSWER", "ORDERING", "UPDATED"]);
    for e in entries {
        t.row([
            e.key.clone(),
            e.answer.clone(),
            or_dash(e.ordering_attribute.clone()),
            e.updated_at.clone(),
        ]);
    }
    t
}
