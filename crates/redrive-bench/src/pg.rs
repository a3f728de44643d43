//! `redrive-bench pg-baseline`: a raw pgmq-style queue written directly in SQL, the
//! baseline that redrive's PostgreSQL store is measured against. It needs no redrive
//! server: it creates a schema of its own, publishes with multi-row `INSERT`s over several
//! connections, then receives (`FOR UPDATE SKIP LOCKED` + visibility timeout, one
//! statement) and deletes by id, with the same message count, body size and batch sizes
//! as `w1`. The schema is dropped afterwards unless `--keep` is given.
//!
//! By default the table and statements are pgmq's own (`--table pgmq`): a `jsonb`
//! message, an index on the visibility time, `RETURNING` on every statement. `--table
//! lean` drops what pgmq has beyond the queue mechanics (no `vt` index, a `bytea`
//! message), the cheapest queue PostgreSQL can run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinSet;
use tokio_postgres::{Client, Config, NoTls};

use crate::cpu::{CpuMark, CpuWatch};
use crate::failure::input_error;
use crate::report::{Progress, Report, rate, round2, secs};

/// `redrive-bench pg-baseline`.
#[derive(Debug, Args)]
pub struct PgBaselineArgs {
    /// PostgreSQL connection URL (postgres://USER@HOST:PORT/DATABASE).
    #[arg(long, value_name = "URL")]
    pg: String,
    /// Schema to create for the run (default: a fresh `bench_pg_…`); must not exist.
    #[arg(long, value_name = "NAME")]
    schema: Option<String>,
    /// Messages to publish and consume.
    #[arg(long, short = 'n', default_value_t = 200_000)]
    messages: u64,
    /// Body size (e.g. 256, 1KiB).
    #[arg(long, default_value = "256", value_parser = crate::units::parse_size)]
    size: u64,
    /// Messages per INSERT.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch: u32,
    /// Connections publishing at once (one INSERT in flight on each).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    in_flight: u32,
    /// Messages per receive (LIMIT of the SKIP LOCKED select).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    receive_batch: u32,
    /// Connections receiving at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    receive_in_flight: u32,
    /// Connections deleting received batches at once (pipelined behind the receives).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    settle_in_flight: u32,
    /// The queue table: pgmq's own, or a lean one without pgmq's `vt` index and `jsonb`.
    #[arg(long, value_enum, default_value_t = Table::Pgmq)]
    table: Table,
    /// Also report the CPU time of every `postgres` process on this machine, per message
    /// and phase (next to the load tool's).
    #[arg(long)]
    postgres_cpu: bool,
}

/// The shape of the baseline's queue table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Table {
    /// pgmq's queue table and statements (`pgmq.create`, `send_batch`, `read`, `delete`):
    /// `message jsonb`, `headers jsonb`, an index on `vt`, `RETURNING` everywhere.
    Pgmq,
    /// The queue mechanics alone: one index (the primary key), a `bytea` message.
    Lean,
}

impl Table {
    fn as_str(self) -> &'static str {
        match self {
            Table::Pgmq => "pgmq",
            Table::Lean => "lean",
        }
    }

    fn create(self, schema: &str) -> String {
        match self {
            Table::Pgmq => format!(
                "CREATE SCHEMA {schema};
                 CREATE TABLE {schema}.q (
                     msg_id bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
                     read_ct int NOT NULL DEFAULT 0,
                     enqueued_at timestamptz NOT NULL DEFAULT now(),
                     vt timestamptz NOT NULL,
                     message jsonb,
                     headers jsonb
                 );
                 CREATE INDEX q_vt_idx ON {schema}.q (vt ASC);"
            ),
            Table::Lean => format!(
                "CREATE SCHEMA {schema};
                 CREATE TABLE {schema}.q (
                     msg_id bigserial PRIMARY KEY,
                     read_ct int NOT NULL DEFAULT 0,
                     enqueued_at timestamptz NOT NULL DEFAULT now(),
                     vt timestamptz NOT NULL DEFAULT now(),
                     message bytea NOT NULL
                 );"
            ),
        }
    }

    /// The batch insert; `$1` is the array of message contents.
    fn insert(self, schema: &str) -> String {
        match self {
            // pgmq.send_batch: the messages arrive as jsonb (parsed by the server).
            Table::Pgmq => format!(
                "INSERT INTO {schema}.q (vt, message, headers) \
                 SELECT clock_timestamp(), unnest($1::text[])::jsonb, \
                 unnest(ARRAY[]::jsonb[]) RETURNING msg_id"
            ),
            Table::Lean => format!("INSERT INTO {schema}.q (message) SELECT unnest($1::bytea[])"),
        }
    }

    /// The receive; `$1` is the batch size.
    fn receive(self, schema: &str) -> String {
        let returning = match self {
            Table::Pgmq => "q.msg_id, q.message, q.read_ct, q.enqueued_at, q.vt, q.headers",
            Table::Lean => "q.msg_id, q.message",
        };
        format!(
            "WITH c AS (SELECT msg_id FROM {schema}.q WHERE vt <= clock_timestamp() \
             ORDER BY msg_id LIMIT $1 FOR UPDATE SKIP LOCKED) \
             UPDATE {schema}.q AS q SET vt = clock_timestamp() + interval '30 seconds', \
             read_ct = q.read_ct + 1 FROM c WHERE q.msg_id = c.msg_id \
             RETURNING {returning}"
        )
    }

    /// The acknowledgement; `$1` is the array of ids.
    fn delete(self, schema: &str) -> String {
        match self {
            Table::Pgmq => {
                format!("DELETE FROM {schema}.q WHERE msg_id = ANY($1) RETURNING msg_id")
            }
            Table::Lean => format!("DELETE FROM {schema}.q WHERE msg_id = ANY($1)"),
        }
    }
}

