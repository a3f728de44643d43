//! `redrive failures`: dead letters across the queues the token may read, grouped by the
//! shape of their failure (`GET /v1/failures`), newest first.

use anyhow::Context as _;
use clap::Args;
use redrive_api::failure::FailureSignature;
use redrive_client::FailureQuery;

use super::{Ctx, area, queue_name};
use crate::output::{Table, or_dash, preview, print_json};
use crate::units::{parse_time, ranged_u32};

/// Characters of a masked description shown in the table (`--json` has it whole).
const SHOWN_DESCRIPTION: usize = 60;

/// `redrive failures`.
#[derive(Debug, Args)]
pub struct FailuresArgs {
    /// Only this queue's signatures.
    #[arg(long, value_name = "QUEUE", value_parser = queue_name)]
    pub queue: Option<String>,
    /// Area counted: live, archived or quarantine [server default: live].
    #[arg(long, value_name = "AREA", value_parser = area)]
    pub area: Option<String>,
    /// Only signatures last seen at or after (RFC 3339, or -DUR for "ago").
    #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
    pub from: Option<String>,
    /// Only signatures first seen before (RFC 3339, or -DUR for "ago").
    #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
    pub to: Option<String>,
    /// Page size (1 to 500) [server default: 100].
    #[arg(long, value_name = "N", value_parser = ranged_u32(1, 500))]
    pub limit: Option<u32>,
    /// Continue after a previous page.
    #[arg(long, value_name = "CURSOR")]
    pub cursor: Option<String>,
}

/// The last 24 hours of a signature as one line of block characters, oldest first.
fn spark(values: &[u64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let top = values.iter().copied().max().unwrap_or(0);
    values
        .iter()
        .map(|&v| match v {
            0 => ' ',
            _ => {
                // 1..=top onto the eight bars (a non-zero hour is never blank).
                let i = ((v - 1) * 8 / top.max(1)).min(7);
                BARS[usize::try_from(i).unwrap_or(7)]
            }
        })
        .collect()
}

/// Runs `failures`.
pub async fn run(ctx: &Ctx, args: FailuresArgs) -> anyhow::Result<()> {
    let query = FailureQuery {
        queue: args.queue,
        area: args.area,
        from: args.from,
        to: args.to,
        cursor: args.cursor,
        limit: args.limit,
    };
    let page = ctx
        .client
        .recovery()
        .failures(&query)
        .await
        .context("list failures")?;
    if ctx.json {
        return print_json(&page);
    }
    if page.signatures.is_empty() {
        println!("no failures");
    } else {
        print!("{}", table(&page.signatures).render());
        println!("records of one: redrive dlq list QUEUE --signature ID");
    }
    if let Some(c) = &page.next_cursor {
        println!("more: --cursor {c}");
    }
    Ok(())
}

fn table(signatures: &[FailureSignature]) -> Table {
    let mut t = Table::new([
        "ID",
        "QUEUE",
        "REASON",
        "OUTCOME",
        "TYPE",
        "COUNT",
        "LIVE",
        "LAST-SEEN",
        "LAST-24H",
        "DESCRIPTION",
    ]);
    for s in signatures {
        t.row([
            s.id.clone(),
            s.queue.clone(),
            s.reason.clone(),
            or_dash(s.outcome_class.as_ref()),
            or_dash(s.message_type.as_ref()),
            s.count.to_string(),
            s.live.to_string(),
            s.last_seen.clone(),
            spark(&s.sparkline),
            preview(&s.description, SHOWN_DESCRIPTION),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_scales_to_its_busiest_hour_and_never_hides_one() {
        assert_eq!(spark(&[0, 1, 8, 4]), " ▁█▄");
        assert_eq!(spark(&[0, 0]), "  ");
        assert_eq!(spark(&[1, 100]), "▁█");
    }
}
