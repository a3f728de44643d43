//! `redrive stats [QUEUE]`: live counts of one queue or of all.

use anyhow::Context as _;
use clap::Args;
use redrive_api::queue::QueueInfo;

use super::{Ctx, queue_name};
use crate::output::{Table, or_dash, print_json};
use crate::units::format_duration_ms;

/// `redrive stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Only this queue.
    #[arg(value_parser = queue_name)]
    pub queue: Option<String>,
}

/// Runs `stats`.
pub async fn run(ctx: &Ctx, args: StatsArgs) -> anyhow::Result<()> {
    let queues = match &args.queue {
        Some(name) => {
            let q = ctx
                .client
                .get_queue(name)
                .await
                .with_context(|| format!("stats of {name}"))?;
            if ctx.json {
                return print_json(&q);
            }
            vec![q]
        }
        None => {
            let list = ctx.client.list_queues().await.context("stats")?;
            if ctx.json {
                return print_json(&list);
            }
            list.queues
        }
    };
    if queues.is_empty() {
        println!("no queues");
        return Ok(());
    }
    print!("{}", counts_table(&queues).render());
    Ok(())
}

/// One row of counts per queue, with a total row when there are several.
pub fn counts_table(queues: &[QueueInfo]) -> Table {
    let mut t = Table::new([
        "QUEUE",
        "ACTIVE",
        "SCHEDULED",
        "LOCKED",
        "DEFERRED",
        "DEAD-LETTERED",
        "OLDEST",
    ]);
    let mut total = [0u64; 5];
    for q in queues {
        let c = &q.counts;
        let cells = [c.active, c.scheduled, c.locked, c.deferred, c.dead_lettered];
        for (sum, v) in total.iter_mut().zip(cells) {
            *sum += v;
        }
        let mut row = vec![q.name.clone()];
        row.extend(cells.iter().map(ToString::to_string));
        row.push(or_dash(c.oldest_message_age_ms.map(format_duration_ms)));
        t.row(row);
    }
    if queues.len() > 1 {
        let mut row = vec!["(total)".to_owned()];
        row.extend(total.iter().map(ToString::to_string));
        t.row(row);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_api::queue::{QueueCounts, QueuePolicy};

    fn info(name: &str, active: u64, dead: u64) -> QueueInfo {
        QueueInfo {
            name: name.to_owned(),
            policy: QueuePolicy::default(),
            policy_version: 1,
            created_at: String::new(),
            updated_at: String::new(),
            counts: QueueCounts {
                active,
                dead_lettered: dead,
                oldest_message_age_ms: Some(90_000),
                ..QueueCounts::default()
            },
        }
    }

    #[test]
    fn counts_table_totals_several_queues() {
        let t = counts_table(&[info("a", 2, 1), info("bb", 3, 0)]).render();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[1].starts_with("a "), "{t}");
        assert!(lines[1].ends_with("1m30s"), "{t}");
        assert!(lines[3].starts_with("(total)"), "{t}");
        assert!(lines[3].contains(" 5 "), "{t}");
        let one = counts_table(&[info("a", 2, 1)]).render();
        assert_eq!(one.lines().count(), 2);
    }
}