/// A column taken as the server sent it (binary format), whatever its type: what a
/// consumer receives before decoding it.
struct Raw;

impl<'a> tokio_postgres::types::FromSql<'a> for Raw {
    fn from_sql(
        _: &tokio_postgres::types::Type,
        _: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw)
    }

    fn accepts(_: &tokio_postgres::types::Type) -> bool {
        true
    }
}

/// Validates the URL and the schema name before anything is created.
fn prepare(a: &PgBaselineArgs) -> anyhow::Result<(Config, String)> {
    if !(a.pg.starts_with("postgres://") || a.pg.starts_with("postgresql://")) {
        return Err(input_error(format!(
            "--pg {:?}: expected a postgres://USER@HOST:PORT/DATABASE URL",
            a.pg
        )));
    }
    if a.pg.contains("schema=") {
        return Err(input_error(
            "--pg: pg-baseline creates a schema of its own; drop the ?schema= parameter \
             (use --schema NAME to choose its name)",
        ));
    }
    let config: Config =
        a.pg.parse()
            .map_err(|e| input_error(format!("--pg {:?}: {e}", a.pg)))?;
    let schema = match &a.schema {
        Some(s) => s.clone(),
        None => format!("bench_pg_{}", crate::units::now().0),
    };
    if !valid_schema_name(&schema) {
        return Err(input_error(format!(
            "--schema {schema:?}: use 1 to 63 lowercase letters, digits or underscores, \
             starting with a letter or underscore"
        )));
    }
    if a.messages == 0 {
        return Err(input_error("--messages must be at least 1"));
    }
    Ok((config, schema))
}

fn valid_schema_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && s.len() <= 63
}

async fn connect(config: &Config) -> anyhow::Result<Client> {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .context("connect to PostgreSQL")?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("warning: PostgreSQL connection ended: {e}");
        }
    });
    // The same durability as redrive's own connections: a commit is answered once synced.
    client
        .batch_execute("SET synchronous_commit = on")
        .await
        .context("set synchronous_commit")?;
    Ok(client)
}

/// Runs the scenario; fills `report`. The schema is dropped afterwards unless `keep`.
pub async fn run(a: PgBaselineArgs, keep: bool, report: &mut Report) -> anyhow::Result<String> {
    let (config, schema) = prepare(&a)?;
    let admin = connect(&config).await?;
    let exists = admin
        .query_opt(
            "SELECT 1 FROM pg_namespace WHERE nspname = $1",
            &[&schema.as_str()],
        )
        .await
        .context("look for the schema")?
        .is_some();
    if exists {
        return Err(input_error(format!(
            "schema {schema} already exists; pg-baseline only uses a schema it creates"
        )));
    }
    admin
        .batch_execute(&a.table.create(&schema))
        .await
        .with_context(|| format!("create schema {schema}"))?;
    let outcome = measure(&config, &schema, &a, report).await;
    if keep {
        eprintln!("kept schema {schema}");
    } else if let Err(e) = admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
    {
        eprintln!("warning: could not drop schema {schema}: {e}");
    }
    outcome.map(|()| format!("{schema}.q"))
}

