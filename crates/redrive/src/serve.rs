//! `redrive serve`: loads the configuration, sets up logging, opens the store, and runs
//! the HTTP server until SIGINT or SIGTERM, then closes the store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use redrive_core::Clock;
use redrive_store::Store;
use redrive_store_postgres::{DatabaseClock, PostgresOptions, PostgresStore};
use redrive_store_sqlite::{SqliteOptions, SqliteStore};
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

use crate::config::{self, Config, LogConfig, LogFormat, Overrides, StoreLocation};
use crate::failure::input_error;
use crate::units::parse_duration_ms;

/// `redrive serve`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Environment: REDRIVE_CONFIG, REDRIVE_LISTEN, REDRIVE_DATA_DIR, REDRIVE_STORE, REDRIVE_LOG,
REDRIVE_LOG_FORMAT, REDRIVE_SERVER_SWEEP_INTERVAL_MS, REDRIVE_SERVER_SHUTDOWN_TIMEOUT_MS,
REDRIVE_SQS_LISTEN, REDRIVE_SQS_PUBLIC_URL, REDRIVE_SQS_ACCOUNT_ID, REDRIVE_SQS_REGION, REDRIVE_SQS_ACCESS_KEYS,
REDRIVE_AUTH_ENABLED, REDRIVE_BOOTSTRAP_TOKEN, REDRIVE_CA_FILE (also --ca-file), REDRIVE_SERVER_CONSOLE.
Precedence: flags > environment > config file > built-in defaults.")]
pub struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, env = "REDRIVE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:7474].
    #[arg(long, value_name = "ADDR", value_parser = config::parse_listen)]
    pub listen: Option<SocketAddr>,
    /// Directory of the embedded database [default: ./redrive-data].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Storage URL: sqlite://PATH [default: SQLite in the data directory].
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Log filter: info, debug, redrive_server=debug,info … [default: info].
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Log line format [default: text].
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Background sweep interval (e.g. 1s, 250ms).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub sweep_interval: Option<u64>,
    /// How long shutdown waits for in-flight work (e.g. 30s).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub shutdown_timeout: Option<u64>,
    /// Address of the SQS-compatible endpoint, or `off` [default: 127.0.0.1:9324].
    #[arg(long, value_name = "ADDR|off", value_parser = parse_sqs_listen_arg)]
    pub sqs_listen: Option<String>,
    /// The URL clients reach the SQS endpoint at, the base of its queue URLs [default:
    /// http:// and the SQS listen address].
    #[arg(long, value_name = "URL", value_parser = parse_public_url_arg)]
    pub sqs_public_url: Option<String>,
    /// Account id in SQS queue URLs and ARNs [default: 000000000000].
    #[arg(long, value_name = "ID")]
    pub sqs_account_id: Option<String>,
    /// Region in SQS queue ARNs [default: us-east-1].
    #[arg(long, value_name = "REGION")]
    pub sqs_region: Option<String>,
    /// Require API tokens on every request (auth.enabled).
    #[arg(long)]
    pub auth: bool,
    /// Serve the web console at / (server.console) [default: on].
    #[arg(long, value_name = "on|off", value_parser = parse_console_arg)]
    pub console: Option<bool>,
    /// Print the built-in default configuration file and exit.
    #[arg(long)]
    pub print_default_config: bool,
}

impl ServeArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen,
            data_dir: self.data_dir.clone(),
            store: self.store.clone(),
            log_level: self.log_level.clone(),
            log_format: self.log_format,
            sweep_interval_ms: self.sweep_interval,
            shutdown_timeout_ms: self.shutdown_timeout,
            sqs_listen: self.sqs_listen.clone(),
            sqs_public_url: self.sqs_public_url.clone(),
            sqs_account_id: self.sqs_account_id.clone(),
            sqs_region: self.sqs_region.clone(),
            // Secrets come from the file or the environment, not from the command line.
            sqs_access_keys: None,
            auth_enabled: self.auth.then_some(true),
            bootstrap_token: None,
            push_allowed_networks: None,
            ca_file: None,
            // A node setting of the file or the environment.
            failing_path_window: None,
            console: self.console,
        }
    }
}

fn parse_public_url_arg(s: &str) -> Result<String, String> {
    config::parse_public_url(s).map(|()| s.trim().to_owned())
}

fn parse_console_arg(s: &str) -> Result<bool, String> {
    config::parse_on_off(s)
}

fn parse_sqs_listen_arg(s: &str) -> Result<String, String> {
    config::parse_sqs_listen(s).map(|_| s.trim().to_owned())
}

