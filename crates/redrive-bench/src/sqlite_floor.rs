//! `redrive-bench sqlite-floor`: the most replay-plan items per second one SQLite writer
//! can record on this machine, with no server and nothing but the writes. Each item is
//! the durable rows a bounded replay writes for it: its case row updated (admitted, then
//! closed), its timeline entries and audit entries inserted, its plan item updated
//! (admitted, then settled), and the replay message inserted into the destination queue
//! and deleted once consumed. The tables have the shape and indexes of the store's
//! (`case_timeline` keyed by case and sequence, `audit_log` with its four indexes) and the
//! file the store's settings (WAL, `synchronous = FULL`); items are written `--batch` to a
//! transaction, one prepared statement per row, from one thread, as the store's writer
//! does. Whatever the engine does besides (reads, gates, the effect authority, HTTP,
//! JSON, hashing the audit chain) only lowers the figure: it is a ceiling for
//! `redrive-bench plan --rate 0` on SQLite.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use rusqlite::{Connection, params};

use crate::failure::input_error;
use crate::report::{Report, rate, round2, secs};

/// `redrive-bench sqlite-floor`.
#[derive(Debug, Args)]
pub(crate) struct SqliteFloorArgs {
    /// Items to record (at most 10,000,000).
    #[arg(long, short = 'n', default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub(crate) items: u64,
    /// Items per transaction.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) batch: u64,
    /// Timeline entries written per item (a plan writes five: the effect asked at
    /// admission, eligible again, admitted, the effect present, completed).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub(crate) timeline: u32,
    /// Audit entries written per item (a plan writes three: the payload read, the
    /// replay, the decision).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub(crate) audit: u32,
    /// Bytes of each replay message's body (at most 1 MiB).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(0..=1_048_576))]
    pub(crate) size: u64,
    /// The SQLite file (created; must not exist). Default: a fresh file in the
    /// temporary directory, removed afterwards.
    #[arg(long, value_name = "FILE")]
    pub(crate) file: Option<PathBuf>,
}

const SCHEMA: &str = "
CREATE TABLE cases (id TEXT PRIMARY KEY, state TEXT NOT NULL, version INTEGER NOT NULL,
    next_check_at INTEGER, data TEXT NOT NULL);
CREATE INDEX cases_state ON cases (state, next_check_at);
CREATE TABLE case_timeline (case_id TEXT NOT NULL, seq INTEGER NOT NULL, at INTEGER NOT NULL,
    actor TEXT NOT NULL, state TEXT NOT NULL, evidence TEXT NOT NULL, fields TEXT NOT NULL,
    PRIMARY KEY (case_id, seq)) WITHOUT ROWID;
CREATE TABLE audit_log (seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, actor_id TEXT NOT NULL,
    actor_name TEXT NOT NULL, action TEXT NOT NULL, entity TEXT, targets TEXT NOT NULL,
    outcome TEXT NOT NULL, client TEXT, prev_hash TEXT NOT NULL, hash TEXT NOT NULL);
CREATE INDEX audit_log_actor ON audit_log (actor_id, seq);
CREATE INDEX audit_log_entity ON audit_log (entity, seq);
CREATE INDEX audit_log_action ON audit_log (action, seq);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE TABLE plan_items (plan_id TEXT NOT NULL, seq INTEGER NOT NULL, case_id TEXT NOT NULL,
    state TEXT NOT NULL, updated_at INTEGER NOT NULL, PRIMARY KEY (plan_id, seq)) WITHOUT ROWID;
CREATE INDEX plan_items_state ON plan_items (plan_id, state, seq);
CREATE TABLE messages (sequence INTEGER PRIMARY KEY, queue TEXT NOT NULL,
    message_id TEXT NOT NULL, body BLOB NOT NULL, visible_at INTEGER NOT NULL);
CREATE INDEX messages_visible ON messages (queue, visible_at, sequence);
";

/// What one run wrote.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) items: u64,
    pub(crate) rows: u64,
}

/// The rows written per item: the case updated twice, the plan item updated twice, the
/// message inserted and deleted, and the timeline and audit entries.
pub(crate) fn rows_per_item(a: &SqliteFloorArgs) -> u64 {
    6 + u64::from(a.timeline) + u64::from(a.audit)
}

fn open(path: &Path, items: u64) -> anyhow::Result<Connection> {
    let conn = Connection::open(path).with_context(|| format!("open {}", path.display()))?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    anyhow::ensure!(mode.eq_ignore_ascii_case("wal"), "WAL refused: {mode}");
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "cache_size", -16_384)?;
    conn.execute_batch(SCHEMA)?;
    // The cases and their plan items exist before the plan runs (not timed).
    let tx = conn.unchecked_transaction()?;
    {
        let mut case = tx.prepare(
            "INSERT INTO cases (id, state, version, next_check_at, data) VALUES (?1, 'replay_eligible', 1, NULL, ?2)",
        )?;
        let mut item = tx.prepare(
            "INSERT INTO plan_items (plan_id, seq, case_id, state, updated_at) VALUES ('plan_1', ?1, ?2, 'waiting', 0)",
        )?;
        let data = r#"{"correction":{"kind":"code","identity":"c1"},"tests":[{"outcome":"pass"}]}"#;
        for i in 0..items {
            let id = format!("case_{i:09}");
            case.execute(params![id, data])?;
            item.execute(params![i64::try_from(i)?, id])?;
        }
    }
    tx.commit()?;
    Ok(conn)
}

