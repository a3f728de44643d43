//! `redrive session list`: a queue's sessions, by id (`GET /v1/queues/{name}/sessions`).

use anyhow::Context as _;
use clap::Subcommand;
use redrive_api::message::SessionSummary;

use super::{Ctx, queue_name};
use crate::output::{Table, or_dash, print_json};
use crate::units::ranged_u32;

/// `redrive session ...`.
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// List a queue's sessions by id: those with messages or a live lock, each with its
    /// messages by state and, while a receiver holds it, when its lock runs out.
    List {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        queue: String,
        /// Continue after this session id (the `more:` line of a previous page).
        #[arg(long, value_name = "ID")]
        after: Option<String>,
        /// Page size (1 to 100) [server default: 50].
        #[arg(long, value_name = "N", value_parser = ranged_u32(1, 100))]
        limit: Option<u32>,
    },
}

/// Runs a `session` command.
pub async fn run(ctx: &Ctx, c: SessionCommand) -> anyhow::Result<()> {
    match c {
        SessionCommand::List {
            queue,
            after,
            limit,
        } => {
            let page = ctx
                .client
                .admin()
                .list_sessions(&queue, after.as_deref(), limit)
                .await
                .with_context(|| format!("list the sessions of {queue}"))?;
            if ctx.json {
                return print_json(&page);
            }
            if page.sessions.is_empty() {
                println!("no sessions");
            } else {
                print!("{}", table(&page.sessions).render());
            }
            if let Some(next) = &page.next {
                println!("more: --after {next}");
            }
            Ok(())
        }
    }
}

fn table(sessions: &[SessionSummary]) -> Table {
    let mut t = Table::new([
        "SESSION",
        "ACTIVE",
        "SCHEDULED",
        "IN-FLIGHT",
        "DEFERRED",
        "LOCKED-UNTIL",
    ]);
    for s in sessions {
        t.row([
            s.session_id.clone(),
            s.active.to_string(),
            s.scheduled.to_string(),
            s.in_flight.to_string(),
            s.deferred.to_string(),
            or_dash(s.locked_until.as_ref()),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_a_lock_only_while_it_holds() {
        let held = SessionSummary {
            session_id: "c-17".into(),
            active: 2,
            scheduled: 0,
            in_flight: 1,
            deferred: 0,
            locked: true,
            locked_until: Some("2026-12-06T10:00:00Z".into()),
        };
        let free = SessionSummary {
            session_id: "c-18".into(),
            locked: false,
            locked_until: None,
            ..held.clone()
        };
        let out = table(&[held, free]).render();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[0].starts_with("SESSION"), "{out}");
        assert!(lines[1].contains("c-17") && lines[1].ends_with("2026-12-06T10:00:00Z"));
        assert!(
            lines[2].contains("c-18") && lines[2].trim_end().ends_with('-'),
            "{out}"
        );
    }
}
