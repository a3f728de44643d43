//! `redrive stats [QUEUE]`: live counts of one queue or of all.

use anyhow::Context as _;
use clap::Args;
use redrive_api::queue::QueueInfo;

use std::io::{IsTerminal as _, Write as _};

use super::{Ctx, queue_name};
use crate::output::{Table, or_dash, print_json};
use crate::units::{format_duration_ms, parse_duration_ms, ranged};

/// `redrive stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Only this queue.
    #[arg(value_parser = queue_name)]
    pub queue: Option<String>,
    /// A live view: the counts again every --interval until interrupted (Ctrl-C) or
    /// --count refreshes; redrawn in place on a terminal, one table (or JSON line) after
    /// another when piped.
    #[arg(long)]
    pub watch: bool,
    /// With --watch: the time between two refreshes (e.g. 2s; 100ms to 1h) [default: 2s].
    #[arg(long, value_name = "DUR", requires = "watch", value_parser = interval)]
    pub interval: Option<u64>,
    /// With --watch: stop after this many refreshes (1 to 1000000).
    #[arg(long, value_name = "N", requires = "watch", value_parser = ranged(1, 1_000_000))]
    pub count: Option<u64>,
}

/// A refresh interval from 100 ms to an hour.
fn interval(s: &str) -> Result<u64, String> {
    let ms = parse_duration_ms(s)?;
    if !(100..=3_600_000).contains(&ms) {
        return Err(format!("{s:?} is out of range (100ms to 1h)"));
    }
    Ok(ms)
}

/// Runs `stats`, once or (`--watch`) again and again.
pub async fn run(ctx: &Ctx, args: StatsArgs) -> anyhow::Result<()> {
    if !args.watch {
        return once(ctx, &args, false).await;
    }
    let tty = !ctx.json && std::io::stdout().is_terminal();
    let every = std::time::Duration::from_millis(args.interval.unwrap_or(2_000));
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let mut shown: u64 = 0;
    loop {
        if tty {
            // Clear the screen and draw from the top: the view stays in place.
            print!("\x1b[H\x1b[2J");
        }
        if !ctx.json {
            println!("{}", crate::units::now().to_rfc3339());
        }
        once(ctx, &args, true).await?;
        std::io::stdout().flush()?;
        shown += 1;
        if args.count.is_some_and(|c| shown >= c) {
            return Ok(());
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = &mut interrupted => return Ok(()),
        }
    }
}

/// One look at the counts; with `--json`, the document on one line when `line` (a
/// watch prints one after another).
async fn once(ctx: &Ctx, args: &StatsArgs, line: bool) -> anyhow::Result<()> {
    let queues = match &args.queue {
        Some(name) => {
            let q = ctx
                .client
                .admin()
                .get_queue(name)
                .await
                .with_context(|| format!("stats of {name}"))?;
            if ctx.json {
                return emit(&q, line);
            }
            vec![q]
        }
        None => {
            let list = ctx.client.admin().list_queues().await.context("stats")?;
            if ctx.json {
                return emit(&list, line);
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

/// Prints `v` as JSON: pretty, or on one line.
fn emit<T: serde::Serialize>(v: &T, line: bool) -> anyhow::Result<()> {
    if line {
        println!("{}", serde_json::to_string(v)?);
        Ok(())
    } else {
        print_json(v)
    }
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
