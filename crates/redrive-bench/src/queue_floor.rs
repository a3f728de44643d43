//! `redrive-bench sqlite-queue-floor`: the most messages per second one SQLite writer can
//! receive and complete on this machine, with no server and nothing but the statements,
//! for two designs of the lock a receive takes:
//!
//! - `rows` (the store's design): a receive rewrites each message's row (state, lock
//!   token, lock expiry, delivery count) in one transaction, and the completion deletes
//!   the row in another;
//! - `memory`: the lock lives in the writer's memory; a receive reads the rows past the
//!   last one handed out and writes nothing, and the completion deletes the row.
//!
//! The table has the shape and the indexes of the store's `messages` (the `due_at` index
//! over a generated column, the expiry and session indexes) and the file the store's
//! settings (WAL, `synchronous = FULL`). The messages are inserted first (not timed);
//! then batches of `--batch` are received and completed, each transaction committed (and
//! synced) on its own, from one thread, as the store's writer does. Whatever a server
//! does besides (HTTP, JSON, the broker's rules) only lowers the figure: it is a ceiling
//! for `redrive-bench w1`'s receive + complete on SQLite, by design.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use rusqlite::{Connection, params};

use crate::report::{Report, rate, round2, secs};

/// Where a receive keeps its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Locks {
    /// In the message's row, rewritten by the receive (the store's design).
    Rows,
    /// In the writer's memory: the receive writes nothing.
    Memory,
}

impl Locks {
    fn as_str(self) -> &'static str {
        match self {
            Locks::Rows => "rows",
            Locks::Memory => "memory",
        }
    }
}

/// `redrive-bench sqlite-queue-floor`.
#[derive(Debug, Args)]
pub(crate) struct QueueFloorArgs {
    /// Messages to receive and complete (at most 10,000,000).
    #[arg(long, short = 'n', default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub(crate) messages: u64,
    /// Messages per receive and per completion (one transaction each).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) batch: u64,
    /// Where a receive keeps its lock.
    #[arg(long, value_enum, default_value_t = Locks::Rows)]
    pub(crate) locks: Locks,
    /// Bytes of each message's body (at most 1 MiB).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(0..=1_048_576))]
    pub(crate) size: u64,
    /// The SQLite file (created; must not exist). Default: a fresh file in the
    /// temporary directory, removed afterwards.
    #[arg(long, value_name = "FILE")]
    pub(crate) file: Option<PathBuf>,
}

const SCHEMA: &str = "
CREATE TABLE messages (
    queue_id INTEGER NOT NULL, sequence INTEGER NOT NULL, message_id TEXT NOT NULL,
    body BLOB NOT NULL, content_type TEXT, properties TEXT, correlation_id TEXT,
    session_id TEXT, message_type TEXT, intent TEXT, valid_until INTEGER,
    enqueued_at INTEGER NOT NULL, scheduled_at INTEGER, state TEXT NOT NULL,
    visible_at INTEGER NOT NULL, expires_at INTEGER,
    delivery_count INTEGER NOT NULL DEFAULT 0, lock_token TEXT, locked_until INTEGER,
    deferred INTEGER NOT NULL DEFAULT 0, first_delivered_at INTEGER,
    last_delivered_at INTEGER, last_attempt TEXT,
    due_at INTEGER GENERATED ALWAYS AS
        (CASE WHEN state = 'locked' THEN locked_until ELSE visible_at END) VIRTUAL,
    PRIMARY KEY (queue_id, sequence)
);
CREATE INDEX messages_due ON messages (queue_id, state, due_at, sequence);
CREATE INDEX messages_expiry ON messages (queue_id, expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX messages_session ON messages (queue_id, session_id, sequence)
    WHERE session_id IS NOT NULL;
";

/// What one run did.
#[derive(Debug)]
pub(crate) struct Done {
    pub(crate) received: u64,
    pub(crate) completed: u64,
    pub(crate) transactions: u64,
    /// How long each commit took (its WAL sync), µs, in order.
    pub(crate) commits_us: Vec<u64>,
}

/// Commits `tx`, noting how long the commit (its sync) took.
fn commit(tx: rusqlite::Transaction<'_>, done: &mut Done) -> anyhow::Result<()> {
    let start = Instant::now();
    tx.commit()?;
    done.commits_us
        .push(u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX));
    done.transactions += 1;
    Ok(())
}

/// The `p`-th percentile of `sorted` (nearest rank), ms.
fn percentile_ms(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted.len()) - 1;
    round2(sorted[i] as f64 / 1000.0)
}

fn open(path: &Path, a: &QueueFloorArgs) -> anyhow::Result<Connection> {
    let conn = Connection::open(path).with_context(|| format!("open {}", path.display()))?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    anyhow::ensure!(mode.eq_ignore_ascii_case("wal"), "WAL refused: {mode}");
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "cache_size", -16_384)?;
    conn.execute_batch(SCHEMA)?;
    let body = vec![b'x'; usize::try_from(a.size)?];
    let tx = conn.unchecked_transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO messages (queue_id, sequence, message_id, body, enqueued_at, state, \
             visible_at) VALUES (1, ?1, ?2, ?3, 0, 'available', 0)",
        )?;
        for i in 1..=a.messages {
            insert.execute(params![i64::try_from(i)?, format!("m{i}"), body])?;
        }
    }
    tx.commit()?;
    Ok(conn)
}