/// Binds the SQS endpoint's listener. The default address is best-effort: when it is
/// taken (another redrive, an emulator) the server warns and runs without the endpoint;
/// an address that was configured must bind.
async fn bind_sqs(config: &Config) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let Some(addr) = config::parse_sqs_listen(&config.sqs_listen).map_err(input_error)? else {
        info!("SQS endpoint off");
        return Ok(None);
    };
    match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => Ok(Some(l)),
        Err(e) if config.sqs_listen == config::DEFAULT_SQS_LISTEN => {
            warn!(%addr, error = %e,
                "cannot listen on the default SQS address; running without the SQS endpoint \
                 (set sqs_listen to another address, or to off)");
            Ok(None)
        }
        Err(e) => Err(e).with_context(|| format!("cannot listen on {addr} (sqs_listen)")),
    }
}

/// Runs the server until a shutdown signal.
/// `redrive serve`; `ca_file` is the global `--ca-file` (the extra CA bundle outgoing
/// requests trust), which outranks the configuration's `ca_file`.
pub async fn run(args: ServeArgs, ca_file: Option<PathBuf>) -> anyhow::Result<()> {
    if args.print_default_config {
        print!("{}", config::DEFAULT_TOML);
        return Ok(());
    }
    let overrides = Overrides {
        ca_file,
        ..args.overrides()
    };
    let config = Config::load(args.config.as_deref(), &overrides)?;
    init_logging(&config.log)?;
    let trust = config.trust()?;
    info!(
        config_file = %args.config.as_deref().map_or_else(|| "(none)".into(), |p| p.display().to_string()),
        "effective configuration: {}",
        config.summary()
    );
    match redrive_server::raise_nofile_limit() {
        Ok((soft, hard)) => info!(soft, hard, "open-file limit raised to the hard limit"),
        Err(e) => warn!(error = %e, "cannot raise the open-file limit"),
    }
    let location = config.store_location()?;
    // Register the handlers before anything can take long, so that an early SIGTERM is a
    // graceful shutdown rather than the default kill.
    let shutdown = shutdown_signal().context("cannot install signal handlers")?;

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let local = listener
        .local_addr()
        .context("cannot read the listening address")?;
    let sqs_listener = bind_sqs(&config).await?;

    let (store, clock) = open_store(&location).await?;
    info!(store = %store.describe(), listen = %local, "store opened");

    if !config.push_allowed_networks.is_empty() {
        info!(
            push_allowed_networks = config.push_allowed_networks.join(","),
            "push endpoints may also be on these private networks"
        );
    }
    if let Some(ca) = &config.ca_file {
        info!(ca_file = %ca.display(), extra_roots = trust.extra_roots(),
            "outgoing https requests also trust this CA bundle");
    }
    let broker = redrive_broker::Broker::with_outgoing(
        store.as_dyn(),
        clock,
        config.auth.access(),
        config.push_network()?,
        trust,
    );
    if config.auth.enabled {
        let created = broker
            .bootstrap_admin(config.auth.bootstrap_token.as_deref())
            .await
            .context("cannot make sure an admin token exists")?;
        if let Some(secret) = created {
            // Printed once, to the terminal, never to the log.
            eprintln!(
                "\n  redrive: authentication is on and no admin token existed; created one.\n  \
                 Admin token (shown only now): {secret}\n  \
                 export REDRIVE_TOKEN={secret}\n"
            );
            info!("bootstrap admin token created and printed to the terminal");
        }
        info!("authentication on: every request needs an API token");
    } else {
        warn!(listen = %local,
            "AUTHENTICATION IS OFF: anyone who can reach this loopback address may read and \
             change everything. Turn it on with --auth (auth.enabled = true)");
    }
    broker.set_replay_settings(redrive_broker::ReplaySettings {
        flag_after_failures: config.replay.flag_after_failures,
        lease_ttl: std::time::Duration::from_millis(config.server.lease_ttl_ms.max(1)),
        ..redrive_broker::ReplaySettings::default()
    });
    broker.set_case_settings(config.case_settings()?);
    broker.set_node_replay_budget(config.node_replay_budget()?);
    broker
        .set_plan_settings(config.plan_settings()?)
        .context("cannot apply the replay plan settings of the configuration")?;
    let authorities = config.effect_authorities()?;
    if !authorities.is_empty() {
        broker
            .cases()
            .apply_effect_authorities(&authorities)
            .await
            .context("cannot register the effect authorities of the configuration")?;
        info!(
            authorities = authorities.len(),
            "effect authorities of the configuration registered"
        );
    }
    let register = config.register_entries()?;
    if !register.is_empty() {
        let changed = broker
            .apply_register(&register)
            .await
            .context("cannot apply the idempotency register of the configuration")?;
        info!(
            entries = register.len(),
            changed, "idempotency register entries of the configuration applied"
        );
    }
    let mut extra = Vec::new();
    if let Some(l) = sqs_listener {
        let addr = l
            .local_addr()
            .context("cannot read the SQS endpoint's listening address")?;
        let public_url = config.sqs_public_url(addr);
        if config.sqs_public_url_guessed(addr) {
            tracing::warn!(sqs_listen = %addr, public_url = %public_url,
                "the SQS endpoint listens on every address, so its queue URLs name localhost: \
                 set sqs_public_url to the URL clients reach it at");
        }
        info!(sqs_listen = %addr, public_url = %public_url, account_id = %config.sqs_account_id,
            region = %config.sqs_region, "SQS endpoint enabled");
        let sqs = redrive_sqs::router(
            broker.clone(),
            redrive_sqs::SqsConfig {
                account_id: config.sqs_account_id.clone(),
                region: config.sqs_region.clone(),
                public_url,
                access_keys: config.sqs_keys()?,
            },
        );
        extra.push((l, sqs));
    }
    let result =
        redrive_server::run_with(config.server.clone(), broker, listener, extra, shutdown).await;
    if let Err(e) = &result {
        error!(error = format!("{e:#}"), "server stopped with an error");
    }
    info!("closing the store");
    store.close();
    info!("stopped");
    result
}