/// Writes every item's rows; returns what was written.
pub(crate) fn write(conn: &Connection, a: &SqliteFloorArgs) -> anyhow::Result<Written> {
    let body = vec![b'x'; usize::try_from(a.size)?];
    let evidence = "effect authority answered present: ledger entry of the intent";
    let fields = r#"{"plan":"plan_1","window":"1","budget":"items/s 100000"}"#;
    let mut rows = 0u64;
    let mut audit_seq = 0i64;
    let mut first = 0u64;
    while first < a.items {
        let last = (first + a.batch).min(a.items);
        let tx = conn.unchecked_transaction()?;
        {
            let mut case = tx.prepare_cached(
                "UPDATE cases SET state = ?2, version = version + 1, data = ?3 WHERE id = ?1",
            )?;
            let mut entry = tx.prepare_cached(
                "INSERT INTO case_timeline (case_id, seq, at, actor, state, evidence, fields) VALUES (?1, ?2, ?3, 'plan', 'replay_admitted', ?4, ?5)",
            )?;
            let mut audit = tx.prepare_cached(
                "INSERT INTO audit_log (seq, at, actor_id, actor_name, action, entity, targets, outcome, client, prev_hash, hash) \
                 VALUES (?1, ?2, 'tok_1', 'replayer', 'case.replay', ?3, '[]', 'ok', NULL, ?4, ?5)",
            )?;
            let mut item = tx.prepare_cached(
                "UPDATE plan_items SET state = ?3, updated_at = ?4 WHERE plan_id = 'plan_1' AND seq = ?1 AND case_id = ?2",
            )?;
            let mut send = tx.prepare_cached(
                "INSERT INTO messages (sequence, queue, message_id, body, visible_at) VALUES (?1, 'orders', ?2, ?3, ?4)",
            )?;
            let mut delete = tx.prepare_cached("DELETE FROM messages WHERE sequence = ?1")?;
            for i in first..last {
                let n = i64::try_from(i)?;
                let id = format!("case_{i:09}");
                for (state, at) in [("replay_admitted", n), ("completed", n + 1)] {
                    anyhow::ensure!(
                        case.execute(params![id, state, fields])? == 1,
                        "case {id} missing"
                    );
                    anyhow::ensure!(
                        item.execute(params![n, id, state, at])? == 1,
                        "plan item {n} missing"
                    );
                }
                for seq in 0..a.timeline {
                    entry.execute(params![id, seq, n, evidence, fields])?;
                }
                for _ in 0..a.audit {
                    audit_seq += 1;
                    let hash = format!("{audit_seq:064x}");
                    audit.execute(params![audit_seq, n, id, hash, hash])?;
                }
                send.execute(params![n, format!("{id}|1"), body, n])?;
                anyhow::ensure!(delete.execute([n])? == 1, "message {n} missing");
                rows += rows_per_item(a);
            }
        }
        tx.commit()?;
        first = last;
    }
    Ok(Written {
        items: a.items,
        rows,
    })
}

/// The SQLite file of a floor run: `file` if given (it must not exist), else a fresh one
/// in the temporary directory named after `prefix`; and whether to remove it afterwards.
pub(crate) fn scratch_file(file: Option<&Path>, prefix: &str) -> anyhow::Result<(PathBuf, bool)> {
    match file {
        Some(p) if p.exists() => Err(input_error(format!(
            "{} exists: name a new file",
            p.display()
        ))),
        Some(p) => Ok((p.to_path_buf(), false)),
        None => Ok((
            std::env::temp_dir().join(format!(
                "{prefix}-{}-{}.db",
                std::process::id(),
                crate::units::now().0
            )),
            true,
        )),
    }
}

/// Removes a SQLite file and its WAL and shared-memory files, if there.
pub(crate) fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// `sqlite-floor`: sets the file up, times the writes, reports.
pub(crate) fn run(a: &SqliteFloorArgs, report: &mut Report) -> anyhow::Result<()> {
    let (path, temporary) = scratch_file(a.file.as_deref(), "redrive-sqlite-floor")?;
    let outcome = (|| {
        let conn = open(&path, a.items)?;
        let start = Instant::now();
        let w = write(&conn, a)?;
        let took = start.elapsed();
        report.add("items", w.items, "");
        report.add("rows_per_item", rows_per_item(a), "");
        report.add("batch", a.batch, "items/tx");
        report.add("write_s", round2(secs(took)), "s");
        report.add("rows_rate", rate(w.rows, took), "rows/s");
        report.add("items_rate", rate(w.items, took), "items/s");
        anyhow::Ok(())
    })();
    if temporary {
        remove_db(&path);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_leaves_its_rows_and_the_replays_are_consumed() {
        let path = std::env::temp_dir().join(format!(
            "redrive-sqlite-floor-test-{}.db",
            std::process::id()
        ));
        let a = SqliteFloorArgs {
            items: 25,
            batch: 10,
            timeline: 5,
            audit: 3,
            size: 16,
            file: None,
        };
        let conn = open(&path, a.items).unwrap();
        let w = write(&conn, &a).unwrap();
        assert_eq!(
            w,
            Written {
                items: 25,
                rows: 25 * 14
            }
        );
        let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
        assert_eq!(count("SELECT count(*) FROM case_timeline"), 125);
        assert_eq!(count("SELECT count(*) FROM audit_log"), 75);
        assert_eq!(count("SELECT count(*) FROM messages"), 0);
        assert_eq!(
            count("SELECT count(*) FROM cases WHERE state = 'completed' AND version = 3"),
            25
        );
        assert_eq!(
            count("SELECT count(*) FROM plan_items WHERE state = 'completed'"),
            25
        );
        drop(conn);
        remove_db(&path);
    }
}