/// Receives and completes every message, a batch at a time.
pub(crate) fn run_batches(conn: &Connection, a: &QueueFloorArgs) -> anyhow::Result<Done> {
    let mut done = Done {
        received: 0,
        completed: 0,
        transactions: 0,
        commits_us: Vec::new(),
    };
    let now = 1_000i64;
    let lock_until = now + 30_000;
    // The memory design's lock table: the sequences handed out and not completed, and
    // where the next receive starts.
    let mut after = 0i64;
    loop {
        let limit = i64::try_from(a.batch)?;
        let got: Vec<(i64, Vec<u8>)> = match a.locks {
            Locks::Rows => {
                let tx = conn.unchecked_transaction()?;
                let got = {
                    let mut select = tx.prepare_cached(
                        "SELECT sequence, body FROM messages WHERE queue_id = 1 \
                         AND state = 'available' AND due_at <= ?1 \
                         ORDER BY due_at, sequence LIMIT ?2",
                    )?;
                    let got: Vec<(i64, Vec<u8>)> = select
                        .query_map(params![now, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                        .collect::<rusqlite::Result<_>>()?;
                    let mut lock = tx.prepare_cached(
                        "UPDATE messages SET state = 'locked', lock_token = ?2, \
                         locked_until = ?3, delivery_count = delivery_count + 1, \
                         first_delivered_at = coalesce(first_delivered_at, ?4), \
                         last_delivered_at = ?4 WHERE queue_id = 1 AND sequence = ?1",
                    )?;
                    for (seq, _) in &got {
                        let token = format!("{seq}.{:032x}", seq.wrapping_mul(0x9e37_79b9));
                        anyhow::ensure!(
                            lock.execute(params![seq, token, lock_until, now])? == 1,
                            "message {seq} missing"
                        );
                    }
                    got
                };
                commit(tx, &mut done)?;
                got
            }
            Locks::Memory => {
                let mut select = conn.prepare_cached(
                    "SELECT sequence, body FROM messages WHERE queue_id = 1 \
                     AND state = 'available' AND due_at <= ?1 AND sequence > ?2 \
                     ORDER BY due_at, sequence LIMIT ?3",
                )?;
                let got: Vec<(i64, Vec<u8>)> = select
                    .query_map(params![now, after, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                if let Some((last, _)) = got.last() {
                    after = *last;
                }
                got
            }
        };
        if got.is_empty() {
            break;
        }
        done.received += got.len() as u64;
        let tx = conn.unchecked_transaction()?;
        {
            let mut delete =
                tx.prepare_cached("DELETE FROM messages WHERE queue_id = 1 AND sequence = ?1")?;
            for (seq, _) in &got {
                anyhow::ensure!(delete.execute([seq])? == 1, "message {seq} missing");
            }
        }
        commit(tx, &mut done)?;
        done.completed += got.len() as u64;
    }
    Ok(done)
}

/// `sqlite-queue-floor`: sets the file up, times the receives and completions, reports.
pub(crate) fn run(a: &QueueFloorArgs, report: &mut Report) -> anyhow::Result<()> {
    let (path, temporary) =
        crate::sqlite_floor::scratch_file(a.file.as_deref(), "redrive-queue-floor")?;
    let outcome = (|| {
        let conn = open(&path, a)?;
        let start = Instant::now();
        let d = run_batches(&conn, a)?;
        let took = start.elapsed();
        anyhow::ensure!(
            d.completed == a.messages,
            "{} of {} completed",
            d.completed,
            a.messages
        );
        report.add("locks", a.locks.as_str(), "");
        report.add("messages", d.completed, "");
        report.add("batch", a.batch, "msgs/tx");
        report.add("transactions", d.transactions, "");
        report.add("consume_s", round2(secs(took)), "s");
        report.add("receive_complete_rate", rate(d.completed, took), "msgs/s");
        let mut commits = d.commits_us.clone();
        commits.sort_unstable();
        report.add("commit_p50", percentile_ms(&commits, 50.0), "ms");
        report.add("commit_p99", percentile_ms(&commits, 99.0), "ms");
        report.add("commit_max", percentile_ms(&commits, 100.0), "ms");
        anyhow::Ok(())
    })();
    if temporary {
        crate::sqlite_floor::remove_db(&path);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let us: Vec<u64> = (1..=100).map(|i| i * 1_000).collect();
        assert_eq!(percentile_ms(&us, 50.0), 50.0);
        assert_eq!(percentile_ms(&us, 99.0), 99.0);
        assert_eq!(percentile_ms(&us, 100.0), 100.0);
        assert_eq!(percentile_ms(&[1_500], 50.0), 1.5);
        assert_eq!(percentile_ms(&[], 99.0), 0.0);
    }

    fn args(locks: Locks) -> QueueFloorArgs {
        QueueFloorArgs {
            messages: 1_000,
            batch: 256,
            locks,
            size: 16,
            file: None,
        }
    }

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "redrive-queue-floor-test-{name}-{}.db",
            std::process::id()
        ))
    }

    #[test]
    fn both_designs_receive_and_complete_every_message_once() {
        for (locks, transactions) in [(Locks::Rows, 9), (Locks::Memory, 4)] {
            let path = tmp(locks.as_str());
            crate::sqlite_floor::remove_db(&path);
            let a = args(locks);
            let conn = open(&path, &a).unwrap();
            let d = run_batches(&conn, &a).unwrap();
            // 1,000 in batches of 256: four batches. Rows: a receive and a completion
            // transaction each, and the last receive that finds nothing; memory: the
            // completions only.
            assert_eq!(
                (d.received, d.completed, d.transactions),
                (1_000, 1_000, transactions),
                "{locks:?}"
            );
            assert_eq!(d.commits_us.len() as u64, transactions, "each commit timed");
            let left: i64 = conn
                .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
                .unwrap();
            assert_eq!(left, 0, "{locks:?}");
            drop(conn);
            crate::sqlite_floor::remove_db(&path);
        }
    }
}