/// How often a node sharing PostgreSQL re-measures its offset to the database's clock.
const CLOCK_REFRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// The opened store, kept concrete so that it can be closed at the end.
pub(crate) enum OpenStore {
    Sqlite(Arc<SqliteStore>, PathBuf),
    Postgres(Arc<PostgresStore>, String),
}

impl OpenStore {
    pub(crate) fn as_dyn(&self) -> Arc<dyn Store> {
        match self {
            OpenStore::Sqlite(s, _) => s.clone(),
            OpenStore::Postgres(s, _) => s.clone(),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            OpenStore::Sqlite(_, path) => path.display().to_string(),
            OpenStore::Postgres(_, url) => config::redact_url(url),
        }
    }

    pub(crate) fn close(&self) {
        match self {
            OpenStore::Sqlite(s, _) => s.close(),
            OpenStore::Postgres(s, _) => s.close(),
        }
    }
}

/// Opens (and migrates) the store, with the clock its nodes decide time by: the system
/// clock for SQLite (one process), the database-aligned clock for PostgreSQL (many nodes).
pub(crate) async fn open_store(
    location: &StoreLocation,
) -> anyhow::Result<(OpenStore, Arc<dyn Clock>)> {
    match location {
        StoreLocation::Sqlite(db_path) => {
            config::ensure_parent_dir(db_path)?;
            let store =
                SqliteStore::open(db_path, SqliteOptions::default()).with_context(|| {
                    format!("cannot open the SQLite store at {}", db_path.display())
                })?;
            Ok((
                OpenStore::Sqlite(Arc::new(store), db_path.clone()),
                Arc::new(redrive_server::SystemClock),
            ))
        }
        StoreLocation::Postgres {
            url,
            schema,
            pool_size,
        } => {
            let shown = config::redact_url(url);
            let defaults = PostgresOptions::default();
            let options = PostgresOptions {
                schema: schema.clone(),
                pool_size: pool_size.unwrap_or(defaults.pool_size),
                ..defaults
            };
            let store = PostgresStore::connect(url, options)
                .await
                .with_context(|| format!("cannot open the PostgreSQL store at {shown}"))?;
            let clock = DatabaseClock::start(url, CLOCK_REFRESH)
                .await
                .with_context(|| {
                    format!("cannot read the clock of the PostgreSQL store at {shown}")
                })?;
            info!(offset_ms = clock.offset_ms(), "using the database's clock");
            Ok((
                OpenStore::Postgres(Arc::new(store), url.clone()),
                Arc::new(clock),
            ))
        }
    }
}

fn init_logging(log: &LogConfig) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&log.level)
        .map_err(|e| input_error(format!("invalid log level {:?}: {e}", log.level)))?;
    // Every event names the spans it happened in (the request's method, route and id, the
    // broker operation's queue), and each span logs a line as it closes, with the status and
    // latency of a request and the busy/idle time of an operation. Those spans are DEBUG
    // (see redrive-server's `trace`): at the default level neither appears.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_span_events(FmtSpan::CLOSE);
    let installed = match log.format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_ansi(false)
            .try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))
}

/// A future that completes on SIGINT or SIGTERM. The handlers are installed now.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        Ok(async move {
            tokio::select! {
                _ = int.recv() => info!("SIGINT received: shutting down"),
                _ = term.recv() => info!("SIGTERM received: shutting down"),
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                info!("Ctrl-C received: shutting down");
            } else {
                std::future::pending::<()>().await;
            }
        })
    }
}