async fn measure(
    config: &Config,
    schema: &str,
    a: &PgBaselineArgs,
    report: &mut Report,
) -> anyhow::Result<()> {
    let cpu = CpuWatch {
        server: None,
        postgres: a.postgres_cpu,
    };
    let (published, publish_cpu) = publish(config, schema, a, &cpu).await.context("publish")?;
    report.add("table", a.table.as_str(), "");
    report.add("messages", a.messages, "");
    report.add("body_size", a.size, "bytes");
    report.add("send_batch", a.batch, "messages/insert");
    report.add("publish_connections", a.in_flight, "");
    report.add("publish_seconds", secs(published), "s");
    report.add("insert_rate", rate(a.messages, published), "msgs/s");
    report.add(
        "publish_throughput",
        round2(rate(a.messages * a.size, published) as f64 / 1_048_576.0),
        "MiB/s",
    );
    cpu.report(report, "publish", publish_cpu.0, publish_cpu.1, a.messages);
    let (consumed, consume_cpu) = receive_and_delete(config, schema, a, &cpu)
        .await
        .context("consume")?;
    report.add("receive_batch", a.receive_batch, "messages/receive");
    report.add("consume_seconds", secs(consumed), "s");
    report.add("receive_delete_rate", rate(a.messages, consumed), "msgs/s");
    cpu.report(report, "consume", consume_cpu.0, consume_cpu.1, a.messages);
    Ok(())
}

/// `in_flight` connections each insert batches until `messages` are in. Returns the
/// time taken and the CPU marks around it (the end taken before the connections close).
async fn publish(
    config: &Config,
    schema: &str,
    a: &PgBaselineArgs,
    cpu: &CpuWatch,
) -> anyhow::Result<(Duration, (CpuMark, CpuMark))> {
    let size = usize::try_from(a.size)?;
    // The lean table takes the body as bytes; pgmq's takes a JSON document of the same
    // size (a string of `x`s).
    let body = match a.table {
        Table::Lean => vec![b'x'; size],
        Table::Pgmq => format!("\"{}\"", "x".repeat(size.saturating_sub(2))).into_bytes(),
    };
    let table = a.table;
    let next = Arc::new(AtomicU64::new(0));
    let inserted = Arc::new(AtomicU64::new(0));
    let sql = a.table.insert(schema);
    let mut clients = Vec::new();
    for _ in 0..a.in_flight {
        clients.push(Arc::new(connect(config).await?));
    }
    let progress = Progress::start("inserted", a.messages, inserted.clone());
    let start_cpu = cpu.mark();
    let start = Instant::now();
    let mut tasks: JoinSet<anyhow::Result<()>> = JoinSet::new();
    for client in &clients {
        let client = Arc::clone(client);
        let (next, inserted, body, sql) =
            (next.clone(), inserted.clone(), body.clone(), sql.clone());
        let (total, batch) = (a.messages, u64::from(a.batch));
        tasks.spawn(async move {
            let stmt = client.prepare(&sql).await?;
            loop {
                let from = next.fetch_add(batch, Ordering::SeqCst);
                if from >= total {
                    return Ok(());
                }
                let n = batch.min(total - from);
                let done = match table {
                    Table::Lean => {
                        let bodies: Vec<&[u8]> = (0..n).map(|_| body.as_slice()).collect();
                        client.execute(&stmt, &[&bodies]).await?
                    }
                    Table::Pgmq => {
                        let text = std::str::from_utf8(&body)?;
                        let docs: Vec<&str> = (0..n).map(|_| text).collect();
                        client.query(&stmt, &[&docs]).await?.len() as u64
                    }
                };
                inserted.fetch_add(done, Ordering::Relaxed);
            }
        });
    }
    let result = join_all(&mut tasks).await;
    let elapsed = start.elapsed();
    let end_cpu = cpu.mark();
    drop(clients);
    progress.finish().await;
    result?;
    let n = inserted.load(Ordering::SeqCst);
    if n != a.messages {
        anyhow::bail!("inserted {n} rows, expected {}", a.messages);
    }
    Ok((elapsed, (start_cpu, end_cpu)))
}

