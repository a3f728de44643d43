//! `redrive-bench pg-baseline` against the real PostgreSQL server: both table shapes run
//! end to end, leave the shape they promise (pgmq's `vt` index and `jsonb` message, or the
//! lean table's single index and `bytea`), consume everything they insert, drop their
//! schema unless told to keep it, and refuse a schema that already exists.
//!
//! Needs `REDRIVE_TEST_POSTGRES_URL`: without it the test says it is skipped, and under
//! CI it fails.

// Helpers outside `#[test]` functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};

use serde_json::Value;

/// The outcome of one `redrive-bench` run.
struct Run {
    args: Vec<String>,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts success and returns stdout.
    #[track_caller]
    fn ok(&self) -> &str {
        assert_eq!(
            self.code,
            Some(0),
            "`redrive-bench {}` failed:\nstdout: {}\nstderr: {}",
            self.args.join(" "),
            self.stdout,
            self.stderr
        );
        &self.stdout
    }

    /// Asserts exit code `code` and that stderr is one `error:` line mentioning `needle`.
    #[track_caller]
    fn fails(&self, code: i32, needle: &str) {
        assert_eq!(
            self.code,
            Some(code),
            "`redrive-bench {}`: expected exit {code}:\nstdout: {}\nstderr: {}",
            self.args.join(" "),
            self.stdout,
            self.stderr
        );
        assert!(
            self.stderr.contains(needle),
            "`redrive-bench {}`: stderr lacks {needle:?}:\n{}",
            self.args.join(" "),
            self.stderr
        );
        assert!(
            self.stderr.starts_with("error:"),
            "not an error line: {}",
            self.stderr
        );
    }
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// The indexes of `schema.q` and the type of its `message` column.
async fn shape(db: &tokio_postgres::Client, schema: &str) -> (Vec<String>, String, i64) {
    let indexes = db
        .query(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'q' \
             ORDER BY indexname",
            &[&schema],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let message_type: String = db
        .query_one(
            "SELECT data_type FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = 'q' AND column_name = 'message'",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    let rows: i64 = db
        .query_one(&format!("SELECT count(*) FROM {schema}.q"), &[])
        .await
        .unwrap()
        .get(0);
    (indexes, message_type, rows)
}

async fn schema_exists(db: &tokio_postgres::Client, schema: &str) -> bool {
    db.query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await
        .unwrap()
        .is_some()
}

/// Runs `redrive-bench --json pg-baseline --pg URL --schema SCHEMA EXTRA…` (no server
/// needed; `--url` points nowhere).
fn baseline(url: &str, schema: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "--url",
        "http://127.0.0.1:9",
        "--json",
        "pg-baseline",
        "--pg",
        url,
        "--schema",
        schema,
    ];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_redrive-bench"))
        .args(&args)
        .env_remove("REDRIVE_URL")
        .env_remove("REDRIVE_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Run {
        args: args.iter().map(|s| (*s).to_owned()).collect(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_baseline_tables_run_end_to_end() {
    let Some(url) = redrive_testkit::postgres::url("the pg-baseline test") else {
        return;
    };
    let db = connect(&url).await;
    for (table, index_count, message_type) in [("pgmq", 2, "jsonb"), ("lean", 1, "bytea")] {
        let schema = format!("rd_bl_{table}_{:012x}", fastrand::u64(..1 << 48));
        let run = baseline(
            &url,
            &schema,
            &[
                "-n",
                "3000",
                "--batch",
                "100",
                "--table",
                table,
                "--postgres-cpu",
                "--keep",
            ],
        );
        let report: Value = serde_json::from_str(run.ok()).unwrap();
        assert_eq!(report["table"], table, "{report}");
        assert_eq!(report["messages"], 3000, "{report}");
        assert!(report["insert_rate"].as_u64().unwrap() > 0, "{report}");
        assert!(
            report["receive_delete_rate"].as_u64().unwrap() > 0,
            "{report}"
        );
        for figure in [
            "publish_cpu_client",
            "publish_cpu_postgres",
            "consume_cpu_postgres",
        ] {
            assert!(report[figure].as_f64().is_some(), "{figure}: {report}");
        }
        assert!(report.get("publish_cpu_server").is_none(), "{report}");

        let (indexes, ty, left) = shape(&db, &schema).await;
        assert_eq!(indexes.len(), index_count, "{table}: {indexes:?}");
        if table == "pgmq" {
            assert!(indexes.iter().any(|d| d.contains("(vt)")), "{indexes:?}");
        }
        assert_eq!(ty, message_type, "{table}");
        assert_eq!(
            left, 0,
            "{table}: every inserted message was received and deleted"
        );

        // A schema that exists is refused, and left as it was.
        let again = baseline(&url, &schema, &["-n", "10"]);
        again.fails(2, "already exists");
        assert!(schema_exists(&db, &schema).await);
        db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }

    // Without --keep the schema is dropped afterwards.
    let schema = format!("rd_bl_drop_{:012x}", fastrand::u64(..1 << 48));
    let run = baseline(&url, &schema, &["-n", "500"]);
    let report: Value = serde_json::from_str(run.ok()).unwrap();
    assert_eq!(
        report["table"], "pgmq",
        "pgmq's table is the default: {report}"
    );
    assert!(report.get("publish_cpu_postgres").is_none(), "{report}");
    assert!(!schema_exists(&db, &schema).await);
}
