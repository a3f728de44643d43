//! `redrive migrate`: brings the store's schema to this build's version without starting
//! the server (`serve` also migrates at start). Safe to run while PostgreSQL nodes are
//! serving: its migrations take an advisory lock. An SQLite file in use by a running
//! server is refused (one process per file; the server migrated it at its start). Both
//! backends refuse a schema newer than this build.

use std::path::PathBuf;

use anyhow::Context as _;
use redrive_store_postgres::{PostgresOptions, PostgresStore};
use redrive_store_sqlite::{SqliteOptions, SqliteStore};

use crate::config::{self, Config, Overrides, StoreLocation};

/// `redrive migrate`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// TOML configuration file (its `store` and `data_dir` are used).
    #[arg(long, env = "REDRIVE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of the embedded SQLite database [default: ./redrive-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Storage URL: sqlite://PATH or postgres://… (with ?schema=NAME).
    #[arg(long, value_name = "URL")]
    store: Option<String>,
}

/// Migrates and prints the schema version.
pub async fn run(args: MigrateArgs, json: bool) -> anyhow::Result<()> {
    let flags = Overrides {
        data_dir: args.data_dir,
        store: args.store,
        ..Overrides::default()
    };
    let config = Config::load(args.config.as_deref(), &flags)?;
    let (shown, version) = match config.store_location()? {
        StoreLocation::Sqlite(path) => {
            config::ensure_parent_dir(&path)?;
            let store = SqliteStore::open(&path, SqliteOptions::default()).with_context(|| {
                format!("cannot migrate the SQLite store at {}", path.display())
            })?;
            store.close();
            (
                path.display().to_string(),
                redrive_store_sqlite::SCHEMA_VERSION,
            )
        }
        // Migrating needs one connection; the pool size does not apply.
        StoreLocation::Postgres { url, schema, .. } => {
            let shown = config::redact_url(&url);
            let options = PostgresOptions {
                schema,
                ..PostgresOptions::default()
            };
            let v = PostgresStore::migrate(&url, options)
                .await
                .with_context(|| format!("cannot migrate the PostgreSQL store at {shown}"))?;
            (shown, i64::from(v))
        }
    };
    if json {
        println!(
            "{}",
            serde_json::json!({"store": shown, "schema_version": version})
        );
    } else {
        println!("store {shown} is at schema version {version}");
    }
    Ok(())
}