/// `receive_in_flight` connections take batches (visibility timeout 30 s); each batch's
/// ids go to `settle_in_flight` connections that delete them. Returns the time until the
/// last delete and the CPU marks around the phase.
async fn receive_and_delete(
    config: &Config,
    schema: &str,
    a: &PgBaselineArgs,
    cpu: &CpuWatch,
) -> anyhow::Result<(Duration, (CpuMark, CpuMark))> {
    let receive_sql = a.table.receive(schema);
    let delete_sql = a.table.delete(schema);
    let returning = a.table == Table::Pgmq;
    let total = a.messages;
    let deleted = Arc::new(AtomicU64::new(0));
    let finished_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    // Bounded hand-off from receivers to deleters: receives run at most this far ahead.
    let (tx, rx) = mpsc::channel::<Vec<i64>>(usize::try_from(a.settle_in_flight)?);
    let rx = Arc::new(Mutex::new(rx));
    let mut receivers = Vec::new();
    for _ in 0..a.receive_in_flight {
        receivers.push(Arc::new(connect(config).await?));
    }
    let mut deleters = Vec::new();
    for _ in 0..a.settle_in_flight {
        deleters.push(Arc::new(connect(config).await?));
    }
    let progress = Progress::start("deleted", total, deleted.clone());
    let start_cpu = cpu.mark();
    let start = Instant::now();
    let mut tasks: JoinSet<anyhow::Result<()>> = JoinSet::new();
    let limit = i64::from(a.receive_batch);
    for client in &receivers {
        let client = Arc::clone(client);
        let (tx, deleted, sql) = (tx.clone(), deleted.clone(), receive_sql.clone());
        tasks.spawn(async move {
            let stmt = client.prepare(&sql).await?;
            let mut last_progress = Instant::now();
            while deleted.load(Ordering::SeqCst) < total {
                let rows = client.query(&stmt, &[&limit]).await?;
                if rows.is_empty() {
                    if last_progress.elapsed() > Duration::from_secs(60) {
                        anyhow::bail!("stalled: nothing to receive for 60 s");
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                last_progress = Instant::now();
                let mut ids = Vec::with_capacity(rows.len());
                for row in &rows {
                    ids.push(row.try_get::<_, i64>(0)?);
                    // Read the message as a consumer would.
                    let Raw = row.try_get(1)?;
                }
                if tx.send(ids).await.is_err() {
                    break;
                }
            }
            Ok(())
        });
    }
    drop(tx);
    for client in &deleters {
        let client = Arc::clone(client);
        let (rx, deleted, finished_at, sql) = (
            rx.clone(),
            deleted.clone(),
            finished_at.clone(),
            delete_sql.clone(),
        );
        tasks.spawn(async move {
            let stmt = client.prepare(&sql).await?;
            loop {
                let Some(ids) = rx.lock().await.recv().await else {
                    return Ok(());
                };
                let n = if returning {
                    client.query(&stmt, &[&ids]).await?.len() as u64
                } else {
                    client.execute(&stmt, &[&ids]).await?
                };
                let before = deleted.fetch_add(n, Ordering::SeqCst);
                if before < total
                    && before + n >= total
                    && let Ok(mut at) = finished_at.lock()
                {
                    *at = Some(Instant::now());
                }
            }
        });
    }
    let result = join_all(&mut tasks).await;
    let end_cpu = cpu.mark();
    drop((receivers, deleters));
    progress.finish().await;
    result?;
    let end = finished_at
        .lock()
        .ok()
        .and_then(|at| *at)
        .unwrap_or_else(Instant::now);
    Ok((end.duration_since(start), (start_cpu, end_cpu)))
}

/// Waits for every task; on the first failure aborts the rest and returns it.
async fn join_all(tasks: &mut JoinSet<anyhow::Result<()>>) -> anyhow::Result<()> {
    let mut failure = None;
    while let Some(done) = tasks.join_next().await {
        let outcome = done.map_err(anyhow::Error::new).and_then(|r| r);
        if let Err(e) = outcome {
            failure.get_or_insert(e);
            tasks.abort_all();
        }
    }
    failure.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: PgBaselineArgs,
    }

    fn args(extra: &[&str]) -> PgBaselineArgs {
        let mut v = vec!["t"];
        v.extend_from_slice(extra);
        T::parse_from(v).a
    }

    #[test]
    fn schema_names_are_checked() {
        assert!(valid_schema_name("bench_pg_1"));
        assert!(valid_schema_name("_x"));
        assert!(!valid_schema_name("1abc"));
        assert!(!valid_schema_name("Bench"));
        assert!(!valid_schema_name("a;drop"));
        assert!(!valid_schema_name(""));
        assert!(!valid_schema_name(&"a".repeat(64)));
    }

    #[test]
    fn bad_urls_and_schemas_are_input_errors() {
        let e = prepare(&args(&["--pg", "http://x"])).unwrap_err();
        assert_eq!(crate::failure::exit_code(&e), 2, "{e:#}");
        let e = prepare(&args(&["--pg", "postgres://u@h/db?schema=x"])).unwrap_err();
        assert!(format!("{e:#}").contains("schema"), "{e:#}");
        let e = prepare(&args(&["--pg", "postgres://u@h/db", "--schema", "X-1"])).unwrap_err();
        assert_eq!(crate::failure::exit_code(&e), 2, "{e:#}");
        let e = prepare(&args(&["--pg", "postgres://u@h/db", "-n", "0"])).unwrap_err();
        assert_eq!(crate::failure::exit_code(&e), 2, "{e:#}");
        let (_, schema) = prepare(&args(&["--pg", "postgres://u@h/db"])).unwrap();
        assert!(schema.starts_with("bench_pg_"), "{schema}");
    }
}
